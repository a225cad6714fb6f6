//! The shared conformance suite, run against `HttpStore` talking to a real fencelock server
//! on each store — in-memory, embedded, PostgreSQL, etcd: through a server, every store keeps
//! the same rules as it does directly.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fencelock_client::HttpStore;
use fencelock_conformance::Harness;
use fencelock_core::{Capabilities, LockStore};
use fencelock_server::Config;

/// Starts a server on the store at `address`, on a thread and runtime of its own that live as
/// long as the test binary (the store's connections belong to that runtime), and returns
/// the server's URL.
fn serve(address: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the server");
        runtime.block_on(async move {
            let store = fencelock_stores::open(&address).await.expect("the store opens");
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            fencelock_server::serve(listener, store, Config::default(), std::future::pending()).await
        })
    });
    url
}

/// A fresh client (each check runs on its own runtime) of the server at `url`, holding it to
/// `capabilities`: those of the store behind the server, as seen through the API.
fn client(url: &str, capabilities: Capabilities) -> Harness {
    let store: Arc<dyn LockStore> = Arc::new(HttpStore::new(url).unwrap());
    Harness::real(store).declaring(capabilities)
}

/// What a client sees of a store with `ttl_granularity` behind a server: a release answers
/// 204 without the lease. Durability and sharing are the store's, held to by the store's own
/// suite (a client cannot restart the server under it, nor be a second server), and the
/// restart of a real server process is tested in the command tests.
fn through_a_server(ttl_granularity: Duration) -> Capabilities {
    Capabilities {
        ttl_granularity,
        knows_released_lease: false,
        writer_intents: false,
        principals: false,
        lock_delays: false,
        ..Capabilities::BASELINE
    }
}

mod memory {
    use super::*;

    async fn harness() -> Harness {
        static URL: OnceLock<String> = OnceLock::new();
        let url = URL.get_or_init(|| serve("memory://".into()));
        client(url, through_a_server(Duration::from_millis(1)))
    }

    fencelock_conformance::suite!(harness);
}

mod embedded {
    use super::*;

    async fn harness() -> Harness {
        static URL: OnceLock<String> = OnceLock::new();
        let url = URL.get_or_init(|| {
            // The server holds the file until the test binary exits, so it lives in cargo's
            // folder for test files rather than a temporary folder that would outlive it.
            let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-conformance.db");
            for stale in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{stale}", file.display()));
            }
            serve(format!("sqlite://{}", file.display()))
        });
        client(url, through_a_server(Duration::from_millis(1)))
    }

    fencelock_conformance::suite!(harness);
}

mod postgres {
    use super::*;

    async fn harness() -> Harness {
        static URL: OnceLock<String> = OnceLock::new();
        let url = URL.get_or_init(|| serve(fencelock_testkit::shared_postgres().url()));
        client(url, through_a_server(Duration::from_millis(1)))
    }

    fencelock_conformance::suite!(harness);
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;

    async fn harness() -> Harness {
        static URL: OnceLock<String> = OnceLock::new();
        let url = URL.get_or_init(|| serve(fencelock_testkit::shared_etcd().url()));
        // etcd's TTLs are whole seconds, rounded up.
        client(url, through_a_server(Duration::from_secs(1)))
    }

    fencelock_conformance::suite!(harness);
}
