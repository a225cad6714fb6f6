//! Semaphores and read-write locks under concurrency and waiting, through real connections
//! to one server (the scenarios are in `common::scenarios`; `postgres_holds.rs` runs them
//! on two servers sharing PostgreSQL).

mod common;

use std::time::Duration;

use common::{TestServer, scenarios};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_acquirers_on_a_semaphore_of_limit_five_have_five_winners_over_ten_rounds() {
    scenarios::fifty_acquirers_five_permits(&[TestServer::real().await]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_acquirers_on_a_semaphore_of_limit_five_have_five_winners_over_ten_rounds_on_the_embedded_store()
 {
    scenarios::fifty_acquirers_five_permits(&[TestServer::embedded().await]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_hold_overlaps_another_hold() {
    scenarios::no_write_overlaps_another_hold(&[TestServer::real().await], Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_hold_overlaps_another_hold_on_the_embedded_store() {
    scenarios::no_write_overlaps_another_hold(&[TestServer::embedded().await], Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_goes_before_a_later_reader() {
    let s = TestServer::real().await;
    scenarios::writers_go_before_later_readers(&s, &s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writer_goes_before_a_later_reader_on_the_embedded_store() {
    let s = TestServer::embedded().await;
    scenarios::writers_go_before_later_readers(&s, &s).await;
}
