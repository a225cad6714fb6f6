//! `fencelock bench`: a load generator — try-acquire/release cycles against a fencelock server
//! or store, or against a peer's classic lock (Redis, etcd, PostgreSQL), with progress on a
//! terminal and latency percentiles at the end.
//!
//! Every target runs the same workload, through the same loop ([`run_load`]), so that one
//! measuring client compares everyone. A cycle is: try-acquire a resource chosen at random
//! among N (no waiting); if granted, release it with its token. Each client keeps one
//! connection of its own for the whole run (its [`Session`]).
//!
//! # Layout
//!
//! - this module: the flags, the loop, the counts and the report;
//! - `own`: fencelock's own targets (`--server`, `--store`);
//! - `peers`: `--target redis://…`, `etcd://…`, `postgres://…`.

mod lean;
mod own;
mod peers;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::Claim;
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::time::Instant;

use super::common::{Claimed, Failure, Target, exit, finish, print_json, ttl};

/// Flags of `fencelock bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Measure a peer's classic lock instead of fencelock: redis://HOST:PORT (SET NX PX and a
    /// Lua compare-and-delete), etcd://HOST:PORT (a lease and a put-if-absent txn; needs the
    /// `etcd` build feature) or postgres://… (an upsert on a lock table). Wins over
    /// --server and --store.
    #[arg(long = "target", env = "FENCELOCK_BENCH_TARGET")]
    peer: Option<String>,
    /// Concurrent clients, each with a connection of its own.
    #[arg(long, env = "FENCELOCK_BENCH_CLIENTS", default_value_t = 16)]
    clients: usize,
    /// Distinct resources the clients pick from at random (default: as many as clients).
    #[arg(long, env = "FENCELOCK_BENCH_RESOURCES")]
    resources: Option<usize>,
    /// How long to run, e.g. 10s.
    #[arg(long, env = "FENCELOCK_BENCH_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// The TTL of each lease.
    #[arg(long, env = "FENCELOCK_TTL", default_value = "30s", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// Print the report as JSON.
    #[arg(long, env = "FENCELOCK_JSON", value_parser = clap::builder::BoolishValueParser::new())]
    json: bool,
    /// With `--limit N` or `--mode read|write`, each cycle takes a permit of a semaphore or a
    /// hold of a read-write lock instead of a lock (fencelock's own targets only).
    #[command(flatten)]
    claimed: Claimed,
}

/// Runs the benchmark and prints its report; exit 0, or 3 if every call failed.
pub async fn run(args: Args) -> ExitCode {
    finish("bench", bench(args).await)
}

async fn bench(args: Args) -> Result<u8, Failure> {
    if args.clients == 0 || args.resources == Some(0) {
        return Err(Failure::bad_input("--clients and --resources must be at least 1"));
    }
    let claim = args.claimed.claim();
    let load = Load {
        room: match claim {
            None | Some(Claim::Write) => 1,
            Some(Claim::Permit { limit }) => limit,
            Some(Claim::Read) => u32::MAX,
        },
        clients: args.clients,
        resources: args.resources.unwrap_or(args.clients),
        duration: args.duration,
        ttl: ttl(args.ttl)?.as_duration(),
        prefix: format!(
            "bench/{}/{}/",
            std::process::id(),
            fencelock_core::Timestamp::now_wall().as_millis()
        ),
    };
    let (target, contender): (String, Box<dyn Contender>) = match &args.peer {
        Some(_) if claim.is_some() => {
            return Err(Failure::bad_input(
                "--limit and --mode measure fencelock's own semaphores and read-write locks; a --target peer has only locks",
            ));
        }
        Some(address) => (address.clone(), peers::open(address, &load).await?),
        None => {
            let address = args.target.store.as_deref().unwrap_or(&args.target.server);
            (address.to_owned(), own::open(&args.target, &load, claim).await?)
        }
    };
    let report = run_load(&*contender, &load).await?;
    if args.json {
        print_json(&report.to_json(&target, &load));
    } else {
        println!("{}", report.to_text(&target, &load));
    }
    if report.granted + report.held == 0 && report.errors > 0 {
        return Err(Failure::new(
            exit::UNREACHABLE,
            format!("every call to {target} failed"),
        ));
    }
    Ok(exit::OK)
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Load {
    /// Concurrent clients.
    pub clients: usize,
    /// Distinct resources the clients pick from.
    pub resources: usize,
    /// How long to run.
    pub duration: Duration,
    /// The TTL of each lease.
    pub ttl: Duration,
    /// A prefix for resource names, so runs do not meet each other's leases.
    pub prefix: String,
    /// How many clients may hold one resource at once: 1 for a lock or a write hold, the
    /// limit for a semaphore's permits, any number for read holds.
    pub room: u32,
}

impl Load {
    /// The name of resource `i`, the same for every target.
    pub fn name(&self, i: usize) -> String {
        format!("{}{i}", self.prefix)
    }
}

/// A target of the benchmark: opens one session per client.
#[async_trait]
pub trait Contender: Send + Sync {
    /// Opens client `client`'s session, with a connection of its own.
    async fn session(&self, client: usize) -> Result<Box<dyn Session>, Failure>;
}

/// One client's connection to a target, and its way of taking a lock.
#[async_trait]
pub trait Session: Send {
    /// Tries once (no waiting) to take resource `resource` (an index below
    /// [`Load::resources`]): its fencing token if granted, `None` if another owner holds it.
    async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>>;
    /// Releases resource `resource` if `token` still holds it; `false` if it did not.
    async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool>;
}

/// What a run measured. Every cycle is one acquire: `granted + held + errors == cycles`, and
/// every granted lease is released once: `releases + release_errors == granted`.
#[derive(Debug)]
pub struct Report {
    /// Acquire attempts (each with a release if it was granted).
    pub cycles: u64,
    /// Acquires granted.
    pub granted: u64,
    /// Acquires answered "held by another owner".
    pub held: u64,
    /// Acquires that failed (target unavailable).
    pub errors: u64,
    /// Releases that released.
    pub releases: u64,
    /// Releases that failed or found the lease gone.
    pub release_errors: u64,
    /// Grants of a resource that as many other clients of this run as it has room for held at
    /// that moment, by our own books: a lock that let two holders in, a semaphore one more
    /// than its limit. Zero on a correct target.
    pub overlaps: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// Acquire latency (granted or held), in microseconds.
    pub acquire: Histogram<u64>,
    /// Release latency, in microseconds.
    pub release: Histogram<u64>,
}

#[derive(Debug, Default)]
struct Counts {
    cycles: AtomicU64,
    granted: AtomicU64,
    held: AtomicU64,
    errors: AtomicU64,
    releases: AtomicU64,
    release_errors: AtomicU64,
    overlaps: AtomicU64,
}

/// Opens every client's session, then runs `load` against them until `load.duration` is
/// over. Connections are made before the clock starts.
pub async fn run_load(contender: &dyn Contender, load: &Load) -> Result<Report, Failure> {
    let mut sessions = Vec::with_capacity(load.clients);
    for client in 0..load.clients {
        sessions.push(contender.session(client).await?);
    }
    let counts = Arc::new(Counts::default());
    let holders: Arc<Vec<AtomicU32>> = Arc::new((0..load.resources).map(|_| AtomicU32::new(0)).collect());
    let started = Instant::now();
    let deadline = started + load.duration;
    let progress = progress(load.duration, counts.clone());
    let workers: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(client, session)| {
            let (counts, holders) = (counts.clone(), holders.clone());
            let room = load.room;
            tokio::spawn(async move { cycle(session, client, (&holders, room), deadline, &counts).await })
        })
        .collect();
    let mut acquire = histogram();
    let mut release = histogram();
    for worker in workers {
        if let Ok((a, r)) = worker.await {
            // Same bounds on every histogram: adding cannot fail.
            let _ = acquire.add(a);
            let _ = release.add(r);
        }
    }
    let elapsed = started.elapsed();
    if let Some(progress) = progress {
        progress.abort();
    }
    let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Ok(Report {
        cycles: count(&counts.cycles),
        granted: count(&counts.granted),
        held: count(&counts.held),
        errors: count(&counts.errors),
        releases: count(&counts.releases),
        release_errors: count(&counts.release_errors),
        overlaps: count(&counts.overlaps),
        elapsed,
        acquire,
        release,
    })
}

/// One client's loop: try-acquire a random resource, release it with its token if granted,
/// until the deadline.
async fn cycle(
    mut session: Box<dyn Session>,
    client: usize,
    (holders, room): (&[AtomicU32], u32),
    deadline: Instant,
    counts: &Counts,
) -> (Histogram<u64>, Histogram<u64>) {
    let (mut acquire, mut release) = (histogram(), histogram());
    let mut random = Random::new(client);
    while Instant::now() < deadline {
        let resource = random.below(holders.len());
        counts.cycles.fetch_add(1, Ordering::Relaxed);
        let asked = Instant::now();
        let token = match session.try_acquire(resource).await {
            Ok(Some(token)) => token,
            Ok(None) => {
                record(&mut acquire, asked.elapsed());
                counts.held.fetch_add(1, Ordering::Relaxed);
                // Let the holder run before asking again.
                tokio::task::yield_now().await;
                continue;
            }
            Err(_) => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        };
        record(&mut acquire, asked.elapsed());
        counts.granted.fetch_add(1, Ordering::Relaxed);
        if holders[resource].fetch_add(1, Ordering::AcqRel) >= room {
            counts.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        // Cleared before the release is sent: once the target has released, the next grant
        // may come at once, and must not find our mark.
        holders[resource].fetch_sub(1, Ordering::Release);
        let asked = Instant::now();
        match session.release(resource, token).await {
            Ok(true) => {
                record(&mut release, asked.elapsed());
                counts.releases.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) | Err(_) => {
                counts.release_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    (acquire, release)
}

/// A small xorshift generator: which resource to try next, with no dependency and no lock
/// shared between clients. Seeded by the client's number, so runs are repeatable.
struct Random(u64);

impl Random {
    fn new(client: usize) -> Self {
        Self((client as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % n as u64) as usize
    }
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 60 s at 3 significant figures: the bounds are valid, so this cannot fail.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn record(histogram: &mut Histogram<u64>, took: Duration) {
    histogram.saturating_record(u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1));
}

/// A progress bar on a terminal (standard error), updated a few times a second; none when
/// standard error is not a terminal (a script reading `--json`).
fn progress(duration: Duration, counts: Arc<Counts>) -> Option<tokio::task::JoinHandle<()>> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(duration.as_millis() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {elapsed}/{duration} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let started = Instant::now();
    Some(tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(200));
        loop {
            every.tick().await;
            let elapsed = started.elapsed();
            let cycles = counts.cycles.load(Ordering::Relaxed);
            let rate = cycles as f64 / elapsed.as_secs_f64().max(0.001);
            bar.set_position(elapsed.as_millis() as u64);
            bar.set_message(format!("{cycles} cycles, {rate:.0}/s"));
            if elapsed >= duration {
                bar.finish_and_clear();
                return;
            }
        }
    }))
}

impl Report {
    /// Cycles (acquire attempts, each with its release if granted) per second.
    pub fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64().max(0.001)
    }

    /// The report as JSON (latencies in milliseconds).
    pub fn to_json(&self, target: &str, load: &Load) -> serde_json::Value {
        json!({
            "target": target,
            "clients": load.clients,
            "resources": load.resources,
            "seconds": self.elapsed.as_secs_f64(),
            "cycles": self.cycles,
            "cycles_per_second": self.rate(),
            "granted": self.granted,
            "held": self.held,
            "errors": self.errors,
            "releases": self.releases,
            "release_errors": self.release_errors,
            "overlaps": self.overlaps,
            "acquire_ms": percentiles(&self.acquire),
            "release_ms": percentiles(&self.release),
        })
    }

    /// The report for people.
    pub fn to_text(&self, target: &str, load: &Load) -> String {
        let line = |name: &str, h: &Histogram<u64>| {
            let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            format!(
                "{name:<8} p50 {:>8.3} ms   p99 {:>8.3} ms   p99.9 {:>8.3} ms   max {:>8.3} ms",
                ms(0.5),
                ms(0.99),
                ms(0.999),
                h.max() as f64 / 1000.0
            )
        };
        format!(
            "target   {target}\nload     {} clients on {} resources for {:.1} s\n\
             cycles   {} ({:.0}/s): granted {}, held {}, errors {}; released {}, release errors {}\n{}\n{}",
            load.clients,
            load.resources,
            self.elapsed.as_secs_f64(),
            self.cycles,
            self.rate(),
            self.granted,
            self.held,
            self.errors,
            self.releases,
            self.release_errors,
            line("acquire", &self.acquire),
            line("release", &self.release),
        )
    }
}

fn percentiles(h: &Histogram<u64>) -> serde_json::Value {
    let ms = |v: u64| v as f64 / 1000.0;
    json!({
        "p50": ms(h.value_at_quantile(0.5)),
        "p90": ms(h.value_at_quantile(0.9)),
        "p99": ms(h.value_at_quantile(0.99)),
        "p999": ms(h.value_at_quantile(0.999)),
        "max": ms(h.max()),
        "count": h.len(),
    })
}
