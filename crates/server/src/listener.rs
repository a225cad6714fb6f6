//! Accepting connections and serving them, split as mini-redis does: [`run`] accepts (under a
//! connection limit), each connection is served by hyper with header read timeouts — after
//! its TLS handshake, with [`Config::tls`](crate::Config::tls) — and a shutdown drains them
//! all.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::routes::router;
use crate::state::App;
use crate::tls::Tls;

/// hyper's smallest read buffer, and so the smallest `max_header_bytes`.
pub const MIN_HEADER_BYTES: usize = 8192;

/// How long to back off when `accept` fails (e.g. out of file descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Accepts and serves connections until `shutdown` completes, then drains them.
pub async fn run(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let service = TowerToHyperService::new(router(app.clone()));
    let config = app.config.clone();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        // hyper answers a head that does not fit 431; below 8192 it would panic.
        .max_buf_size(config.max_header_bytes.max(MIN_HEADER_BYTES));
    let graceful = GracefulShutdown::new();
    // Each connection holds a permit; at the limit, new connections wait in the listen
    // queue instead of taking memory and file descriptors.
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
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
        // Lock requests are small: send answers at once.
        let _ = stream.set_nodelay(true);
        let connection = Connection {
            http: http.clone(),
            service: service.clone(),
            watcher: graceful.watcher(),
            _permit: permit,
        };
        match config.tls.clone() {
            None => tokio::spawn(connection.serve(stream)),
            Some(tls) => tokio::spawn(connection.serve_tls(stream, tls, config.header_read_timeout)),
        };
    }
    drop(listener);
    tracing::info!("shutting down: answering waiters and finishing in-flight requests");
    app.waiters.shut_down();
    if tokio::time::timeout(config.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
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
    /// Lets a shutdown wait for this connection, even while its handshake is under way.
    watcher: Watcher,
    /// Held for as long as the connection lasts: a place under the connection limit.
    _permit: OwnedSemaphorePermit,
}

impl Connection {
    /// Serves HTTP/1.1 on `io` until the client closes it or a shutdown drains it.
    async fn serve(self, io: impl AsyncRead + AsyncWrite + Send + Unpin + 'static) {
        let connection = self.http.serve_connection(TokioIo::new(io), self.service);
        if let Err(error) = self.watcher.watch(connection).await {
            tracing::debug!(%error, "connection ended with an error");
        }
    }

    /// The TLS handshake, then HTTP/1.1 over it. The handshake runs here, in the
    /// connection's own task, so a slow client delays nobody else; and within the header
    /// read timeout, so a client that connects and never finishes it gives its place back.
    async fn serve_tls(self, stream: TcpStream, tls: Tls, limit: Duration) {
        match tokio::time::timeout(limit, tls.accept(stream)).await {
            Ok(Ok(stream)) => self.serve(stream).await,
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => tracing::debug!(?limit, "TLS handshake not finished in time"),
        }
    }
}
