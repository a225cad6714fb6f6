//! `fencelock bench`: a load generator — acquire/release cycles against a server or a store,
//! with progress on a terminal and latency percentiles at the end.
//!
//! Each client loops over: acquire one resource, release it with its token. With as many
//! resources as clients there is no contention and the figures are the store's (and server's)
//! cost per operation; with fewer, clients meet busy locks, which count as `held`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencelock_core::{AcquireOutcome, LockStore, Owner, ReleaseOutcome, Resource, Ttl};
use hdrhistogram::Histogram;
use serde_json::json;
use tokio::time::Instant;

use super::common::{Failure, Target, exit, finish, print_json, ttl};

/// Flags of `fencelock bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Concurrent clients.
    #[arg(long, env = "FENCELOCK_BENCH_CLIENTS", default_value_t = 16)]
    clients: usize,
    /// Distinct resources the clients share (default: one each, so no contention).
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
}

/// Runs the benchmark and prints its report; exit 0, or 3 if every call failed.
pub async fn run(args: Args) -> ExitCode {
    finish("bench", bench(args).await)
}

async fn bench(args: Args) -> Result<u8, Failure> {
    if args.clients == 0 || args.resources == Some(0) {
        return Err(Failure::bad_input("--clients and --resources must be at least 1"));
    }
    let client = args.target.connect().await?;
    let load = Load {
        clients: args.clients,
        resources: args.resources.unwrap_or(args.clients),
        duration: args.duration,
        ttl: ttl(args.ttl)?,
        prefix: format!(
            "bench/{}/{}/",
            std::process::id(),
            fencelock_core::Timestamp::now_wall().as_millis()
        ),
    };
    let target = args
        .target
        .store
        .as_deref()
        .unwrap_or(&args.target.server)
        .to_owned();
    let report = run_load(client.store().clone(), &load).await;
    if args.json {
        print_json(&report.to_json(&target, &load));
    } else {
        println!("{}", report.to_text(&target, &load));
    }
    if report.cycles == 0 && report.errors > 0 {
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
    /// Distinct resources the clients share out (clients % resources).
    pub resources: usize,
    /// How long to run.
    pub duration: Duration,
    /// The TTL of each lease.
    pub ttl: Ttl,
    /// A prefix for resource names, so runs do not meet each other's leases.
    pub prefix: String,
}

/// What a run measured.
#[derive(Debug)]
pub struct Report {
    /// Acquire/release cycles completed.
    pub cycles: u64,
    /// Acquires answered "held by another owner".
    pub held: u64,
    /// Calls that failed (store unavailable, refused release).
    pub errors: u64,
    /// How long the run took.
    pub elapsed: Duration,
    /// Acquire latency, in microseconds.
    pub acquire: Histogram<u64>,
    /// Release latency, in microseconds.
    pub release: Histogram<u64>,
}

#[derive(Debug, Default)]
struct Counts {
    cycles: AtomicU64,
    held: AtomicU64,
    errors: AtomicU64,
}

/// Runs `load` against `store` and measures it. Stops by itself after `load.duration`.
pub async fn run_load(store: Arc<dyn LockStore>, load: &Load) -> Report {
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let deadline = started + load.duration;
    let progress = progress(load.duration, counts.clone());
    let workers: Vec<_> = (0..load.clients)
        .map(|client| {
            let resource = Resource::new(format!("{}{}", load.prefix, client % load.resources.max(1)));
            let owner = Owner::new(&format!("bench-{client}"));
            let (store, counts, ttl) = (store.clone(), counts.clone(), load.ttl);
            tokio::spawn(async move {
                match (resource, owner) {
                    (Ok(resource), Ok(owner)) => {
                        cycle(&*store, &resource, &owner, ttl, deadline, &counts).await
                    }
                    _ => (histogram(), histogram()),
                }
            })
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
    if let Some(progress) = progress {
        progress.abort();
    }
    Report {
        cycles: counts.cycles.load(Ordering::Relaxed),
        held: counts.held.load(Ordering::Relaxed),
        errors: counts.errors.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        acquire,
        release,
    }
}

/// One client's loop: acquire, release with the token, until the deadline.
async fn cycle(
    store: &dyn LockStore,
    resource: &Resource,
    owner: &Owner,
    ttl: Ttl,
    deadline: Instant,
    counts: &Counts,
) -> (Histogram<u64>, Histogram<u64>) {
    let (mut acquire, mut release) = (histogram(), histogram());
    while Instant::now() < deadline {
        let asked = Instant::now();
        let token = match store.acquire(resource, owner, ttl).await {
            Ok(AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease)) => lease.token,
            Ok(AcquireOutcome::Held { .. }) => {
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
        let asked = Instant::now();
        match store.release(resource, owner, Some(token)).await {
            Ok(ReleaseOutcome::Released(_)) => {
                record(&mut release, asked.elapsed());
                counts.cycles.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                counts.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    (acquire, release)
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 60 s at 3 significant figures: the bounds are valid, so this cannot fail.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn record(histogram: &mut Histogram<u64>, took: Duration) {
    histogram.saturating_record(u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1));
}

/// A progress bar on a terminal (standard error), updated a few times a second.
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
    /// Completed cycles per second.
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
            "held": self.held,
            "errors": self.errors,
            "acquire_ms": percentiles(&self.acquire),
            "release_ms": percentiles(&self.release),
        })
    }

    /// The report for people.
    pub fn to_text(&self, target: &str, load: &Load) -> String {
        let line = |name: &str, h: &Histogram<u64>| {
            let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            format!(
                "{name:<8} p50 {:>8.3} ms   p90 {:>8.3} ms   p99 {:>8.3} ms   max {:>8.3} ms",
                ms(0.5),
                ms(0.9),
                ms(0.99),
                h.max() as f64 / 1000.0
            )
        };
        format!(
            "target   {target}\nload     {} clients on {} resources for {:.1} s\n\
             cycles   {} ({:.0} acquire+release cycles/s), held {}, errors {}\n{}\n{}",
            load.clients,
            load.resources,
            self.elapsed.as_secs_f64(),
            self.cycles,
            self.rate(),
            self.held,
            self.errors,
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
        "max": ms(h.max()),
        "count": h.len(),
    })
}
