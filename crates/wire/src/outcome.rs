//! The one two-way translator between what a store did and what the API answers: the server
//! encodes an outcome into a body, a status and a problem kind with it, and the HTTP client
//! decodes them back into the same outcome. It also names every operation and outcome for
//! metrics and log lines ([`Op`], [`Label`]), so nobody spells them as strings.

use std::time::Duration;

use fencelock_core::{
    AcquireAllOutcome, AcquireOutcome, Acquired, Busy, EndedLease, ForceOutcome, Hold, HoldKind, HoldOutcome,
    HoldPage, Lease, LeasePage, Owner, Refusal, ReleaseOutcome, RenewOutcome, Resource, Resources,
};

use crate::body::{
    AcquireAllResponse, AcquireResponse, AllGranted, AllRefused, AllStopped, Delayed, Granted, Held,
    InvalidLease, LeaseBody, LockRefusal, Stopped, millis,
};
use crate::hold::{
    HoldAcquireResponse, HoldBody, HoldGranted, HoldItem, HoldListResponse, HoldStopped, HoldsBody, Mode,
    PermitBody, PermitGranted, RwLockAcquireResponse, RwLockBody, RwLockBusy, RwLockListResponse,
    SemaphoreAcquireResponse, SemaphoreBody, SemaphoreBusy, SemaphoreListResponse,
};
use crate::parse;
use crate::problem::{Problem, ProblemKind};

/// An operation of the API, as metrics and log lines name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `POST /locks/{resource}`.
    Acquire,
    /// `POST /locks`: several locks, all or none.
    AcquireAll,
    /// `GET /locks/{resource}`.
    Get,
    /// `DELETE /locks/{resource}`.
    Release,
    /// `POST /locks/{resource}/renew`.
    Renew,
    /// `GET /locks`.
    List,
    /// `DELETE /locks/{resource}` with `{"force": true}`: an administrator's release.
    ForceRelease,
}

impl Op {
    /// The name in metrics and log lines: `acquire`, `acquire_all`, `get`, `release`,
    /// `renew`, `list`, `force_release`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::AcquireAll => "acquire_all",
            Self::Get => "get",
            Self::Release => "release",
            Self::Renew => "renew",
            Self::List => "list",
            Self::ForceRelease => "force_release",
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
    /// A semaphore's live permits carry another limit than the one asked for.
    LimitMismatch,
    /// Nobody holds the lock, but the lock-delay after its last lease's expiry runs.
    Delayed,
    /// Waiting would have closed a cycle of owners waiting for each other: refused.
    Deadlock,
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
            Self::LimitMismatch => "limit_mismatch",
            Self::Delayed => "delayed",
            Self::Deadlock => "deadlock",
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
            Self::Delayed { .. } => Label::Delayed,
        }
    }
}

/// Several locks: `granted` if any lease is new (else `extended`); refused, `held` if another
/// owner holds any of them (else `delayed`).
impl Outcome for AcquireAllOutcome {
    fn label(&self) -> Label {
        let any = |outcomes: &[AcquireOutcome], label| outcomes.iter().any(|o| o.label() == label);
        match self {
            Self::Granted(granted) if any(granted, Label::Granted) => Label::Granted,
            Self::Granted(_) => Label::Extended,
            Self::Refused(refusals) if any(refusals, Label::Held) => Label::Held,
            Self::Refused(_) => Label::Delayed,
        }
    }
}

impl Outcome for HoldOutcome {
    fn label(&self) -> Label {
        match self {
            Self::Granted { .. } => Label::Granted,
            Self::Extended(_) => Label::Extended,
            Self::Busy(_) => Label::Held,
            Self::LimitMismatch { .. } => Label::LimitMismatch,
        }
    }
}

/// An acquire through the waiters: labelled by its last outcome, whether it waited or not.
impl<T: Outcome> Outcome for Acquired<T> {
    fn label(&self) -> Label {
        self.outcome.label()
    }
}

/// A get of a semaphore or read-write lock: its live holds, none if nothing is held.
impl Outcome for Vec<Hold> {
    fn label(&self) -> Label {
        if self.is_empty() {
            Label::NotFound
        } else {
            Label::Found
        }
    }
}

impl Outcome for HoldPage {
    fn label(&self) -> Label {
        Label::Listed
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

/// A force-release: something was freed, or nothing was held.
impl Outcome for ForceOutcome {
    fn label(&self) -> Label {
        match self {
            Self::Released(_) => Label::Released,
            Self::NotFound => Label::NotFound,
        }
    }
}

impl Outcome for ReleaseOutcome {
    fn label(&self) -> Label {
        judged_label(self)
    }
}

impl<L> Outcome for RenewOutcome<L>
where
    Self: Judged,
{
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

/// A renewal of a permit or a hold answers it (200), as a lock's renewal answers the lease.
impl Judged for RenewOutcome<Hold> {
    type Done = Hold;
    type Body = HoldItem;
    const DONE: Label = Label::Renewed;
    const DONE_STATUS: u16 = 200;

    fn judged(&self) -> Result<&Hold, Refusal> {
        match self {
            Self::Renewed(hold) => Ok(hold),
            Self::NotFound => Err(Refusal::NotFound),
            Self::Forbidden => Err(Refusal::Forbidden),
            Self::Conflict => Err(Refusal::Conflict),
        }
    }

    fn encode(hold: &Hold) -> HoldItem {
        HoldItem::from(hold)
    }

    fn decode(body: HoldItem) -> Result<Self, InvalidLease> {
        Ok(Self::Renewed(Hold::try_from(body)?))
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

/// What the SPEC calls a kind's names in people's words: `semaphore`, `read-write lock`.
fn noun(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Semaphore => "semaphore",
        HoldKind::RwLock => "read-write lock",
    }
}

/// What one owner holds of a kind: a `permit`, a `hold`.
fn held_noun(kind: HoldKind) -> &'static str {
    match kind {
        HoldKind::Semaphore => "permit",
        HoldKind::RwLock => "hold",
    }
}

/// The problem's `detail` for a refusal of `owner`'s release or renewal of its permit or
/// hold on `name` ([`Refusal::Forbidden`]: its name holds one, of another principal).
pub fn hold_refusal_detail(kind: HoldKind, refusal: Refusal, name: &Resource, owner: &Owner) -> String {
    let (noun, held) = (noun(kind), held_noun(kind));
    match refusal {
        Refusal::NotFound => format!("{owner} holds no live {held} of the {noun} {name}"),
        Refusal::Forbidden => {
            format!("the {held} of {owner} on the {noun} {name} belongs to another principal")
        }
        Refusal::Conflict => {
            format!("the live {held} of {owner} on the {noun} {name} has another fencing token")
        }
    }
}

/// The problem's `detail` when nothing is held of `name`.
pub fn hold_not_found_detail(kind: HoldKind, name: &Resource) -> String {
    format!("no live {} of the {} {name}", held_noun(kind), noun(kind))
}

/// The problem of an acquire asking `asked` permits of the semaphore `name`, whose live
/// permits carry `limit`: its `limit` member is theirs, for the client to read back.
pub fn limit_mismatch_problem(name: &Resource, asked: u32, limit: u32) -> Problem {
    let detail = format!("the live permits of the semaphore {name} have limit {limit}, not {asked}");
    let mut problem = Problem::new(ProblemKind::LimitMismatch, detail, "");
    problem.limit = Some(limit);
    problem
}

/// The outcome a problem answered to an acquire of a semaphore tells of: a limit
/// mismatch, or `None` for any other problem.
pub fn decode_limit_mismatch(problem: &Problem) -> Option<HoldOutcome> {
    match (ProblemKind::from_type_uri(&problem.type_uri), problem.limit) {
        (Some(ProblemKind::LimitMismatch), Some(limit)) => Some(HoldOutcome::LimitMismatch { limit }),
        _ => None,
    }
}

/// The answer to an acquire of a permit or a hold of `kind` on `name`; `Err` with the live
/// permits' limit for a [`HoldOutcome::LimitMismatch`], which is answered as a problem
/// ([`limit_mismatch_problem`]).
pub fn encode_hold_acquire(
    kind: HoldKind,
    name: &Resource,
    outcome: &HoldOutcome,
) -> Result<HoldAcquireResponse, u32> {
    let (hold, extended, replaced) = match outcome {
        HoldOutcome::LimitMismatch { limit } => return Err(*limit),
        HoldOutcome::Busy(busy) => return Ok(encode_busy(kind, name, busy)),
        HoldOutcome::Granted { hold, replaced } => (hold, false, replaced.as_ref()),
        HoldOutcome::Extended(hold) => (hold, true, None),
    };
    Ok(match HoldItem::from(hold) {
        HoldItem::Permit(permit) => {
            HoldAcquireResponse::Semaphore(SemaphoreAcquireResponse::Granted(PermitGranted {
                acquired: true,
                extended,
                permit,
            }))
        }
        HoldItem::Hold(body) => HoldAcquireResponse::RwLock(RwLockAcquireResponse::Granted(HoldGranted {
            acquired: true,
            extended,
            hold: body,
            replaced: replaced.and_then(HoldBody::of),
        })),
    })
}

/// The answer to an acquire of a permit or a hold of `kind` on `name` that the server stopped
/// waiting for while shutting down, without its store's answer ([`HoldStopped`]).
pub fn encode_hold_stopped(kind: HoldKind, name: &Resource) -> HoldAcquireResponse {
    let stopped = HoldStopped {
        acquired: false,
        name: name.to_string(),
        shutting_down: true,
    };
    match kind {
        HoldKind::Semaphore => HoldAcquireResponse::Semaphore(SemaphoreAcquireResponse::Stopped(stopped)),
        HoldKind::RwLock => HoldAcquireResponse::RwLock(RwLockAcquireResponse::Stopped(stopped)),
    }
}

fn encode_busy(kind: HoldKind, name: &Resource, busy: &Busy) -> HoldAcquireResponse {
    let retry_in_ms = millis(busy.retry_in);
    match kind {
        HoldKind::Semaphore => {
            HoldAcquireResponse::Semaphore(SemaphoreAcquireResponse::Busy(SemaphoreBusy {
                acquired: false,
                name: name.to_string(),
                holders: busy.holders.len(),
                permits: busy.holders.iter().filter_map(PermitBody::of).collect(),
                retry_in_ms,
            }))
        }
        HoldKind::RwLock => HoldAcquireResponse::RwLock(RwLockAcquireResponse::Busy(RwLockBusy {
            acquired: false,
            name: name.to_string(),
            mode: held_mode(&busy.holders),
            holders: busy.holders.iter().filter_map(HoldBody::of).collect(),
            writer_waits: busy.writer_waits,
            retry_in_ms,
        })),
    }
}

/// The mode a read-write lock is held in: its holders'; `write` when nothing is held (a
/// reader refused only because a writer waits: the writer has the next turn).
fn held_mode(holders: &[Hold]) -> Mode {
    holders
        .first()
        .and_then(|h| Mode::of(h.claim))
        .unwrap_or(Mode::Write)
}

/// The outcome an acquire's answer of either kind tells of.
pub fn decode_hold_acquire(answer: HoldAcquireResponse) -> Result<HoldOutcome, InvalidLease> {
    let granted = |hold: Hold, extended: bool, replaced: Option<Hold>| {
        if extended {
            HoldOutcome::Extended(hold)
        } else {
            HoldOutcome::Granted { hold, replaced }
        }
    };
    Ok(match answer {
        HoldAcquireResponse::Semaphore(SemaphoreAcquireResponse::Granted(g)) => {
            granted(g.permit.try_into()?, g.extended, None)
        }
        HoldAcquireResponse::RwLock(RwLockAcquireResponse::Granted(g)) => {
            let replaced = g.replaced.map(Hold::try_from).transpose()?;
            granted(g.hold.try_into()?, g.extended, replaced)
        }
        HoldAcquireResponse::Semaphore(SemaphoreAcquireResponse::Busy(busy)) => HoldOutcome::Busy(Busy {
            holders: read_all(busy.permits)?,
            writer_waits: false,
            retry_in: Duration::from_millis(busy.retry_in_ms),
        }),
        HoldAcquireResponse::RwLock(RwLockAcquireResponse::Busy(busy)) => HoldOutcome::Busy(Busy {
            holders: read_all(busy.holders)?,
            writer_waits: busy.writer_waits,
            retry_in: Duration::from_millis(busy.retry_in_ms),
        }),
        HoldAcquireResponse::Semaphore(SemaphoreAcquireResponse::Stopped(_))
        | HoldAcquireResponse::RwLock(RwLockAcquireResponse::Stopped(_)) => {
            return Err(InvalidLease::ShuttingDown);
        }
    })
}

fn read_all<B>(bodies: Vec<B>) -> Result<Vec<Hold>, InvalidLease>
where
    Hold: TryFrom<B, Error = InvalidLease>,
{
    bodies.into_iter().map(Hold::try_from).collect()
}

/// The answer to a get of `name` of `kind`, given its live holds in token order; `None`
/// when nothing is held (answered 404, [`hold_not_found_detail`]).
pub fn encode_holds(kind: HoldKind, name: &Resource, holds: &[Hold]) -> Option<HoldsBody> {
    match kind {
        HoldKind::Semaphore => semaphore_body(name, holds).map(HoldsBody::Semaphore),
        HoldKind::RwLock => rwlock_body(name, holds).map(HoldsBody::RwLock),
    }
}

/// A semaphore's live permits, with their limit; `None` if there is none.
fn semaphore_body(name: &Resource, holds: &[Hold]) -> Option<SemaphoreBody> {
    let permits: Vec<PermitBody> = holds.iter().filter_map(PermitBody::of).collect();
    Some(SemaphoreBody {
        name: name.to_string(),
        limit: permits.first()?.limit,
        permits,
    })
}

/// A read-write lock's live holds, with their mode; `None` if there is none.
fn rwlock_body(name: &Resource, holds: &[Hold]) -> Option<RwLockBody> {
    let holders: Vec<HoldBody> = holds.iter().filter_map(HoldBody::of).collect();
    Some(RwLockBody {
        name: name.to_string(),
        mode: holders.first()?.mode,
        holders,
    })
}

/// The live holds a get's answer lists, in its order (the token order).
pub fn decode_holds(body: HoldsBody) -> Result<Vec<Hold>, InvalidLease> {
    match body {
        HoldsBody::Semaphore(semaphore) => read_all(semaphore.permits),
        HoldsBody::RwLock(rwlock) => read_all(rwlock.holders),
    }
}

/// The answer to a list of `kind`.
pub fn encode_hold_page(kind: HoldKind, page: &HoldPage) -> HoldListResponse {
    let next_cursor = page.next.as_ref().map(parse::encode_cursor);
    let names = page.names.iter();
    match kind {
        HoldKind::Semaphore => HoldListResponse::Semaphores(SemaphoreListResponse {
            semaphores: names
                .filter_map(|(name, holds)| semaphore_body(name, holds))
                .collect(),
            next_cursor,
        }),
        HoldKind::RwLock => HoldListResponse::RwLocks(RwLockListResponse {
            rwlocks: names
                .filter_map(|(name, holds)| rwlock_body(name, holds))
                .collect(),
            next_cursor,
        }),
    }
}

/// The page a list's answer of either kind tells of.
pub fn decode_hold_page(answer: HoldListResponse) -> Result<HoldPage, InvalidLease> {
    let (bodies, next_cursor): (Vec<HoldsBody>, _) = match answer {
        HoldListResponse::Semaphores(list) => (
            list.semaphores.into_iter().map(HoldsBody::Semaphore).collect(),
            list.next_cursor,
        ),
        HoldListResponse::RwLocks(list) => (
            list.rwlocks.into_iter().map(HoldsBody::RwLock).collect(),
            list.next_cursor,
        ),
    };
    let names = bodies
        .into_iter()
        .map(|body| {
            let name = match &body {
                HoldsBody::Semaphore(semaphore) => &semaphore.name,
                HoldsBody::RwLock(rwlock) => &rwlock.name,
            };
            Ok((Resource::new(name.as_str())?, decode_holds(body)?))
        })
        .collect::<Result<_, InvalidLease>>()?;
    let next = next_cursor
        .map(|cursor| parse::cursor(&cursor))
        .transpose()
        .map_err(|e| InvalidLease::Answer(format!("a cursor no server makes: {}", e.message)))?;
    Ok(HoldPage { names, next })
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
        AcquireOutcome::Delayed { resource, retry_in } => AcquireResponse::Delayed(Delayed {
            acquired: false,
            resource: resource.to_string(),
            retry_after_ms: millis(*retry_in),
        }),
    }
}

/// The answer to an acquire of several locks.
pub fn encode_acquire_all(outcome: &AcquireAllOutcome) -> AcquireAllResponse {
    match outcome {
        AcquireAllOutcome::Granted(granted) => AcquireAllResponse::Granted(AllGranted {
            acquired: true,
            locks: granted
                .iter()
                .filter_map(AcquireOutcome::lease)
                .map(LeaseBody::from)
                .collect(),
            extended: granted
                .iter()
                .filter_map(|outcome| match outcome {
                    AcquireOutcome::Extended(lease) => Some(lease.resource.to_string()),
                    _ => None,
                })
                .collect(),
        }),
        AcquireAllOutcome::Refused(refusals) => {
            let refusals: Vec<LockRefusal> = refusals
                .iter()
                .filter_map(|refusal| match encode_acquire(refusal) {
                    AcquireResponse::Held(held) => Some(LockRefusal::Held(held)),
                    AcquireResponse::Delayed(delayed) => Some(LockRefusal::Delayed(delayed)),
                    AcquireResponse::Granted(_) | AcquireResponse::Stopped(_) => None,
                })
                .collect();
            AcquireAllResponse::Refused(AllRefused {
                acquired: false,
                held: refusals
                    .iter()
                    .map(|refusal| match refusal {
                        LockRefusal::Held(held) => held.resource.clone(),
                        LockRefusal::Delayed(delayed) => delayed.resource.clone(),
                    })
                    .collect(),
                retry_after_ms: outcome.retry_in().map_or(0, millis),
                refusals,
            })
        }
    }
}

/// The answer to an acquire of `resources` that the server stopped waiting for while
/// shutting down, without its store's answer ([`AllStopped`]).
pub fn encode_all_stopped(resources: &Resources) -> AcquireAllResponse {
    AcquireAllResponse::Stopped(AllStopped {
        acquired: false,
        resources: resources.as_slice().iter().map(Resource::to_string).collect(),
        shutting_down: true,
    })
}

/// The outcome an acquire of several locks tells of.
pub fn decode_acquire_all(answer: AcquireAllResponse) -> Result<AcquireAllOutcome, InvalidLease> {
    Ok(match answer {
        AcquireAllResponse::Granted(granted) => AcquireAllOutcome::Granted(
            granted
                .locks
                .into_iter()
                .map(|lock| {
                    let extended = granted.extended.contains(&lock.resource);
                    decode_acquire(AcquireResponse::Granted(Granted {
                        acquired: true,
                        extended,
                        lock,
                    }))
                })
                .collect::<Result<_, _>>()?,
        ),
        AcquireAllResponse::Refused(refused) => AcquireAllOutcome::Refused(
            refused
                .refusals
                .into_iter()
                .map(|refusal| {
                    decode_acquire(match refusal {
                        LockRefusal::Held(held) => AcquireResponse::Held(held),
                        LockRefusal::Delayed(delayed) => AcquireResponse::Delayed(delayed),
                    })
                })
                .collect::<Result<_, _>>()?,
        ),
        AcquireAllResponse::Stopped(_) => return Err(InvalidLease::ShuttingDown),
    })
}

/// The answer that another owner holds the lock (its lease names the resource asked for).
pub fn encode_held(holder: &Lease, expires_in: Duration) -> Held {
    Held {
        acquired: false,
        resource: holder.resource.to_string(),
        holder: LeaseBody::from(holder),
        expires_in_ms: millis(expires_in),
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
        AcquireResponse::Delayed(delayed) => AcquireOutcome::Delayed {
            resource: Resource::new(delayed.resource)?,
            retry_in: Duration::from_millis(delayed.retry_after_ms),
        },
        AcquireResponse::Stopped(_) => return Err(InvalidLease::ShuttingDown),
    })
}

/// The answer to an acquire of `resource` that the server stopped waiting for while shutting
/// down, without its store's answer ([`Stopped`]).
pub fn encode_stopped(resource: &Resource) -> AcquireResponse {
    AcquireResponse::Stopped(Stopped {
        acquired: false,
        resource: resource.to_string(),
        shutting_down: true,
    })
}

#[cfg(test)]
mod tests {
    use fencelock_core::{Claim, FencingToken, Timestamp};

    use super::*;

    fn hold(owner: &str, token: u64, claim: Claim) -> Hold {
        Hold {
            lease: Lease {
                owner: Owner::new(owner).unwrap(),
                token: FencingToken(token),
                ..lease()
            },
            claim,
        }
    }

    /// Through JSON and back, as the client reads what the server wrote.
    fn through_json<T: serde::Serialize + serde::de::DeserializeOwned>(value: &T) -> T {
        serde_json::from_value(serde_json::to_value(value).unwrap()).unwrap()
    }

    #[test]
    fn hold_acquires_round_trip_through_their_answer() {
        let name = Resource::new("r").unwrap();
        let permit = Claim::Permit { limit: 3 };
        let busy = |holders: Vec<Hold>, writer_waits| {
            HoldOutcome::Busy(Busy {
                holders,
                writer_waits,
                retry_in: Duration::from_millis(250),
            })
        };
        for (kind, outcome) in [
            (
                HoldKind::Semaphore,
                HoldOutcome::Granted {
                    hold: hold("o", 7, permit),
                    replaced: None,
                },
            ),
            (HoldKind::Semaphore, HoldOutcome::Extended(hold("o", 7, permit))),
            (
                HoldKind::Semaphore,
                busy(vec![hold("a", 1, permit), hold("b", 2, permit)], false),
            ),
            (
                HoldKind::RwLock,
                HoldOutcome::Granted {
                    hold: hold("o", 9, Claim::Write),
                    replaced: Some(hold("o", 8, Claim::Read)),
                },
            ),
            (
                HoldKind::RwLock,
                HoldOutcome::Granted {
                    hold: hold("o", 9, Claim::Read),
                    replaced: None,
                },
            ),
            (HoldKind::RwLock, HoldOutcome::Extended(hold("o", 9, Claim::Read))),
            (HoldKind::RwLock, busy(vec![hold("a", 1, Claim::Read)], true)),
            (HoldKind::RwLock, busy(vec![hold("a", 1, Claim::Write)], false)),
            (HoldKind::RwLock, busy(vec![], true)),
        ] {
            let answer = encode_hold_acquire(kind, &name, &outcome).unwrap();
            assert_eq!(decode_hold_acquire(through_json(&answer)).unwrap(), outcome);
        }
        let mismatch = HoldOutcome::LimitMismatch { limit: 5 };
        assert_eq!(encode_hold_acquire(HoldKind::Semaphore, &name, &mismatch), Err(5));
        let problem = limit_mismatch_problem(&name, 3, 5);
        assert_eq!(problem.status, 409);
        assert!(problem.type_uri.ends_with("limit-mismatch"));
        assert_eq!(decode_limit_mismatch(&through_json(&problem)), Some(mismatch));
        assert_eq!(
            decode_limit_mismatch(&Problem::new(ProblemKind::Conflict, "", "")),
            None
        );
    }

    #[test]
    fn hold_answers_are_written_as_the_spec_says() {
        let name = Resource::new("r").unwrap();
        let granted = HoldOutcome::Granted {
            hold: hold("o", 7, Claim::Permit { limit: 3 }),
            replaced: None,
        };
        let json =
            serde_json::to_value(encode_hold_acquire(HoldKind::Semaphore, &name, &granted).unwrap()).unwrap();
        assert_eq!(json["acquired"], true);
        assert_eq!(json["permit"]["name"], "r");
        assert_eq!(json["permit"]["limit"], 3);
        assert_eq!(json["permit"]["fencing_token"], 7);
        let busy = HoldOutcome::Busy(Busy {
            holders: vec![hold("a", 1, Claim::Read), hold("b", 2, Claim::Read)],
            writer_waits: true,
            retry_in: Duration::ZERO,
        });
        let json =
            serde_json::to_value(encode_hold_acquire(HoldKind::RwLock, &name, &busy).unwrap()).unwrap();
        assert_eq!(json["acquired"], false);
        assert_eq!((&json["name"], &json["mode"]), (&"r".into(), &"read".into()));
        assert_eq!(json["holders"][1]["owner"], "b");
    }

    #[test]
    fn holds_and_pages_round_trip_through_their_answer() {
        let name = Resource::new("r").unwrap();
        let permits = vec![
            hold("a", 1, Claim::Permit { limit: 2 }),
            hold("b", 2, Claim::Permit { limit: 2 }),
        ];
        let readers = vec![hold("a", 3, Claim::Read), hold("b", 4, Claim::Read)];
        for (kind, holds) in [(HoldKind::Semaphore, &permits), (HoldKind::RwLock, &readers)] {
            let body = encode_holds(kind, &name, holds).unwrap();
            assert_eq!(&decode_holds(through_json(&body)).unwrap(), holds);
            assert_eq!(encode_holds(kind, &name, &[]), None);
            let page = HoldPage {
                names: vec![
                    (name.clone(), holds.clone()),
                    (Resource::new("s").unwrap(), holds.clone()),
                ],
                next: Some(Resource::new("s").unwrap()),
            };
            let answer = encode_hold_page(kind, &page);
            assert_eq!(decode_hold_page(through_json(&answer)).unwrap(), page);
        }
        let body = serde_json::to_value(encode_holds(HoldKind::Semaphore, &name, &permits)).unwrap();
        assert_eq!((&body["name"], &body["limit"]), (&"r".into(), &2.into()));
        let body = serde_json::to_value(encode_holds(HoldKind::RwLock, &name, &readers)).unwrap();
        assert_eq!(body["mode"], "read");
    }

    #[test]
    fn hold_renewals_round_trip_through_their_body() {
        for claim in [Claim::Permit { limit: 4 }, Claim::Read, Claim::Write] {
            let renewed = RenewOutcome::Renewed(hold("o", 5, claim));
            let body = RenewOutcome::<Hold>::encode(renewed.judged().unwrap());
            assert_eq!(
                RenewOutcome::<Hold>::decode(through_json(&body)).unwrap(),
                renewed
            );
            assert_eq!(renewed.label(), Label::Renewed);
        }
        let zero: HoldItem = serde_json::from_value(serde_json::json!({"name": "r", "owner": "o",
            "fencing_token": 1, "acquired_at": "2026-11-29T06:30:00.123Z",
            "expires_at": "2026-11-29T06:30:30.123Z", "limit": 0}))
        .unwrap();
        assert!(matches!(Hold::try_from(zero), Err(InvalidLease::Answer(_))));
    }

    fn lease() -> Lease {
        Lease {
            resource: Resource::new("r").unwrap(),
            owner: Owner::new("o").unwrap(),
            token: FencingToken(7),
            acquired_at: Timestamp::from_millis(1_000),
            expires_at: Timestamp::from_millis(31_000),
            hold_until: None,
            lock_delay: std::time::Duration::ZERO,
            // Round trips carry metadata too.
            meta: Some(fencelock_core::Meta::parse(r#"{"host":"db-3","pid":311}"#).unwrap()),
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

    fn capped(resource: &str, token: u64) -> Lease {
        Lease {
            resource: Resource::new(resource).unwrap(),
            token: FencingToken(token),
            hold_until: Some(Timestamp::from_millis(61_000)),
            ..lease()
        }
    }

    #[test]
    fn a_cap_travels_as_hold_until_and_a_lease_without_one_has_no_such_field() {
        let answer = serde_json::to_value(encode_acquire(&AcquireOutcome::Granted {
            lease: capped("r", 7),
            expired: None,
        }))
        .unwrap();
        assert_eq!(answer["lock"]["hold_until"], "1970-01-01T00:01:01.000Z");
        let plain = serde_json::to_value(LeaseBody::from(&lease())).unwrap();
        assert!(plain.get("hold_until").is_none(), "{plain}");
        let delayed = AcquireOutcome::Delayed {
            resource: Resource::new("r").unwrap(),
            retry_in: Duration::from_millis(250),
        };
        assert_eq!(
            serde_json::to_value(encode_acquire(&delayed)).unwrap(),
            serde_json::json!({"acquired": false, "resource": "r", "retry_after_ms": 250})
        );
        for outcome in [
            delayed,
            AcquireOutcome::Extended(capped("r", 7)),
            AcquireOutcome::Held {
                holder: capped("r", 7),
                expires_in: Duration::from_millis(3),
            },
        ] {
            assert_eq!(
                decode_acquire(through_json(&encode_acquire(&outcome))).unwrap(),
                outcome
            );
        }
    }

    #[test]
    fn acquires_of_several_locks_round_trip_through_their_answer() {
        let granted = AcquireAllOutcome::Granted(vec![
            AcquireOutcome::Granted {
                lease: capped("b", 9),
                expired: None,
            },
            AcquireOutcome::Extended(Lease {
                resource: Resource::new("a").unwrap(),
                ..lease()
            }),
        ]);
        let refused = AcquireAllOutcome::Refused(vec![
            AcquireOutcome::Held {
                holder: capped("b", 3),
                expires_in: Duration::from_millis(900),
            },
            AcquireOutcome::Delayed {
                resource: Resource::new("c").unwrap(),
                retry_in: Duration::from_millis(400),
            },
        ]);
        for outcome in [&granted, &refused] {
            let answer = through_json(&encode_acquire_all(outcome));
            assert_eq!(&decode_acquire_all(answer).unwrap(), outcome);
        }
        let json = serde_json::to_value(encode_acquire_all(&granted)).unwrap();
        assert_eq!(json["acquired"], true);
        assert_eq!(
            (&json["locks"][0]["resource"], &json["locks"][1]["resource"]),
            (&"b".into(), &"a".into())
        );
        assert_eq!(json["extended"], serde_json::json!(["a"]));
        let json = serde_json::to_value(encode_acquire_all(&refused)).unwrap();
        assert_eq!(json["acquired"], false);
        assert_eq!(json["held"], serde_json::json!(["b", "c"]));
        assert_eq!(json["retry_after_ms"], 400, "the soonest of the two");
        assert_eq!(json["refusals"][0]["holder"]["fencing_token"], 3);
        assert_eq!(json["refusals"][1]["retry_after_ms"], 400);
        assert_eq!((granted.label(), refused.label()), (Label::Granted, Label::Held));
        let extended = AcquireAllOutcome::Granted(vec![AcquireOutcome::Extended(lease())]);
        let delayed = AcquireAllOutcome::Refused(vec![AcquireOutcome::Delayed {
            resource: Resource::new("c").unwrap(),
            retry_in: Duration::ZERO,
        }]);
        assert_eq!(
            (extended.label(), delayed.label()),
            (Label::Extended, Label::Delayed)
        );
    }

    #[test]
    fn a_server_shutting_down_answers_acquired_false_and_a_client_reads_no_outcome() {
        let name = Resource::new("job").unwrap();
        let one = serde_json::to_value(encode_stopped(&name)).unwrap();
        assert_eq!(
            one,
            serde_json::json!({"acquired": false, "resource": "job", "shutting_down": true})
        );
        let read: AcquireResponse = serde_json::from_value(one).unwrap();
        assert_eq!(decode_acquire(read), Err(InvalidLease::ShuttingDown));
        let names = Resources::new(vec![name.clone(), Resource::new("b").unwrap()]).unwrap();
        let all = serde_json::to_value(encode_all_stopped(&names)).unwrap();
        assert_eq!(
            all,
            serde_json::json!({"acquired": false, "resources": ["job", "b"], "shutting_down": true})
        );
        let read: AcquireAllResponse = serde_json::from_value(all).unwrap();
        assert_eq!(decode_acquire_all(read), Err(InvalidLease::ShuttingDown));
        for kind in [HoldKind::Semaphore, HoldKind::RwLock] {
            let hold = serde_json::to_value(encode_hold_stopped(kind, &name)).unwrap();
            assert_eq!(
                hold,
                serde_json::json!({"acquired": false, "name": "job", "shutting_down": true})
            );
            let read: HoldAcquireResponse = serde_json::from_value(hold).unwrap();
            assert_eq!(decode_hold_acquire(read), Err(InvalidLease::ShuttingDown));
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
            assert_eq!(RenewOutcome::<Lease>::from(refusal).label(), Label::from(refusal));
        }
        assert_eq!(ProblemKind::Unavailable.refusal(), None);
    }

    #[test]
    fn done_calls_round_trip_through_their_body() {
        let renewed = RenewOutcome::Renewed(lease());
        let body = RenewOutcome::<Lease>::encode(renewed.judged().unwrap());
        assert_eq!(RenewOutcome::<Lease>::decode(body).unwrap(), renewed);
        assert_eq!(
            ReleaseOutcome::decode(()).unwrap(),
            ReleaseOutcome::Released(None)
        );
        assert_eq!(renewed.label().as_str(), "renewed");
    }
}
