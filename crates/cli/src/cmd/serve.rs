//! `fencelock serve`: runs the server until SIGTERM or Ctrl-C; SIGHUP reads the
//! authentication file and the TLS certificate again.

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use fencelock_core::Ttl;
use fencelock_server::Config;
use fencelock_server::auth::{AuthFile, Keyring, RateLimit};
use fencelock_server::hub::HubLimits;
use fencelock_server::listener::MIN_HEADER_BYTES;
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
    /// The most bytes of a lease's `meta` a client may send, as compact JSON.
    #[arg(long, env = "FENCELOCK_MAX_META_BYTES", default_value_t = 1024,
        value_parser = clap::value_parser!(u32).range(2..))]
    max_meta_bytes: u32,
    /// The largest request body, in bytes.
    #[arg(long, env = "FENCELOCK_MAX_BODY_BYTES", default_value_t = 16_384)]
    max_body_bytes: usize,
    /// How many connections are served at once; at the limit, the keep-alive connection idle
    /// the longest is closed to let a new one in.
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
    /// After a lock's lease expires unreleased (its holder presumed crashed or cut off),
    /// nobody is granted the lock for this long, so that writes the holder still had in
    /// flight drain first; a release ends it at once. Whole milliseconds.
    #[arg(long, env = "FENCELOCK_LOCK_DELAY", default_value = "0s", value_parser = humantime::parse_duration)]
    lock_delay: Duration,
    /// The authentication file (TOML): principals, the SHA-256 of their tokens, and their
    /// rights per name prefix; read again on SIGHUP. Without it every caller may do
    /// anything, so the server listens on loopback only.
    #[arg(long, env = "FENCELOCK_AUTH")]
    auth: Option<PathBuf>,
    /// Serve without --auth on an address other than loopback: anyone who can reach it may
    /// take or free any lock.
    #[arg(long, env = "FENCELOCK_INSECURE_NO_AUTH", conflicts_with = "auth")]
    insecure_no_auth: bool,
    /// Requests per second each principal may send (all callers together, without --auth);
    /// more are answered 429 with Retry-After. Default: unlimited.
    #[arg(long, env = "FENCELOCK_RATE_LIMIT")]
    rate_limit: Option<NonZeroU32>,
    /// How many requests a principal may send at once before --rate-limit applies (default:
    /// one second's worth).
    #[arg(long, env = "FENCELOCK_RATE_BURST", requires = "rate_limit")]
    rate_burst: Option<NonZeroU32>,
    /// The largest request head (request line and headers), in bytes, at least 8192; a larger
    /// one is answered 431.
    #[arg(long, env = "FENCELOCK_MAX_HEADER_BYTES", default_value_t = 16_384)]
    max_header_bytes: usize,
    /// Serve HTTPS with this certificate (PEM: the server's certificate, then any
    /// intermediates); needs --tls-key. Read again on SIGHUP.
    #[arg(long, env = "FENCELOCK_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM). Read again on SIGHUP.
    #[arg(long, env = "FENCELOCK_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// How many events the server keeps for streams of GET /events that reconnect: one
    /// that resumes from an older id gets a reset and a snapshot instead.
    #[arg(long, env = "FENCELOCK_EVENT_RETENTION", default_value_t = HubLimits::default().retention)]
    event_retention: usize,
    /// How many events a stream of GET /events may fall behind before it is cut off (with
    /// event: overflow).
    #[arg(long, env = "FENCELOCK_EVENT_BUFFER", default_value_t = HubLimits::default().buffer)]
    event_buffer: usize,
    /// How many streams of GET /events each principal (all callers together, without
    /// --auth) may keep open; more are answered 429.
    #[arg(long, env = "FENCELOCK_MAX_EVENT_STREAMS", default_value_t = HubLimits::default().streams_per_principal)]
    max_event_streams: usize,
    /// The longest a stream of GET /events goes quiet: a heartbeat comment then.
    #[arg(long, env = "FENCELOCK_EVENT_HEARTBEAT", default_value = "15s", value_parser = humantime::parse_duration)]
    event_heartbeat: Duration,
}

impl Args {
    fn config(&self) -> Result<Config, String> {
        let max_ttl = Ttl::from_duration(self.max_ttl, Ttl::CEILING).map_err(|e| format!("--max-ttl {e}"))?;
        if self.max_connections == 0 || self.purge_interval.is_zero() {
            return Err("--max-connections and --purge-interval must be above zero".into());
        }
        if self.max_header_bytes < MIN_HEADER_BYTES {
            return Err(format!(
                "--max-header-bytes must be at least {MIN_HEADER_BYTES}, the smallest buffer the HTTP server reads with"
            ));
        }
        if !self.lock_delay.subsec_nanos().is_multiple_of(1_000_000) {
            return Err("--lock-delay must be a whole number of milliseconds".into());
        }
        if self.event_buffer == 0 || self.max_event_streams == 0 || self.event_heartbeat.is_zero() {
            return Err(
                "--event-buffer, --max-event-streams and --event-heartbeat must be above zero".into(),
            );
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
                max_meta_bytes: usize::try_from(self.max_meta_bytes).unwrap_or(usize::MAX),
            },
            max_body_bytes: self.max_body_bytes,
            max_header_bytes: self.max_header_bytes,
            rate_limit: self.rate_limit.map(|per_second| RateLimit {
                per_second,
                burst: self.rate_burst.unwrap_or(per_second),
            }),
            header_read_timeout: self.header_timeout,
            body_read_timeout: self.body_timeout,
            max_connections: self.max_connections,
            max_waiters: self.max_waiters,
            purge_interval: self.purge_interval,
            lock_delay: self.lock_delay,
            tls: self.tls()?,
            events: HubLimits {
                retention: self.event_retention,
                buffer: self.event_buffer,
                streams_per_principal: self.max_event_streams,
                heartbeat: self.event_heartbeat,
            },
            ..Config::default()
        })
    }

    /// Refuses to serve without authentication where others can reach the server, unless
    /// told to.
    fn check_exposure(&self) -> Result<(), String> {
        if self.auth.is_some() || self.listen.ip().to_canonical().is_loopback() {
            return Ok(());
        }
        if self.insecure_no_auth {
            tracing::warn!(listen = %self.listen,
                "serving without authentication on an address others can reach (--insecure-no-auth): anyone who can reach it may take or free any lock");
            return Ok(());
        }
        Err(format!(
            "refusing to serve {} without authentication: anyone who can reach it could take or free any lock. \
             Give --auth FILE (principals and the SHA-256 of their tokens; `fencelock auth new-token NAME` makes one), \
             listen on loopback (e.g. 127.0.0.1:7070), or pass --insecure-no-auth to serve it open anyway",
            self.listen
        ))
    }

    /// The authentication file, read and checked, if one is given.
    fn auth(&self) -> Result<Option<(PathBuf, Keyring)>, String> {
        let Some(path) = &self.auth else {
            return Ok(None);
        };
        let file = AuthFile::load(path).map_err(|e| format!("--auth {}: {e}", path.display()))?;
        Ok(Some((path.clone(), Keyring::new(file))))
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
    let mut config = args.config()?;
    args.check_exposure()?;
    let auth = args.auth()?;
    config.auth = auth.as_ref().map(|(_, keyring)| keyring.clone());
    let shutdown = shutdown_signal()?;
    let reloads = reload_on_hangup(Reload {
        auth,
        tls: config.tls.clone(),
    })?;
    let store = fencelock_stores::open(&args.store)
        .await
        .map_err(|e| e.to_string())?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let principals = config.auth.as_ref().map(|keyring| keyring.current().len());
    let scheme = if config.tls.is_some() { "https" } else { "http" };
    tracing::info!(%address, %scheme, store = %args.store, principals, "fencelock is serving");
    tokio::spawn(reloads);
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

/// What SIGHUP reads again.
struct Reload {
    /// The authentication file and the keyring it is put in.
    auth: Option<(PathBuf, Keyring)>,
    /// The TLS certificate and key, read again for new connections.
    tls: Option<Tls>,
}

impl Reload {
    /// Reads every file again; one that does not pass its checks is logged, and the one in
    /// force kept.
    fn run(&self) {
        if let Some((path, keyring)) = &self.auth {
            // A small file, read once per SIGHUP: not worth a blocking thread.
            match AuthFile::load(path) {
                Ok(file) => {
                    let principals = file.len();
                    keyring.replace(file);
                    tracing::info!(path = %path.display(), principals, "authentication file read again");
                }
                Err(error) => tracing::warn!(path = %path.display(), %error,
                    "authentication file not read again: keeping the one in force"),
            }
        }
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => tracing::info!(cert = %tls.files().cert.display(), "TLS certificate reloaded"),
                Err(error) => {
                    tracing::warn!(%error, "TLS certificate not reloaded: still serving the previous one")
                }
            }
        }
    }
}

/// Listens for SIGHUP from now on (so that one never ends the process, its default action),
/// and reads `reload` again on each: the returned future runs until the process ends.
fn reload_on_hangup(reload: Reload) -> Result<impl Future<Output = ()>, String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = signal(SignalKind::hangup()).map_err(|e| format!("cannot listen for SIGHUP: {e}"))?;
    Ok(async move {
        while hangup.recv().await.is_some() {
            tracing::info!("SIGHUP received: reading the files again");
            reload.run();
        }
    })
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

    #[test]
    fn the_most_metadata_is_a_flag_of_at_least_an_empty_object() {
        let config = |flags: &[&str]| {
            Serve::try_parse_from(["serve"].iter().chain(flags))
                .map(|serve| serve.args.config().unwrap().limits.max_meta_bytes)
        };
        assert_eq!(config(&[]).unwrap(), fencelock_core::Meta::DEFAULT_MAX_BYTES);
        assert_eq!(config(&["--max-meta-bytes", "4096"]).unwrap(), 4096);
        for bad in ["0", "1", "-1", "x"] {
            assert!(config(&["--max-meta-bytes", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_rate_limit_bursts_one_seconds_worth_unless_told_and_headers_have_a_floor() {
        let config = |flags: &[&str]| {
            let serve = Serve::try_parse_from(["serve"].iter().chain(flags)).map_err(|e| e.to_string())?;
            serve.args.config()
        };
        let rate = |flags: &[&str]| {
            config(flags)
                .unwrap()
                .rate_limit
                .map(|rate| (rate.per_second.get(), rate.burst.get()))
        };
        assert_eq!(rate(&[]), None);
        assert_eq!(rate(&["--rate-limit", "5"]), Some((5, 5)));
        assert_eq!(rate(&["--rate-limit", "5", "--rate-burst", "20"]), Some((5, 20)));
        assert!(config(&["--rate-burst", "20"]).is_err());
        assert!(config(&["--rate-limit", "0"]).is_err());
        assert_eq!(config(&[]).unwrap().max_header_bytes, 16_384);
        let small = config(&["--max-header-bytes", "8191"]).unwrap_err();
        assert!(small.contains("at least 8192"), "{small}");
    }

    #[test]
    fn the_lock_delay_is_a_duration_of_whole_milliseconds_and_none_by_default() {
        let delay = |flags: &[&str]| {
            let serve = Serve::try_parse_from(["serve"].iter().chain(flags)).map_err(|e| e.to_string())?;
            serve.args.config().map(|config| config.lock_delay)
        };
        assert_eq!(delay(&[]), Ok(Duration::ZERO));
        assert_eq!(delay(&["--lock-delay", "15s"]), Ok(Duration::from_secs(15)));
        assert_eq!(delay(&["--lock-delay", "300ms"]), Ok(Duration::from_millis(300)));
        assert!(delay(&["--lock-delay", "soon"]).is_err());
        let fraction = delay(&["--lock-delay", "1500us"]).unwrap_err();
        assert!(fraction.contains("whole number of milliseconds"), "{fraction}");
    }
}
