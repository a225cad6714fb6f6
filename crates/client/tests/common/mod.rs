//! A real fencelock server on port 0, on its own runtime so that a test can kill it the way
//! a crash would: every task and every connection ends at once.

#![allow(dead_code)] // Each test file uses a different part of this.

use std::sync::Arc;
use std::time::Duration;

use fencelock_client::{AcquireError, Client, LeaseGuard, Owner, Resource, Ttl};
use fencelock_core::MemoryStore;
use fencelock_server::Config;

/// A server on an in-memory store, reachable at `url`.
pub struct TestServer {
    pub url: String,
    /// The store behind the server, for forcing losses (deleting a lease behind the
    /// holder's back) and for reading the last expiry after the server is killed.
    pub store: Arc<MemoryStore>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl TestServer {
    /// A server with the default configuration.
    pub fn start() -> Self {
        Self::with_config(Config::default())
    }

    /// A server with `config`.
    pub fn with_config(config: Config) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the server");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        listener.set_nonblocking(true).unwrap();
        let scheme = if config.tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{}", listener.local_addr().unwrap());
        let store = Arc::new(MemoryStore::new());
        let served = store.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            fencelock_server::serve(listener, served, config, std::future::pending()).await
        });
        Self {
            url,
            store,
            runtime: Some(runtime),
        }
    }

    /// Kills the server: no shutdown code runs, open connections drop.
    pub fn kill(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[allow(unused_imports)] // Not every test file uses the fixtures.
pub use fencelock_testkit::fixtures::{owner, resource, ttl_ms as ttl};

pub use fencelock_testkit::eventually;

/// Tries to acquire until granted (the holder's lease must end first).
pub async fn take_over(client: &Client, resource: &Resource, owner: &Owner, ttl: Ttl) -> LeaseGuard {
    eventually(
        Duration::from_secs(10),
        "the lock to be free",
        async || match client.try_acquire(resource, owner, ttl).await {
            Ok(guard) => Some(guard),
            Err(AcquireError::Busy { .. }) => None,
            Err(error) => panic!("acquire failed: {error}"),
        },
    )
    .await
}
