//! The shared conformance suite, run against `HttpStore` talking to a real fencelock server
//! (on an in-memory store, on port 0): the HTTP client keeps the same rules as every store.

mod common;

use std::sync::{Arc, OnceLock};

use fencelock_client::HttpStore;
use fencelock_conformance::Harness;

/// One server for the whole suite (each check works in its own namespace of resources);
/// a fresh client per check, as each check runs on its own runtime.
async fn harness() -> Harness {
    static SERVER: OnceLock<common::TestServer> = OnceLock::new();
    let server = SERVER.get_or_init(common::TestServer::start);
    Harness::real(Arc::new(HttpStore::new(&server.url).unwrap()))
}

fencelock_conformance::suite!(harness);
