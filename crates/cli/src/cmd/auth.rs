//! `fencelock auth new-token NAME`: a fresh random bearer token for the principal NAME, and
//! the `[[principal]]` block of the server's `--auth` file that recognizes it.
//!
//! The token is 256 bits from the operating system's random source, in hex. It is printed
//! this once: the block holds only its SHA-256, which is all the server keeps, so a leaked
//! auth file gives nobody a token. Exit 0; 2 for a name that cannot be a principal's; 3 if
//! the operating system gives no randomness.

use std::fmt::Write as _;
use std::process::ExitCode;

use fencelock_core::Principal;
use sha2::{Digest, Sha256};

use super::common::{self, Failure, exit};

/// `fencelock auth …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Make a random token for the principal NAME, and print it with the `[[principal]]`
    /// block to add to the --auth file of `fencelock serve` (the token is shown only this
    /// once: the file holds its SHA-256).
    NewToken {
        /// The principal's name, e.g. billing.
        name: String,
    },
}

/// Runs `fencelock auth …`.
pub fn run(command: Command) -> ExitCode {
    match command {
        Command::NewToken { name } => common::finish("auth new-token", new_token(&name)),
    }
}

fn new_token(name: &str) -> Result<u8, Failure> {
    let principal = Principal::new(name)
        .map_err(|e| Failure::bad_input(format!("invalid principal name {name:?}: {e}")))?;
    let mut secret = [0_u8; 32];
    getrandom::fill(&mut secret).map_err(|e| {
        Failure::new(
            exit::UNREACHABLE,
            format!("no randomness from the operating system: {e}"),
        )
    })?;
    let token = hex(&secret);
    print!("{}", announce(&principal, &token));
    Ok(exit::OK)
}

/// What `new-token` prints: the token, on a line that is not TOML (so that the output
/// appended whole to the auth file makes the server refuse it, rather than keep the token
/// next to its hash), then the block.
fn announce(principal: &Principal, token: &str) -> String {
    let digest = hex(&Sha256::digest(token.as_bytes()));
    // A JSON string of a principal's name (no control characters) is a TOML basic string.
    let name = serde_json::to_string(principal.as_str()).unwrap_or_default();
    format!(
        "\
# The token of the principal {name}, shown only this once. Its clients send it with
# --auth-token TOKEN, or better FENCELOCK_AUTH_TOKEN=TOKEN in their environment:
token: {token}

# Add this to the --auth file of `fencelock serve` (then SIGHUP the server, or restart it):
[[principal]]
name = {name}
token_sha256 = \"{digest}\"
# Rights over the names that start with a prefix (on locks, semaphores and read-write
# locks): read, lock, admin. For example:
# grants = [{{ prefix = \"payment:\", rights = [\"read\", \"lock\"] }}]
grants = []
"
    )
}

/// `bytes` in lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, byte| {
            // Writing to a String cannot fail.
            let _ = write!(out, "{byte:02x}");
            out
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_holds_the_sha256_of_the_token_and_a_toml_name() {
        let principal = Principal::new("ops \"eu\"").unwrap();
        let shown = announce(&principal, "test");
        assert!(shown.contains("\ntoken: test\n"), "{shown}");
        assert!(shown.contains("\nname = \"ops \\\"eu\\\"\"\n"), "{shown}");
        // SHA-256("test"), as the SPEC's example file has it.
        assert!(
            shown.contains(
                "token_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\""
            ),
            "{shown}"
        );
    }
}
