//! One file per command, plus what the client commands share.

pub mod acquire;
pub mod auth;
pub mod bench;
mod common;
pub mod elect;
pub mod events;
pub mod leader;
pub mod list;
pub mod release;
pub mod renew;
pub mod run;
pub mod serve;
pub mod status;
mod waiting;
