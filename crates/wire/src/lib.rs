//! # fencelock-wire
//!
//! The JSON of the fencelock HTTP API, in one place that the server and the client both use,
//! so they cannot drift apart; the same types generate the OpenAPI description.
//!
//! # Layout
//!
//! - [`body`]: requests and answers as they travel ([`LeaseBody`], [`AcquireResponse`], …).
//! - [`hold`]: the requests and answers of semaphores and read-write locks ([`PermitBody`],
//!   [`HoldBody`], …).
//! - [`election`]: the requests and answers of leader election ([`LeadershipBody`],
//!   [`CampaignResponse`], …).
//! - [`event`]: the events of `GET /events` ([`EventData`], [`EventId`], …).
//! - [`fields`]: the names and bounds of the request fields ([`Limits`]: those a server
//!   configures), for the parser and the schema.
//! - [`outcome`]: the one two-way translator between the store's outcomes and the API's
//!   answers (body, status, problem kind), and the labels metrics and events use.
//! - [`parse`]: strict validation of request bodies, path segments and query parameters
//!   into the model's newtypes, listing every bad field.
//! - [`problem`]: RFC 9457 problems and [`ProblemKind`], the one table from outcome to
//!   HTTP status.
//! - [`whoami`]: who the server takes the caller for, and its rights ([`WhoAmI`]).

pub mod body;
pub mod election;
pub mod event;
pub mod fields;
pub mod hold;
pub mod outcome;
pub mod parse;
pub mod problem;
pub mod whoami;

pub use body::{
    AcquireAllRequest, AcquireAllResponse, AcquireRequest, AcquireResponse, AllGranted, AllRefused,
    AllStopped, Delayed, DeleteRequest, ForceReleaseRequest, Granted, Held, LeaseBody, ListResponse,
    LockRefusal, ReleaseRequest, RenewRequest, Stopped, TtlFields, WaiterBody, Watched,
};
pub use election::{
    CampaignBody, CampaignDelayed, CampaignResponse, CampaignStopped, CampaignedBody, ElectionRenewBody,
    LeadershipBody, ProclaimBody, ResignBody,
};
pub use event::{EventData, EventId, EventName, Notice, Relayed, Subject, Topic, Topics};
pub use fields::Limits;
pub use hold::{
    HoldAcquireRequest, HoldAcquireResponse, HoldBody, HoldGranted, HoldItem, HoldListResponse, HoldStopped,
    HoldsBody, Mode, PermitBody, PermitGranted, RwLockAcquireRequest, RwLockAcquireResponse, RwLockBody,
    RwLockBusy, RwLockListResponse, SemaphoreAcquireRequest, SemaphoreAcquireResponse, SemaphoreBody,
    SemaphoreBusy, SemaphoreListResponse,
};
pub use outcome::{Judged, Label, Op, Outcome};
pub use parse::{
    Acquire, AcquireAll, AcquireHold, AcquireLock, BadBody, Campaign, Delete, ElectionRenew, Proclaim,
    Release, Renew, Resign,
};
pub use problem::{FieldError, Problem, ProblemKind};
pub use whoami::{GrantBody, RightName, WhoAmI};
