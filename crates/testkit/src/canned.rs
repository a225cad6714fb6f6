//! [`Canned`]: an HTTP/1.1 server on loopback that gives every request the same answer and
//! keeps the requests, for tests of how a client reads answers no real server of the test
//! can give (a 401, a 429 with its `Retry-After`) and of what the client sent.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

/// A loopback HTTP/1.1 server that answers every request with one canned answer (and
/// `Connection: close`), and keeps each request it got. Its threads are the test binary's:
/// it cannot outlive it.
#[derive(Debug)]
pub struct Canned {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Canned {
    /// A server answering `status` (e.g. `401 Unauthorized`) with `headers` and an
    /// `application/problem+json` body `body`.
    pub fn start(status: &str, headers: &[(&str, &str)], body: &str) -> Self {
        let mut answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/problem+json\r\nContent-Length: {}\r\nConnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            answer.push_str(&format!("{name}: {value}\r\n"));
        }
        answer.push_str("\r\n");
        answer.push_str(body);
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a canned server's port");
        let port = listener.local_addr().expect("a bound port").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let kept = requests.clone();
        thread::Builder::new()
            .name(format!("canned-{port}"))
            .spawn(move || {
                for stream in listener.incoming().map_while(Result::ok) {
                    let (answer, kept) = (answer.clone(), kept.clone());
                    thread::spawn(move || answer_one(stream, &answer, &kept));
                }
            })
            .expect("start a canned server thread");
        Self { port, requests }
    }

    /// A server answering `status` (e.g. `403 Forbidden`) with `headers` and the problem
    /// `urn:fencelock:problem:SLUG` that says `detail`.
    pub fn problem(status: &str, headers: &[(&str, &str)], slug: &str, detail: &str) -> Self {
        let code = status.split(' ').next().unwrap_or_default();
        let body = format!(
            r#"{{"type":"urn:fencelock:problem:{slug}","title":"{status}","status":{code},"detail":"{detail}","instance":"/"}}"#
        );
        Self::start(status, headers, &body)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far, whole (request line, headers, body), in the order they came.
    pub fn requests(&self) -> Vec<String> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Reads one request (its head, then as much body as its `Content-Length` says), keeps it,
/// and answers.
fn answer_one(stream: TcpStream, answer: &str, kept: &Mutex<Vec<String>>) {
    let Ok(writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    let mut request = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
        request.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    request.push_str(&String::from_utf8_lossy(&body));
    kept.lock().unwrap_or_else(PoisonError::into_inner).push(request);
    let mut writer = writer;
    let _ = writer.write_all(answer.as_bytes());
}
