//! Runs `examples/transfer.rs`, so the README's transfer cannot rot: twenty transfers in
//! opposite directions take both accounts' locks together and never deadlock, money is
//! neither made nor lost, and a transfer carrying an older pair of leases' tokens is refused
//! by the fenced writes — straight on a store and through a real server.

mod common;

#[allow(dead_code)] // The example's `main` is not called here.
#[path = "../examples/transfer.rs"]
mod transfer;

use common::TestServer;

async fn check(address: &str) {
    let report = transfer::transfers(address).await.unwrap();
    // 100 - 10 × 7 + 10 × 3 on account 1.
    assert_eq!(report.balances, (60, 40), "{report:?}");
    assert!(report.stale_refused, "{report:?}");
}

#[tokio::test]
async fn transfers_both_ways_on_a_store_move_every_cent_once() {
    check("memory://").await;
}

#[tokio::test]
async fn transfers_both_ways_through_a_server_move_every_cent_once() {
    let server = TestServer::start();
    check(&server.url).await;
}
