//! The nemesis: faults from the store's menu, at random times from the seed, each begun,
//! held a while, healed, and recorded both times as a [`Fault`] entry.
//!
//! Two lanes run side by side: one hits the servers, the store and the network between
//! them, one fault at a time (and waits after each until the store serves again, so that the
//! store is never down for the whole run); the other stops clients. Neither begins a fault
//! it could not heal before the run's faults end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fencelock_testkit::{Direction, Proxy};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::fault::FaultKind;
use crate::history::{Entry, Fault, Mono};
use crate::rng::Rng;
use crate::sink::Sink;
use crate::target::{StoreKind, Target};

/// The nemesis's streams of random numbers (clients have theirs from 1000).
const INFRA_STREAM: u64 = 1;
const CLIENT_STREAM: u64 = 2;

/// Quiet before the first fault, so that clients hold something when it comes.
const WARM_UP: Duration = Duration::from_millis(1_500);

/// Time kept, past a fault's planned end, to heal it before the run's faults end.
const TO_HEAL: Duration = Duration::from_secs(1);

/// How many faults of each kind a run injected.
pub type Tally = BTreeMap<&'static str, u32>;

/// Records a fault's beginning or healing.
fn record(sink: &Sink, kind: FaultKind, target: &str, phase: &str, detail: String) {
    sink.push(Entry::Fault(Fault {
        kind: kind.name().to_owned(),
        target: target.to_owned(),
        phase: phase.to_owned(),
        at: Mono::now(),
        detail,
    }));
}

/// The lane of faults on servers, store and network.
pub struct Infrastructure<'a> {
    target: &'a mut Target,
    rng: Rng,
    sink: Sink,
    menu: Vec<FaultKind>,
    /// The longest TTL a client asks for: a pause must outlast it to matter.
    longest_ttl: Duration,
    tally: Tally,
}

impl<'a> Infrastructure<'a> {
    /// The lane over `target`, injecting the kinds of `menu` (the client pauses are the
    /// other lane's).
    pub fn new(
        target: &'a mut Target,
        seed: &Rng,
        sink: Sink,
        menu: &[FaultKind],
        longest_ttl: Duration,
    ) -> Self {
        let menu = menu
            .iter()
            .copied()
            .filter(|kind| *kind != FaultKind::PauseClient)
            .collect();
        Self {
            target,
            rng: seed.stream(INFRA_STREAM),
            sink,
            menu,
            longest_ttl,
            tally: Tally::new(),
        }
    }

    /// Injects faults until `end`, one at a time, each healed and recovered from before the
    /// next; what it injected, by kind.
    pub fn run(mut self, end: Instant) -> anyhow::Result<Tally> {
        sleep_until(Instant::now() + WARM_UP, end);
        while !self.menu.is_empty() && Instant::now() + TO_HEAL * 2 < end {
            let gap = self
                .rng
                .millis(Duration::from_millis(300), Duration::from_millis(1_500));
            sleep_until(Instant::now() + gap, end);
            let Some(&kind) = self.rng.pick(&self.menu) else {
                break;
            };
            // A fault too long for what is left is not begun; a shorter one may be next.
            if !self.inject(kind, end)? {
                continue;
            }
            *self.tally.entry(kind.name()).or_default() += 1;
            if let Err(error) = self.target.wait_recovered() {
                eprintln!("torture: after {}: {error:#}", kind.name());
                anyhow::bail!("the store did not recover after {}: {error:#}", kind.name());
            }
        }
        Ok(self.tally)
    }

    fn begin(&self, kind: FaultKind, target: &str, detail: String) {
        eprintln!("torture: {} {target} {detail}", kind.name());
        record(&self.sink, kind, target, "begin", detail);
    }

    fn heal(&self, kind: FaultKind, target: &str) {
        record(&self.sink, kind, target, "heal", String::new());
    }

    /// A while of `low..=high`.
    fn lasting(&mut self, low: u64, high: u64) -> Duration {
        self.rng
            .millis(Duration::from_millis(low), Duration::from_millis(high))
    }

    fn pick_server(&mut self) -> usize {
        self.rng.below(self.target.server_count() as u64) as usize
    }

    fn pick_node(&mut self) -> usize {
        self.rng.below(self.target.node_count().max(1) as u64) as usize
    }

    /// Whether a fault lasting `lasts` can be healed before `end`.
    fn fits(lasts: Duration, end: Instant) -> bool {
        Instant::now() + lasts + TO_HEAL <= end
    }

    /// Begins one fault of `kind`, holds it, heals it; `false` if it would not have healed
    /// before `end`, and was not begun.
    fn inject(&mut self, kind: FaultKind, end: Instant) -> anyhow::Result<bool> {
        match kind {
            FaultKind::PauseServer => {
                let i = self.pick_server();
                let lasts = self.longest_ttl + self.lasting(300, 2_000);
                let name = format!("server {i}");
                let detail = format!("for {lasts:?}");
                self.episode(
                    kind,
                    &name,
                    detail,
                    lasts,
                    end,
                    |t| {
                        t.server(i).pause();
                        Ok(())
                    },
                    |t| {
                        t.server(i).resume();
                        Ok(())
                    },
                )
            }
            FaultKind::KillServer => {
                let i = self.pick_server();
                let down = self.lasting(0, 2_000);
                let name = format!("server {i}");
                let detail = format!("down for {down:?}");
                self.episode(
                    kind,
                    &name,
                    detail,
                    down,
                    end,
                    |t| {
                        t.server(i).kill();
                        Ok(())
                    },
                    |t| t.server(i).start_again(),
                )
            }
            FaultKind::PauseNode => {
                let i = self.pick_node();
                let lasts = self.lasting(1_000, 4_000);
                let name = self.target.node_name(i);
                let detail = format!("for {lasts:?}");
                self.episode(
                    kind,
                    &name,
                    detail,
                    lasts,
                    end,
                    |t| {
                        t.pause_node(i);
                        Ok(())
                    },
                    |t| {
                        t.resume_node(i);
                        Ok(())
                    },
                )
            }
            FaultKind::KillNode => {
                let i = self.pick_node();
                let down = self.lasting(500, 3_000);
                let name = self.target.node_name(i);
                let detail = format!("down for {down:?}");
                self.episode(
                    kind,
                    &name,
                    detail,
                    down,
                    end,
                    |t| {
                        t.kill_node(i);
                        Ok(())
                    },
                    |t| {
                        t.restart_node(i);
                        Ok(())
                    },
                )
            }
            FaultKind::Partition => self.partition(kind, end),
            FaultKind::SlowNetwork => {
                let i = self.pick_server();
                let (lasts, delay) = (self.lasting(1_000, 4_000), self.lasting(20, 400));
                let name = format!("server {i} -> store");
                let detail = format!("each chunk {delay:?} late, for {lasts:?}");
                self.episode(
                    kind,
                    &name,
                    detail,
                    lasts,
                    end,
                    |t| {
                        t.proxies(i).iter().for_each(|proxy| proxy.delay(delay));
                        Ok(())
                    },
                    |t| {
                        t.proxies(i).iter().for_each(Proxy::restore);
                        Ok(())
                    },
                )
            }
            FaultKind::PartitionMember => {
                let i = self.pick_node();
                let lasts = self.lasting(2_000, 5_000);
                let name = self.target.node_name(i);
                let detail = format!("parted from the other members for {lasts:?}");
                self.episode(
                    kind,
                    &name,
                    detail,
                    lasts,
                    end,
                    |t| {
                        t.cut_member(i);
                        Ok(())
                    },
                    |t| {
                        t.reconnect_member(i);
                        Ok(())
                    },
                )
            }
            FaultKind::ClockStep => self.clock_step(kind, end),
            FaultKind::PauseClient => Ok(false),
        }
    }

    /// One fault on the target: recorded as begun, `start`ed, held for `lasts`, `stop`ped,
    /// recorded as healed; `false` if it would not heal before `end`, and was not begun.
    #[allow(clippy::too_many_arguments)]
    fn episode(
        &mut self,
        kind: FaultKind,
        name: &str,
        detail: String,
        lasts: Duration,
        end: Instant,
        start: impl FnOnce(&mut Target) -> anyhow::Result<()>,
        stop: impl FnOnce(&mut Target) -> anyhow::Result<()>,
    ) -> anyhow::Result<bool> {
        if !Self::fits(lasts, end) {
            return Ok(false);
        }
        self.begin(kind, name, detail);
        start(self.target)?;
        std::thread::sleep(lasts);
        stop(self.target)?;
        self.heal(kind, name);
        Ok(true)
    }

    /// Cuts a server from all its store's nodes, or from one, in one of the ways a network
    /// fails.
    fn partition(&mut self, kind: FaultKind, end: Instant) -> anyhow::Result<bool> {
        let i = self.pick_server();
        let nodes = self.target.proxies(i).len();
        let only = (nodes > 1 && self.rng.percent(50)).then(|| self.rng.below(nodes as u64) as usize);
        let how = *self
            .rng
            .pick(&["cut", "blackhole", "requests-lost", "answers-lost"])
            .unwrap_or(&"cut");
        let lasts = self.lasting(1_000, 5_000);
        let name = match only {
            Some(node) => format!("server {i} -> {}", self.target.node_name(node)),
            None => format!("server {i} -> store"),
        };
        let detail = format!("{how} for {lasts:?}");
        self.episode(
            kind,
            &name,
            detail,
            lasts,
            end,
            |t| {
                let hit = t
                    .proxies(i)
                    .iter()
                    .enumerate()
                    .filter(|(at, _)| only.is_none_or(|node| node == *at));
                for (_, proxy) in hit {
                    match how {
                        "blackhole" => proxy.blackhole(),
                        "requests-lost" => proxy.cut_one_way(Direction::ToTarget),
                        "answers-lost" => proxy.cut_one_way(Direction::FromTarget),
                        _ => proxy.cut(),
                    }
                }
                Ok(())
            },
            |t| {
                t.proxies(i).iter().for_each(Proxy::restore);
                Ok(())
            },
        )
    }

    /// Steps a server's wall clock, and steps it back when healing. On the embedded store,
    /// half the time across a restart (the server killed and started on the stepped clock),
    /// as the guarantee's restart rule is about; elsewhere within the bounds the guarantee
    /// sets (Redlock: 30 s between a server and the nodes).
    fn clock_step(&mut self, kind: FaultKind, end: Instant) -> anyhow::Result<bool> {
        let i = self.pick_server();
        let largest = match self.target.kind() {
            StoreKind::Sqlite => 3_600_000,
            _ => 5_000,
        };
        let magnitude = self.rng.between(200, largest);
        let offset = if self.rng.percent(50) {
            i64::try_from(magnitude).unwrap_or(i64::MAX)
        } else {
            -i64::try_from(magnitude).unwrap_or(i64::MAX)
        };
        let across_restart = self.target.kind() == StoreKind::Sqlite && self.rng.percent(50);
        let lasts = self.lasting(1_000, 4_000);
        let name = format!("server {i}");
        let how = if across_restart {
            "across a restart"
        } else {
            "while it runs"
        };
        let detail = format!("{offset:+} ms {how}, for {lasts:?}");
        self.episode(
            kind,
            &name,
            detail,
            lasts,
            end,
            |t| {
                // Across a restart, the server starts on the stepped clock.
                if across_restart {
                    t.server(i).kill();
                }
                if let Some(clock) = t.server(i).clock() {
                    clock.set_offset_ms(offset);
                }
                if across_restart {
                    t.server(i).start_again()?;
                }
                Ok(())
            },
            |t| {
                if let Some(clock) = t.server(i).clock() {
                    clock.set_offset_ms(0);
                }
                Ok(())
            },
        )
    }
}

/// The lane of client pauses: stops one client at a time (SIGSTOP) for longer than the
/// longest TTL, so that its guards stop renewing and it wakes up believing it holds what it
/// held, until `end`. What it injected.
pub fn pause_clients(pids: &[u32], seed: &Rng, sink: &Sink, longest_ttl: Duration, end: Instant) -> Tally {
    let mut rng = seed.stream(CLIENT_STREAM);
    let mut tally = Tally::new();
    sleep_until(Instant::now() + WARM_UP, end);
    loop {
        let gap = rng.millis(Duration::from_millis(500), Duration::from_millis(3_000));
        let lasts = longest_ttl + rng.millis(Duration::from_millis(200), Duration::from_millis(2_000));
        if Instant::now() + gap + lasts >= end {
            return tally;
        }
        std::thread::sleep(gap);
        let Some(i) = rng.pick(&(0..pids.len()).collect::<Vec<_>>()).copied() else {
            return tally;
        };
        let name = format!("client {i}");
        let Ok(pid) = i32::try_from(pids[i]) else { continue };
        record(
            sink,
            FaultKind::PauseClient,
            &name,
            "begin",
            format!("for {lasts:?}"),
        );
        // A client that has exited (it failed) has nothing to pause: the run reports it.
        let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        std::thread::sleep(lasts);
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        record(sink, FaultKind::PauseClient, &name, "heal", String::new());
        *tally.entry(FaultKind::PauseClient.name()).or_default() += 1;
    }
}

/// Sleeps until `until`, or until `end` if that comes first.
fn sleep_until(until: Instant, end: Instant) {
    let wake = until.min(end);
    if let Some(left) = wake.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}
