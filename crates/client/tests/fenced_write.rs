//! Runs `examples/fenced_write.rs`, so the example cannot rot: A's late write with the older
//! token is refused by both protected resources, and B's write stands.

#[allow(dead_code)] // The example's `main` is not called here.
#[path = "../examples/fenced_write.rs"]
mod fenced_write;

#[tokio::test]
async fn the_late_write_of_a_paused_holder_is_rejected() {
    let mut out = Vec::new();
    let report = fenced_write::timeline(None, &mut out).await.unwrap();
    let text = String::from_utf8(out).unwrap();
    println!("{text}");
    assert!(report.b > report.a, "{report:?}");
    assert!(report.late_write_rejected, "{report:?}\n{text}");
    assert_eq!(report.value, "B's entry");
    assert_eq!(report.balance, 80);
    assert!(text.contains("REJECTED"), "{text}");
}
