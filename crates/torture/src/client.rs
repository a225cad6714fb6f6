//! One client process of a run (`fencelock-torture client`, started by the runner).
//!
//! A process of its own, so that the nemesis can stop it for real (SIGSTOP): its guards then
//! stop renewing, exactly as in a garbage-collection pause or a stopped VM, and it wakes up
//! believing what it believed before — which is when fencing matters.
//!
//! It takes locks, permits, read and write holds and all-or-none sets through the client
//! library, each with its guard, on a server of its choice per operation, with and without
//! waiting; keeps them a while (the guard renews them), writing to the fenced resource with
//! their tokens; then releases them or lets them expire. Every operation goes to standard
//! output as one JSON [`Entry`] when it is answered. Standard input steers it: the line
//! `liveness` ends the faults (it then makes [`LIVENESS_ACQUIRES`] acquires that must work,
//! and exits), and its end stops it at once.
//!
//! Renewals happen inside the guard, out of sight; the client notes one whenever the guard's
//! `held_until` moves on, which is when a renewal was confirmed: the renewal was sent at
//! `held_until - ttl` (the guard counts from the send) and answered by the moment it is
//! noticed.

use std::io::Write as _;
use std::path::PathBuf;
use std::pin::pin;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use fencelock_client::{
    AcquireError, AcquireOutcome, Claim, Client, Held, Hold, HoldKind, HttpOptions, HttpStore, Lease,
    LostReason, MultiGuard, Owner, ReleaseOutcome, Resource, Resources, StoreError, Ttl,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::watch;

use crate::clock::Anchor;
use crate::history::{Call, Entry, Kind, Mono, Op, Outcome, Phase, Seen};
use crate::resource::{ACCEPTED, WriteRequest};
use crate::rng::Rng;
use crate::workload::{self, Action, LIVENESS_ACQUIRES, Ttls};

/// How often a holder looks at its guard and its clock.
const TICK: Duration = Duration::from_millis(50);

/// A tick this much later than due means the process was stopped meanwhile (or starved of
/// the CPU for as long, which to a holder is the same).
const WOKE_AFTER: Duration = Duration::from_millis(300);

/// Longest a client waits after an answer it could not read (a server down, a store
/// unreachable) before it asks again: a client that asked at once would fill the history with
/// thousands of refused connections while a server restarts.
const BACKOFF: Duration = Duration::from_millis(200);

/// The stream of a client's random numbers: the seed's stream for client `id`.
const CLIENT_STREAMS: u64 = 1_000;

/// The settings of one client, as the runner passes them.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// The client's number in the run.
    #[arg(long)]
    pub id: u32,
    /// The run's seed.
    #[arg(long)]
    pub seed: u64,
    /// A server to talk to (`http://…`); give several.
    #[arg(long = "server", required = true)]
    pub servers: Vec<String>,
    /// The fenced resource's socket.
    #[arg(long)]
    pub resource: PathBuf,
    /// The TTLs to ask for, in milliseconds, comma-separated.
    #[arg(long)]
    pub ttls: String,
    /// How long a liveness acquire may take, in milliseconds.
    #[arg(long)]
    pub liveness_ms: u64,
    /// How long one request to a server may take, in milliseconds (waits come on top).
    #[arg(long, default_value_t = 3_000)]
    pub request_timeout_ms: u64,
}

/// What the runner has told the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    Faults,
    Liveness,
    Stop,
}

/// Runs one client until the runner stops it, or until its liveness acquires are done.
pub fn main(args: ClientArgs) -> anyhow::Result<()> {
    // One thread: the guards' renewals and the workload share it, as in a small service.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(run(args));
    // The read of standard input blocks a thread of its own, which a plain drop of the
    // runtime would wait for: until the runner closes the pipe.
    runtime.shutdown_background();
    result
}

async fn run(args: ClientArgs) -> anyhow::Result<()> {
    let options = HttpOptions {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        ..HttpOptions::default()
    };
    let servers = args
        .servers
        .iter()
        .map(|url| HttpStore::with_options(url, options.clone()).map(Client::from_http))
        .collect::<Result<Vec<_>, _>>()?;
    let ttls = Ttls::parse(&args.ttls).map_err(anyhow::Error::msg)?;
    let mut worker = Worker {
        id: args.id,
        rng: Rng::new(args.seed).stream(CLIENT_STREAMS + u64::from(args.id)),
        servers,
        fence: Fence::new(args.resource.clone()),
        ttls,
        recorder: Recorder::new(args.id),
        control: listen_to_runner(),
    };
    while worker.control() == Control::Faults {
        worker.step().await?;
    }
    if worker.control() == Control::Liveness {
        worker.recorder.phase = Phase::Liveness;
        worker.liveness(Duration::from_millis(args.liveness_ms)).await?;
    }
    Ok(())
}

/// Reads the runner's lines from standard input: `liveness`, and the end.
fn listen_to_runner() -> watch::Receiver<Control> {
    let (tell, control) = watch::channel(Control::Faults);
    tokio::spawn(async move {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.trim() == "liveness" {
                tell.send_replace(Control::Liveness);
            }
        }
        tell.send_replace(Control::Stop);
    });
    control
}

/// Writes the client's operations to standard output, numbering them.
#[derive(Debug)]
struct Recorder {
    client: u32,
    next: u64,
    phase: Phase,
    anchor: Anchor,
    /// Whether the last operation recorded had an unknown outcome.
    unknown: bool,
}

impl Recorder {
    fn new(client: u32) -> Self {
        Self {
            client,
            next: 0,
            phase: Phase::Faults,
            anchor: Anchor::now(),
            unknown: false,
        }
    }

    /// The next operation's number.
    fn number(&mut self) -> u64 {
        let number = self.next;
        self.next += 1;
        number
    }

    /// `instant` on the run's clock.
    fn mono(&self, instant: Instant) -> Mono {
        self.anchor.mono(instant)
    }

    /// Writes one operation, whole, as one line.
    fn record(&mut self, op: Op) {
        self.unknown = op.outcome == Outcome::Unknown;
        let line = match serde_json::to_string(&Entry::Op(op)) {
            Ok(line) => line,
            Err(error) => {
                eprintln!("client {}: cannot write an operation: {error}", self.client);
                return;
            }
        };
        let mut out = std::io::stdout().lock();
        // The runner reads until the end: if it has gone, nobody is left to tell.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    }
}

/// What was asked, shared by every operation on one grant.
#[derive(Debug, Clone)]
struct Ask {
    /// The acquire's number, whose owner this is.
    number: u64,
    kind: Kind,
    names: Vec<String>,
    owner: String,
    claim: Option<Claim>,
    ttl: Duration,
    wait: Duration,
    /// The server it went to (renewals and releases go through the guard, to the same one).
    server: Option<u32>,
}

impl Ask {
    /// An operation of `call` on this grant, with nothing seen yet.
    fn op(&self, recorder: &Recorder, number: u64, call: Call, span: (Mono, Mono), outcome: Outcome) -> Op {
        let (limit, mode) = match self.claim {
            Some(Claim::Permit { limit }) => (Some(limit), None),
            Some(Claim::Read) => (None, Some("read".to_owned())),
            Some(Claim::Write) => (None, Some("write".to_owned())),
            None => (None, None),
        };
        Op {
            client: recorder.client,
            op: number,
            phase: recorder.phase,
            call,
            kind: self.kind,
            names: self.names.clone(),
            owner: self.owner.clone(),
            server: self.server,
            limit,
            mode,
            ttl_ms: millis(self.ttl),
            wait_ms: millis(self.wait),
            token: None,
            invoked: span.0,
            completed: span.1,
            outcome,
            leases: Vec::new(),
            extended: false,
            held_until: None,
            detail: String::new(),
        }
    }

    /// Whether writes under this grant go to the fenced resource: an exclusive grant (a
    /// lock, a write hold), whose token orders the writers of its name.
    fn fenced(&self) -> bool {
        self.kind == Kind::Lock || self.claim == Some(Claim::Write)
    }

    fn ttl(&self) -> anyhow::Result<Ttl> {
        Ok(Ttl::from_millis(millis(self.ttl), Ttl::DEFAULT_MAX)?)
    }

    fn owner(&self) -> anyhow::Result<Owner> {
        Ok(self.owner.parse()?)
    }
}

/// What the guard of a lock or of a hold shows of what it holds.
trait Shown: Held {
    fn seen(&self) -> Seen;
}

impl Shown for Lease {
    fn seen(&self) -> Seen {
        seen(self, None)
    }
}

impl Shown for Hold {
    fn seen(&self) -> Seen {
        let claim = match self.claim {
            Claim::Permit { .. } => "permit",
            Claim::Read => "read",
            Claim::Write => "write",
        };
        seen(&self.lease, Some(claim.to_owned()))
    }
}

/// A lease as the history keeps it: `claim` is a hold's mode or `permit`, none for a lock.
pub(crate) fn seen(lease: &Lease, claim: Option<String>) -> Seen {
    Seen {
        name: lease.resource.as_str().to_owned(),
        owner: lease.owner.as_str().to_owned(),
        token: lease.token.0,
        acquired_at: lease.acquired_at.as_millis(),
        expires_at: lease.expires_at.as_millis(),
        claim,
    }
}

/// How a hold ends, as planned when it is granted.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// How long to keep it.
    keep: Duration,
    /// At the end: stop renewing and let it expire, rather than release it.
    let_expire: bool,
}

struct Worker {
    id: u32,
    rng: Rng,
    servers: Vec<Client>,
    fence: Fence,
    ttls: Ttls,
    recorder: Recorder,
    control: watch::Receiver<Control>,
}

impl Worker {
    fn control(&self) -> Control {
        *self.control.borrow()
    }

    /// One thing of the workload, to its end.
    async fn step(&mut self) -> anyhow::Result<()> {
        match workload::action(&mut self.rng) {
            Action::Lock => {
                let (name, _) = workload::pick_name(Kind::Lock, &mut self.rng);
                self.lock(vec![name]).await?;
            }
            Action::AllOrNone => {
                let names = workload::pick_locks(&mut self.rng);
                self.lock(names).await?;
            }
            Action::Permit => {
                let (name, i) = workload::pick_name(Kind::Semaphore, &mut self.rng);
                let limit = workload::semaphore_limit(i);
                self.hold(name, Claim::Permit { limit }).await?;
            }
            Action::Read => {
                let (name, _) = workload::pick_name(Kind::Rwlock, &mut self.rng);
                self.hold(name, Claim::Read).await?;
            }
            Action::Write => {
                let (name, _) = workload::pick_name(Kind::Rwlock, &mut self.rng);
                self.hold(name, Claim::Write).await?;
            }
            Action::Get => self.get().await?,
            Action::Idle => {
                let idle = self.rng.millis(Duration::ZERO, Duration::from_millis(200));
                tokio::time::sleep(idle).await;
            }
        }
        if self.recorder.unknown {
            let backoff = self.rng.millis(Duration::from_millis(20), BACKOFF);
            tokio::time::sleep(backoff).await;
        }
        Ok(())
    }

    /// A new grant's question: a TTL, a wait, an owner no other grant has.
    fn ask(&mut self, kind: Kind, names: Vec<String>, claim: Option<Claim>) -> Ask {
        let ttl = self.ttls.pick(&mut self.rng);
        let wait = workload::wait(ttl, &mut self.rng);
        let number = self.recorder.number();
        Ask {
            number,
            kind,
            names,
            owner: format!("c{}-{number}", self.id),
            claim,
            ttl,
            wait,
            server: None,
        }
    }

    /// A server for the next operation, at random; it is recorded in `ask`.
    fn server(&mut self, ask: &mut Ask) -> Client {
        let at = self.rng.below(self.servers.len() as u64);
        ask.server = u32::try_from(at).ok();
        self.servers[at as usize].clone()
    }

    fn plan(&mut self, ttl: Duration) -> Plan {
        Plan {
            keep: workload::hold(ttl, &mut self.rng),
            let_expire: self.rng.percent(25),
        }
    }

    /// A lock, or several all or none; kept a while if granted. Whether it was granted.
    async fn lock(&mut self, names: Vec<String>) -> anyhow::Result<bool> {
        let ask = self.ask(Kind::Lock, names, None);
        let plan = self.plan(ask.ttl);
        self.lock_asked(ask, plan).await
    }

    async fn lock_asked(&mut self, mut ask: Ask, plan: Plan) -> anyhow::Result<bool> {
        let client = self.server(&mut ask);
        let (ttl, owner) = (ask.ttl()?, ask.owner()?);
        let invoked = Mono::now();
        let granted = if let [name] = ask.names.as_slice() {
            let resource: Resource = name.parse()?;
            client
                .acquire(&resource, &owner, ttl, ask.wait)
                .await
                .map(MultiGuard::from)
        } else {
            let names = ask
                .names
                .iter()
                .map(|n| n.parse())
                .collect::<Result<Vec<Resource>, _>>()?;
            client
                .acquire_all(&Resources::new(names)?, &owner, ttl, ask.wait)
                .await
        };
        let guard = self.settle(&ask, invoked, granted);
        Ok(match guard {
            Some(guard) => {
                self.keep(guard, &ask, plan).await;
                true
            }
            None => false,
        })
    }

    /// A permit or a read or write hold; kept a while if granted.
    async fn hold(&mut self, name: String, claim: Claim) -> anyhow::Result<()> {
        let kind = match claim {
            Claim::Permit { .. } => Kind::Semaphore,
            Claim::Read | Claim::Write => Kind::Rwlock,
        };
        let mut ask = self.ask(kind, vec![name.clone()], Some(claim));
        let plan = self.plan(ask.ttl);
        let client = self.server(&mut ask);
        let (ttl, owner, resource) = (ask.ttl()?, ask.owner()?, name.parse::<Resource>()?);
        let invoked = Mono::now();
        let granted = client
            .acquire_claim(&resource, &owner, claim, ttl, None, ask.wait)
            .await;
        if let Some(guard) = self.settle(&ask, invoked, granted.map(MultiGuard::from)) {
            self.keep(guard, &ask, plan).await;
        }
        Ok(())
    }

    /// Records an acquire's answer; the guard, if it was granted.
    fn settle<T: Shown>(
        &mut self,
        ask: &Ask,
        invoked: Mono,
        answer: Result<MultiGuard<T>, AcquireError>,
    ) -> Option<MultiGuard<T>> {
        let span = (invoked, Mono::now());
        match answer {
            Ok(guard) => {
                let mut op = ask.op(&self.recorder, ask.number, Call::Acquire, span, Outcome::Ok);
                op.leases = guard.held().iter().map(Shown::seen).collect();
                op.held_until = Some(self.recorder.mono(guard.held_until()));
                self.recorder.record(op);
                Some(guard)
            }
            Err(error) => {
                let (outcome, leases) = refusal(&error);
                let mut op = ask.op(&self.recorder, ask.number, Call::Acquire, span, outcome);
                op.leases = leases;
                op.detail = error.to_string();
                self.recorder.record(op);
                None
            }
        }
    }

    /// Keeps what `guard` holds for the plan's time, writing to the fenced resource, then
    /// releases it or lets it expire; records every renewal the guard confirms, and the loss
    /// if the guard says it is lost.
    async fn keep<T: Shown>(&mut self, guard: MultiGuard<T>, ask: &Ask, plan: Plan) {
        let started = Instant::now();
        let mut lost = pin!(guard.lost());
        let mut confirmed = guard.held_until();
        let mut last_tick = Instant::now();
        let mut next_write = started + self.rng.millis(Duration::ZERO, ask.ttl / 3);
        let mut expiring = false;
        let reason = loop {
            tokio::select! {
                reason = &mut lost => break Some(reason),
                () = tokio::time::sleep(TICK) => {}
            }
            let now = Instant::now();
            let woke = now.duration_since(last_tick) > TICK + WOKE_AFTER;
            last_tick = now;
            self.note_renewal(&guard, ask, &mut confirmed);
            if ask.fenced() && (woke || (now >= next_write && guard.is_held())) {
                // After a pause, write at once, without asking the guard: the holder checked
                // before it was stopped, as any holder does, and the fencing token is all
                // that stands between this write and the next holder's data.
                self.write_all(&guard, ask).await;
                next_write = Instant::now() + self.rng.millis(Duration::from_millis(20), ask.ttl / 3);
            }
            if !expiring && now.duration_since(started) >= plan.keep {
                if !plan.let_expire {
                    break None;
                }
                // Stop renewing and carry on until the guard gives the lease up.
                guard.pause_renewal();
                expiring = true;
            }
        };
        if let Some(reason) = reason {
            self.note_loss(&guard, ask, &reason);
            if expiring {
                // Let it expire: dropping the guard would release it. Its renewal task has
                // ended with the loss, so forgetting it leaks only its bookkeeping.
                std::mem::forget(guard);
                return;
            }
        }
        self.release(guard, ask).await;
    }

    /// Records a renewal if the guard confirmed one since `confirmed`.
    fn note_renewal<T: Shown>(&mut self, guard: &MultiGuard<T>, ask: &Ask, confirmed: &mut Instant) {
        let until = guard.held_until();
        if until <= *confirmed {
            return;
        }
        *confirmed = until;
        let sent = until.checked_sub(ask.ttl).unwrap_or(until);
        let span = (self.recorder.mono(sent), Mono::now());
        for held in guard.held() {
            let number = self.recorder.number();
            let mut op = ask.op(&self.recorder, number, Call::Renew, span, Outcome::Ok);
            op.token = Some(held.lease().token.0);
            op.leases = vec![held.seen()];
            op.held_until = Some(self.recorder.mono(until));
            self.recorder.record(op);
        }
    }

    /// Records that the guard said its leases are lost, one operation per lease.
    fn note_loss<T: Shown>(&mut self, guard: &MultiGuard<T>, ask: &Ask, reason: &LostReason) {
        let now = Mono::now();
        for held in guard.held() {
            let number = self.recorder.number();
            let mut op = ask.op(&self.recorder, number, Call::Lost, (now, now), Outcome::Ok);
            op.names = vec![held.lease().resource.as_str().to_owned()];
            op.token = Some(held.lease().token.0);
            op.held_until = Some(self.recorder.mono(guard.held_until()));
            op.detail = reason.to_string();
            self.recorder.record(op);
        }
    }

    /// Releases every lease of the guard (each with its token), one operation per lease.
    async fn release<T: Shown>(&mut self, guard: MultiGuard<T>, ask: &Ask) {
        let held = guard.held();
        let invoked = Mono::now();
        let answer = guard.release().await;
        let span = (invoked, Mono::now());
        for (at, held) in held.iter().enumerate() {
            let (outcome, detail) = match &answer {
                Ok(outcomes) => match outcomes.get(at) {
                    Some(ReleaseOutcome::Released(_)) => (Outcome::Ok, String::new()),
                    Some(refused) => (Outcome::Refused, format!("{refused:?}")),
                    None => (Outcome::Unknown, "no answer for this lease".to_owned()),
                },
                // The first error of the releases, whichever lease it was about: each is
                // unknown.
                Err(error) => (Outcome::Unknown, error.to_string()),
            };
            let number = self.recorder.number();
            let mut op = ask.op(&self.recorder, number, Call::Release, span, outcome);
            op.names = vec![held.lease().resource.as_str().to_owned()];
            op.token = Some(held.lease().token.0);
            op.detail = detail;
            self.recorder.record(op);
        }
    }

    /// One write per lease of the guard to the fenced resource, with its token.
    async fn write_all<T: Shown>(&mut self, guard: &MultiGuard<T>, ask: &Ask) {
        for held in guard.held() {
            let request = WriteRequest {
                client: self.id,
                op: ask.number,
                name: held.lease().resource.as_str().to_owned(),
                token: held.lease().token.0,
            };
            if let Err(error) = self.fence.write(&request).await {
                eprintln!(
                    "client {}: the fenced resource did not answer: {error:#}",
                    self.id
                );
            }
        }
    }

    /// A read of who holds a name, of any kind.
    async fn get(&mut self) -> anyhow::Result<()> {
        let kind = *self
            .rng
            .pick(&[Kind::Lock, Kind::Semaphore, Kind::Rwlock])
            .unwrap_or(&Kind::Lock);
        let (name, _) = workload::pick_name(kind, &mut self.rng);
        let resource: Resource = name.parse()?;
        let number = self.recorder.number();
        let mut ask = Ask {
            number,
            kind,
            names: vec![name],
            owner: format!("c{}-{number}", self.id),
            claim: None,
            ttl: Duration::ZERO,
            wait: Duration::ZERO,
            server: None,
        };
        let client = self.server(&mut ask);
        let invoked = Mono::now();
        let answer: Result<Vec<Seen>, StoreError> = match kind {
            Kind::Lock => client
                .get(&resource)
                .await
                .map(|lease| lease.iter().map(Shown::seen).collect()),
            Kind::Semaphore | Kind::Rwlock => {
                let hold_kind = if kind == Kind::Semaphore {
                    HoldKind::Semaphore
                } else {
                    HoldKind::RwLock
                };
                let holds = client.holds(hold_kind, &resource).await;
                holds.map(|holds| holds.iter().map(Shown::seen).collect())
            }
        };
        let span = (invoked, Mono::now());
        let op = match answer {
            Ok(leases) => {
                let mut op = ask.op(&self.recorder, number, Call::Get, span, Outcome::Ok);
                op.leases = leases;
                op
            }
            Err(error) => {
                let mut op = ask.op(&self.recorder, number, Call::Get, span, Outcome::Unknown);
                op.detail = error.to_string();
                op
            }
        };
        self.recorder.record(op);
        Ok(())
    }

    /// After every fault has healed: a few locks, each of which must be granted within
    /// `bound`; each is asked again (a new owner) until it is, or the bound has passed.
    async fn liveness(&mut self, bound: Duration) -> anyhow::Result<()> {
        for _ in 0..LIVENESS_ACQUIRES {
            let (name, _) = workload::pick_name(Kind::Lock, &mut self.rng);
            let deadline = Instant::now() + bound;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let mut ask = self.ask(Kind::Lock, vec![name.clone()], None);
                ask.ttl = self.ttls.shortest();
                ask.wait = left;
                let plan = Plan {
                    keep: ask.ttl / 4,
                    let_expire: false,
                };
                if self.lock_asked(ask, plan).await? || Instant::now() >= deadline {
                    break;
                }
                if self.control() == Control::Stop {
                    return Ok(());
                }
                // Refused or unknown before the bound: the store may still be settling.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}

/// What an acquire that gave no guard tells: refused (with the holders in the way) or
/// unknown.
fn refusal(error: &AcquireError) -> (Outcome, Vec<Seen>) {
    match error {
        AcquireError::Busy { holder, .. } => (Outcome::Refused, vec![holder.seen()]),
        AcquireError::HoldBusy { busy, .. } => {
            (Outcome::Refused, busy.holders.iter().map(Shown::seen).collect())
        }
        AcquireError::Blocked { in_the_way } => {
            let holders = in_the_way.iter().filter_map(|outcome| match outcome {
                AcquireOutcome::Held { holder, .. } => Some(holder.seen()),
                _ => None,
            });
            (Outcome::Refused, holders.collect())
        }
        AcquireError::Delayed { .. } | AcquireError::LimitMismatch { .. } | AcquireError::Deadlock { .. } => {
            (Outcome::Refused, Vec::new())
        }
        // Granted, then refused by the store when the guard confirmed it: the client holds
        // nothing, and what was granted may have been taken back (all or none) or may run
        // out its TTL. The client cannot tell which: unknown.
        AcquireError::LostBeforeConfirmed { lease, .. } => (Outcome::Unknown, vec![lease.seen()]),
        AcquireError::Store(StoreError::Unavailable { .. } | StoreError::Corrupt(_)) => {
            (Outcome::Unknown, Vec::new())
        }
        // A request the server refused as it stands: nothing changed (and the runner asked
        // something it should not have: the detail says what).
        _ => (Outcome::Refused, Vec::new()),
    }
}

/// The client's connection to the fenced resource, made again after it breaks.
struct Fence {
    path: PathBuf,
    connection: Option<BufReader<UnixStream>>,
}

impl Fence {
    fn new(path: PathBuf) -> Self {
        Self {
            path,
            connection: None,
        }
    }

    /// Sends one write and reads the resource's verdict: whether it was accepted.
    async fn write(&mut self, request: &WriteRequest) -> anyhow::Result<bool> {
        let answer = self.exchange(request).await;
        if answer.is_err() {
            // A connection that failed half-way cannot be trusted with the next write.
            self.connection = None;
        }
        answer
    }

    async fn exchange(&mut self, request: &WriteRequest) -> anyhow::Result<bool> {
        let connection = match &mut self.connection {
            Some(connection) => connection,
            None => {
                let stream = UnixStream::connect(&self.path)
                    .await
                    .with_context(|| format!("connect to {}", self.path.display()))?;
                self.connection.insert(BufReader::new(stream))
            }
        };
        let mut line = serde_json::to_string(request)?;
        line.push('\n');
        connection.get_mut().write_all(line.as_bytes()).await?;
        let mut answer = String::new();
        if connection.read_line(&mut answer).await? == 0 {
            anyhow::bail!("the resource closed the connection");
        }
        Ok(answer.trim() == ACCEPTED)
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
