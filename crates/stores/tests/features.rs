//! A store left out of this build has tests that did not run: that must fail, not pass
//! unseen. `scripts/test` builds every feature (`cargo test --workspace --all-features`).

#[test]
fn every_store_is_built_so_every_store_test_ran() {
    let missing: Vec<&str> = fencelock_stores::SCHEMES
        .iter()
        .filter(|scheme| !scheme.is_built())
        .map(|scheme| scheme.feature.unwrap_or(scheme.example))
        .collect();
    assert!(
        missing.is_empty(),
        "built without {missing:?}, so their tests did not run: use scripts/test \
         (cargo test --workspace --all-features)"
    );
}
