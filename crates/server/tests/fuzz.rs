//! Property-based fuzzing of how the server reads a name from the raw request path (a lock's
//! resource, a semaphore's or a read-write lock's name), held to a plain model of the SPEC:
//! every `%` starts an escape of two hex digits, the decoded bytes are UTF-8, and the text
//! is a name. The number of cases is fixed (see `fencelock_testkit::fuzz::config`).

use axum::http::Uri;
use fencelock_core::{HoldKind, InvalidName, Resource};
use fencelock_server::extract;
use fencelock_testkit::fuzz::{config, name_faults, name_like};
use fencelock_wire::{FieldError, parse};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

/// Why the model refuses a raw segment.
#[derive(Debug)]
enum Refused {
    /// A `%` not followed by two hex digits.
    Escape,
    /// The decoded bytes are not UTF-8.
    Utf8,
    /// The text breaks these rules on names.
    Name(Vec<InvalidName>),
}

/// The SPEC's reading of a raw path segment, written plainly.
fn model(raw: &str) -> Result<String, Refused> {
    let mut pieces = raw.split('%');
    let mut bytes = pieces.next().unwrap_or_default().as_bytes().to_vec();
    for piece in pieces {
        let hex = piece
            .get(..2)
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or(Refused::Escape)?;
        bytes.push(u8::from_str_radix(hex, 16).unwrap());
        bytes.extend_from_slice(&piece.as_bytes()[2..]);
    }
    let name = String::from_utf8(bytes).map_err(|_| Refused::Utf8)?;
    match name_faults(&name) {
        faults if faults.is_empty() => Ok(name),
        faults => Err(Refused::Name(faults)),
    }
}

/// Whether the server's answer for `raw` is the model's: the same name, or a refusal of the
/// field `field` for the same reason.
fn agrees(raw: &str, field: &str, read: Result<Resource, FieldError>) -> Result<(), TestCaseError> {
    match (read, model(raw)) {
        (Ok(resource), Ok(name)) => prop_assert_eq!(resource.as_str(), name),
        (Err(error), Err(why)) => {
            prop_assert_eq!(&error.field, field);
            let message = error.message.as_str();
            let same = match &why {
                Refused::Escape => message.contains("%-escape"),
                Refused::Utf8 => message.contains("UTF-8") && !message.contains("bytes"),
                Refused::Name(faults) => faults.iter().any(|fault| fault.to_string() == message),
            };
            prop_assert!(
                same,
                "{:?}: the server says {:?}, the model {:?}",
                raw,
                message,
                why
            );
        }
        (read, expected) => prop_assert!(
            false,
            "{:?}: the server reads {:?}, the model {:?}",
            raw,
            read,
            expected
        ),
    }
    Ok(())
}

/// Raw segments as a client may send them (characters a URI path allows, but `/`, `?` and
/// `#`): plain characters, escapes of any byte in either case, and broken escapes.
fn segment() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[A-Za-z0-9._~!$&'()*+,;=:@-]{1,8}",
        4 => any::<u8>().prop_map(|b| format!("%{b:02X}")),
        1 => any::<u8>().prop_map(|b| format!("%{b:02x}")),
        1 => prop::sample::select(vec!["%", "%4", "%G0", "%0g", "%%", "%-1", "%+1"]).prop_map(str::to_owned),
        1 => "a{250,260}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

/// How each kind's paths name the thing: the collection, the field of a bad name, and the
/// server's reading.
type Reader = fn(&Uri) -> Result<Resource, FieldError>;
const KINDS: [(&str, &str, Reader); 3] = [
    ("/locks", "resource", extract::resource),
    ("/semaphores", "name", |uri| {
        extract::hold_name(HoldKind::Semaphore, uri)
    }),
    ("/rwlocks", "name", |uri| {
        extract::hold_name(HoldKind::RwLock, uri)
    }),
];

proptest! {
    #![proptest_config(config(1024))]

    /// The server reads the segment after each kind's collection (whatever follows it) as
    /// the model does.
    #[test]
    fn paths_are_read_as_the_model_reads_them(
        raw in segment(),
        rest in prop::sample::select(vec!["", "/", "/renew", "/renew/x", "?owner=a%ZZ", "#x"]),
    ) {
        for (collection, field, read) in KINDS {
            let path = format!("{collection}/{raw}{rest}");
            let uri = path.parse::<Uri>();
            prop_assert!(uri.is_ok(), "{:?} is not a URI", path);
            agrees(&raw, field, read(&uri.unwrap()))?;
        }
    }

    /// What the client encodes as a segment, the server reads back as the same name, or
    /// refuses for a rule of names (never for an escape).
    #[test]
    fn the_server_reads_back_what_the_client_encodes(name in name_like()) {
        let raw = parse::encode_segment(&name);
        for (collection, field, read) in KINDS {
            let uri = format!("{collection}/{raw}/renew").parse::<Uri>().unwrap();
            let read = read(&uri);
            prop_assert_eq!(read.clone().ok(), Resource::named(name.clone()).ok());
            agrees(&raw, field, read)?;
        }
    }
}
