//! # fencelock-torture
//!
//! A randomised, seeded, time-bounded run of one store through faults, and a checker that
//! judges what every client saw. `scripts/torture --store S --seconds N --seed K` runs it by
//! hand; the README's test command runs a short one of every store. `docs/TORTURE.md` says
//! how to read a run, and what each store survived.
//!
//! # Layout
//!
//! - [`history`]: what a run records — every operation with when it was asked and answered
//!   and what came of it, every write to the fenced resource, every fault — as JSON lines.
//!   The runner writes it, the checker reads it; neither knows the other's workings.
//! - [`run`]: the run — [`target`] (the store's throwaway servers and the `fencelock serve`
//!   processes on it, each behind proxies of its own, in [`server`]), [`resource`] (the
//!   fenced resource), the client processes ([`client`], doing the [`workload`]), the
//!   [`nemesis`] (injecting the kinds of [`fault`]), the [`watcher`]s of the servers' event
//!   streams and the end drain, and the history written in the end ([`sink`] gathers it).
//! - [`clock`]: the monotonic clock every process of a run reads; [`rng`]: the seeded
//!   randomness.
//! - [`check`]: the checker. [`check::check`] judges a history, with no knowledge of the
//!   nemesis but the kills of servers, property by property (fenced writes, token order,
//!   exclusion, holder safety, releases, all or none, liveness, the event streams), and its
//!   [`check::Report`] prints a verdict per property, the seed, and for each violation the
//!   slice of history that shows it.
//! - [`verdict`]: the hook that hands a run's history to the checker and prints its report.

pub mod check;
pub mod client;
pub mod clock;
pub mod fault;
pub mod history;
pub mod nemesis;
pub mod resource;
pub mod rng;
pub mod run;
pub mod server;
pub mod sink;
pub mod target;
pub mod verdict;
pub mod watcher;
pub mod workload;
