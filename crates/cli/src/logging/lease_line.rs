//! The JSON line of a lease's change (every grant and release is logged), written as the
//! stock JSON formatter writes it, at a fraction of its cost.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format as Formatter, Json, Writer};
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The JSON format, with the line of a lease's change written as the stock formatter `json`
/// writes it (with `flatten_event`) but without its machinery on the request's path: by
/// [`JsonFields`] into a buffer kept from line to line, its time (read from `now`) digit by
/// digit. Every other line, and a lease's line inside a span (whose fields the stock
/// formatter adds), is `json`'s.
pub struct LeaseLines<T> {
    json: Formatter<Json, T>,
    now: fn() -> std::time::SystemTime,
}

impl<T> LeaseLines<T> {
    /// Lease lines timed by the system clock, every other line written by `json`.
    pub fn new(json: Formatter<Json, T>) -> Self {
        Self {
            json,
            now: std::time::SystemTime::now,
        }
    }

    /// Writes `event` into `line` as JSON, with its newline. The entries and their order
    /// are the stock formatter's: the time, the level, the fields, the target.
    fn write(&self, line: &mut String, event: &Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        line.push_str("{\"timestamp\":\"");
        push_micros(line, (self.now)());
        line.push_str("\",\"level\":\"");
        line.push_str(meta.level().as_str());
        line.push('"');
        let mut fields = JsonFields { line, result: Ok(()) };
        event.record(&mut fields);
        fields.result?;
        fields.string("target", meta.target());
        fields.line.push_str("}\n");
        Ok(())
    }
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
        // once: the many small writes cost nothing there. (Taken already only if a field's
        // value logged while being written: the stock formatter writes that.)
        LINE.with(|line| match line.try_borrow_mut() {
            Ok(mut line) => {
                line.clear();
                self.write(&mut line, event)?;
                writer.write_str(&line)
            }
            Err(_) => self.json.format_event(ctx, writer, event),
        })
    }
}

thread_local! {
    /// A lease line as it is written ([`LeaseLines`]), on the thread that logs it.
    static LINE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// A line's fields as JSON entries, each after a comma, as the stock formatter's visitor
/// (`tracing_serde`'s, through `serde_json`) writes them: a value logged with `%` or `?` as
/// a string of its text, numbers and booleans bare. The kinds it leaves to the default
/// (`i128`, `u128`, errors, bytes) come as `Debug` values, as they do to that visitor.
struct JsonFields<'a> {
    line: &'a mut String,
    /// `Err` if a value's `Debug` failed: the line is not written.
    result: fmt::Result,
}

impl JsonFields<'_> {
    /// `,"name":`.
    fn key(&mut self, name: &str) {
        self.line.push_str(",\"");
        escape(self.line, name);
        self.line.push_str("\":");
    }

    fn string(&mut self, name: &str, value: &str) {
        self.key(name);
        self.line.push('"');
        escape(self.line, value);
        self.line.push('"');
    }

    fn bare(&mut self, name: &str, value: &str) {
        self.key(name);
        self.line.push_str(value);
    }
}

impl Visit for JsonFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.string(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field.name());
        self.line.push('"');
        if write!(Escaped(self.line), "{value:?}").is_err() {
            self.result = Err(fmt::Error);
        }
        self.line.push('"');
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.bare(field.name(), itoa::Buffer::new().format(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.bare(field.name(), itoa::Buffer::new().format(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.bare(field.name(), if value { "true" } else { "false" });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        // Rare in a lease's line: serde_json's own text (shortest digits, `null` if not finite).
        match serde_json::to_string(&value) {
            Ok(text) => self.bare(field.name(), &text),
            Err(_) => self.result = Err(fmt::Error),
        }
    }
}

/// Writes what it is given into a line, escaped as a JSON string's contents.
struct Escaped<'a>(&'a mut String);

impl fmt::Write for Escaped<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        escape(self.0, text);
        Ok(())
    }
}

/// Appends `text` to `line` escaped as serde_json escapes a string's contents: `"` and `\`
/// after a backslash, the control characters `\b \t \n \f \r` by name and the others as
/// `\u00xx` (lowercase hex); everything else, non-ASCII included, as it is.
fn escape(line: &mut String, text: &str) {
    let mut run = 0;
    while let Some(at) = next_escaped(text.as_bytes(), run) {
        // `at` and `run` are next to ASCII bytes, so on character boundaries.
        line.push_str(&text[run..at]);
        run = at + 1;
        let byte = text.as_bytes()[at];
        let name = match byte {
            b'"' => '"',
            b'\\' => '\\',
            0x08 => 'b',
            b'\t' => 't',
            b'\n' => 'n',
            0x0c => 'f',
            b'\r' => 'r',
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                line.push_str("\\u00");
                line.push(char::from(HEX[usize::from(byte >> 4)]));
                line.push(char::from(HEX[usize::from(byte & 0xf)]));
                continue;
            }
        };
        line.push('\\');
        line.push(name);
    }
    line.push_str(&text[run..]);
}

/// Where the first byte from `from` on that [`escape`] escapes is: eight bytes at a time
/// while none is (a name, an owner, a time: most text has none), then one at a time.
fn next_escaped(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    while let Some(word) = bytes[at..].first_chunk::<8>() {
        if any_escaped(u64::from_ne_bytes(*word)) {
            break;
        }
        at += 8;
    }
    let is_escaped = |byte: u8| byte < 0x20 || byte == b'"' || byte == b'\\';
    bytes[at..]
        .iter()
        .position(|&byte| is_escaped(byte))
        .map(|found| at + found)
}

/// Whether one of the eight bytes of `word` is a control character, `"` or `\`: the byte
/// tests of "Bit Twiddling Hacks" (`hasless`, `haszero`), exact as a yes or no. Subtracting
/// `n` from every byte sets the high bit of the lowest byte below `n` (`& !word` leaves out
/// bytes whose high bit was set, non-ASCII ones); a borrow can mark a byte above it, never
/// one when none is below. (A byte equal to `b` is a zero byte of `word ^ b`.)
fn any_escaped(word: u64) -> bool {
    const EACH: u64 = u64::MAX / 255;
    let below = |word: u64, n: u8| word.wrapping_sub(EACH * u64::from(n)) & !word & (EACH * 0x80) != 0;
    let has = |byte: u8| below(word ^ (EACH * u64::from(byte)), 1);
    below(word, 0x20) || has(b'"') || has(b'\\')
}

/// Appends `time` as the stock formatter's clock (`SystemTime`) writes it: RFC 3339 in UTC
/// with six fraction digits, `2026-12-03T17:00:00.123456Z` (a time before 1970 as 1970
/// begins).
fn push_micros(line: &mut String, time: std::time::SystemTime) {
    let micros = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_micros()).unwrap_or(u64::MAX));
    let millis = fencelock_core::Timestamp::from_millis(micros / 1000).rfc3339();
    // `…T17:00:00.123`, then three more digits and the `Z`.
    line.push_str(&millis.as_str()[..23]);
    let rest = micros % 1000;
    for digit in [rest / 100, rest / 10 % 10, rest % 10] {
        // A digit: less than 10.
        line.push(char::from(b'0' + digit as u8));
    }
    line.push('Z');
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
        let micros = |time| {
            let mut line = String::new();
            push_micros(&mut line, time);
            line
        };
        let at = |us| micros(std::time::UNIX_EPOCH + std::time::Duration::from_micros(us));
        assert_eq!(at(1_796_317_200_000_001), "2026-12-03T17:00:00.000001Z");
        assert_eq!(at(1_796_317_259_999_999), "2026-12-03T17:00:59.999999Z");
        let before = std::time::UNIX_EPOCH - std::time::Duration::from_secs(1);
        assert_eq!(micros(before), "1970-01-01T00:00:00.000000Z");
    }

    #[test]
    fn a_lease_line_is_the_stock_json_formatters_line() {
        let log = || {
            tracing::info!(target: fencelock_server::events::LEASE, event = "grant", kind = "lock", resource = %"pay\"ment:42 é\n",
                owner = %"w\\1", token = 7u64, expires_at = %"2026-12-03T17:00:30Z", waited_ms = 0u64);
            tracing::info!(target: fencelock_server::events::LEASE, event = "release", held_ms = 12u64, negative = -3i64,
                ratio = 0.5f64, ok = true, text = "plain", debug = ?Some("x"));
            let ascii: String = (0..=0x7f_u8).map(char::from).collect();
            let error = std::io::Error::other("broken \"pipe\"");
            tracing::info!(target: fencelock_server::events::LEASE, text = ascii.as_str(), shown = %ascii,
                "we\"ird\tkey" = u64::MAX, min = i64::MIN, huge = 1u128 << 100, tiny = -5i128, nan = f64::NAN,
                inf = f64::INFINITY, third = 1.0f64 / 3.0, error = &error as &dyn std::error::Error, none = None::<u64>);
            tracing::warn!(target: fencelock_server::events::LEASE, "a message with {} and fields", "args");
            tracing::info!(origin = 3u64, "another target's line");
            let span = tracing::info_span!("request", id = 9u64);
            span.in_scope(|| tracing::info!(target: fencelock_server::events::LEASE, event = "grant", resource = %"in a span"));
        };
        let (stock, lean) = (written(false, log), written(true, log));
        assert_eq!(lean.lines().count(), 6, "{lean}");
        assert_eq!(lean, stock);
        let first: serde_json::Value = serde_json::from_str(lean.lines().next().unwrap()).unwrap();
        assert_eq!(first["resource"], "pay\"ment:42 é\n");
        assert_eq!(first["target"], fencelock_server::events::LEASE);
    }

    #[test]
    fn a_string_is_escaped_as_serde_json_escapes_it() {
        let unicode = ['é', '€', '\u{2028}', '𝄞'];
        // At every place of a text long enough for the eight-byte steps, beside plain bytes
        // next to those escaped (`!`, `#`, `[`, `]`, DEL) and non-ASCII ones.
        let plain = "!#[]\u{7f}ab€cdefghijklmnopq";
        for c in (0..=0x7f_u8).map(char::from).chain(unicode) {
            for at in 0..plain.chars().count() {
                let mut text: String = plain.chars().take(at).collect();
                text.push(c);
                text.extend(plain.chars().skip(at));
                let mut line = String::from("\"");
                escape(&mut line, &text);
                line.push('"');
                assert_eq!(line, serde_json::to_string(&text).unwrap(), "{text:?}");
            }
        }
    }
}
