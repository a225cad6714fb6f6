//! A store left out of this build has tests that did not run: that must fail, not pass
//! unseen. `scripts/test` builds every feature (`cargo test --workspace --all-features`).

#[test]
fn every_store_is_built_so_every_store_test_ran() {
    let stores = [
        ("sqlite", cfg!(feature = "sqlite")),
        ("postgres", cfg!(feature = "postgres")),
        ("etcd", cfg!(feature = "etcd")),
    ];
    let missing: Vec<&str> = stores
        .iter()
        .filter(|(_, built)| !built)
        .map(|(name, _)| *name)
        .collect();
    assert!(
        missing.is_empty(),
        "built without {missing:?}, so their tests did not run: use scripts/test \
         (cargo test --workspace --all-features)"
    );
}
