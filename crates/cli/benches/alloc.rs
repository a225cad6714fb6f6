//! What one request costs the server in allocations, beside how many it answers a second
//! (issue 25, item 1): `cargo bench --all-features -p fencelock --bench alloc`.
//!
//! The server runs in this process, as `fencelock serve` runs it (its runtime, its JSON log
//! lines through the same non-blocking writer, here into a sink), on `memory://` and on the
//! embedded store in a temporary folder. Every allocation of the process goes through a
//! counting global allocator; the clients are plain threads on keep-alive TCP connections that
//! write each request into one reused buffer and read each answer into another, so that what is
//! counted over a phase, divided by its requests, is the server's cost per request (the
//! runtime's, hyper's, the handler's, the store's, the log writer's thread's).
//!
//! Flags: `--requests N` per phase (default 40,000), `--connections N` (default 8).
//! Requests/s is the phase's requests over its wall time: a figure to compare phases and
//! commits of one run, with the clients on the same two cores; `scripts/bench-wrk` is the
//! throughput benchmark.

// The bench logs as the binary does: the binary's own module, of which it needs one function.
#[allow(dead_code)]
#[path = "../src/logging/mod.rs"]
mod logging;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fencelock_server::Config;

/// Counts every allocation (a `realloc` is one, of its new size) and the bytes asked for.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to `System` unchanged; the counters are only atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(bytes as u64, Ordering::Relaxed);
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// The process's allocations and bytes so far.
fn counted() -> (u64, u64) {
    (ALLOCATIONS.load(Ordering::Relaxed), BYTES.load(Ordering::Relaxed))
}

/// One request a client sends, by its index: written into the client's reused buffer.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// `GET /healthz`.
    Healthz,
    /// `POST /locks/bench:{client}:{i}`, no `wait_ms`: each a grant of a free name.
    Acquire,
    /// `DELETE /locks/bench:{client}:{i}` with the token its acquire got.
    Release,
    /// An acquire, then the release of what it got: two requests.
    Cycle,
}

/// What a phase cost per request, and how many it answered a second.
struct Cost {
    allocations: f64,
    bytes: f64,
    per_second: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (mut requests, mut connections) = (40_000_usize, 8_usize);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--requests" => requests = args.next().ok_or("--requests needs N")?.parse()?,
            "--connections" => connections = args.next().ok_or("--connections needs N")?.parse()?,
            // `cargo bench` passes `--bench`.
            "--bench" => {}
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let _logs = logging::init_to(logging::Format::Json, std::io::sink(), false)?;
    let runtime = tokio::runtime::Runtime::new()?;
    let folder = tempfile::tempdir()?;
    let embedded = format!("sqlite://{}", folder.path().join("bench.db").display());

    println!("{connections} connections, {requests} requests per phase; per request:");
    println!("| store | request | allocations | bytes | requests/s |");
    println!("| --- | --- | --- | --- | --- |");
    for (store, asks) in [
        ("memory://", &[Ask::Healthz, Ask::Acquire, Ask::Release][..]),
        (embedded.as_str(), &[Ask::Acquire, Ask::Release, Ask::Cycle][..]),
    ] {
        let address = runtime.block_on(start(store))?;
        // Warms up what is made once (metric series, thread-locals, the store's statements).
        drive(address, connections, 64, Ask::Cycle, 0)?;
        for (phase, &ask) in asks.iter().enumerate() {
            // Names of a phase are its own, so that every acquire is a grant.
            let cost = drive(address, connections, requests, ask, phase + 1)?;
            let label = if store.starts_with("sqlite") {
                "embedded"
            } else {
                store
            };
            println!(
                "| {label} | {ask:?} | {:.1} | {:.0} | {:.0} |",
                cost.allocations, cost.bytes, cost.per_second
            );
        }
    }
    Ok(())
}

/// Serves `store` on a loopback port in the runtime's background, as `fencelock serve`.
async fn start(store: &str) -> Result<SocketAddr, Box<dyn std::error::Error>> {
    let store = fencelock_stores::open(store).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(fencelock_server::serve(
        listener,
        store,
        Config::default(),
        std::future::pending(),
    ));
    Ok(address)
}

/// `requests` of `ask` over `connections` clients (a release needs the phase before it to
/// have acquired the same names: phase numbers name them), counted from the first to the last.
fn drive(
    address: SocketAddr,
    connections: usize,
    requests: usize,
    ask: Ask,
    phase: usize,
) -> Result<Cost, Box<dyn std::error::Error>> {
    // A release releases the names of the acquire phase before it.
    let names = if matches!(ask, Ask::Release) {
        phase - 1
    } else {
        phase
    };
    let each = requests / connections;
    let streams = (0..connections)
        .map(|_| TcpStream::connect(address))
        .collect::<Result<Vec<_>, _>>()?;
    let (before, started) = (counted(), Instant::now());
    let sent = std::thread::scope(|scope| {
        let clients: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(client, stream)| scope.spawn(move || client_run(stream, client, names, each, ask)))
            .collect();
        clients
            .into_iter()
            .map(|client| client.join().unwrap_or_else(|_| Err("a client panicked".into())))
            .sum::<Result<usize, String>>()
    })?;
    let took = started.elapsed();
    let after = counted();
    // The client threads' own allocations (their stacks' bookkeeping, the join handles) are
    // counted too: a few per phase, nothing per request.
    let sent_f = sent as f64;
    Ok(Cost {
        allocations: (after.0 - before.0) as f64 / sent_f,
        bytes: (after.1 - before.1) as f64 / sent_f,
        per_second: sent_f / took.as_secs_f64().max(Duration::from_micros(1).as_secs_f64()),
    })
}

/// Tokens of the last phase that acquired, by client and index: a release sends its own.
static TOKENS: std::sync::Mutex<Vec<Vec<u64>>> = std::sync::Mutex::new(Vec::new());

/// One client: `each` of `ask`, one at a time on one keep-alive connection. Returns how many
/// requests it sent.
fn client_run(
    mut stream: TcpStream,
    client: usize,
    names: usize,
    each: usize,
    ask: Ask,
) -> Result<usize, String> {
    let mut request = Vec::with_capacity(512);
    let mut answer = [0_u8; 4096];
    // Made before the first request, filled in place: no allocation per request.
    let mut tokens = match ask {
        Ask::Release => take_tokens(client),
        _ => vec![0_u64; each],
    };
    let mut sent = 0;
    for (i, token) in tokens.iter_mut().enumerate().take(each) {
        let steps: &[Ask] = match ask {
            Ask::Cycle => &[Ask::Acquire, Ask::Release],
            _ => std::slice::from_ref(&ask),
        };
        for &step in steps {
            request.clear();
            write_request(&mut request, step, names, client, i, *token).map_err(|e| e.to_string())?;
            stream.write_all(&request).map_err(|e| e.to_string())?;
            let (status, body) = read_answer(&mut stream, &mut answer)?;
            let expected = if matches!(step, Ask::Release) { 204 } else { 200 };
            if status != expected {
                return Err(format!(
                    "{step:?} answered {status}: {}",
                    String::from_utf8_lossy(body)
                ));
            }
            if matches!(step, Ask::Acquire) {
                *token = fencing_token(body).ok_or("an acquire answered no fencing_token")?;
            }
            sent += 1;
        }
    }
    if matches!(ask, Ask::Acquire) {
        put_tokens(client, tokens);
    }
    Ok(sent)
}

fn take_tokens(client: usize) -> Vec<u64> {
    let mut all = TOKENS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    all.get_mut(client).map(std::mem::take).unwrap_or_default()
}

fn put_tokens(client: usize, tokens: Vec<u64>) {
    let mut all = TOKENS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if all.len() <= client {
        all.resize(client + 1, Vec::new());
    }
    all[client] = tokens;
}

/// Writes the HTTP/1.1 request of `step` into `request` (whose capacity is enough).
fn write_request(
    request: &mut Vec<u8>,
    step: Ask,
    names: usize,
    client: usize,
    i: usize,
    token: u64,
) -> std::io::Result<()> {
    let mut body = [0_u8; 96];
    let room = body.len();
    let mut cursor = &mut body[..];
    let (method, path) = match step {
        Ask::Healthz => ("GET", false),
        Ask::Acquire | Ask::Cycle => {
            write!(cursor, r#"{{"owner":"bench-{client}","ttl_ms":60000}}"#)?;
            ("POST", true)
        }
        Ask::Release => {
            write!(cursor, r#"{{"owner":"bench-{client}","fencing_token":{token}}}"#)?;
            ("DELETE", true)
        }
    };
    let length = room - cursor.len();
    if path {
        write!(request, "{method} /locks/bench:{names}:{client}:{i} HTTP/1.1\r\n")?;
    } else {
        write!(request, "{method} /healthz HTTP/1.1\r\n")?;
    }
    write!(
        request,
        "Host: bench\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )?;
    request.extend_from_slice(&body[..length]);
    Ok(())
}

/// Reads one answer into `buffer`: its status and its body.
fn read_answer<'a>(stream: &mut TcpStream, buffer: &'a mut [u8]) -> Result<(u16, &'a [u8]), String> {
    let mut filled = 0;
    loop {
        let n = stream.read(&mut buffer[filled..]).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        filled += n;
        let Some(head) = find(&buffer[..filled], b"\r\n\r\n") else {
            continue;
        };
        let length = content_length(&buffer[..head]).unwrap_or(0);
        let end = head + 4 + length;
        if filled < end {
            continue;
        }
        let status = std::str::from_utf8(&buffer[9..12])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("no status line")?;
        return Ok((status, &buffer[head + 4..end]));
    }
}

fn content_length(head: &[u8]) -> Option<usize> {
    let at = find_ignoring_case(head, b"content-length:")? + b"content-length:".len();
    digits(&head[at..])
}

fn fencing_token(body: &[u8]) -> Option<u64> {
    let at = find(body, br#""fencing_token":"#)? + br#""fencing_token":"#.len();
    digits(&body[at..]).map(|n| n as u64)
}

/// The number at the start of `bytes`, after spaces.
fn digits(bytes: &[u8]) -> Option<usize> {
    let bytes = bytes.trim_ascii_start();
    let end = bytes
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(bytes.len());
    std::str::from_utf8(&bytes[..end]).ok()?.parse().ok()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn find_ignoring_case(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}
