//! The one two-way translator between what a store did and what the API answers: the server
//! encodes an outcome into a body, a status and a problem kind with it, and the HTTP client
//! decodes them back into the same outcome. It also names every operation and outcome for
//! metrics and log lines ([`Op`], [`Label`]), so nobody spells them as strings.

use std::time::Duration;

use fencelock_core::{
    AcquireOutcome, Acquired, EndedLease, Lease, LeasePage, Owner, Refusal, ReleaseOutcome, RenewOutcome,
    Resource,
};

use crate::body::{AcquireResponse, Granted, Held, InvalidLease, LeaseBody};
use crate::problem::ProblemKind;

/// An operation of the API, as metrics and log lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `POST /locks/{resource}`.
    Acquire,
    /// `GET /locks/{resource}`.
    Get,
    /// `DELETE /locks/{resource}`.
    Release,
    /// `POST /locks/{resource}/renew`.
    Renew,
    /// `GET /locks`.
    List,
}

impl Op {
    /// The name in metrics and log lines: `acquire`, `get`, `release`, `renew`, `list`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Get => "get",
            Self::Release => "release",
            Self::Renew => "renew",
            Self::List => "list",
        }
    }
}

/// How a request ended, as metrics and log lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Label {
    /// A new lease.
    Granted,
    /// The caller's lease, extended by a re-acquire.
    Extended,
    /// Held by another owner (an acquire's answer, not an error).
    Held,
    /// The lease was released.
    Released,
    /// The lease was renewed.
    Renewed,
    /// A get found a live lease.
    Found,
    /// A list answered a page.
    Listed,
    /// No live lease.
    NotFound,
    /// A live lease of another owner.
    Forbidden,
    /// The live lease has another fencing token.
    Conflict,
    /// The store failed.
    Unavailable,
}

impl Label {
    /// The name in metrics and log lines, e.g. `granted` or `not_found`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Granted => "granted",
            Self::Extended => "extended",
            Self::Held => "held",
            Self::Released => "released",
            Self::Renewed => "renewed",
            Self::Found => "found",
            Self::Listed => "listed",
            Self::NotFound => "not_found",
            Self::Forbidden => "forbidden",
            Self::Conflict => "conflict",
            Self::Unavailable => "unavailable",
        }
    }
}

impl From<Refusal> for Label {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::NotFound,
            Refusal::Forbidden => Self::Forbidden,
            Refusal::Conflict => Self::Conflict,
        }
    }
}

/// An outcome of a store call, with the label it is counted and logged under.
pub trait Outcome {
    /// The label of this outcome.
    fn label(&self) -> Label;
}

impl Outcome for AcquireOutcome {
    fn label(&self) -> Label {
        match self {
            Self::Granted { .. } => Label::Granted,
            Self::Extended(_) => Label::Extended,
            Self::Held { .. } => Label::Held,
        }
    }
}

/// An acquire through the waiters: labelled by its last outcome, whether it waited or not.
impl Outcome for Acquired {
    fn label(&self) -> Label {
        self.outcome.label()
    }
}

/// A get: the live lease, if any.
impl Outcome for Option<Lease> {
    fn label(&self) -> Label {
        match self {
            Some(_) => Label::Found,
            None => Label::NotFound,
        }
    }
}

impl Outcome for LeasePage {
    fn label(&self) -> Label {
        Label::Listed
    }
}

impl Outcome for ReleaseOutcome {
    fn label(&self) -> Label {
        judged_label(self)
    }
}

impl Outcome for RenewOutcome {
    fn label(&self) -> Label {
        judged_label(self)
    }
}

fn judged_label<O: Judged>(outcome: &O) -> Label {
    outcome.judged().map_or_else(Label::from, |_| O::DONE)
}

/// A call the store judges by [`Refusal::check`] (release, renew): done, or refused. Done
/// answers `DONE_STATUS` with its body; a refusal answers its problem.
pub trait Judged: From<Refusal> + Sized {
    /// What a done call holds.
    type Done;
    /// What a done call answers with (`()`: no body).
    type Body;
    /// The label of a done call.
    const DONE: Label;
    /// The status of a done call.
    const DONE_STATUS: u16;

    /// Done, or why not.
    fn judged(&self) -> Result<&Self::Done, Refusal>;
    /// The body of a done call.
    fn encode(done: &Self::Done) -> Self::Body;
    /// A done call, read back from its body.
    fn decode(body: Self::Body) -> Result<Self, InvalidLease>;
}

impl Judged for ReleaseOutcome {
    type Done = Option<EndedLease>;
    type Body = ();
    const DONE: Label = Label::Released;
    const DONE_STATUS: u16 = 204;

    fn judged(&self) -> Result<&Option<EndedLease>, Refusal> {
        match self {
            Self::Released(ended) => Ok(ended),
            Self::NotFound => Err(Refusal::NotFound),
            Self::Forbidden => Err(Refusal::Forbidden),
            Self::Conflict => Err(Refusal::Conflict),
        }
    }

    fn encode(_: &Option<EndedLease>) {}

    /// The answer is an empty 204: which lease ended cannot be told.
    fn decode((): ()) -> Result<Self, InvalidLease> {
        Ok(Self::Released(None))
    }
}

impl Judged for RenewOutcome {
    type Done = Lease;
    type Body = LeaseBody;
    const DONE: Label = Label::Renewed;
    const DONE_STATUS: u16 = 200;

    fn judged(&self) -> Result<&Lease, Refusal> {
        match self {
            Self::Renewed(lease) => Ok(lease),
            Self::NotFound => Err(Refusal::NotFound),
            Self::Forbidden => Err(Refusal::Forbidden),
            Self::Conflict => Err(Refusal::Conflict),
        }
    }

    fn encode(lease: &Lease) -> LeaseBody {
        LeaseBody::from(lease)
    }

    fn decode(body: LeaseBody) -> Result<Self, InvalidLease> {
        Ok(Self::Renewed(Lease::try_from(body)?))
    }
}

impl From<Refusal> for ProblemKind {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NotFound => Self::NotFound,
            Refusal::Forbidden => Self::Forbidden,
            Refusal::Conflict => Self::Conflict,
        }
    }
}

impl ProblemKind {
    /// The refusal this problem tells of, if it tells of one.
    pub fn refusal(self) -> Option<Refusal> {
        match self {
            Self::NotFound => Some(Refusal::NotFound),
            Self::Forbidden => Some(Refusal::Forbidden),
            Self::Conflict => Some(Refusal::Conflict),
            _ => None,
        }
    }
}

/// The problem's `detail` for a refusal of `owner`'s call on `resource`.
pub fn refusal_detail(refusal: Refusal, resource: &Resource, owner: &Owner) -> String {
    match refusal {
        Refusal::NotFound => not_found_detail(resource),
        Refusal::Forbidden => format!("{resource} is held by another owner than {owner}"),
        Refusal::Conflict => format!("the live lease on {resource} has another fencing token"),
    }
}

/// The problem's `detail` when there is no live lease on `resource`.
pub fn not_found_detail(resource: &Resource) -> String {
    format!("no live lock on {resource}")
}

/// The answer to an acquire.
pub fn encode_acquire(outcome: &AcquireOutcome) -> AcquireResponse {
    let granted = |lease, extended| {
        AcquireResponse::Granted(Granted {
            acquired: true,
            extended,
            lock: LeaseBody::from(lease),
        })
    };
    match outcome {
        AcquireOutcome::Granted { lease, .. } => granted(lease, false),
        AcquireOutcome::Extended(lease) => granted(lease, true),
        AcquireOutcome::Held { holder, expires_in } => {
            AcquireResponse::Held(encode_held(holder, *expires_in))
        }
    }
}

/// The answer that another owner holds the lock (its lease names the resource asked for).
pub fn encode_held(holder: &Lease, expires_in: Duration) -> Held {
    Held {
        acquired: false,
        resource: holder.resource.to_string(),
        holder: LeaseBody::from(holder),
        expires_in_ms: u64::try_from(expires_in.as_millis()).unwrap_or(u64::MAX),
    }
}

/// The outcome an acquire's answer tells of. An answer does not say which expired lease a
/// grant replaced.
pub fn decode_acquire(answer: AcquireResponse) -> Result<AcquireOutcome, InvalidLease> {
    Ok(match answer {
        AcquireResponse::Granted(granted) if granted.extended => {
            AcquireOutcome::Extended(granted.lock.try_into()?)
        }
        AcquireResponse::Granted(granted) => AcquireOutcome::Granted {
            lease: granted.lock.try_into()?,
            expired: None,
        },
        AcquireResponse::Held(held) => AcquireOutcome::Held {
            holder: held.holder.try_into()?,
            expires_in: Duration::from_millis(held.expires_in_ms),
        },
    })
}

#[cfg(test)]
mod tests {
    use fencelock_core::{FencingToken, Timestamp};

    use super::*;

    fn lease() -> Lease {
        Lease {
            resource: Resource::new("r").unwrap(),
            owner: Owner::new("o").unwrap(),
            token: FencingToken(7),
            acquired_at: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(31_000),
        }
    }

    #[test]
    fn acquires_round_trip_through_their_answer() {
        for outcome in [
            AcquireOutcome::Granted {
                lease: lease(),
                expired: None,
            },
            AcquireOutcome::Extended(lease()),
            AcquireOutcome::Held {
                holder: lease(),
                expires_in: Duration::from_millis(1_234),
            },
        ] {
            let answer = encode_acquire(&outcome);
            let json = serde_json::to_value(&answer).unwrap();
            let read: AcquireResponse = serde_json::from_value(json).unwrap();
            assert_eq!(decode_acquire(read).unwrap(), outcome);
        }
    }

    #[test]
    fn refusals_round_trip_through_their_problem_kind() {
        for refusal in [Refusal::NotFound, Refusal::Forbidden, Refusal::Conflict] {
            let kind = ProblemKind::from(refusal);
            assert_eq!(
                ProblemKind::from_status(kind.status()).and_then(ProblemKind::refusal),
                Some(refusal)
            );
            assert_eq!(ReleaseOutcome::from(refusal).judged(), Err(refusal));
            assert_eq!(RenewOutcome::from(refusal).label(), Label::from(refusal));
        }
        assert_eq!(ProblemKind::Unavailable.refusal(), None);
    }

    #[test]
    fn done_calls_round_trip_through_their_body() {
        let renewed = RenewOutcome::Renewed(lease());
        let body = RenewOutcome::encode(renewed.judged().unwrap());
        assert_eq!(RenewOutcome::decode(body).unwrap(), renewed);
        assert_eq!(
            ReleaseOutcome::decode(()).unwrap(),
            ReleaseOutcome::Released(None)
        );
        assert_eq!(renewed.label().as_str(), "renewed");
    }
}
