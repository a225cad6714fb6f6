//! The nouns of fencelock: validated newtypes for what a lease is made of.
//!
//! Every value here is checked once, when it is built; code that holds a [`Resource`], an
//! [`Owner`] or a [`Ttl`] can trust it without checking again.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use compact_str::CompactString;
use serde_json::{Map, Value};

/// The most bytes a resource name or an owner may have.
pub const MAX_NAME_BYTES: usize = 255;

/// Why a resource name or an owner was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    /// Nothing left (for an owner: nothing left after trimming white space).
    #[error("must not be empty or blank")]
    Empty,
    /// More than [`MAX_NAME_BYTES`] bytes of UTF-8.
    #[error("must be at most 255 bytes of UTF-8")]
    TooLong,
    /// Contains U+0000–U+001F or U+007F.
    #[error("must not contain control characters")]
    ControlCharacter,
}

fn check_name(name: &str) -> Result<(), InvalidName> {
    if name.is_empty() {
        Err(InvalidName::Empty)
    } else if name.len() > MAX_NAME_BYTES {
        Err(InvalidName::TooLong)
    } else if name.bytes().any(|b| b.is_ascii_control()) {
        // Bytes, not chars: in UTF-8 no byte of a longer character is below 0x80.
        Err(InvalidName::ControlCharacter)
    } else {
        Ok(())
    }
}

/// What starts the name under which a store keeps an election: a control character, which no
/// name a client sends may contain, so an election never meets a lock a client named.
pub const ELECTION_MARK: char = '\u{1}';

/// The most bytes an election's name may have: its lock's name is one byte longer.
pub const MAX_ELECTION_NAME_BYTES: usize = MAX_NAME_BYTES - 1;

/// The name of what is locked, e.g. `payment:42`: 1 to 255 bytes of UTF-8 without control
/// characters, compared byte for byte — or, kept by the server alone, the lock of an
/// election ([`Resource::election`]), which is such a name after [`ELECTION_MARK`].
///
/// A name of up to 24 bytes is kept inline, in the 24 bytes a `String`'s header took: a
/// table of ten million leases then holds no heap block per name (it had two, the map's key
/// and the lease's own), and a clone of the name, which every store call makes, allocates
/// nothing. A longer name is on the heap, as before.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Resource(CompactString);

impl Resource {
    /// Checks `name` and wraps it. The lock of an election is accepted too, because every
    /// store reads the names it keeps back through here; what a client names goes through
    /// [`Resource::named`] instead.
    pub fn new(name: impl Into<CompactString>) -> Result<Self, InvalidName> {
        let name = name.into();
        match name.strip_prefix(ELECTION_MARK) {
            Some(election) if !election.is_empty() && name.len() <= MAX_NAME_BYTES => check_name(election)?,
            _ => check_name(&name)?,
        }
        Ok(Self(name))
    }

    /// Checks `name` as a client sends it: [`Resource::new`]'s rules, and the lock of an
    /// election is refused as the control character it starts with is.
    pub fn named(name: impl Into<CompactString>) -> Result<Self, InvalidName> {
        let name = name.into();
        check_name(&name)?;
        Ok(Self(name))
    }

    /// The lock that keeps the election `name`: `name` after [`ELECTION_MARK`]. `name` must
    /// leave room for the mark: at most [`MAX_ELECTION_NAME_BYTES`] bytes.
    pub fn election(name: &Resource) -> Result<Resource, InvalidName> {
        if name.is_election() {
            return Err(InvalidName::ControlCharacter);
        }
        if name.0.len() > MAX_ELECTION_NAME_BYTES {
            return Err(InvalidName::TooLong);
        }
        let mut election = CompactString::with_capacity(ELECTION_MARK.len_utf8() + name.0.len());
        election.push(ELECTION_MARK);
        election.push_str(&name.0);
        Ok(Self(election))
    }

    /// The name of the election this lock keeps, if it is an election's.
    pub fn election_name(&self) -> Option<&str> {
        self.0.strip_prefix(ELECTION_MARK)
    }

    /// Whether this is the lock of an election.
    pub fn is_election(&self) -> bool {
        self.0.starts_with(ELECTION_MARK)
    }

    /// The greatest lock of an election there can be: a list from after it shows no
    /// election. Elections sort before every name a client may write (their mark is below
    /// a space), so an unprefixed list of locks starts after this one rather than read them
    /// and drop them. It is the mark and the greatest 254 bytes of UTF-8: U+10FFFF 63 times,
    /// then U+07FF.
    pub fn past_elections() -> Resource {
        let mut name = CompactString::default();
        name.push(ELECTION_MARK);
        name.extend(std::iter::repeat_n('\u{10FFFF}', 63));
        name.push('\u{7FF}');
        Self(name)
    }

    /// The name as it was given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who holds a lease: the name the caller chose, e.g. `worker-7:pid-311`, and the
/// [`Principal`] it authenticated as, if the server checks who calls.
///
/// The name is trimmed of leading and trailing white space; what is left is 1 to 255 bytes
/// without control characters, and is compared byte for byte (`Worker-7` is not
/// `worker-7`). Two owners are the same when both their names and their principals are: the
/// name alone proves nothing, since anyone who may read a lease sees it. On one name, an
/// owner's name is taken by at most one principal at a time; see [`Owner::claims_name_of`].
/// Names of up to 24 bytes are kept inline, as a [`Resource`]'s are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    name: CompactString,
    principal: Option<Principal>,
}

impl Owner {
    /// Trims `name` (as [`str::trim`] does), checks what is left and wraps it, of no principal.
    pub fn new(name: &str) -> Result<Self, InvalidName> {
        let name = name.trim();
        check_name(name)?;
        Ok(Self {
            name: CompactString::new(name),
            principal: None,
        })
    }

    /// This owner name, of `principal` (none: a server without authentication).
    pub fn of(self, principal: Option<Principal>) -> Self {
        Self { principal, ..self }
    }

    /// The trimmed name.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The principal the owner authenticated as, if any.
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_ref()
    }

    /// Whether `other` has this owner's name but another principal: it may then neither
    /// extend, renew nor release this owner's lease, and is refused the name while this
    /// owner holds it.
    pub fn claims_name_of(&self, other: &Owner) -> bool {
        self.name == other.name && self.principal != other.principal
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl std::str::FromStr for Owner {
    type Err = InvalidName;
    fn from_str(s: &str) -> Result<Self, InvalidName> {
        Self::new(s)
    }
}

/// Who a request authenticated as: a principal of the server's authentication file, e.g.
/// `billing`. 1 to 255 bytes of UTF-8 without control characters, compared byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal(CompactString);

impl Principal {
    /// Checks `name` and wraps it.
    pub fn new(name: impl Into<CompactString>) -> Result<Self, InvalidName> {
        let name = name.into();
        check_name(&name)?;
        Ok(Self(name))
    }

    /// The name as it was given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! display_as_str {
    ($($t:ty),*) => {$(
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::borrow::Borrow<str> for $t {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
        impl std::str::FromStr for $t {
            type Err = InvalidName;
            fn from_str(s: &str) -> Result<Self, InvalidName> {
                Self::new(s)
            }
        }
    )*};
}
display_as_str!(Resource, Principal);

/// The number that comes with every new lease. For one resource, every new lease gets a
/// token greater than every token issued for it before; a protected resource rejects writes
/// that carry a lower token than the highest it has seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FencingToken(pub u64);

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a TTL was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTtl {
    /// Zero: a lease that expires as it is granted protects nothing.
    #[error("must be at least 1 millisecond")]
    Zero,
    /// Above the configured maximum.
    #[error("must be at most {max_ms} milliseconds")]
    TooLong {
        /// The maximum, in milliseconds.
        max_ms: u64,
    },
    /// Not a whole number of milliseconds.
    #[error("must be a whole number of milliseconds")]
    Fractional,
}

/// How long a lease lasts from the moment it is granted or renewed: a whole number of
/// milliseconds, at least one, at most a maximum the caller chooses (see [`Ttl::DEFAULT_MAX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ttl(u64);

impl Ttl {
    /// The default maximum TTL: one day.
    pub const DEFAULT_MAX: Ttl = Ttl(86_400_000);

    /// The longest maximum a server may be configured with: one year.
    pub const CEILING: Ttl = Ttl(365 * 86_400_000);

    /// A TTL of `ms` milliseconds, for constants; `ms` must not be zero.
    pub const fn from_const_millis(ms: u64) -> Self {
        assert!(ms > 0, "a TTL is at least 1 millisecond");
        Self(ms)
    }

    /// A TTL of `ms` milliseconds, refused if zero or above `max`.
    pub fn from_millis(ms: u64, max: Ttl) -> Result<Self, InvalidTtl> {
        match ms {
            0 => Err(InvalidTtl::Zero),
            ms if ms > max.0 => Err(InvalidTtl::TooLong { max_ms: max.0 }),
            ms => Ok(Self(ms)),
        }
    }

    /// A TTL of `duration`, refused if zero, above `max`, or not whole milliseconds.
    pub fn from_duration(duration: Duration, max: Ttl) -> Result<Self, InvalidTtl> {
        if !duration.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(InvalidTtl::Fractional);
        }
        let ms = u64::try_from(duration.as_millis()).map_err(|_| InvalidTtl::TooLong { max_ms: max.0 })?;
        Self::from_millis(ms, max)
    }

    /// The TTL in milliseconds.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// The TTL as a [`Duration`].
    pub fn as_duration(self) -> Duration {
        Duration::from_millis(self.0)
    }
}

/// `expires_at`, or the cap if it comes first.
fn cut(expires_at: Timestamp, cap: Option<Timestamp>) -> Timestamp {
    cap.map_or(expires_at, |cap| expires_at.min(cap))
}

/// Why lease metadata was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidMeta {
    /// Not a JSON object.
    #[error("must be a JSON object")]
    NotAnObject,
    /// A value that is an object or an array: metadata is flat.
    #[error("must have only string, number, boolean or null values ({key:?} has another)")]
    Nested {
        /// The key of the first such value.
        key: String,
    },
    /// More bytes as compact JSON than allowed.
    #[error("must be at most {max_bytes} bytes as compact JSON")]
    TooLarge {
        /// The most allowed.
        max_bytes: usize,
    },
}

/// What a holder says about its lease, e.g. `{"host": "db-3", "pid": 311, "job": "backup"}`:
/// a flat JSON object (string, number, boolean or null values) kept with the lease, permit
/// or hold, shown wherever it is shown.
///
/// Kept as its compact JSON text, checked once when built: stores write the text as it is,
/// and a clone shares it (no allocation), so a lease with metadata costs a grant no more
/// than one without once it is built.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Meta(Arc<str>);

impl Meta {
    /// The default most bytes of metadata, as compact JSON.
    pub const DEFAULT_MAX_BYTES: usize = 1024;

    /// Checks `value` (flat object, at most `max_bytes` as compact JSON) and keeps it.
    pub fn from_value(value: &Value, max_bytes: usize) -> Result<Self, InvalidMeta> {
        let Value::Object(object) = value else {
            return Err(InvalidMeta::NotAnObject);
        };
        Self::from_object(object, max_bytes)
    }

    /// Checks `object` (flat, at most `max_bytes` as compact JSON) and keeps it.
    pub fn from_object(object: &Map<String, Value>, max_bytes: usize) -> Result<Self, InvalidMeta> {
        if let Some((key, _)) = object
            .iter()
            .find(|(_, value)| matches!(value, Value::Object(_) | Value::Array(_)))
        {
            return Err(InvalidMeta::Nested { key: key.clone() });
        }
        // A map of strings and scalars always serializes; the fallback is never taken.
        let text = serde_json::to_string(object).unwrap_or_default();
        if text.len() > max_bytes {
            return Err(InvalidMeta::TooLarge { max_bytes });
        }
        Ok(Self(text.into()))
    }

    /// Reads metadata back from its compact JSON text, as a store kept it: checked for
    /// shape but not for size, since a lease keeps the metadata it was granted with even if
    /// the server's limit is lowered later.
    pub fn parse(text: &str) -> Result<Self, InvalidMeta> {
        let value: Value = serde_json::from_str(text).map_err(|_| InvalidMeta::NotAnObject)?;
        Self::from_value(&value, usize::MAX)
    }

    /// The compact JSON text, e.g. `{"host":"db-3"}`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The metadata as a JSON object.
    pub fn to_object(&self) -> Map<String, Value> {
        // Built from an object, so it reads back as one.
        serde_json::from_str(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for Meta {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an acquire asks for besides the resource and its owner: how long the lease lasts
/// from each grant, extension or renewal, two terms that stay with the lease for its
/// whole life, whatever its renewals and extensions send, and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The lease's TTL.
    pub ttl: Ttl,
    /// A cap on holding, measured from the grant that issues the token: the lease ends then
    /// at the latest, however often it is renewed (for jobs of unknown length that must not
    /// keep a lock forever).
    pub max_hold: Option<Ttl>,
    /// After the lease **expires** (its holder never released it: presumed crashed or cut
    /// off), nobody is granted the resource before `expires_at + lock_delay`, so that writes
    /// the holder still had in flight drain first. A release ends it at once.
    pub lock_delay: Duration,
    /// The lease's metadata: a grant that issues a token takes it (none: the lease has
    /// none); an extension replaces the lease's with it if given, and keeps it if not.
    pub meta: Option<Meta>,
}

impl Terms {
    /// A lease of `ttl`, with no cap, no lock-delay and no metadata.
    pub fn ttl(ttl: Ttl) -> Self {
        Self {
            ttl,
            max_hold: None,
            lock_delay: Duration::ZERO,
            meta: None,
        }
    }

    /// These terms with metadata (`None`: none for a grant, the lease's own for an
    /// extension).
    pub fn meta(self, meta: Option<Meta>) -> Self {
        Self { meta, ..self }
    }

    /// These terms with a cap on holding.
    pub fn max_hold(self, max_hold: Option<Ttl>) -> Self {
        Self { max_hold, ..self }
    }

    /// These terms with a lock-delay (whole milliseconds are kept).
    pub fn lock_delay(self, lock_delay: Duration) -> Self {
        Self {
            lock_delay: Duration::from_millis(u64::try_from(lock_delay.as_millis()).unwrap_or(u64::MAX)),
            ..self
        }
    }
}

/// The most locks one acquire may take at once.
pub const MAX_RESOURCES: usize = 64;

/// Why a set of resources for one acquire was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidResources {
    /// None, or more than [`MAX_RESOURCES`].
    #[error("must name 1 to 64 resources")]
    Count,
    /// A name given twice.
    #[error("must not name {0} twice")]
    Duplicate(Resource),
}

/// The locks one acquire takes together, all or none: 1 to [`MAX_RESOURCES`] distinct
/// resources, in the order the caller gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources(Vec<Resource>);

impl Resources {
    /// Checks `resources` and wraps them.
    pub fn new(resources: Vec<Resource>) -> Result<Self, InvalidResources> {
        if resources.is_empty() || resources.len() > MAX_RESOURCES {
            return Err(InvalidResources::Count);
        }
        let mut sorted: Vec<&Resource> = resources.iter().collect();
        sorted.sort();
        if let Some(pair) = sorted.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(InvalidResources::Duplicate(pair[0].clone()));
        }
        Ok(Self(resources))
    }

    /// The resources in the order given.
    pub fn as_slice(&self) -> &[Resource] {
        &self.0
    }
}

/// A point in time: milliseconds since the Unix epoch, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The time `ms` milliseconds after the Unix epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms)
    }

    /// The system's wall clock now (clamped to the epoch if it is set before 1970).
    pub fn now_wall() -> Self {
        Self::from(SystemTime::now())
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + ttl`, saturating at the end of time.
    pub fn plus(self, ttl: Ttl) -> Self {
        Self(self.0.saturating_add(ttl.0))
    }

    /// How long from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// RFC 3339 in UTC with exactly three fraction digits, e.g. `2026-11-29T06:30:00.123Z`.
    pub fn to_rfc3339(self) -> String {
        self.rfc3339().as_str().to_owned()
    }

    /// [`Timestamp::to_rfc3339`]'s text, on the stack: for a line or a body written at once.
    pub fn rfc3339(self) -> Rfc3339 {
        // RFC 3339 has four year digits: a time past 9999 (only a store clock gone far wrong,
        // or a sum that saturated, gets there) is written as the last one it can say.
        let ms = self.0.min(Self::LAST_RFC3339.0);
        let (secs, milli) = (ms / 1000, ms % 1000);
        let (days, in_day) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil(days);
        let mut text = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, digits: usize, mut n: u64| {
            for i in (at..at + digits).rev() {
                // A digit: n % 10 < 10.
                text[i] = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(0, 4, year);
        put(5, 2, month);
        put(8, 2, day);
        put(11, 2, in_day / 3600);
        put(14, 2, in_day / 60 % 60);
        put(17, 2, in_day % 60);
        put(20, 3, milli);
        Rfc3339(text)
    }

    /// 9999-12-31T23:59:59.999Z, the last time RFC 3339 can write.
    const LAST_RFC3339: Self = Self(253_402_300_799_999);

    /// Reads an RFC 3339 timestamp (as [`Timestamp::to_rfc3339`] writes them).
    pub fn parse_rfc3339(text: &str) -> Option<Self> {
        humantime::parse_rfc3339(text).ok().map(Self::from)
    }
}

/// The year, month and day of the `days`-th day after 1970-01-01 (proleptic Gregorian), by
/// Howard Hinnant's `civil_from_days` for days on or after the epoch.
fn civil(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so that a leap day ends its year, in eras of 400 years.
    let z = days + 719_468;
    let (era, of_era) = (z / 146_097, z % 146_097);
    let year_of_era = (of_era - of_era / 1460 + of_era / 36_524 - of_era / 146_096) / 365;
    let of_year = of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_based = (5 * of_year + 2) / 153;
    let day = of_year - (153 * march_based + 2) / 5 + 1;
    let month = if march_based < 10 {
        march_based + 3
    } else {
        march_based - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

/// A timestamp's RFC 3339 text ([`Timestamp::rfc3339`]): 24 ASCII bytes.
#[derive(Clone, Copy)]
pub struct Rfc3339([u8; 24]);

impl Rfc3339 {
    /// The text.
    pub fn as_str(&self) -> &str {
        // Digits and `-T:.Z` only: always UTF-8.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        let ms = time
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Self(ms)
    }
}

impl From<Timestamp> for SystemTime {
    fn from(time: Timestamp) -> Self {
        UNIX_EPOCH + Duration::from_millis(time.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.rfc3339().as_str())
    }
}

/// A grant of a resource to an owner until `expires_at`, with its fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// What is locked.
    pub resource: Resource,
    /// Who holds it (with the principal it authenticated as).
    pub owner: Owner,
    /// The token of this grant; unchanged by extension and renewal.
    pub token: FencingToken,
    /// When the lease was granted, or last extended by a re-acquire.
    pub acquired_at: Timestamp,
    /// When the lease ends, by the clock of the store that enforces it.
    pub expires_at: Timestamp,
    /// The cap on holding ([`Terms::max_hold`]): `expires_at` never passes it, whatever is
    /// renewed or extended. Set by the grant that issued the token; `None`: no cap.
    pub hold_until: Option<Timestamp>,
    /// How long the resource stays closed to everyone after this lease expires without being
    /// released ([`Terms::lock_delay`]); zero: none.
    pub lock_delay: Duration,
    /// What the holder said about it ([`Terms::meta`]); `None`: nothing.
    pub meta: Option<Meta>,
}

impl Lease {
    /// A new lease of `resource` for `owner` with `token`, granted at `now` on `terms`: it
    /// ends after the TTL, or at the cap if that comes first.
    pub fn granted(
        resource: &Resource,
        owner: &Owner,
        token: FencingToken,
        now: Timestamp,
        terms: &Terms,
    ) -> Self {
        let hold_until = terms.max_hold.map(|cap| now.plus(cap));
        Self {
            resource: resource.clone(),
            owner: owner.clone(),
            token,
            acquired_at: now,
            expires_at: cut(now.plus(terms.ttl), hold_until),
            hold_until,
            lock_delay: terms.lock_delay,
            meta: terms.meta.clone(),
        }
    }

    /// This lease extended or renewed at `now` for `ttl`, cut at its cap; `extended` sets
    /// `acquired_at` anew (a re-acquire), a renewal leaves it. `meta`, if given, replaces the
    /// lease's metadata; if not, the lease keeps its own.
    pub fn prolonged(&self, now: Timestamp, ttl: Ttl, extended: bool, meta: Option<&Meta>) -> Self {
        Self {
            acquired_at: if extended { now } else { self.acquired_at },
            expires_at: cut(now.plus(ttl), self.hold_until),
            meta: meta.or(self.meta.as_ref()).cloned(),
            ..self.clone()
        }
    }

    /// When the resource may be granted again if this lease expires without a release:
    /// `expires_at + lock_delay`.
    pub fn closed_until(&self) -> Timestamp {
        let delay = u64::try_from(self.lock_delay.as_millis()).unwrap_or(u64::MAX);
        Timestamp::from_millis(self.expires_at.as_millis().saturating_add(delay))
    }

    /// Whether the lease is live at `now`: `now < expires_at`.
    pub fn is_live(&self, now: Timestamp) -> bool {
        now < self.expires_at
    }

    /// How long the lease has left at `now`.
    pub fn expires_in(&self, now: Timestamp) -> Duration {
        self.expires_at.since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_checked_when_built() {
        assert_eq!(Resource::new("payment:42").unwrap().as_str(), "payment:42");
        assert_eq!(Resource::new(""), Err(InvalidName::Empty));
        assert!(Resource::new("a".repeat(255)).is_ok());
        assert_eq!(Resource::new("a".repeat(256)), Err(InvalidName::TooLong));
        // 128 two-byte characters are 256 bytes: the limit is in bytes, not characters.
        assert_eq!(Resource::new("é".repeat(128)), Err(InvalidName::TooLong));
        for bad in ["a\u{0}b", "a\nb", "a\u{1f}", "\u{7f}"] {
            assert_eq!(Resource::new(bad), Err(InvalidName::ControlCharacter), "{bad:?}");
        }
        // Resources are not trimmed: white space is part of the name.
        assert_eq!(Resource::new(" x ").unwrap().as_str(), " x ");
        assert!(Resource::new("résumé/€").is_ok());
    }

    #[test]
    fn an_election_is_kept_as_a_lock_no_client_can_name() {
        let name = Resource::named("leader:db").unwrap();
        let lock = Resource::election(&name).unwrap();
        assert_eq!(lock.as_str(), "\u{1}leader:db");
        assert_eq!(lock.election_name(), Some("leader:db"));
        assert_eq!(name.election_name(), None);
        // Stores read it back; clients cannot send it.
        assert_eq!(Resource::new(lock.as_str()), Ok(lock.clone()));
        assert_eq!(Resource::named(lock.as_str()), Err(InvalidName::ControlCharacter));
        assert_eq!(Resource::new("\u{1}"), Err(InvalidName::ControlCharacter));
        assert_eq!(Resource::new("\u{1}\u{1}a"), Err(InvalidName::ControlCharacter));
        assert_eq!(Resource::election(&lock), Err(InvalidName::ControlCharacter));
        let longest = Resource::named("e".repeat(254)).unwrap();
        assert_eq!(Resource::election(&longest).unwrap().as_str().len(), 255);
        let too_long = Resource::named("e".repeat(255)).unwrap();
        assert_eq!(Resource::election(&too_long), Err(InvalidName::TooLong));
        assert_eq!(
            Resource::new(format!("\u{1}{}", "e".repeat(255))),
            Err(InvalidName::TooLong)
        );
    }

    #[test]
    fn owners_are_trimmed_then_checked() {
        assert_eq!(Owner::new("  worker-7 \t").unwrap().as_str(), "worker-7");
        assert_eq!(Owner::new(""), Err(InvalidName::Empty));
        assert_eq!(Owner::new(" \t\n\u{3000}"), Err(InvalidName::Empty));
        assert_eq!(Owner::new(&"o".repeat(256)), Err(InvalidName::TooLong));
        assert!(Owner::new(&format!("  {}  ", "o".repeat(255))).is_ok());
        assert_eq!(Owner::new("a\u{1}b"), Err(InvalidName::ControlCharacter));
        assert_ne!(Owner::new("Worker-7"), Owner::new("worker-7"));
    }

    #[test]
    fn ttls_are_whole_milliseconds_within_bounds() {
        let max = Ttl::DEFAULT_MAX;
        assert_eq!(Ttl::from_millis(0, max), Err(InvalidTtl::Zero));
        assert_eq!(Ttl::from_millis(1, max).unwrap().as_millis(), 1);
        assert!(Ttl::from_millis(86_400_000, max).is_ok());
        assert_eq!(
            Ttl::from_millis(86_400_001, max),
            Err(InvalidTtl::TooLong { max_ms: 86_400_000 })
        );
        assert_eq!(
            Ttl::from_duration(Duration::from_micros(1500), max),
            Err(InvalidTtl::Fractional)
        );
        assert_eq!(
            Ttl::from_duration(Duration::from_secs(30), max)
                .unwrap()
                .as_duration(),
            Duration::from_secs(30)
        );
    }

    #[test]
    fn timestamps_are_written_as_humantime_writes_them_from_1970_to_9999() {
        // Every 13th day's first and last millisecond, and one within it (13 days: every
        // weekday, month day and place in the leap cycle comes by), up to the last time RFC
        // 3339 can write.
        let day = 86_400_000;
        let last = Timestamp::LAST_RFC3339.0;
        let mut ms = 0;
        while ms <= last {
            for t in [ms, ms + day - 1, ms + (ms / day * 7_919_333) % day] {
                let t = t.min(last);
                let time = UNIX_EPOCH + Duration::from_millis(t);
                let theirs = humantime::format_rfc3339_millis(time).to_string();
                assert_eq!(Timestamp(t).to_rfc3339(), theirs, "{t}");
            }
            ms += 13 * day;
        }
    }

    #[test]
    fn timestamps_have_three_fraction_digits_and_end_in_z() {
        let t = Timestamp::from_millis(1_795_933_800_123);
        assert_eq!(t.to_rfc3339(), "2026-11-29T06:30:00.123Z");
        assert_eq!(
            Timestamp::from_millis(1_795_933_800_000).to_rfc3339(),
            "2026-11-29T06:30:00.000Z"
        );
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()), Some(t));
        let last = "9999-12-31T23:59:59.999Z";
        for beyond in [253_402_300_799_999, 253_402_300_800_000, u64::MAX] {
            assert_eq!(Timestamp::from_millis(beyond).to_rfc3339(), last, "{beyond}");
        }
    }

    #[test]
    fn a_lease_is_live_strictly_before_its_expiry() {
        let lease = Lease {
            resource: Resource::new("r").unwrap(),
            owner: Owner::new("o").unwrap(),
            token: FencingToken(1),
            acquired_at: Timestamp::from_millis(1000),
            expires_at: Timestamp::from_millis(2000),
            hold_until: None,
            lock_delay: Duration::ZERO,
            meta: None,
        };
        assert!(lease.is_live(Timestamp::from_millis(1999)));
        assert!(!lease.is_live(Timestamp::from_millis(2000)));
        assert_eq!(
            lease.expires_in(Timestamp::from_millis(1500)),
            Duration::from_millis(500)
        );
        assert_eq!(lease.expires_in(Timestamp::from_millis(2500)), Duration::ZERO);
    }

    #[test]
    fn a_cap_cuts_every_expiry_and_stays_with_the_lease() {
        let (r, o) = (Resource::new("r").unwrap(), Owner::new("o").unwrap());
        let ms = |ms| Ttl::from_millis(ms, Ttl::DEFAULT_MAX).unwrap();
        let now = Timestamp::from_millis(1_000);
        let terms = Terms::ttl(ms(500))
            .max_hold(Some(ms(800)))
            .lock_delay(Duration::from_micros(2_500_700));
        let lease = Lease::granted(&r, &o, FencingToken(1), now, &terms);
        assert_eq!(
            (lease.expires_at, lease.hold_until),
            (Timestamp::from_millis(1_500), Some(Timestamp::from_millis(1_800)))
        );
        assert_eq!(
            lease.lock_delay,
            Duration::from_millis(2_500),
            "whole milliseconds"
        );
        assert_eq!(lease.closed_until(), Timestamp::from_millis(4_000));
        let later = Timestamp::from_millis(1_400);
        let renewed = lease.prolonged(later, ms(500), false, None);
        assert_eq!(
            (renewed.acquired_at, renewed.expires_at),
            (now, Timestamp::from_millis(1_800))
        );
        let extended = lease.prolonged(later, ms(100), true, None);
        assert_eq!(
            (extended.acquired_at, extended.expires_at),
            (later, Timestamp::from_millis(1_500))
        );
        assert_eq!(extended.hold_until, lease.hold_until);
        let uncapped = Lease::granted(&r, &o, FencingToken(2), now, &Terms::ttl(ms(500)));
        assert_eq!(
            (uncapped.hold_until, uncapped.closed_until()),
            (None, uncapped.expires_at)
        );
    }

    #[test]
    fn metadata_is_a_flat_object_of_bounded_compact_size() {
        let value = serde_json::json!({"host": "db-3", "pid": 311, "ok": true, "none": null});
        let meta = Meta::from_value(&value, Meta::DEFAULT_MAX_BYTES).unwrap();
        assert_eq!(
            meta.as_str(),
            r#"{"host":"db-3","none":null,"ok":true,"pid":311}"#
        );
        assert_eq!(Meta::parse(meta.as_str()), Ok(meta.clone()));
        assert_eq!(serde_json::Value::Object(meta.to_object()), value);
        assert_eq!(
            Meta::from_value(&serde_json::json!({"a": {"b": 1}}), 1024),
            Err(InvalidMeta::Nested { key: "a".into() })
        );
        assert_eq!(
            Meta::from_value(&serde_json::json!({"a": [1]}), 1024),
            Err(InvalidMeta::Nested { key: "a".into() })
        );
        for not_object in [
            serde_json::json!([1]),
            serde_json::json!("x"),
            serde_json::json!(null),
        ] {
            assert_eq!(Meta::from_value(&not_object, 1024), Err(InvalidMeta::NotAnObject));
        }
        // `{"k":"…"}` is 8 bytes around the value: 1,016 bytes of value fill 1,024 exactly.
        let fits = serde_json::json!({"k": "x".repeat(1016)});
        assert!(Meta::from_value(&fits, 1024).is_ok());
        let over = serde_json::json!({"k": "x".repeat(1017)});
        assert_eq!(
            Meta::from_value(&over, 1024),
            Err(InvalidMeta::TooLarge { max_bytes: 1024 })
        );
    }

    #[test]
    fn a_grant_takes_the_metadata_sent_and_a_prolonging_keeps_it_unless_it_sends_one() {
        let (r, o) = (Resource::new("r").unwrap(), Owner::new("o").unwrap());
        let ttl = Ttl::from_millis(500, Ttl::DEFAULT_MAX).unwrap();
        let meta = |v| Meta::from_value(&v, 1024).unwrap();
        let (first, second) = (
            meta(serde_json::json!({"job": 1})),
            meta(serde_json::json!({"job": 2})),
        );
        let now = Timestamp::from_millis(1_000);
        let lease = Lease::granted(
            &r,
            &o,
            FencingToken(1),
            now,
            &Terms::ttl(ttl).meta(Some(first.clone())),
        );
        assert_eq!(lease.meta.as_ref(), Some(&first));
        assert_eq!(lease.prolonged(now, ttl, true, None).meta.as_ref(), Some(&first));
        assert_eq!(lease.prolonged(now, ttl, false, Some(&second)).meta, Some(second));
        assert_eq!(
            Lease::granted(&r, &o, FencingToken(2), now, &Terms::ttl(ttl)).meta,
            None
        );
    }

    #[test]
    fn several_resources_are_one_to_sixty_four_distinct_names_in_a_canonical_order() {
        let r = |n: &str| Resource::new(n).unwrap();
        assert_eq!(Resources::new(vec![]), Err(InvalidResources::Count));
        let many: Vec<Resource> = (0..65).map(|i| r(&format!("r{i}"))).collect();
        assert_eq!(Resources::new(many.clone()), Err(InvalidResources::Count));
        assert!(Resources::new(many[..64].to_vec()).is_ok());
        assert_eq!(
            Resources::new(vec![r("a"), r("b"), r("a")]),
            Err(InvalidResources::Duplicate(r("a")))
        );
        let set = Resources::new(vec![r("b"), r("é"), r("a"), r("B")]).unwrap();
        assert_eq!(set.as_slice()[0], r("b"), "the order given is kept");
    }
}
