//! The ZooKeeper store against real, throwaway ZooKeeper: the conformance suite on a
//! standalone server; members of a three-member ensemble stopped and started again; two
//! stores (two fencelock servers) on one ensemble; and a store whose session expires.

use std::sync::Arc;
use std::time::{Duration, Instant};

use fencelock_conformance::{Harness, owner, ttl};
use fencelock_core::{LockStore, StoreError};
use fencelock_stores::Deadline;
use fencelock_stores::zookeeper::{ZooKeeperOptions, ZooKeeperStore};
use fencelock_testkit::shared_zookeeper;

mod shared;

/// The shared server's address; starting it blocks, so not on the async worker.
async fn shared_url() -> String {
    tokio::task::spawn_blocking(|| shared_zookeeper().url())
        .await
        .expect("start ZooKeeper")
}

async fn store(url: &str) -> Arc<Deadline<ZooKeeperStore>> {
    Arc::new(ZooKeeperStore::connect(url).await.expect("connect to ZooKeeper"))
}

async fn harness() -> Harness {
    let url = shared_url().await;
    let again = move || {
        let url = url.clone();
        async move { store(&url).await as Arc<dyn LockStore> }
    };
    shared::harness(again().await, again)
}

fencelock_conformance::suite!(harness);
