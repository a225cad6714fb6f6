//! # fencelock-torture
//!
//! A randomised, seeded, time-bounded run of one store through faults, and a checker that
//! judges what every client saw. `scripts/torture --store S --seconds N --seed K` runs it by
//! hand; the README's test command runs a short one of every store.
//!
//! # Layout
//!
//! - [`history`]: what a run records — every operation with when it was asked and answered
//!   and what came of it, every write to the fenced resource, every fault — as JSON lines.
//!   The runner writes it, the checker reads it; neither knows the other's workings.
//! - [`check`]: the checker. [`check::check`] judges a history, with no knowledge of the
//!   nemesis, property by property (fenced writes, token order, exclusion, holder safety,
//!   releases, all or none, liveness), and its [`check::Report`] prints a verdict per
//!   property, the seed, and for each violation the slice of history that shows it.

pub mod check;
pub mod history;
