//! [`Route`]: the routes of the API by their templates, as the router matches them and the
//! metrics name them.

use axum::extract::MatchedPath;
use fencelock_core::HoldKind;

/// A route of the API, as the router matches it and `fencelock_http_requests_total` names it
/// (by its template, never the path, which holds resource names).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq)]
pub enum Route {
    /// `/locks`.
    Locks,
    /// `/locks/{resource}`.
    Lock,
    /// `/locks/{resource}/renew`.
    Renew,
    /// `/semaphores` or `/rwlocks`.
    Holds(HoldKind),
    /// `/semaphores/{name}` or `/rwlocks/{name}`.
    Hold(HoldKind),
    /// `/semaphores/{name}/renew` or `/rwlocks/{name}/renew`.
    HoldRenew(HoldKind),
    /// `/elections/{name}`.
    Election,
    /// `/elections/{name}/proclaim`.
    Proclaim,
    /// `/elections/{name}/renew`.
    ElectionRenew,
    /// `/elections/{name}/observe`.
    Observe,
    /// `/events`.
    Events,
    /// `/healthz`.
    Healthz,
    /// `/readyz`.
    Readyz,
    /// `/metrics`.
    Metrics,
    /// `/openapi.json`.
    OpenApi,
    /// `/whoami`.
    WhoAmI,
    /// `/ui`: the dashboard's page.
    Ui,
    /// `/ui/{asset}`: its scripts, style sheet and icon.
    UiAsset,
    /// No route matched.
    Other,
}

impl Route {
    /// Every route the router matches.
    pub(crate) const MATCHED: [Self; 21] = [
        Self::Locks,
        Self::Lock,
        Self::Renew,
        Self::Holds(HoldKind::Semaphore),
        Self::Hold(HoldKind::Semaphore),
        Self::HoldRenew(HoldKind::Semaphore),
        Self::Holds(HoldKind::RwLock),
        Self::Hold(HoldKind::RwLock),
        Self::HoldRenew(HoldKind::RwLock),
        Self::Election,
        Self::Proclaim,
        Self::ElectionRenew,
        Self::Observe,
        Self::Events,
        Self::Healthz,
        Self::Readyz,
        Self::Metrics,
        Self::OpenApi,
        Self::WhoAmI,
        Self::Ui,
        Self::UiAsset,
    ];

    /// The router's template (`other` for no route).
    pub fn template(self) -> &'static str {
        match self {
            Self::Locks => "/locks",
            Self::Lock => "/locks/{resource}",
            Self::Renew => "/locks/{resource}/renew",
            Self::Holds(HoldKind::Semaphore) => "/semaphores",
            Self::Hold(HoldKind::Semaphore) => "/semaphores/{name}",
            Self::HoldRenew(HoldKind::Semaphore) => "/semaphores/{name}/renew",
            Self::Holds(HoldKind::RwLock) => "/rwlocks",
            Self::Hold(HoldKind::RwLock) => "/rwlocks/{name}",
            Self::HoldRenew(HoldKind::RwLock) => "/rwlocks/{name}/renew",
            Self::Election => "/elections/{name}",
            Self::Proclaim => "/elections/{name}/proclaim",
            Self::ElectionRenew => "/elections/{name}/renew",
            Self::Observe => "/elections/{name}/observe",
            Self::Events => "/events",
            Self::Healthz => "/healthz",
            Self::Readyz => "/readyz",
            Self::Metrics => "/metrics",
            Self::OpenApi => "/openapi.json",
            Self::WhoAmI => "/whoami",
            Self::Ui => "/ui",
            Self::UiAsset => "/ui/{asset}",
            Self::Other => "other",
        }
    }

    /// Whether the route needs no token: the operations' routes and the dashboard's files
    /// (which hold no data: the page asks the API for it with a token).
    pub(crate) fn is_open(self) -> bool {
        matches!(
            self,
            Self::Healthz
                | Self::Readyz
                | Self::Metrics
                | Self::OpenApi
                | Self::Ui
                | Self::UiAsset
                | Self::Other
        )
    }

    /// The route the router matched, if any.
    pub(crate) fn of(matched: Option<&MatchedPath>) -> Self {
        matched
            .and_then(|path| {
                Self::MATCHED
                    .into_iter()
                    .find(|route| route.template() == path.as_str())
            })
            .unwrap_or(Self::Other)
    }
}
