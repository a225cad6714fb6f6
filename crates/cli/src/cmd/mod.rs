//! One file per command.

pub mod serve;
