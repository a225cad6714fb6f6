//! [`ApiDoc`]: the OpenAPI 3.1 description, assembled from the routes' own descriptions and
//! the wire types, with the bearer scheme on every route behind the authentication; and the
//! route that serves it.

use axum::Json;
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};

use crate::route::Route;

/// The OpenAPI 3.1 description, generated from the handlers and the wire types.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "fencelock",
        description = "Leases with fencing tokens for distributed mutual exclusion."
    ),
    paths(
        super::acquire::acquire,
        super::acquire_all::acquire_all,
        super::get::get,
        super::release::release,
        super::renew::renew,
        super::list::list,
        super::hold_acquire::acquire_semaphore,
        super::hold_get::get_semaphore,
        super::hold_release::release_semaphore,
        super::hold_renew::renew_semaphore,
        super::hold_list::list_semaphores,
        super::hold_acquire::acquire_rwlock,
        super::hold_get::get_rwlock,
        super::hold_release::release_rwlock,
        super::hold_renew::renew_rwlock,
        super::hold_list::list_rwlocks,
        super::elections::campaign,
        super::elections::get,
        super::elections::proclaim,
        super::elections::renew,
        super::elections::resign,
        super::elections::observe,
        super::events::events,
        super::health::healthz,
        super::health::readyz,
        super::health::metrics,
        super::whoami::whoami,
        super::ui::page,
        super::ui::asset
    ),
    modifiers(&Bearer),
    components(schemas(
        fencelock_wire::ForceReleaseRequest,
        fencelock_wire::Granted,
        fencelock_wire::Held,
        fencelock_wire::Delayed,
        fencelock_wire::AllGranted,
        fencelock_wire::AllRefused,
        fencelock_wire::LockRefusal,
        fencelock_wire::FieldError,
        fencelock_wire::PermitGranted,
        fencelock_wire::SemaphoreBusy,
        fencelock_wire::HoldGranted,
        fencelock_wire::RwLockBusy,
        fencelock_wire::PermitBody,
        fencelock_wire::HoldBody,
        fencelock_wire::Mode,
        fencelock_wire::EventName,
        fencelock_wire::Notice,
        fencelock_wire::CampaignedBody,
        fencelock_wire::CampaignDelayed,
        fencelock_wire::CampaignStopped,
        fencelock_wire::WhoAmI,
        fencelock_wire::GrantBody,
        fencelock_wire::RightName
    ))
)]
pub struct ApiDoc;

/// In the OpenAPI description: the bearer token scheme, required by every route behind
/// [`authenticate`](crate::auth::authenticate) (not by health, readiness and metrics).
struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "A token of the server's authentication file (`fencelock serve --auth FILE`); a server without one needs none",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(BEARER, SecurityScheme::Http(scheme));
        for route in Route::MATCHED.into_iter().filter(|route| !route.is_open()) {
            let Some(item) = openapi.paths.paths.get_mut(route.template()) else {
                continue;
            };
            for operation in [&mut item.get, &mut item.post, &mut item.delete]
                .into_iter()
                .flatten()
            {
                operation.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
            }
        }
    }
}

/// The name of the bearer scheme in the OpenAPI description.
const BEARER: &str = "bearer";

/// `GET /openapi.json`.
pub(super) async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
