//! [`Shared`]: a TCP connection that the HTTP server reads and writes while the connection
//! watches its client ([`hung_up`]), which only peeks.
//!
//! The server serves a request received whole to its end even if its client then closes its
//! side of the connection (hyper's half-close), as HTTP/1.0-style clients do after a request
//! sent with `Connection: close`. So the server no longer reads while a request is served,
//! and no longer hears a client that goes away. For a request that waits in line that
//! matters: its wait must end when its caller is gone. The connection then peeks at the
//! socket itself, which needs the socket shared with the server.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// A TCP connection, shared: reading and writing go through readiness and non-blocking
/// calls on `&TcpStream`, which several holders may make.
#[derive(Debug, Clone)]
pub(super) struct Shared(pub(super) Arc<TcpStream>);

impl AsyncRead for Shared {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            ready!(self.0.poll_read_ready(cx))?;
            // The reader lends memory not yet written (hyper: 8 KiB or more), which a read
            // into a `&mut [u8]` would have to zero whole, every time: the bytes land in this
            // thread's buffer (zeroed once) instead, and only those read are copied over.
            let read = LANDING.with_borrow_mut(|landing| -> io::Result<()> {
                let room = buf.remaining().min(landing.len());
                let n = self.0.try_read(&mut landing[..room])?;
                buf.put_slice(&landing[..n]);
                Ok(())
            });
            match read {
                // The readiness was stale, and is cleared: wait for the next.
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
    }
}

thread_local! {
    /// Where a read of a connection lands first, on the thread that reads it.
    static LANDING: std::cell::RefCell<Box<[u8]>> = std::cell::RefCell::new(vec![0; 16 * 1024].into_boxed_slice());
}

impl AsyncWrite for Shared {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write(buf) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.0.poll_write_ready(cx))?;
            match self.0.try_write_vectored(bufs) {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                written => return Poll::Ready(written),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// A TCP socket keeps nothing back to flush.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(socket2::SockRef::from(&*self.0).shutdown(std::net::Shutdown::Write))
    }
}

/// Completes when the client of `socket` closes its side of the connection while a request
/// of it waits in line (`waiting` says when). A client that only half-closes cannot be told
/// from one that went away, and a wait must not outlive its caller: both end the wait.
/// Bytes that arrive instead (a next request, TLS records) show the client is there: the
/// watch then rests until the next wait.
pub(super) async fn hung_up(socket: &TcpStream, mut waiting: watch::Receiver<bool>) {
    // The sender lives as long as the connection: `Err` (it is gone) cannot happen.
    let mut until = async |waits: bool| {
        if waiting.wait_for(|now| *now == waits).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    loop {
        until(true).await;
        let mut byte = [0u8; 1];
        let gone = tokio::select! {
            peeked = socket.peek(&mut byte) => matches!(peeked, Ok(0) | Err(_)),
            () = until(false) => false,
        };
        if gone {
            return;
        }
        until(false).await;
    }
}
