//! What the property-based fuzz targets (`tests/fuzz.rs` of `wire` and `server`) share: a
//! bounded configuration, strings near the edges of the naming rules, and those rules
//! written out plainly from the SPEC, as the model the parsers are held to.

use fencelock_core::InvalidName;
use fencelock_core::model::MAX_NAME_BYTES;
use proptest::prelude::*;
use proptest::test_runner::Config;

/// `cases` cases per property (or `PROPTEST_CASES`, for a longer run by hand), and no
/// failure files: a failure prints its minimal input, which the fix then keeps as a plain
/// test.
pub fn config(cases: u32) -> Config {
    let defaults = Config::default();
    Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            defaults.cases
        } else {
            cases
        },
        failure_persistence: None,
        ..defaults
    }
}

/// Strings near the edges of the rules on names and owners: white space (ASCII and
/// Unicode) around and inside, control characters, multi-byte characters, and lengths
/// around [`MAX_NAME_BYTES`]; sometimes any string at all.
pub fn name_like() -> impl Strategy<Value = String> {
    let edgy = prop_oneof![
        4 => proptest::char::range('a', 'z'),
        1 => Just(' '),
        1 => prop::sample::select(vec!['\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{3000}', '\u{2028}']),
        1 => prop::sample::select(vec!['\0', '\u{1}', '\u{1b}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}']),
        1 => prop::sample::select(vec!['é', '€', '𝄞', '%', '/', ':', '+', '"', '\\']),
    ];
    let short = prop::collection::vec(edgy.clone(), 0..12).prop_map(|c| c.into_iter().collect::<String>());
    // A long run of `a` with edgy characters at both ends, to land on both sides of 255 bytes.
    let long = (
        short.clone(),
        MAX_NAME_BYTES - 8..MAX_NAME_BYTES + 4,
        short.clone(),
    )
        .prop_map(|(head, n, tail)| format!("{head}{}{tail}", "a".repeat(n)));
    prop_oneof![6 => short, 3 => long, 1 => any::<String>()]
}

/// Every rule of the SPEC that `name` breaks as a resource, semaphore, read-write lock or
/// principal name (an owner after trimming): 1 to 255 bytes of UTF-8, no U+0000–U+001F or
/// U+007F. Empty if it is a good name.
pub fn name_faults(name: &str) -> Vec<InvalidName> {
    let mut faults = Vec::new();
    if name.is_empty() {
        faults.push(InvalidName::Empty);
    }
    if name.len() > MAX_NAME_BYTES {
        faults.push(InvalidName::TooLong);
    }
    if name.chars().any(|c| c <= '\u{1f}' || c == '\u{7f}') {
        faults.push(InvalidName::ControlCharacter);
    }
    faults
}

/// Whether `answer` is what the SPEC says of `name`: accepted if it breaks no rule,
/// else refused for one of the rules it breaks.
pub fn judged_as_spec_says<T>(name: &str, answer: &Result<T, InvalidName>) -> bool {
    let faults = name_faults(name);
    match answer {
        Ok(_) => faults.is_empty(),
        Err(why) => faults.contains(why),
    }
}
