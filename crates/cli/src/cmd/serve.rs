//! `fencelock serve`: runs the server until SIGTERM or Ctrl-C; SIGHUP reloads the TLS
//! certificate.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use fencelock_core::Ttl;
use fencelock_server::Config;
use fencelock_server::tls::{Tls, TlsFiles};
use fencelock_wire::Limits;
use tokio::net::TcpListener;

/// Flags of `fencelock serve`; every one also reads an environment variable.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The address to listen on.
    #[arg(long, env = "FENCELOCK_LISTEN", default_value = "127.0.0.1:7070")]
    listen: SocketAddr,
    // The help lists the stores this build has, from the stores' table of schemes.
    #[arg(long, env = "FENCELOCK_STORE", default_value = "sqlite://fencelock.db", help = store_help())]
    store: String,
    /// The longest TTL a client may ask for.
    #[arg(long, env = "FENCELOCK_MAX_TTL", default_value = "1day", value_parser = humantime::parse_duration)]
    max_ttl: Duration,
    /// The longest `wait_ms` a client may ask for.
    #[arg(long, env = "FENCELOCK_MAX_WAIT", default_value = "5m", value_parser = humantime::parse_duration)]
    max_wait: Duration,
    /// The largest `limit` a client may give a semaphore.
    #[arg(long, env = "FENCELOCK_MAX_LIMIT", default_value_t = Limits::DEFAULT_MAX_LIMIT,
        value_parser = clap::value_parser!(u32).range(1..))]
    max_limit: u32,
    /// The largest request body, in bytes.
    #[arg(long, env = "FENCELOCK_MAX_BODY_BYTES", default_value_t = 16_384)]
    max_body_bytes: usize,
    /// How many connections are served at once.
    #[arg(long, env = "FENCELOCK_MAX_CONNECTIONS", default_value_t = 1024)]
    max_connections: usize,
    /// How many acquires may wait at once (default: half of --max-connections); more are
    /// answered at once, so that holders always have connections to renew and release.
    #[arg(long, env = "FENCELOCK_MAX_WAITERS")]
    max_waiters: Option<usize>,
    /// How long a client may take to send its headers (also the keep-alive idle time).
    #[arg(long, env = "FENCELOCK_HEADER_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    header_timeout: Duration,
    /// How long a client may take to send its body.
    #[arg(long, env = "FENCELOCK_BODY_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    body_timeout: Duration,
    /// How often expired leases are purged and logged.
    #[arg(long, env = "FENCELOCK_PURGE_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    purge_interval: Duration,
    /// Serve HTTPS with this certificate (PEM: the server's certificate, then any
    /// intermediates); needs --tls-key. Read again on SIGHUP.
    #[arg(long, env = "FENCELOCK_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM). Read again on SIGHUP.
    #[arg(long, env = "FENCELOCK_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

impl Args {
    fn config(&self) -> Result<Config, String> {
        let max_ttl = Ttl::from_duration(self.max_ttl, Ttl::CEILING).map_err(|e| format!("--max-ttl {e}"))?;
        if self.max_connections == 0 || self.purge_interval.is_zero() {
            return Err("--max-connections and --purge-interval must be above zero".into());
        }
        if self.max_waiters.is_some_and(|w| w >= self.max_connections) {
            return Err(
                "--max-waiters must be below --max-connections: waiters hold connections, and \
                 holders need some left to renew and release"
                    .into(),
            );
        }
        Ok(Config {
            limits: Limits {
                max_ttl,
                max_wait: self.max_wait,
                max_limit: self.max_limit,
            },
            max_body_bytes: self.max_body_bytes,
            header_read_timeout: self.header_timeout,
            body_read_timeout: self.body_timeout,
            max_connections: self.max_connections,
            max_waiters: self.max_waiters,
            purge_interval: self.purge_interval,
            tls: self.tls()?,
            ..Config::default()
        })
    }

    /// TLS from `--tls-cert` and `--tls-key`, or none. Clap makes sure they come together.
    fn tls(&self) -> Result<Option<Tls>, String> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        };
        Tls::load(files)
            .map(Some)
            .map_err(|e| format!("cannot serve TLS: {e}"))
    }
}

/// Runs the server; exit 0 after a clean shutdown, 1 if it cannot start.
pub async fn run(args: Args) -> ExitCode {
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            tracing::error!("{message}");
            eprintln!("fencelock serve: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The help of `--store`: every store address this build can open.
fn store_help() -> String {
    format!(
        "The store (the embedded one by default): {}",
        fencelock_stores::supported_schemes().join(", ")
    )
}

async fn serve(args: Args) -> Result<(), String> {
    let config = args.config()?;
    let shutdown = shutdown_signal()?;
    reload_on_hangup(config.tls.clone())?;
    let store = fencelock_stores::open(&args.store)
        .await
        .map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    tracing::info!(%address, %scheme, store = %args.store, "fencelock is serving");
    fencelock_server::serve(listener, store, config, shutdown)
        .await
        .map_err(|e| format!("server failed: {e}"))?;
    tracing::info!("fencelock stopped");
    Ok(())
}

/// Listens for SIGTERM and Ctrl-C (SIGINT) from now on; the future completes on either.
/// Registered before the server says it is serving, so no signal falls in between.
fn shutdown_signal() -> Result<impl Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(|e| format!("cannot listen for SIGINT: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
            _ = interrupt.recv() => tracing::info!("Ctrl-C received"),
        }
    })
}

/// Reloads what can be reloaded on every SIGHUP from now on: the TLS certificate and key.
/// Something that cannot be loaded keeps what was there and is logged. Registered before the
/// server says it is serving, so a SIGHUP never ends it (the default action) once it is.
fn reload_on_hangup(tls: Option<Tls>) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
    tokio::spawn(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading");
            let Some(tls) = &tls else { continue };
            match tls.reload() {
                Ok(()) => tracing::info!(cert = %tls.files().cert.display(), "TLS certificate reloaded"),
                Err(error) => {
                    tracing::warn!(%error, "TLS certificate not reloaded: still serving the previous one")
                }
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `fencelock serve`'s flags alone.
    #[derive(Debug, clap::Parser)]
    struct Serve {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn the_largest_semaphore_limit_is_a_flag_of_at_least_one() {
        let config = |flags: &[&str]| {
            Serve::try_parse_from(["serve"].iter().chain(flags))
                .map(|serve| serve.args.config().unwrap().limits.max_limit)
        };
        assert_eq!(config(&[]).unwrap(), Limits::DEFAULT_MAX_LIMIT);
        assert_eq!(config(&["--max-limit", "3"]).unwrap(), 3);
        for bad in ["0", "-1", "x", "4294967296"] {
            assert!(config(&["--max-limit", bad]).is_err(), "{bad}");
        }
    }
}
