//! The fenced resource: what the README tells users to put behind a lock. It keeps, per
//! name, the highest fencing token it accepted, and refuses a write with a lower one
//! ([`fencelock_client::fence::FencedValue`], the client library's own rule).
//!
//! It runs inside the runner, on a Unix socket, and judges one write at a time: each
//! connection sends [`WriteRequest`]s as JSON lines and reads `accepted` or `refused` for
//! each. Every judgement is recorded as a [`Write`] whose `at` is taken while the judge is
//! held, so the history's order of writes is the order the resource judged them in.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use fencelock_client::FencingToken;
use fencelock_client::fence::FencedValue;
use serde::{Deserialize, Serialize};

use crate::history::{Entry, Mono, Write};
use crate::sink::Sink;

/// What the resource answers a write it took.
pub const ACCEPTED: &str = "accepted";
/// What it answers a write with a token below one it took before.
pub const REFUSED: &str = "refused";

/// One write, as a client sends it: under which acquire, to which name, with which token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub client: u32,
    /// The acquire operation whose lease the write is made under.
    pub op: u64,
    pub name: String,
    pub token: u64,
}

/// The resource, listening on its socket until dropped.
#[derive(Debug)]
pub struct Resource {
    path: PathBuf,
}

/// The values, one per name. A std mutex: held for one judgement and one push to the
/// history, never across anything that waits.
#[derive(Debug, Default)]
struct Judge {
    values: HashMap<String, FencedValue<u64>>,
}

impl Resource {
    /// Listens at `path` and records every judgement into `history`.
    pub fn start(path: &Path, history: Sink) -> std::io::Result<Self> {
        let listener = UnixListener::bind(path)?;
        let judge = Arc::new(Mutex::new(Judge::default()));
        thread::Builder::new()
            .name("fenced-resource".into())
            .spawn(move || {
                for connection in listener.incoming().flatten() {
                    let (judge, history) = (judge.clone(), history.clone());
                    let _ = thread::Builder::new()
                        .name("fenced-write".into())
                        .spawn(move || serve(connection, &judge, &history));
                }
            })?;
        Ok(Self {
            path: path.to_owned(),
        })
    }

    /// Where clients connect.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Answers one connection's writes until it closes.
fn serve(connection: UnixStream, judge: &Mutex<Judge>, history: &Sink) {
    let Ok(mut answers) = connection.try_clone() else {
        return;
    };
    for line in BufReader::new(connection).lines() {
        let Ok(line) = line else { return };
        let answer = match serde_json::from_str::<WriteRequest>(&line) {
            Ok(request) => {
                if judge_write(judge, history, request) {
                    ACCEPTED
                } else {
                    REFUSED
                }
            }
            Err(error) => {
                eprintln!("fenced resource: a write it cannot read ({error}): {line}");
                REFUSED
            }
        };
        if writeln!(answers, "{answer}").is_err() {
            return;
        }
    }
}

/// Judges one write and records it; whether it was accepted.
fn judge_write(judge: &Mutex<Judge>, history: &Sink, request: WriteRequest) -> bool {
    let mut judge = judge.lock().unwrap_or_else(PoisonError::into_inner);
    let value = judge.values.entry(request.name.clone()).or_default();
    let accepted = value
        .update(FencingToken(request.token), |writes| *writes += 1)
        .is_ok();
    history.push(Entry::Write(Write {
        client: request.client,
        op: request.op,
        name: request.name,
        token: request.token,
        at: Mono::now(),
        accepted,
    }));
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_token_is_refused_and_every_judgement_recorded_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let sink = Sink::default();
        let resource = Resource::start(&dir.path().join("r.sock"), sink.clone()).unwrap();
        let mut connection = UnixStream::connect(resource.path()).unwrap();
        let mut answers = BufReader::new(connection.try_clone().unwrap()).lines();
        let mut write = |name: &str, token: u64| {
            let request = WriteRequest {
                client: 1,
                op: token,
                name: name.into(),
                token,
            };
            writeln!(connection, "{}", serde_json::to_string(&request).unwrap()).unwrap();
            answers.next().unwrap().unwrap()
        };
        assert_eq!(write("a", 5), ACCEPTED);
        assert_eq!(write("a", 5), ACCEPTED, "the same holder writes again");
        assert_eq!(write("a", 4), REFUSED);
        assert_eq!(write("b", 1), ACCEPTED, "each name has its own order");
        assert_eq!(write("a", 7), ACCEPTED);
        let writes: Vec<(String, u64, bool)> = sink
            .take()
            .into_iter()
            .map(|entry| match entry {
                Entry::Write(w) => (w.name, w.token, w.accepted),
                other => panic!("{other:?}"),
            })
            .collect();
        let expected = [
            ("a", 5, true),
            ("a", 5, true),
            ("a", 4, false),
            ("b", 1, true),
            ("a", 7, true),
        ];
        let expected: Vec<(String, u64, bool)> =
            expected.iter().map(|(n, t, a)| (n.to_string(), *t, *a)).collect();
        assert_eq!(writes, expected);
    }
}
