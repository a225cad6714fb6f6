//! `fencelock-torture run`: one seeded, time-bounded run of one store.
//!
//! 1. Start the store's throwaway servers (the testkit's), the `fencelock serve` processes
//!    on it, the fenced resource, a watcher of each server's event stream (connected before
//!    any client starts), and the client processes.
//! 2. For `--seconds`, let the clients work while the nemesis injects faults from the
//!    store's menu, each healed before the time is up.
//! 3. Once the store serves again, record `Healed` and tell every client to make its
//!    liveness acquires; wait for them to finish.
//! 4. The end drain: a marker through each server, and a wait until every watcher heard
//!    them ([`Watchers::drain`]); then stop the watchers.
//! 5. Write the history (the run's settings first, then every entry in time order) and
//!    judge it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use fencelock_testkit::spawn_tied;

use crate::fault::FaultKind;
use crate::history::{Call, Entry, Mono, Outcome, Phase, RunInfo};
use crate::nemesis::{Infrastructure, Tally, pause_clients};
use crate::resource::Resource;
use crate::rng::Rng;
use crate::sink::Sink;
use crate::target::{StoreKind, Target};
use crate::watcher::Watchers;
use crate::workload::LIVENESS_ACQUIRES;

/// Time a client has, past its liveness acquires' bound, to finish and exit.
const EXIT_GRACE: Duration = Duration::from_secs(30);

/// The settings of `fencelock-torture run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// The store to torture (`broken`: the control, which must fail).
    #[arg(long, value_enum)]
    pub store: StoreKind,
    /// How long the faults go on, in seconds (setting up and the liveness phase come on
    /// top).
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// The seed of every random choice (workload and nemesis); a random one if not given.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Client processes.
    #[arg(long, default_value_t = 6)]
    pub clients: u32,
    /// `fencelock serve` processes on the store (default 2; the embedded store has one).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Where to write the history (default: a file in the temporary folder, named after
    /// the store and the seed).
    #[arg(long)]
    pub history: Option<PathBuf>,
    /// The `fencelock` binary (default: the one beside this program).
    #[arg(long)]
    pub fencelock: Option<PathBuf>,
    /// The faults to inject, comma-separated (`pause-server,kill-node,…`), `default` (those
    /// the store's guarantee says it lives through) or `all` (also those it lives through
    /// with a stated caveat).
    #[arg(long, default_value = "default")]
    pub faults: String,
}

/// What a run found, besides the history the checker judges.
#[derive(Debug)]
pub struct Ran {
    /// Where the history is.
    pub history: PathBuf,
    /// What went wrong in the run itself (a client that did not finish, a fault not
    /// healed): the run is not to be trusted if any.
    pub problems: Vec<String>,
}

/// Runs it; prints the seed first and a summary at the end.
pub fn run(args: &RunArgs) -> anyhow::Result<Ran> {
    let seed = args.seed.unwrap_or_else(random_seed);
    let kind = args.store;
    let servers = match (kind.shared(), args.servers) {
        (false, Some(n)) if n != 1 => bail!("the {} store has one server (its file is its own)", kind.name()),
        (_, Some(n)) => n,
        (true, None) => 2,
        (false, None) => 1,
    };
    ensure!(
        servers >= 1 && args.clients >= 1 && args.seconds >= 1,
        "a run needs a server, a client and a second"
    );
    ensure!(
        kind != StoreKind::Broken || servers >= 2,
        "the broken control needs two servers to disagree"
    );
    let faults = menu(kind, &args.faults)?;
    let fencelock = fencelock_binary(args.fencelock.as_deref())?;
    let history_path = args.history.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("fencelock-torture-{}-{seed}.jsonl", kind.name()))
    });
    let fault_names: Vec<String> = faults.iter().map(|f| f.name().to_owned()).collect();
    println!(
        "torture: store {}, seed {seed}, {} s of faults ({}), {} clients, {servers} servers",
        kind.name(),
        args.seconds,
        fault_names.join(", "),
        args.clients
    );
    let info = RunInfo {
        store: kind.name().to_owned(),
        seed,
        seconds: args.seconds,
        clients: args.clients,
        servers,
        faults: fault_names,
    };

    let dir = tempfile::Builder::new().prefix("fencelock-torture-").tempdir()?;
    let sink = Sink::default();
    let ttls = kind.ttls();
    let stepped = faults.contains(&FaultKind::ClockStep);
    let mut target = Target::start(kind, servers as usize, &fencelock, dir.path(), stepped)?;
    let filled = target.fill()?;
    if filled > 0 {
        println!("torture: {filled} leases on other names, which each start of the server loads");
    }
    let resource = Resource::start(&dir.path().join("resource.sock"), sink.clone())?;
    let watchers = Watchers::start(&target.urls(), &sink)?;
    let liveness = crate::verdict::liveness_bound(kind);
    let mut clients = (0..args.clients)
        .map(|id| {
            ClientProcess::start(
                id,
                seed,
                &target.urls(),
                resource.path(),
                &ttls.to_arg(),
                liveness,
                dir.path(),
                &sink,
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    let rng = Rng::new(seed);
    let end = Instant::now() + Duration::from_secs(args.seconds);
    let pids: Vec<u32> = clients.iter().map(ClientProcess::pid).collect();
    let pausing = faults.contains(&FaultKind::PauseClient);
    let (client_sink, longest) = (sink.clone(), ttls.longest());
    let client_lane = std::thread::spawn(move || {
        if pausing {
            pause_clients(&pids, &rng, &client_sink, longest, end)
        } else {
            Tally::new()
        }
    });
    let infrastructure = Infrastructure::new(&mut target, &Rng::new(seed), sink.clone(), &faults, longest);
    let infra_tally = infrastructure.run(end);
    let mut tally = client_lane.join().unwrap_or_default();
    let mut problems = Vec::new();
    match infra_tally {
        Ok(infra) => tally.extend(infra),
        Err(error) => problems.push(format!("{error:#}")),
    }
    // Until the end of the faults, as promised: the clients work on.
    if let Some(left) = end.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
    if let Err(error) = target.wait_recovered() {
        problems.push(format!("after the faults: {error:#}"));
    }

    sink.push(Entry::Healed { at: Mono::now() });
    println!("torture: every fault healed; liveness phase (each client must acquire within {liveness:?})");
    for client in &mut clients {
        client.tell("liveness");
    }
    let deadline = Instant::now() + liveness * LIVENESS_ACQUIRES + EXIT_GRACE;
    for client in &mut clients {
        if let Some(problem) = client.finish(deadline) {
            problems.push(problem);
        }
    }
    // The markers are the operations of a client of their own, numbered after the run's.
    match watchers.drain(&target.urls(), args.clients, &sink) {
        Ok(late) => late.iter().for_each(|late| println!("torture: {late}")),
        Err(error) => problems.push(format!("the end drain: {error:#}")),
    }
    watchers.stop(&sink);
    drop(target);
    drop(resource);

    let entries = sink.take();
    problems.extend(unhealed(&entries));
    problems.extend(without_liveness(&entries, args.clients));
    write_history(&history_path, &info, entries.clone())?;
    print_summary(&entries, &tally);
    println!("torture: history: {}", history_path.display());
    for problem in &problems {
        println!("torture: PROBLEM: {problem}");
    }
    if !problems.is_empty() {
        println!("torture: logs kept in {}", dir.keep().display());
    }
    Ok(Ran {
        history: history_path,
        problems,
    })
}

/// A seed from the operating system's randomness (the time, if it has none).
fn random_seed() -> u64 {
    let mut bytes = [0_u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .is_ok()
    {
        // Small enough to type again.
        return u64::from_le_bytes(bytes) % 1_000_000_000;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(1, |d| u64::from(d.subsec_nanos()))
}

/// The faults `--faults` names for the store: every name must apply to it.
pub fn menu(kind: StoreKind, faults: &str) -> anyhow::Result<Vec<FaultKind>> {
    match faults.trim() {
        "default" => return Ok(kind.faults().to_vec()),
        "all" => {
            let mut all = kind.faults().to_vec();
            all.extend(kind.caveats().iter().map(|(fault, _)| *fault));
            return Ok(all);
        }
        "none" | "" => return Ok(Vec::new()),
        _ => {}
    }
    let mut chosen = Vec::new();
    for name in faults.split(',').map(str::trim) {
        let fault = FaultKind::parse(name).with_context(|| {
            let known: Vec<&str> = FaultKind::ALL.iter().map(|f| f.name()).collect();
            format!("no fault is called {name:?}: the faults are {}", known.join(", "))
        })?;
        ensure!(
            kind.applies(fault),
            "{name} does not apply to the {} store",
            kind.name()
        );
        if !chosen.contains(&fault) {
            chosen.push(fault);
        }
    }
    Ok(chosen)
}

/// The `fencelock` binary: as given, else beside this program (cargo builds both into one
/// target folder).
fn fencelock_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path.to_owned(),
        None => std::env::current_exe()?.with_file_name("fencelock"),
    };
    ensure!(
        path.is_file(),
        "no fencelock binary at {}: build it (`cargo build -p fencelock --features etcd,zookeeper`, beside \
         fencelock-torture) or name it with --fencelock",
        path.display()
    );
    Ok(path)
}

/// One client process, its operations read from its standard output into the sink.
struct ClientProcess {
    id: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    reader: Option<JoinHandle<()>>,
    log: PathBuf,
}

impl ClientProcess {
    #[allow(clippy::too_many_arguments)]
    fn start(
        id: u32,
        seed: u64,
        servers: &[String],
        resource: &Path,
        ttls: &str,
        liveness: Duration,
        dir: &Path,
        sink: &Sink,
    ) -> anyhow::Result<Self> {
        let log = dir.join(format!("client-{id}.log"));
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("client")
            .args(["--id", &id.to_string(), "--seed", &seed.to_string()])
            .arg("--resource")
            .arg(resource)
            .args(["--ttls", ttls, "--liveness-ms", &liveness.as_millis().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?);
        for server in servers {
            command.args(["--server", server]);
        }
        let mut child = spawn_tied(command).context("start a client process")?;
        let stdout = child.stdout.take().context("a client's standard output")?;
        let sink = sink.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                match serde_json::from_str::<Entry>(&line) {
                    Ok(entry) => sink.push(entry),
                    Err(error) => {
                        eprintln!("torture: client {id} wrote a line that is no entry ({error}): {line}")
                    }
                }
            }
        });
        Ok(Self {
            id,
            stdin: child.stdin.take(),
            child,
            reader: Some(reader),
            log,
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends the client one line.
    fn tell(&mut self, line: &str) {
        if let Some(stdin) = &mut self.stdin {
            // A client that has exited is reported by `finish`.
            let _ = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
        }
    }

    /// Waits until the client exits (killing it at `deadline`) and its last lines are read;
    /// what went wrong, if anything did.
    fn finish(&mut self, deadline: Instant) -> Option<String> {
        let mut problem = None;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                _ => break None,
            }
        };
        match status {
            Some(status) if status.success() => {}
            Some(status) => {
                problem = Some(format!(
                    "client {} exited with {status} (see {})",
                    self.id,
                    self.log.display()
                ))
            }
            None => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                problem = Some(format!(
                    "client {} did not finish its liveness acquires in time; killed",
                    self.id
                ));
            }
        }
        self.stdin = None;
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        problem
    }
}

/// Faults begun and never healed.
fn unhealed(entries: &[Entry]) -> Vec<String> {
    let mut open: BTreeMap<(String, String), i32> = BTreeMap::new();
    for entry in entries {
        if let Entry::Fault(fault) = entry {
            let count = open
                .entry((fault.kind.clone(), fault.target.clone()))
                .or_default();
            *count += if fault.phase == "begin" { 1 } else { -1 };
        }
    }
    open.into_iter()
        .filter(|(_, count)| *count != 0)
        .map(|((kind, target), _)| format!("{kind} of {target} was not healed"))
        .collect()
}

/// Clients that were not granted every liveness acquire.
fn without_liveness(entries: &[Entry], clients: u32) -> Vec<String> {
    let mut granted: BTreeMap<u32, u32> = BTreeMap::new();
    for entry in entries {
        if let Entry::Op(op) = entry
            && op.phase == Phase::Liveness
            && op.call == Call::Acquire
            && op.outcome == Outcome::Ok
        {
            *granted.entry(op.client).or_default() += 1;
        }
    }
    (0..clients)
        .filter(|client| granted.get(client).copied().unwrap_or(0) < LIVENESS_ACQUIRES)
        .map(|client| format!("client {client} was not granted its {LIVENESS_ACQUIRES} liveness acquires"))
        .collect()
}

/// Writes the history: the run's settings, then every entry in time order, one JSON line
/// each.
fn write_history(path: &Path, info: &RunInfo, mut entries: Vec<Entry>) -> anyhow::Result<()> {
    entries.sort_by_key(Entry::time);
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("create {}", path.display()))?,
    );
    for entry in std::iter::once(Entry::Run(info.clone())).chain(entries) {
        serde_json::to_writer(&mut out, &entry)?;
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

/// What the run did, in a few lines.
fn print_summary(entries: &[Entry], tally: &Tally) {
    let faults: Vec<String> = tally.iter().map(|(kind, n)| format!("{kind} ×{n}")).collect();
    println!(
        "torture: faults injected: {}",
        if faults.is_empty() {
            "none".to_owned()
        } else {
            faults.join(", ")
        }
    );
    let mut calls: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
    let (mut writes, mut refused) = (0, 0);
    for entry in entries {
        match entry {
            Entry::Op(op) => {
                let call = format!("{:?}", op.call).to_lowercase();
                let outcome = format!("{:?}", op.outcome).to_lowercase();
                *calls.entry(call).or_default().entry(outcome).or_default() += 1;
            }
            Entry::Write(write) => {
                writes += 1;
                refused += u32::from(!write.accepted);
            }
            _ => {}
        }
    }
    let total: u32 = calls.values().flat_map(BTreeMap::values).sum();
    let each: Vec<String> = calls
        .iter()
        .map(|(call, outcomes)| {
            let by: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
            format!("{call} ({})", by.join(", "))
        })
        .collect();
    println!("torture: {total} operations: {}", each.join("; "));
    println!("torture: {writes} writes to the fenced resource, {refused} refused (stale tokens)");
    if let Some(silence) = longest_silence(entries) {
        println!(
            "torture: the longest the clients went without an answer (granted or refused) while faults went on: {:.1} s",
            silence.as_secs_f64()
        );
    }
}

/// The longest stretch of the fault phase in which no call of any client was answered with
/// a definite outcome (granted or refused): how long the service as a whole was down. The
/// checker does not judge it — a store without a quorum may rightly answer nothing, and
/// how long an election takes depends on the machine — but a store that stays down while
/// a majority serves shows here (docs/TORTURE.md). `None` without a fault phase.
fn longest_silence(entries: &[Entry]) -> Option<Duration> {
    let healed = entries.iter().find_map(|entry| match entry {
        Entry::Healed { at } => Some(*at),
        _ => None,
    })?;
    let faults: Vec<&crate::history::Op> = entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Op(op) if op.phase == Phase::Faults => Some(op),
            _ => None,
        })
        .collect();
    let start = faults.iter().map(|op| op.invoked).min()?;
    let mut answered: Vec<Mono> = faults
        .iter()
        .filter(|op| op.call != Call::Lost && op.outcome != Outcome::Unknown && op.completed <= healed)
        .map(|op| op.completed)
        .collect();
    answered.sort();
    let marks = std::iter::once(start)
        .chain(answered)
        .chain(std::iter::once(healed));
    let mut longest = 0;
    let mut last = start;
    for mark in marks {
        longest = longest.max(mark.0.saturating_sub(last.0));
        last = mark;
    }
    Some(Duration::from_nanos(longest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Kind, Op};

    fn op(call: Call, invoked_s: u64, completed_s: u64, outcome: Outcome) -> Entry {
        Entry::Op(Op {
            client: 0,
            op: 0,
            phase: Phase::Faults,
            call,
            kind: Kind::Lock,
            names: vec!["a".to_owned()],
            owner: "c0-0".to_owned(),
            server: None,
            limit: None,
            mode: None,
            ttl_ms: 1_000,
            wait_ms: 0,
            token: None,
            invoked: Mono(invoked_s * 1_000_000_000),
            completed: Mono(completed_s * 1_000_000_000),
            outcome,
            leases: Vec::new(),
            extended: false,
            held_until: None,
            detail: String::new(),
        })
    }

    #[test]
    fn the_longest_silence_counts_only_definite_answers_of_the_store() {
        let entries = vec![
            op(Call::Acquire, 10, 11, Outcome::Ok),
            op(Call::Acquire, 11, 13, Outcome::Unknown),
            op(Call::Lost, 14, 14, Outcome::Ok),
            op(Call::Release, 15, 17, Outcome::Refused),
            op(Call::Renew, 17, 18, Outcome::Ok),
            Entry::Healed {
                at: Mono(20_000_000_000),
            },
        ];
        assert_eq!(longest_silence(&entries), Some(Duration::from_secs(6)));
        assert_eq!(longest_silence(&entries[..5]), None, "no fault phase ended");
    }
}
