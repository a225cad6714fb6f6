//! Accepting connections and serving them, split as mini-redis does: [`run`] accepts (under a
//! connection limit, making room by closing the connection idle the longest), each connection
//! is served by hyper with header read timeouts — after its TLS handshake, with
//! [`Config::tls`](crate::Config::tls) — and a shutdown drains them all.
//!
//! A request received whole is served to its end, and answered, even if its client closes
//! its side of the connection right after sending it (hyper's half-close; HTTP/1.0-style
//! clients do so after `Connection: close`). Only a request that waits in line ends when its
//! client closes: the connection watches the socket while it waits ([`socket::hung_up`]).

mod connections;
mod socket;

use std::convert::Infallible;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};

pub use connections::{Peer, Waiting};

use crate::state::App;
use crate::tls::Tls;
use connections::{Activity, Connections, Place};
use socket::{Shared, hung_up};

/// hyper's smallest read buffer, and so the smallest `max_header_bytes`.
pub const MIN_HEADER_BYTES: usize = 8192;

/// How long to back off when `accept` fails (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts connections and serves `router` on them until `shutdown` completes, then drains
/// them. The router is given, not built here, so that the routes may read what a connection
/// tells of its client ([`Peer`]) without the listener and the routes importing each other.
pub async fn run(
    listener: TcpListener,
    router: Router,
    app: App,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let service = TowerToHyperService::new(router);
    let config = app.config.clone();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        // A request received whole is served whole: the client closing its side after
        // sending it does not drop it (waiters are watched apart, see the module docs).
        .half_close(true)
        // hyper answers a head that does not fit 431; below 8192 it would panic.
        .max_buf_size(config.max_header_bytes.max(MIN_HEADER_BYTES));
    // Each connection holds a place; at the limit, a new one waits (the kernel's listen
    // queue holds the ones after it) until room is made.
    let connections = Connections::new(config.max_connections);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let place = tokio::select! {
            place = connections.place() => place,
            () = &mut shutdown => break,
        };
        // Lock requests are small: send answers at once.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            http: http.clone(),
            service: service.clone(),
            place,
        };
        let tls = config.tls.clone().map(|tls| (tls, config.header_read_timeout));
        tokio::spawn(connection.serve(stream, tls));
    }
    drop(listener);
    tracing::info!("shutting down: answering waiters and finishing in-flight requests");
    app.waiters.shut_down();
    connections.close_all();
    if !connections.drained(config.shutdown_grace).await {
        tracing::warn!(
            "some connections did not finish within {:?}",
            config.shutdown_grace
        );
    }
    Ok(())
}

/// One accepted connection, served in a task of its own.
struct Connection {
    http: http1::Builder,
    service: TowerToHyperService<Router>,
    /// Held for as long as the connection lasts: a place under the connection limit, and
    /// what the connection is doing.
    place: Place,
}

impl Connection {
    /// Serves `stream`, after a TLS handshake if `tls` is given: within the time given with
    /// it (the header read timeout), so that a client that connects and never finishes it
    /// gives its place back. The handshake runs here, in the connection's own task, so a slow
    /// client delays nobody else.
    async fn serve(self, stream: TcpStream, tls: Option<(Tls, Duration)>) {
        let socket = Arc::new(stream);
        let Some((tls, limit)) = tls else {
            return self.serve_http(Shared(socket.clone()), &socket).await;
        };
        let handshake = tokio::select! {
            done = tokio::time::timeout(limit, tls.accept(Shared(socket.clone()))) => done,
            () = self.place.activity.close.cancelled() => return,
        };
        match handshake {
            Ok(Ok(stream)) => self.serve_http(stream, &socket).await,
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => tracing::debug!(?limit, "TLS handshake not finished in time"),
        }
    }

    /// Serves HTTP/1.1 on `io` (over `socket`) until the client closes it, the connection is
    /// closed (for room, or by a shutdown) once its request is answered, or its client goes
    /// away while its request waits in line.
    async fn serve_http(self, io: impl AsyncRead + AsyncWrite + Send + Unpin + 'static, socket: &TcpStream) {
        let activity = self.place.activity.clone();
        let service = Tracked {
            service: self.service,
            activity: activity.clone(),
        };
        let mut connection = pin!(self.http.serve_connection(TokioIo::new(io), service));
        let mut closing = false;
        loop {
            tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(error) = ended {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                    return;
                }
                () = activity.close.cancelled(), if !closing => {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
                () = hung_up(socket, activity.waiting.subscribe()) => {
                    // Dropping the connection drops its waiting request: its wait ends.
                    tracing::debug!("the client went away while its request waited");
                    return;
                }
            }
        }
    }
}

/// The API's service on one connection: each request carries the connection's [`Peer`], and
/// keeps the connection busy until it is answered.
#[derive(Clone)]
struct Tracked {
    service: TowerToHyperService<Router>,
    activity: Arc<Activity>,
}

impl hyper::service::Service<Request<Incoming>> for Tracked {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(Peer(self.activity.clone()));
        let serving = self.activity.serving();
        let answer = self.service.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(serving);
            answer
        })
    }
}
