//! What goes to a node and comes back: the script's arguments, its replies, and the records
//! of leases, permits and holds as a node keeps them (see the header of `fencelock.lua`).

use std::time::Duration;

use fencelock_core::{Claim, FencingToken, Hold, HoldKind, Kind, Lease, Meta, Owner, Principal, Resource};
use redis::Value;

use super::error::{RedisError, Result};

/// The separator of a record's fields (byte 31), which no name, owner or principal contains.
pub(super) const US: char = '\u{1f}';

/// An argument of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Arg {
    Text(String),
    Bytes(Vec<u8>),
    Number(u64),
}

impl Arg {
    /// `text` as an argument.
    pub(super) fn text(text: &str) -> Self {
        Self::Text(text.to_owned())
    }

    /// Metadata sent, or none (`''`: every metadata is a JSON object, never empty).
    pub(super) fn meta(meta: Option<&Meta>) -> Self {
        Self::text(meta.map_or("", Meta::as_str))
    }

    /// A token given to a release or renewal, or none (`''`: 0 is a token like any other).
    pub(super) fn token(token: Option<FencingToken>) -> Self {
        token.map_or_else(|| Self::Text(String::new()), |t| Self::Number(t.0))
    }
}

/// The arguments naming `owner`: its name and its principal (empty for none).
pub(super) fn owner_args(owner: &Owner) -> [Arg; 2] {
    [
        Arg::text(owner.as_str()),
        Arg::text(owner.principal().map_or("", Principal::as_str)),
    ]
}

/// What the script answered: the node's time, then the operation's items, read in order.
#[derive(Debug)]
pub(super) struct Reply {
    /// The node's time when it ran the call, in milliseconds since the epoch.
    pub(super) now: u64,
    items: std::vec::IntoIter<Value>,
    address: String,
    op: &'static str,
}

impl Reply {
    pub(super) fn new(address: &str, op: &'static str, answer: Vec<Value>) -> Result<Self> {
        let mut reply = Self {
            now: 0,
            items: answer.into_iter(),
            address: address.to_owned(),
            op,
        };
        reply.now = reply.number()?;
        Ok(reply)
    }

    fn corrupt(&self, what: &str) -> RedisError {
        RedisError::odd(&self.address, self.op, what)
    }

    /// The node that answered, for messages.
    pub(super) fn node(&self) -> &str {
        &self.address
    }

    /// The next item, if it is text and `word`, taken; else nothing is taken.
    pub(super) fn take_word(&mut self, word: &str) -> bool {
        let is = matches!(self.items.as_slice().first(), Some(Value::BulkString(b)) if b == word.as_bytes())
            || matches!(self.items.as_slice().first(), Some(Value::SimpleString(s)) if s == word);
        if is {
            self.items.next();
        }
        is
    }

    /// Whether items are left.
    pub(super) fn is_empty(&self) -> bool {
        self.items.len() == 0
    }

    /// The next item, as text.
    pub(super) fn text(&mut self) -> Result<String> {
        match self.items.next() {
            Some(Value::BulkString(bytes)) => {
                String::from_utf8(bytes).map_err(|_| self.corrupt("text that is not UTF-8"))
            }
            Some(Value::SimpleString(text)) => Ok(text),
            other => Err(self.corrupt(&format!("expected text, got {other:?}"))),
        }
    }

    /// The next item as it came, as an argument to send to another node.
    pub(super) fn arg(&mut self) -> Result<Arg> {
        match self.items.next() {
            Some(Value::BulkString(bytes)) => Ok(Arg::Bytes(bytes)),
            Some(Value::SimpleString(text)) => Ok(Arg::Text(text)),
            Some(Value::Int(n)) => u64::try_from(n)
                .map(Arg::Number)
                .map_err(|_| self.corrupt(&format!("negative number {n}"))),
            other => Err(self.corrupt(&format!("expected an item, got {other:?}"))),
        }
    }

    /// The next item, as a number (an integer, or digits).
    pub(super) fn number(&mut self) -> Result<u64> {
        match self.items.next() {
            Some(Value::Int(n)) => {
                u64::try_from(n).map_err(|_| self.corrupt(&format!("negative number {n}")))
            }
            Some(Value::BulkString(bytes)) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|digits| digits.parse().ok())
                .ok_or_else(|| self.corrupt("a number that is not digits")),
            other => Err(self.corrupt(&format!("expected a number, got {other:?}"))),
        }
    }

    /// The next item, as a record (`None` for an empty one).
    pub(super) fn record(&mut self) -> Result<Option<Record>> {
        let text = self.text()?;
        if text.is_empty() {
            return Ok(None);
        }
        Record::parse(&text)
            .map(Some)
            .map_err(|why| self.corrupt(&format!("record {text:?}: {why}")))
    }

    /// The next two items: an acquire's status and its record (none when the status is
    /// `stale`, whose second item is the node's last token, or when it is empty).
    pub(super) fn status(&mut self) -> Result<(String, Option<Record>)> {
        let status = self.text()?;
        if status == "stale" {
            self.text()?;
            return Ok((status, None));
        }
        Ok((status, self.record()?))
    }

    /// The next item, as a record that must be there.
    pub(super) fn some_record(&mut self) -> Result<Record> {
        self.record()?.ok_or_else(|| self.corrupt("an empty record"))
    }

    /// Every item left, as records.
    pub(super) fn records(&mut self) -> Result<Vec<Record>> {
        let mut records = Vec::new();
        while !self.is_empty() {
            records.push(self.some_record()?);
        }
        Ok(records)
    }
}

/// A lease, permit or hold as a node keeps it (see the script's header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) token: u64,
    pub(super) acquired_at: u64,
    pub(super) expires_at: u64,
    pub(super) hold_until: u64,
    pub(super) lock_delay: u64,
    pub(super) claim: String,
    pub(super) limit: u32,
    pub(super) principal: String,
    pub(super) owner: String,
    /// The end by the node's clock.
    pub(super) until: u64,
    /// The metadata as compact JSON; empty for none.
    pub(super) meta: String,
    /// The record as the node keeps it.
    pub(super) raw: String,
}

impl Record {
    fn parse(text: &str) -> Result<Self, String> {
        let mut fields: Vec<&str> = text.split(US).collect();
        // A record written before leases kept metadata has none.
        let meta = if fields.len() == 13 {
            fields.pop().unwrap_or_default()
        } else {
            ""
        };
        let [
            token,
            acquired_at,
            expires_at,
            hold_until,
            lock_delay,
            claim,
            limit,
            principal,
            owner,
            until,
            _cap,
            _slot,
        ] = fields[..]
        else {
            return Err(format!("{} fields, not 12 or 13", fields.len()));
        };
        let number = |field: &str| {
            field
                .parse::<u64>()
                .map_err(|_| format!("{field:?} is not a number"))
        };
        Ok(Self {
            token: number(token)?,
            acquired_at: number(acquired_at)?,
            expires_at: number(expires_at)?,
            hold_until: number(hold_until)?,
            lock_delay: number(lock_delay)?,
            claim: claim.to_owned(),
            limit: u32::try_from(number(limit)?).map_err(|_| format!("limit {limit} is too large"))?,
            principal: principal.to_owned(),
            owner: owner.to_owned(),
            until: number(until)?,
            meta: meta.to_owned(),
            raw: text.to_owned(),
        })
    }

    /// How long until the record ends, by the node's clock, at the node's `now`.
    pub(super) fn left(&self, now: u64) -> Duration {
        Duration::from_millis(self.until.saturating_sub(now))
    }

    /// How long until its lock-delay ends, by the node's clock, at the node's `now`.
    pub(super) fn closed_for(&self, now: u64) -> Duration {
        Duration::from_millis((self.until + self.lock_delay).saturating_sub(now))
    }

    fn owner(&self) -> Result<Owner, String> {
        let principal = match self.principal.as_str() {
            "" => None,
            name => Some(Principal::new(name).map_err(|e| format!("principal {name:?}: {e}"))?),
        };
        Ok(Owner::new(&self.owner)
            .map_err(|e| format!("owner {:?}: {e}", self.owner))?
            .of(principal))
    }

    /// The lease of `resource` this record is.
    pub(super) fn lease(&self, resource: &Resource) -> Result<Lease> {
        let corrupt = |why: String| RedisError::odd("", "read", format!("{resource}: {why}"));
        Ok(Lease {
            resource: resource.clone(),
            owner: self.owner().map_err(corrupt)?,
            token: FencingToken(self.token),
            acquired_at: fencelock_core::Timestamp::from_millis(self.acquired_at),
            expires_at: fencelock_core::Timestamp::from_millis(self.expires_at),
            hold_until: (self.hold_until > 0)
                .then(|| fencelock_core::Timestamp::from_millis(self.hold_until)),
            lock_delay: Duration::from_millis(self.lock_delay),
            meta: match self.meta.as_str() {
                "" => None,
                text => Some(Meta::parse(text).map_err(|e| corrupt(format!("meta {text:?}: {e}")))?),
            },
        })
    }

    /// The hold on `name` this record is.
    pub(super) fn hold(&self, name: &Resource) -> Result<Hold> {
        let claim = match self.claim.as_str() {
            "permit" => Claim::Permit { limit: self.limit },
            "read" => Claim::Read,
            "write" => Claim::Write,
            other => {
                return Err(RedisError::odd(
                    "",
                    "read",
                    format!("{name}: a hold claims {other:?}"),
                ));
            }
        };
        Ok(Hold {
            lease: self.lease(name)?,
            claim,
        })
    }

    /// Whether `other` is the same lease as this (from another node): all but the node's own
    /// end alike.
    pub(super) fn same_lease(&self, other: &Self) -> bool {
        self.shown() == other.shown()
    }

    /// What every node keeps alike of the lease: all but the node's own end.
    #[allow(clippy::type_complexity)]
    pub(super) fn shown(&self) -> (u64, u64, u64, u64, u64, &str, u32, &str, &str, &str) {
        (
            self.token,
            self.acquired_at,
            self.expires_at,
            self.hold_until,
            self.lock_delay,
            &self.claim,
            self.limit,
            &self.principal,
            &self.owner,
            &self.meta,
        )
    }
}

/// The letter of a kind in the node's keys and notices.
pub(super) fn letter(kind: Kind) -> &'static str {
    match kind {
        Kind::Lock => "L",
        Kind::Semaphore => "S",
        Kind::RwLock => "R",
    }
}

/// The kind of a letter.
pub(super) fn kind_of(letter: &str) -> Option<Kind> {
    match letter {
        "L" => Some(Kind::Lock),
        "S" => Some(Kind::Semaphore),
        "R" => Some(Kind::RwLock),
        _ => None,
    }
}

/// The letter of a hold kind.
pub(super) fn hold_letter(kind: HoldKind) -> &'static str {
    letter(kind.into())
}

/// The claim as the script writes it.
pub(super) fn claim_text(claim: Claim) -> &'static str {
    match claim {
        Claim::Permit { .. } => "permit",
        Claim::Read => "read",
        Claim::Write => "write",
    }
}

/// The kind and name of a release notice (`KIND US NAME`).
pub(super) fn notice(message: &str) -> Option<(Kind, Resource)> {
    let (letter, name) = message.split_once(US)?;
    Some((kind_of(letter)?, Resource::new(name).ok()?))
}
