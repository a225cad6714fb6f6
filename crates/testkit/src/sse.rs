//! [`EventStream`]: a Server-Sent Events stream read through a real HTTP client, one event
//! (or heartbeat comment) at a time, with a deadline on each read.

use std::time::Duration;

/// One message of an event stream: an event, or a comment (a heartbeat).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Message {
    /// The `event:` line (empty for a comment alone).
    pub event: String,
    /// The `id:` line, if any.
    pub id: Option<String>,
    /// The `data:` lines, joined by newlines.
    pub data: String,
    /// The comment lines (`: text`), without the colon and the space.
    pub comments: Vec<String>,
}

impl Message {
    /// The data as JSON (`Null` if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or(serde_json::Value::Null)
    }

    /// Whether this is a comment only (no event).
    pub fn is_comment(&self) -> bool {
        self.event.is_empty() && self.data.is_empty()
    }
}

/// An event stream being read.
#[derive(Debug)]
pub struct EventStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
    ended: bool,
}

impl EventStream {
    /// Reads the stream of `response` (a 200 `text/event-stream`; panics otherwise).
    pub fn new(response: reqwest::Response) -> Self {
        assert_eq!(
            response.status(),
            reqwest::StatusCode::OK,
            "an event stream answers 200"
        );
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(
            content_type.starts_with("text/event-stream"),
            "an event stream is text/event-stream, not {content_type:?}"
        );
        Self {
            response,
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next message, comments included; `None` when the server ended the stream. Fails
    /// the test if none comes within `limit`.
    pub async fn next_message(&mut self, limit: Duration) -> Option<Message> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(message) = self.parse_one() {
                return Some(message);
            }
            if self.ended {
                return None;
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk())
                .await
                .unwrap_or_else(|_| panic!("no event within {limit:?}"));
            match chunk {
                Ok(Some(bytes)) => self.buffer.extend_from_slice(&bytes),
                Ok(None) | Err(_) => self.ended = true,
            }
        }
    }

    /// The next event, skipping comments; `None` when the server ended the stream. Fails the
    /// test if none comes within `limit`.
    pub async fn next_event(&mut self, limit: Duration) -> Option<Message> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let message = self.next_message(left).await?;
            if !message.is_comment() {
                return Some(message);
            }
        }
    }

    /// Events until one that `until` accepts (which is returned last), comments skipped.
    pub async fn events_until(&mut self, limit: Duration, until: impl Fn(&Message) -> bool) -> Vec<Message> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let Some(message) = self.next_event(left).await else {
                panic!("the stream ended before the event waited for; saw {seen:#?}");
            };
            let done = until(&message);
            seen.push(message);
            if done {
                return seen;
            }
        }
    }

    /// One message parsed off the buffer, if a whole one (ended by a blank line) is there.
    fn parse_one(&mut self) -> Option<Message> {
        let end = self.buffer.windows(2).position(|pair| pair == b"\n\n")?;
        let block = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
        self.buffer.drain(..end + 2);
        let mut message = Message::default();
        let mut data = Vec::new();
        for line in block.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "" => message.comments.push(value.to_owned()),
                "event" => message.event = value.to_owned(),
                "id" => message.id = Some(value.to_owned()),
                "data" => data.push(value),
                _ => {}
            }
        }
        message.data = data.join("\n");
        Some(message)
    }
}
