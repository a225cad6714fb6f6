//! Log setup: human-readable text on a terminal, JSON lines for machines.

use std::fmt;
use std::io::IsTerminal;

use serde::ser::{SerializeMap, Serializer as _};
use tracing::{Event, Subscriber};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format as Formatter, Json, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
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
/// call waits for room instead — every grant and release is logged.
pub fn init(format: Format) -> WorkerGuard {
    init_to(format, std::io::stderr(), std::io::stderr().is_terminal())
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
                    timer: SystemTime,
                })
                .init()
        }
    }
    guard
}

/// The JSON format, with the line of a lease's change (every grant and release) written as
/// the stock formatter `json` writes it but without its allocations on the request's path:
/// the timestamp goes straight into the line instead of into a `String` of its own first.
/// Every other line, and a lease's line inside a span (whose fields the stock formatter
/// adds), is `json`'s.
struct LeaseLines<T> {
    json: Formatter<Json, T>,
    timer: T,
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
        // The entries and their order are the stock formatter's with `flatten_event`, and
        // written by the same serializer and field visitor, so the line is the same.
        let mut line = serde_json::Serializer::new(Adaptor(&mut writer));
        let mut map = line.serialize_map(None).map_err(|_| fmt::Error)?;
        let timestamp = Timestamp(&self.timer);
        map.serialize_entry("timestamp", &format_args!("{timestamp}"))
            .map_err(|_| fmt::Error)?;
        map.serialize_entry("level", meta.level().as_str())
            .map_err(|_| fmt::Error)?;
        let mut fields = tracing_serde::SerdeMapVisitor::new(map);
        event.record(&mut fields);
        let mut map = fields.take_serializer().map_err(|_| fmt::Error)?;
        map.serialize_entry("target", meta.target())
            .map_err(|_| fmt::Error)?;
        map.end().map_err(|_| fmt::Error)?;
        writeln!(writer)
    }
}

/// The time of a line, written by `T` wherever it is displayed.
struct Timestamp<'a, T>(&'a T);

impl<T: FormatTime> fmt::Display for Timestamp<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.format_time(&mut Writer::new(f))
    }
}

/// The serializer's bytes into the line (JSON is UTF-8, so every write is whole text).
struct Adaptor<'a, 'w>(&'a mut Writer<'w>);

impl std::io::Write for Adaptor<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let text = std::str::from_utf8(bytes).map_err(std::io::Error::other)?;
        fmt::Write::write_str(self.0, text).map_err(std::io::Error::other)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// One time for every line, so that two formatters' lines can be compared.
    struct Fixed;

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
            let subscriber = builder.event_format(LeaseLines { json, timer: Fixed }).finish();
            tracing::subscriber::with_default(subscriber, log);
        } else {
            tracing::subscriber::with_default(builder.finish(), log);
        }
        String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
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
