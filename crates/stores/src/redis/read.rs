//! What the nodes keep, read from a majority: the lease or holds of a name, pages of names,
//! and the judged calls (release, renew), each settled as soon as no further answer could
//! change it.

use std::collections::BTreeMap;

use fencelock_core::page::page_of;
use fencelock_core::{
    FencingToken, Hold, HoldKind, ListQuery, Meta, Owner, Refusal, Resource, Timestamp, Ttl,
};

use super::RedisStore;
use super::error::{RedisError, Result};
use super::fanout::Answers;
use super::quorum::{agreed, most_common};
use super::reply::{Arg, Record, Reply, hold_letter, owner_args};

/// What a reply holds of leases, permits and holds, for deciding when reads are settled.
pub(super) trait Copies {
    /// Every record.
    fn copies(&self) -> Vec<&Record>;
}

impl Copies for Option<Record> {
    fn copies(&self) -> Vec<&Record> {
        self.iter().collect()
    }
}

impl Copies for Vec<Record> {
    fn copies(&self) -> Vec<&Record> {
        self.iter().collect()
    }
}

impl Copies for Vec<(Resource, Vec<Record>)> {
    fn copies(&self) -> Vec<&Record> {
        self.iter().flat_map(|(_, records)| records).collect()
    }
}

/// Whether the answers so far settle a read: a majority answered, and every copy seen (a
/// lease as every node shows it: a renewal that reached some nodes first is another copy) is
/// either kept by a majority already or could not be with every node still asked; or too
/// few nodes are left for a majority.
fn settled<T: Copies + Send + 'static>(answers: &Answers<T>, quorum: usize) -> bool {
    let pending = answers.pending();
    if answers.answered() + pending < quorum {
        return true;
    }
    if answers.answered() < quorum {
        return false;
    }
    let mut copies: Vec<(&Record, usize)> = Vec::new();
    for r in answers.answers().flat_map(|(_, answer)| answer.copies()) {
        match copies.iter_mut().find(|(c, _)| c.same_lease(r)) {
            Some((_, count)) => *count += 1,
            None => copies.push((r, 1)),
        }
    }
    copies
        .iter()
        .all(|(_, count)| *count >= quorum || count + pending < quorum)
}

fn read_record(mut reply: Reply) -> Result<Option<Record>> {
    reply.record()
}

fn read_records(mut reply: Reply) -> Result<Vec<Record>> {
    reply.records()
}

/// A page of `list`: NAME RECORD per name.
fn read_lock_page(mut reply: Reply) -> Result<Vec<(Resource, Vec<Record>)>> {
    let mut page = Vec::new();
    while !reply.is_empty() {
        let name = reply.text()?;
        page.push((resource(reply.node(), &name)?, vec![reply.some_record()?]));
    }
    Ok(page)
}

/// A page of `list_holds`: NAME COUNT RECORD... per name.
fn read_hold_page(mut reply: Reply) -> Result<Vec<(Resource, Vec<Record>)>> {
    let mut page = Vec::new();
    while !reply.is_empty() {
        let name = reply.text()?;
        let name = resource(reply.node(), &name)?;
        let count = reply.number()?;
        let holds = (0..count)
            .map(|_| reply.some_record())
            .collect::<Result<Vec<_>>>()?;
        page.push((name, holds));
    }
    Ok(page)
}

/// What one node did with a release or renewal.
#[derive(Debug)]
pub(super) enum Judged {
    Done { record: Record, now: u64 },
    Refused(Refusal),
}

fn read_judged(mut reply: Reply) -> Result<Judged> {
    let now = reply.now;
    Ok(match reply.text()?.as_str() {
        "released" | "renewed" => Judged::Done {
            record: reply.some_record()?,
            now,
        },
        "notfound" => Judged::Refused(Refusal::NotFound),
        "forbidden" => Judged::Refused(Refusal::Forbidden),
        "conflict" => Judged::Refused(Refusal::Conflict),
        other => {
            return Err(RedisError::odd(
                reply.node(),
                "judge",
                format!("status {other:?}"),
            ));
        }
    })
}

/// The name a node's key holds.
pub(super) fn resource(node: &str, name: &str) -> Result<Resource> {
    Resource::new(name).map_err(|e| RedisError::odd(node, "read", format!("a key names {name:?}: {e}")))
}

impl RedisStore {
    /// `op` with `args` on the nodes, read with `read`; the answers of a majority, once no
    /// further answer could change which records a majority keeps.
    async fn read<T: Copies + Send + 'static>(
        &self,
        doing: &'static str,
        args: Vec<Arg>,
        read: fn(Reply) -> Result<T>,
    ) -> Result<Vec<T>> {
        let quorum = self.nodes.quorum;
        self.nodes
            .majority((doing, args), read, |answers| settled(answers, quorum))
            .await
    }

    /// The live lease of `name` that a majority keeps alike, if any.
    pub(super) async fn lease_of(&self, name: &Resource) -> Result<Option<fencelock_core::Lease>> {
        let records: Vec<Record> = self
            .read("get", vec![Arg::text(name.as_str())], read_record)
            .await?
            .into_iter()
            .flatten()
            .collect();
        agreed(&records, self.nodes.quorum)
            .first()
            .map(|r| r.lease(name))
            .transpose()
    }

    /// The live holds of `kind` on `name` that a majority keeps alike.
    pub(super) async fn holds_of(&self, kind: HoldKind, name: &Resource) -> Result<Vec<Hold>> {
        let args = vec![Arg::text(hold_letter(kind)), Arg::text(name.as_str())];
        let records: Vec<Record> = self
            .read("holds", args, read_records)
            .await?
            .into_iter()
            .flatten()
            .collect();
        agreed(&records, self.nodes.quorum)
            .iter()
            .map(|r| r.hold(name))
            .collect()
    }

    /// A page of names under `query` with the records a majority keeps of each: of locks
    /// (`kind` `None`) or of holds of `kind`; and where the next page starts.
    pub(super) async fn page(
        &self,
        kind: Option<HoldKind>,
        query: &ListQuery,
    ) -> Result<(Vec<(Resource, Vec<Record>)>, Option<Resource>)> {
        let (min, max) = bounds(query);
        let mut args = Vec::new();
        args.extend(kind.map(|kind| Arg::text(hold_letter(kind))));
        args.extend([
            Arg::Bytes(min),
            Arg::Bytes(max),
            Arg::Number(u64::try_from(query.limit + 1).unwrap_or(u64::MAX)),
        ]);
        let (op, read) = match kind {
            None => ("list", read_lock_page as fn(Reply) -> Result<_>),
            Some(_) => ("list_holds", read_hold_page as fn(Reply) -> Result<_>),
        };
        let pages = self.read(op, args, read).await?;
        let (names, horizon) = merge(pages, query.limit, self.nodes.quorum);
        // Where the next page starts: after the last name kept if more followed, or after
        // `horizon` (the last name read on every node) if a node had more.
        let (names, next) = page_of(names, query.limit, |(name, _)| name);
        Ok((names, next.or(horizon)))
    }

    /// A release (`ttl` none) or renewal (`op`) of `owner`'s lease or hold named by `head`
    /// (the name, or the kind and the name), with `token` if given (and `meta` to replace, for a
    /// renewal), on every node: the record
    /// a majority released or renewed, with when that was done, or the refusal most nodes gave.
    pub(super) async fn judged(
        &self,
        op: &'static str,
        head: Vec<Arg>,
        owner: &Owner,
        ttl: Option<Ttl>,
        token: Option<FencingToken>,
        meta: Option<&Meta>,
    ) -> Result<Result<(Record, Timestamp), Refusal>> {
        let mut args = head;
        args.extend(owner_args(owner));
        args.extend(ttl.map(|ttl| Arg::Number(ttl.as_millis())));
        args.push(Arg::token(token));
        if ttl.is_some() {
            args.extend(self.shown(self.nodes.clock.now()));
            args.push(Arg::meta(meta));
        }
        let quorum = self.nodes.quorum;
        // Settled once a majority did it, or refused it for one same reason: nodes that a
        // change reached late may still refuse otherwise meanwhile.
        let settled = |answers: &Answers<Judged>| {
            let mut counts = [0_usize; 4];
            for (_, judged) in answers.answers() {
                counts[match judged {
                    Judged::Done { .. } => 0,
                    Judged::Refused(Refusal::NotFound) => 1,
                    Judged::Refused(Refusal::Forbidden) => 2,
                    Judged::Refused(Refusal::Conflict) => 3,
                }] += 1;
            }
            counts.iter().any(|c| *c >= quorum)
        };
        let (mut done, mut refusals) = (Vec::new(), Vec::new());
        for judged in self.nodes.majority((op, args), read_judged, settled).await? {
            match judged {
                Judged::Done { record, now } => done.push((record, now)),
                Judged::Refused(refusal) => refusals.push(refusal),
            }
        }
        if done.len() >= quorum {
            let (record, now) = done.swap_remove(0);
            // On one node, its own time; under Redlock, the server's (as for the lease).
            let at = if self.redlock() {
                self.nodes.clock.now()
            } else {
                Timestamp::from_millis(now)
            };
            return Ok(Ok((record, at)));
        }
        Ok(Err(most_common(&refusals).unwrap_or(Refusal::NotFound)))
    }
}

/// The lex bounds (as ZRANGEBYLEX takes them) of the names a page of `query` may hold.
fn bounds(query: &ListQuery) -> (Vec<u8>, Vec<u8>) {
    let prefix = query.prefix.as_bytes();
    let min = match &query.after {
        Some(after) if after.as_str().as_bytes() >= prefix => [b"(", after.as_str().as_bytes()].concat(),
        _ => [b"[", prefix].concat(),
    };
    // No name holds byte 255 (it is not in UTF-8), so every name with the prefix sorts
    // before the prefix followed by it.
    let max = if prefix.is_empty() {
        b"+".to_vec()
    } else {
        [b"(", prefix, &[0xff]].concat()
    };
    (min, max)
}

/// The names that a majority of `pages` (one per node, each of at most `limit + 1` names in
/// byte order, with its records) agree on, with the records they agree on; and, where a
/// node's page was cut, the last name up to which every node was read.
fn merge(
    pages: Vec<Vec<(Resource, Vec<Record>)>>,
    limit: usize,
    quorum: usize,
) -> (Vec<(Resource, Vec<Record>)>, Option<Resource>) {
    let horizon = pages
        .iter()
        .filter(|page| page.len() > limit)
        .filter_map(|page| page.last().map(|(name, _)| name.clone()))
        .min();
    let mut names: BTreeMap<Resource, Vec<Record>> = BTreeMap::new();
    for (name, records) in pages.into_iter().flatten() {
        if horizon.as_ref().is_none_or(|h| name <= *h) {
            names.entry(name).or_default().extend(records);
        }
    }
    let agreed = names
        .into_iter()
        .map(|(name, records)| {
            let records = agreed(&records, quorum);
            (name, records)
        })
        .filter(|(_, records)| !records.is_empty())
        .collect();
    (agreed, horizon)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_bounds_cover_the_prefix_after_the_cursor() {
        let query = |prefix: &str, after: Option<&str>| ListQuery {
            prefix: prefix.into(),
            after: after.map(|a| Resource::new(a).unwrap()),
            limit: 10,
        };
        assert_eq!(bounds(&query("", None)), (b"[".to_vec(), b"+".to_vec()));
        assert_eq!(
            bounds(&query("job:", Some("job:7"))),
            (b"(job:7".to_vec(), b"(job:\xff".to_vec())
        );
        assert_eq!(
            bounds(&query("job:", Some("a"))),
            (b"[job:".to_vec(), b"(job:\xff".to_vec()),
            "a cursor before the prefix"
        );
    }
}
