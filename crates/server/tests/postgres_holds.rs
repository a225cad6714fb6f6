//! Semaphores and read-write locks through two servers sharing one PostgreSQL (a real,
//! throwaway one from the testkit): the limit, the read/write exclusion and writer
//! preference hold across servers.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestServer, scenarios};
use fencelock_core::LockStore;
use fencelock_server::Config;
use fencelock_stores::postgres::PostgresStore;
use fencelock_testkit::shared_postgres;

/// Two servers, each with a store of its own over the one shared database.
async fn two_servers() -> [TestServer; 2] {
    // Starting PostgreSQL blocks: not on the async worker.
    let url = tokio::task::spawn_blocking(|| shared_postgres().url())
        .await
        .expect("start PostgreSQL");
    let server = async || {
        let store = PostgresStore::connect(&url).await.expect("connect to PostgreSQL");
        TestServer::start(Arc::new(store) as Arc<dyn LockStore>, Config::default()).await
    };
    [server().await, server().await]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_acquirers_over_two_servers_on_a_semaphore_of_limit_five_have_five_winners_over_ten_rounds() {
    scenarios::fifty_acquirers_five_permits(&two_servers().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_hold_overlaps_another_hold_across_two_servers() {
    scenarios::no_write_overlaps_another_hold(&two_servers().await, Duration::from_secs(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_on_one_server_goes_before_a_later_reader_on_another() {
    let [a, b] = two_servers().await;
    scenarios::writers_go_before_later_readers(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_goes_before_a_later_reader_on_the_same_server_over_postgres() {
    let [a, _] = two_servers().await;
    scenarios::writers_go_before_later_readers(&a, &a).await;
}
