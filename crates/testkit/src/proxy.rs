//! [`Proxy`]: a TCP relay on loopback that can be cut like a network, for tests of a server
//! that stops answering without closing anything; and that keeps what clients sent, for
//! tests of what a client puts in its requests.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Duration;

/// How often a relay thread looks at the cut and stop flags while it waits.
const TICK: Duration = Duration::from_millis(20);

/// Relays TCP connections from a free loopback port to a target port. While cut
/// ([`Proxy::cut`]), nothing passes in either direction and new connections are accepted but
/// not relayed, yet no connection is closed: to a client, the server simply stops answering,
/// as behind a broken network. [`Proxy::restore`] lets everything held back through.
///
/// The relay runs on threads of the test binary, so it cannot outlive it; dropping the
/// proxy closes every relayed connection.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    flags: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    cut: AtomicBool,
    stop: AtomicBool,
    /// Every byte relayed from clients to the target, in the order relayed.
    sent: Mutex<Vec<u8>>,
}

impl Flags {
    /// Waits while cut; `false` if the proxy stops meanwhile.
    fn wait_while_cut(&self) -> bool {
        while self.cut.load(Ordering::Acquire) {
            if self.stop.load(Ordering::Acquire) {
                return false;
            }
            thread::sleep(TICK);
        }
        !self.stop.load(Ordering::Acquire)
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

    /// From now on, nothing passes until [`Proxy::restore`].
    pub fn cut(&self) {
        self.flags.cut.store(true, Ordering::Release);
    }

    /// Lets traffic pass again, first what was held back.
    pub fn restore(&self) {
        self.flags.cut.store(false, Ordering::Release);
    }

    /// Everything clients sent through the proxy so far (for plain HTTP, their requests
    /// with their headers), as text.
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
        if flags.stop.load(Ordering::Acquire) {
            return;
        }
        let Ok(client) = client else { continue };
        let flags = flags.clone();
        // One thread per connection: it connects upstream once the proxy is not cut, then
        // relays one direction while a second thread relays the other.
        let _ = thread::Builder::new().name("proxy-conn".into()).spawn(move || {
            if !flags.wait_while_cut() {
                return;
            }
            let Ok(server) = TcpStream::connect(target) else {
                let _ = client.shutdown(Shutdown::Both);
                return;
            };
            let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone()) else {
                return;
            };
            let upstream_flags = flags.clone();
            let upstream = thread::spawn(move || pump(client_reader, server, &upstream_flags, true));
            pump(server_reader, client, &flags, false);
            let _ = upstream.join();
        });
    }
}

/// Copies `from` to `to` until either closes or the proxy stops, holding data back while the
/// proxy is cut, and keeping a copy if `upstream` (from a client). Closing one side closes
/// the other, as a real relay would.
fn pump(mut from: TcpStream, mut to: TcpStream, flags: &Flags, upstream: bool) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buffer = [0_u8; 16 * 1024];
    loop {
        if !flags.wait_while_cut() {
            break;
        }
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if upstream {
                    let mut sent = flags.sent.lock().unwrap_or_else(PoisonError::into_inner);
                    sent.extend_from_slice(&buffer[..n]);
                }
                // Data read just before a cut is held until the proxy is restored.
                if !flags.wait_while_cut() || to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
