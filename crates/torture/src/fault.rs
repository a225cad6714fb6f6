//! The kinds of fault a run may inject: named once, for the nemesis that injects them, the
//! stores that list which apply, and the verdict that reads them back from a history.

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGSTOP a `fencelock serve`, for longer than the longest TTL, then SIGCONT.
    PauseServer,
    /// SIGKILL a `fencelock serve`, then start it again.
    KillServer,
    /// SIGSTOP a store node (every process of PostgreSQL), then SIGCONT.
    PauseNode,
    /// SIGKILL a store node, then start it again (on its data; a Redis node empty).
    KillNode,
    /// Cut a server from its store (all its nodes, or one): both ways, one way, or a
    /// blackhole that loses what is in flight.
    Partition,
    /// Slow a server's traffic to its store down: every chunk held back a while.
    SlowNetwork,
    /// Part a member of etcd or ZooKeeper from the other members.
    PartitionMember,
    /// Step a server's wall clock (libfaketime); on the embedded store, across a restart.
    ClockStep,
    /// SIGSTOP a client, for longer than the longest TTL: its guards stop renewing.
    PauseClient,
}

impl FaultKind {
    /// Every kind, in the order of the docs' table.
    pub const ALL: [Self; 9] = [
        Self::PauseServer,
        Self::KillServer,
        Self::PauseNode,
        Self::KillNode,
        Self::Partition,
        Self::SlowNetwork,
        Self::PartitionMember,
        Self::ClockStep,
        Self::PauseClient,
    ];

    /// The name in `--faults` and in the history.
    pub fn name(self) -> &'static str {
        match self {
            Self::PauseServer => "pause-server",
            Self::KillServer => "kill-server",
            Self::PauseNode => "pause-node",
            Self::KillNode => "kill-node",
            Self::Partition => "partition",
            Self::SlowNetwork => "slow-network",
            Self::PartitionMember => "partition-member",
            Self::ClockStep => "clock-step",
            Self::PauseClient => "pause-client",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.name() == name)
    }
}
