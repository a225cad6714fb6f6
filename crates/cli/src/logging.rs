//! Log setup: human-readable text on a terminal, JSON lines for machines.

use std::fmt;
use std::io::IsTerminal;

use serde::ser::{SerializeMap, Serializer as _};
use tracing::{Event, Subscriber};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format as Formatter, Json, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line.
    Json,
}

/// What is logged when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info,rustls_platform_verifier=off";

/// Logs to standard error at the level of `RUST_LOG` (default: `info`, without the
/// certificate verifier's own line for a TLS failure, which the command's error already
/// says in full). Keep the guard until
/// the process ends: dropping it writes out what is still queued.
///
/// Lines are written by a thread of their own, so that a request never waits for standard
/// error (a slow terminal or pipe). Nothing is dropped: when the queue is full, the logging
/// call waits for room instead — every grant and release is logged. That thread writes all
/// the lines queued when it wakes with one call (a buffer it flushes once the queue is
/// empty), not one system call per line.
pub fn init(format: Format) -> WorkerGuard {
    let stderr = std::io::stderr();
    let ansi = stderr.is_terminal();
    init_to(format, std::io::BufWriter::with_capacity(64 * 1024, stderr), ansi)
}

/// Logs as [`init`] does, to `writer` (colours only if `ansi`): the allocation bench logs
/// every grant to a sink the same way the server does to standard error.
pub fn init_to(format: Format, writer: impl std::io::Write + Send + 'static, ansi: bool) -> WorkerGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("fencelock-log")
        .finish(writer);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match format {
        Format::Text => builder.init(),
        Format::Json => {
            let builder = builder.json().flatten_event(true);
            let json = Formatter::default().json().flatten_event(true);
            builder
                .event_format(LeaseLines {
                    json,
                    now: std::time::SystemTime::now,
                })
                .init()
        }
    }
    guard
}

/// The JSON format, with the line of a lease's change (every grant and release) written as
/// the stock formatter `json` writes it but without its allocations on the request's path:
/// into a buffer kept from line to line, with its time (read from `now`) written without the
/// formatting machinery. Every other line, and a lease's line inside a span (whose fields
/// the stock formatter adds), is `json`'s.
struct LeaseLines<T> {
    json: Formatter<Json, T>,
    now: fn() -> std::time::SystemTime,
}

impl<S, N, T> FormatEvent<S, N> for LeaseLines<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let in_span = event.parent().is_some() || ctx.lookup_current().is_some();
        if meta.target() != fencelock_server::events::LEASE || in_span {
            return self.json.format_event(ctx, writer, event);
        }
        // Written into this thread's buffer, kept from line to line, then into the writer at
        // once: the serializer's many small writes cost nothing there. (Taken already only
        // if a field's value logged while being written: the stock formatter writes that.)
        LINE.with(|line| match line.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                self.serialize(&mut line, event)?;
                // The serializer writes JSON, which is UTF-8.
                writer.write_str(std::str::from_utf8(&line).map_err(|_| fmt::Error)?)?;
                writeln!(writer)
            }
            Err(_) => self.json.format_event(ctx, writer, event),
        })
    }
}

impl<T> LeaseLines<T> {
    /// Writes `event` into `line` as JSON. The entries and their order are the stock
    /// formatter's with `flatten_event`, and written by the same serializer and field
    /// visitor, so the line is the same.
    fn serialize(&self, line: &mut Vec<u8>, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        let mut json = serde_json::Serializer::new(line);
        let mut map = json.serialize_map(None).map_err(|_| fmt::Error)?;
        map.serialize_entry("timestamp", micros((self.now)()).as_str())
            .map_err(|_| fmt::Error)?;
        map.serialize_entry("level", meta.level().as_str())
            .map_err(|_| fmt::Error)?;
        let mut fields = tracing_serde::SerdeMapVisitor::new(map);
        event.record(&mut fields);
        let mut map = fields.take_serializer().map_err(|_| fmt::Error)?;
        map.serialize_entry("target", meta.target())
            .map_err(|_| fmt::Error)?;
        map.end().map_err(|_| fmt::Error)
    }
}

thread_local! {
    /// A lease line as it is written ([`LeaseLines`]), on the thread that logs it.
    static LINE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `time` as the stock formatter's clock (`SystemTime`) writes it: RFC 3339 in UTC with six
/// fraction digits, `2026-12-03T17:00:00.123456Z` (a time before 1970 as 1970 begins).
fn micros(time: std::time::SystemTime) -> Micros {
    let micros = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX));
    let millis = fencelock_core::Timestamp::from_millis(micros / 1000).rfc3339();
    // `…T17:00:00.123`, then three more digits and the `Z`.
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    text[..23].copy_from_slice(&millis.as_str().as_bytes()[..23]);
    let rest = micros % 1000;
    for (at, digit) in [(23, rest / 100), (24, rest / 10 % 10), (25, rest % 10)] {
        // A digit: less than 10.
        text[at] = b'0' + digit as u8;
    }
    Micros(text)
}

/// A line's time ([`micros`]): 27 ASCII bytes.
struct Micros([u8; 27]);

impl Micros {
    fn as_str(&self) -> &str {
        // Digits and `-T:.Z` only: always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// One time for every line, so that two formatters' lines can be compared: the stock
    /// formatter's clock writes it so ([`Fixed`]), ours reads it ([`fixed`]).
    struct Fixed;

    fn fixed() -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_796_317_200_123_456)
    }

    impl FormatTime for Fixed {
        fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
            w.write_str("2026-12-03T17:00:00.123456Z")
        }
    }

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Self;

        fn make_writer(&'a self) -> Self {
            self.clone()
        }
    }

    /// The lines `log` writes, with the stock JSON formatter, or with ours if `lean`.
    fn written(lean: bool, log: fn()) -> String {
        let lines = Lines::default();
        let builder = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_timer(Fixed)
            .json()
            .flatten_event(true);
        if lean {
            let json = Formatter::default().json().flatten_event(true).with_timer(Fixed);
            let subscriber = builder.event_format(LeaseLines { json, now: fixed }).finish();
            tracing::subscriber::with_default(subscriber, log);
        } else {
            tracing::subscriber::with_default(builder.finish(), log);
        }
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn a_lines_time_has_six_fraction_digits() {
        let at = |us| micros(std::time::UNIX_EPOCH + std::time::Duration::from_micros(us));
        assert_eq!(at(1_796_317_200_000_001).as_str(), "2026-12-03T17:00:00.000001Z");
        assert_eq!(at(1_796_317_259_999_999).as_str(), "2026-12-03T17:00:59.999999Z");
        let before = std::time::UNIX_EPOCH - std::time::Duration::from_secs(1);
        assert_eq!(micros(before).as_str(), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn a_lease_line_is_the_stock_json_formatters_line() {
        let log = || {
            tracing::info!(target: fencelock_server::events::LEASE, event = "grant", kind = "lock", resource = %"pay\"ment:42 é\n",
                owner = %"w\\1", token = 7u64, expires_at = %"2026-12-03T17:00:30Z", waited_ms = 0u64);
            tracing::info!(target: fencelock_server::events::LEASE, event = "release", held_ms = 12u64, negative = -3i64,
                ratio = 0.5f64, ok = true, text = "plain", debug = ?Some("x"));
            tracing::warn!(target: fencelock_server::events::LEASE, "a message with {} and fields", "args");
            tracing::info!(origin = 3u64, "another target's line");
            let span = tracing::info_span!("request", id = 9u64);
            span.in_scope(|| tracing::info!(target: fencelock_server::events::LEASE, event = "grant", resource = %"in a span"));
        };
        let (stock, lean) = (written(false, log), written(true, log));
        assert_eq!(lean.lines().count(), 5, "{lean}");
        assert_eq!(lean, stock);
        let first: serde_json::Value = serde_json::from_str(lean.lines().next().unwrap()).unwrap();
        assert_eq!(first["resource"], "pay\"ment:42 é\n");
        assert_eq!(first["target"], fencelock_server::events::LEASE);
    }
}
