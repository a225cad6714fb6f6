//! [`logs`]: what a test binary logs, captured as JSON lines, for the tests that assert what
//! fencelock logs.

use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

/// The log lines written so far, each the JSON of `tracing_subscriber::fmt().json()` with
/// the event's fields flattened into the line.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        // A test that panicked while writing poisons nothing worth keeping apart: the bytes
        // are only read by assertions.
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8(bytes).expect("the JSON formatter writes UTF-8")
    }

    /// The JSON lines of `target` logged so far, in order.
    pub fn of(&self, target: &str) -> Vec<Value> {
        self.text()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("a JSON log line"))
            .filter(|line| line["target"] == target)
            .collect()
    }
}

/// Every line this test binary logs at `level` or above, as JSON. The first call makes the
/// capture the global subscriber — a server logs from its tasks on the runtime's threads,
/// which a subscriber of the test's thread alone would miss — and later calls return the same
/// lines, at the level of the first.
pub fn logs(level: tracing::Level) -> &'static Lines {
    static LINES: OnceLock<Lines> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(level)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("no other global subscriber in a test binary");
        lines
    })
}
