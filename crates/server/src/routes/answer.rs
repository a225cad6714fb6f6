//! [`json`]: an answer's JSON body, serialised into one reused buffer and copied out at its
//! exact size — one allocation per answer, where a fresh buffer per answer (axum's `Json`)
//! costs the buffer, its growth, and a second allocation to turn it into a body.

use std::cell::RefCell;

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Room for any lock's answer, so that the buffer never grows on the acquire path.
const ROOM: usize = 1024;

/// A buffer grown past this (an acquire of many locks) is given back, not kept per thread.
const KEPT: usize = 64 * ROOM;

thread_local! {
    /// Where this thread serialises answers, one at a time: borrowed only inside [`json`],
    /// which does not `.await`, so no other answer can find it borrowed.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(ROOM));
}

/// `answer` as an `application/json` body with `status`.
pub(super) fn json(status: StatusCode, answer: &impl Serialize) -> Response {
    let body = SCRATCH.with_borrow_mut(|scratch| {
        scratch.clear();
        let body = serde_json::to_writer(&mut *scratch, answer).map(|()| Bytes::copy_from_slice(scratch));
        if scratch.capacity() > KEPT {
            *scratch = Vec::with_capacity(ROOM);
        }
        body
    });
    match body {
        Ok(body) => (
            status,
            [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))],
            body,
        )
            .into_response(),
        // Our answers are structs of strings and numbers: serde_json cannot fail on them.
        // Should one ever, it is answered as axum's `Json` answers it.
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}
