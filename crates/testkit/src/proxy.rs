//! [`Proxy`]: a TCP relay on loopback that fails like a network — cut, cut one way, slow, or
//! swallowing everything — for tests of a server that stops answering without closing
//! anything, and for the torture suite's partitions; it also keeps what clients sent, for
//! tests of what a client puts in its requests.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// How often a relay thread looks at the flags while it waits.
const TICK: Duration = Duration::from_millis(20);

/// One way through a [`Proxy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the clients that connect to the proxy to the target (requests).
    ToTarget,
    /// From the target back to the clients (answers).
    FromTarget,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Self::ToTarget => 0,
            Self::FromTarget => 1,
        }
    }
}

/// Relays TCP connections from a free loopback port to a target port, and fails on demand
/// like the network between them would:
///
/// - [`Proxy::cut`]: nothing passes in either direction and new connections are accepted
///   but not relayed, yet no connection is closed: to a client, the server simply stops
///   answering, as behind a broken network. What was held back passes on
///   [`Proxy::restore`], as TCP's retransmissions deliver it once a short partition heals.
/// - [`Proxy::cut_one_way`]: the same, in one direction only (requests arrive and their
///   answers are held back, or the other way round): an asymmetric partition.
/// - [`Proxy::delay`]: everything passes, each chunk held back a while: a slow network.
/// - [`Proxy::blackhole`]: everything sent, in either direction and on new connections too,
///   is read and thrown away, and nothing is closed: a partition long enough that what was
///   in flight is lost. Unlike a cut, nothing is delivered later: on [`Proxy::restore`] the
///   connections that lost bytes are closed (their streams have a hole), and new ones relay.
///
/// The relay runs on threads of this process, so it cannot outlive it; dropping the proxy
/// closes every relayed connection.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    flags: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    /// Per [`Direction`]: data that way is held back.
    held: [AtomicBool; 2],
    /// How long each chunk waits before it is passed on, in milliseconds.
    delay_ms: AtomicU64,
    blackhole: AtomicBool,
    /// How long a connection whose target refuses it waits for the target to listen, in
    /// milliseconds ([`Proxy::retry_refused`]).
    refused_patience_ms: AtomicU64,
    stop: AtomicBool,
    /// Every byte relayed from clients to the target, in the order relayed.
    sent: Mutex<Vec<u8>>,
    /// What [`Proxy::rewrite_greeting`] replaces, and with what.
    greeting: Mutex<Option<Rewrite>>,
}

/// Bytes to find in what a client sends first, and the bytes of the same length put in
/// their place.
#[derive(Debug, Clone)]
struct Rewrite {
    find: Vec<u8>,
    replace: Vec<u8>,
}

/// How far into a connection [`Proxy::rewrite_greeting`] looks for its bytes.
const GREETING_BYTES: usize = 1024;

impl Flags {
    /// Waits while `direction` is held back; `false` if the proxy stops meanwhile.
    fn wait_while_held(&self, direction: Direction) -> bool {
        while self.held[direction.index()].load(Ordering::Acquire) {
            if self.stopped() {
                return false;
            }
            thread::sleep(TICK);
        }
        !self.stopped()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    fn blackholed(&self) -> bool {
        self.blackhole.load(Ordering::Acquire)
    }

    fn fully_cut(&self) -> bool {
        self.held.iter().all(|held| held.load(Ordering::Acquire))
    }
}

impl Proxy {
    /// Starts relaying a new free loopback port to `target_port` on loopback.
    pub fn start(target_port: u16) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a proxy port");
        let port = listener.local_addr().expect("a bound port").port();
        let flags = Arc::new(Flags::default());
        let target = SocketAddr::from((Ipv4Addr::LOCALHOST, target_port));
        let accepting = flags.clone();
        thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept(&listener, target, &accepting))
            .expect("start a proxy thread");
        Self { port, flags }
    }

    /// The loopback port to connect to instead of the target's.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// From now on, nothing passes either way until [`Proxy::restore`].
    pub fn cut(&self) {
        for held in &self.flags.held {
            held.store(true, Ordering::Release);
        }
    }

    /// From now on, nothing passes in `direction` until [`Proxy::restore`]; the other way
    /// still flows.
    pub fn cut_one_way(&self, direction: Direction) {
        self.flags.held[direction.index()].store(true, Ordering::Release);
    }

    /// From now on, each chunk read on either side waits `delay` before it is passed on,
    /// until [`Proxy::restore`].
    pub fn delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.flags.delay_ms.store(ms, Ordering::Release);
    }

    /// From now on, everything that arrives, either way and on new connections, is thrown
    /// away, until [`Proxy::restore`]; no connection is closed meanwhile.
    pub fn blackhole(&self) {
        self.flags.blackhole.store(true, Ordering::Release);
    }

    /// Ends every failure: traffic passes again, first what a cut held back; connections
    /// that lost bytes to a blackhole are closed.
    pub fn restore(&self) {
        self.flags.blackhole.store(false, Ordering::Release);
        self.flags.delay_ms.store(0, Ordering::Release);
        for held in &self.flags.held {
            held.store(false, Ordering::Release);
        }
    }

    /// From now on, a new connection that the target refuses is not closed at once: the
    /// proxy calls the target again until it listens, for up to `patience`, holding back
    /// what the client sends meanwhile.
    ///
    /// Without a proxy, the client's own call is refused, and a client that expects its
    /// peer to listen soon tries again. Through a proxy, the client's call was accepted, so
    /// closing it says "it listened, then hung up": a ZooKeeper follower that calls its new
    /// leader a few milliseconds before the leader opens its port (a race that a busy
    /// machine makes common) takes that for a failed leader and starts another election,
    /// where it would have called again. Give it the patience the client itself would have.
    pub fn retry_refused(&self, patience: Duration) {
        let ms = u64::try_from(patience.as_millis()).unwrap_or(u64::MAX);
        self.flags.refused_patience_ms.store(ms, Ordering::Release);
    }

    /// From now on, on each new connection, the first `find` among the first kilobyte that
    /// clients send is relayed as `replace`, of the same length. For a peer protocol in which
    /// a member tells the others where to call it back (ZooKeeper's elections do): told the
    /// proxy's address instead of its own, they call back through a proxy too, and a cut
    /// parts them. Panics if the lengths differ.
    pub fn rewrite_greeting(&self, find: &[u8], replace: &[u8]) {
        assert_eq!(find.len(), replace.len(), "a greeting is rewritten in place");
        assert!(!find.is_empty(), "nothing to find");
        let mut greeting = self.flags.greeting.lock().unwrap_or_else(PoisonError::into_inner);
        *greeting = Some(Rewrite {
            find: find.to_vec(),
            replace: replace.to_vec(),
        });
    }

    /// Everything clients sent through the proxy so far (for plain HTTP, their requests
    /// with their headers), as text. Bytes a blackhole threw away are not in it.
    pub fn sent(&self) -> String {
        let sent = self.flags.sent.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&sent).into_owned()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.flags.stop.store(true, Ordering::Release);
        // Wake the accepting thread, blocked in accept(), so that it sees the stop flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

fn accept(listener: &TcpListener, target: SocketAddr, flags: &Arc<Flags>) {
    for client in listener.incoming() {
        if flags.stopped() {
            return;
        }
        let Ok(client) = client else { continue };
        let flags = flags.clone();
        // One thread per connection: it connects upstream once the proxy lets it, then
        // relays one direction while a second thread relays the other.
        let _ = thread::Builder::new()
            .name("proxy-conn".into())
            .spawn(move || relay(client, target, &flags));
    }
}

/// Relays one accepted connection until either side closes it or the proxy stops.
fn relay(client: TcpStream, target: SocketAddr, flags: &Arc<Flags>) {
    // A connection made into a blackhole or a full cut reaches nobody until it ends.
    loop {
        if flags.stopped() {
            return;
        }
        if flags.blackholed() {
            swallow(client, flags);
            return;
        }
        if !flags.fully_cut() {
            break;
        }
        thread::sleep(TICK);
    }
    let Some(server) = call(target, flags) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // Set when either direction threw bytes away: the connection is then closed on restore.
    let holed = Arc::new(AtomicBool::new(false));
    let (upstream_flags, upstream_holed) = (flags.clone(), holed.clone());
    let greeting = flags
        .greeting
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .map(Greeting::new);
    let upstream = thread::spawn(move || {
        pump(
            client_reader,
            server,
            &upstream_flags,
            (Direction::ToTarget, greeting),
            &upstream_holed,
        );
    });
    pump(
        server_reader,
        client,
        flags,
        (Direction::FromTarget, None),
        &holed,
    );
    let _ = upstream.join();
}

/// Connects to `target`, calling it again while it refuses, for as long as
/// [`Proxy::retry_refused`] allows; `None` if it never answered or the proxy stopped.
fn call(target: SocketAddr, flags: &Flags) -> Option<TcpStream> {
    let patience = Duration::from_millis(flags.refused_patience_ms.load(Ordering::Acquire));
    let deadline = Instant::now() + patience;
    loop {
        match TcpStream::connect(target) {
            Ok(server) => return Some(server),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused && Instant::now() < deadline => {
                if flags.stopped() {
                    return None;
                }
                thread::sleep(TICK);
            }
            Err(_) => return None,
        }
    }
}

/// Reads and drops what `client` sends while the blackhole lasts, then closes it: nothing
/// it sent reached anyone.
fn swallow(mut client: TcpStream, flags: &Flags) {
    let _ = client.set_read_timeout(Some(TICK));
    let mut buffer = [0_u8; 16 * 1024];
    while flags.blackholed() && !flags.stopped() {
        match client.read(&mut buffer) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// A connection's [`Rewrite`] of what its client sends first, across reads: bytes that may
/// be the start of the bytes to find wait for the next read.
struct Greeting {
    rewrite: Rewrite,
    /// Read but not yet passed on.
    kept: Vec<u8>,
    /// Bytes passed on so far.
    passed: usize,
}

impl Greeting {
    fn new(rewrite: Rewrite) -> Self {
        Self {
            rewrite,
            kept: Vec::new(),
            passed: 0,
        }
    }

    /// Puts into `out` what to pass on of `read`, rewritten where it has the bytes to find;
    /// [`Done::Yes`] once the greeting is done with (found, or past the first kilobyte): then
    /// bytes pass as read.
    fn pass(&mut self, read: &[u8], out: &mut Vec<u8>) -> Done {
        self.kept.extend_from_slice(read);
        let find = &self.rewrite.find;
        if let Some(at) = self.kept.windows(find.len()).position(|w| w == find) {
            self.kept[at..at + find.len()].copy_from_slice(&self.rewrite.replace);
            out.append(&mut self.kept);
            return Done::Yes;
        }
        if self.passed + self.kept.len() >= GREETING_BYTES {
            out.append(&mut self.kept);
            return Done::Yes;
        }
        // All but what could begin the bytes to find passes on now.
        let keep = (find.len() - 1).min(self.kept.len());
        let pass = self.kept.len() - keep;
        out.extend(self.kept.drain(..pass));
        self.passed += pass;
        Done::No
    }
}

/// Whether a [`Greeting`] is done with.
enum Done {
    Yes,
    No,
}

/// Copies `from` to `to` until either closes or the proxy stops, holding data back while
/// `direction` is cut, delaying it, or throwing it away in a blackhole (and then marking the
/// connection `holed`), rewriting the client's greeting, and keeping a copy of what goes to
/// the target. Closing one side closes the other, as a real relay would.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    flags: &Flags,
    (direction, mut greeting): (Direction, Option<Greeting>),
    holed: &AtomicBool,
) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buffer = [0_u8; 16 * 1024];
    loop {
        if !flags.wait_while_held(direction) {
            break;
        }
        // A stream with a hole in it is broken for good: close it once the blackhole ends.
        if holed.load(Ordering::Acquire) && !flags.blackholed() {
            break;
        }
        match from.read(&mut buffer) {
            Ok(0) => {
                // What waited to be told from the start of an address passes before the end.
                if let Some(pending) = greeting.take()
                    && flags.wait_while_held(direction)
                {
                    let _ = to.write_all(&pending.kept);
                }
                break;
            }
            Ok(_) if flags.blackholed() => holed.store(true, Ordering::Release),
            Ok(n) => {
                let mut rewritten = Vec::new();
                let chunk = match greeting.as_mut() {
                    Some(pending) => {
                        if let Done::Yes = pending.pass(&buffer[..n], &mut rewritten) {
                            greeting = None;
                        }
                        &rewritten[..]
                    }
                    None => &buffer[..n],
                };
                if direction == Direction::ToTarget {
                    let mut sent = flags.sent.lock().unwrap_or_else(PoisonError::into_inner);
                    sent.extend_from_slice(chunk);
                }
                let delay = flags.delay_ms.load(Ordering::Acquire);
                if delay > 0 {
                    thread::sleep(Duration::from_millis(delay));
                }
                // Data read just before a cut is held until the proxy is restored.
                if !flags.wait_while_held(direction) || to.write_all(chunk).is_err() {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}
