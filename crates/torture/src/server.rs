//! [`Server`]: one `fencelock serve` process of a run, on a fixed loopback port so that it
//! can be killed and started again where its clients look for it, on a wall clock the
//! nemesis can step.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use fencelock_testkit::{FakeClock, free_port, spawn_tied};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a server may take to start (opening its store included) on a busy machine.
const START_DEADLINE: Duration = Duration::from_secs(60);

/// How often a start looks again.
const POLL: Duration = Duration::from_millis(25);

/// A `fencelock serve` of the run.
#[derive(Debug)]
pub struct Server {
    index: usize,
    bin: PathBuf,
    port: u16,
    store: String,
    log: PathBuf,
    /// Its wall clock, if the run steps it.
    clock: Option<FakeClock>,
    /// `None` while killed.
    child: Option<Child>,
    paused: bool,
}

impl Server {
    /// Starts server `index` of the run on a free port, its log in `dir`, on the store at
    /// `store`; under a clock the run can step if `stepped`.
    pub fn start(index: usize, bin: &Path, store: String, dir: &Path, stepped: bool) -> anyhow::Result<Self> {
        let mut server = Self {
            index,
            bin: bin.to_owned(),
            port: free_port(),
            store,
            log: dir.join(format!("server-{index}.log")),
            clock: stepped.then(FakeClock::new),
            child: None,
            paused: false,
        };
        server.start_again()?;
        Ok(server)
    }

    /// The server's address, e.g. `http://127.0.0.1:7070`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its clock, if the run steps it.
    pub fn clock(&self) -> Option<&FakeClock> {
        self.clock.as_ref()
    }

    /// Starts the (killed) server again on its port and store, and waits until it answers.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(self.child.is_none(), "server {} is running", self.index);
        let log = OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut command = Command::new(&self.bin);
        command
            .args(["--log-format", "json", "serve", "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .args(["--store", &self.store])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // Nothing from the runner's environment steers the server but what is given here.
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("FENCELOCK_")) {
                command.env_remove(name);
            }
        }
        if let Some(clock) = &self.clock {
            clock.apply(&mut command);
        }
        let child = spawn_tied(command).with_context(|| format!("start {}", self.bin.display()))?;
        self.child = Some(child);
        self.paused = false;
        self.wait_ready()
    }

    /// Waits until the server takes connections; an error with the end of its log if it
    /// exits first or takes too long.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_DEADLINE;
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                bail!(
                    "server {} exited ({status}) while starting:\n{}",
                    self.index,
                    self.log_tail()
                );
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
        bail!(
            "server {} did not answer within {START_DEADLINE:?}:\n{}",
            self.index,
            self.log_tail()
        )
    }

    /// Whether the server's store answers it (`GET /readyz` is 200).
    pub fn is_ready(&self) -> bool {
        get_status(self.port, "/readyz") == Some(200)
    }

    /// Kills the server at once (SIGKILL): no shutdown runs, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Stops the server where it stands (SIGSTOP), until [`Server::resume`].
    pub fn pause(&mut self) {
        self.signal(Signal::SIGSTOP);
        self.paused = true;
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&mut self) {
        self.signal(Signal::SIGCONT);
        self.paused = false;
    }

    /// Whether it runs and is not paused.
    pub fn is_up(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child
            && let Ok(pid) = i32::try_from(child.id())
        {
            // It may have died meanwhile: then there is nothing to stop or wake.
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        let _ = File::open(&self.log).and_then(|mut f| f.read_to_string(&mut text));
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        self.kill();
    }
}

/// The status code of `GET path` on the loopback `port`; `None` if nothing answers within a
/// second. A tiny HTTP/1.0 request: the runner needs no HTTP client for this.
pub fn get_status(port: u16, path: &str) -> Option<u16> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0_u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
