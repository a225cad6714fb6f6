//! [`Events`]: the event stream of a server (`GET /events`), or of one election (`GET
//! /elections/{name}/observe`), read one event at a time, that resumes by itself — from the last id it saw — when the connection ends or the server cuts
//! it off for falling behind.

use fencelock_core::StoreError;
use fencelock_wire::{EventData, EventName};
use reqwest::Response;

use crate::http::HttpStore;

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// What it tells (`grant`, `release`, …, `snapshot`, `reset`).
    pub name: EventName,
    /// Its id, if it has one.
    pub id: Option<String>,
    /// Its `data:`, JSON.
    pub data: String,
}

impl Event {
    /// The change it tells (`None` for a `reset`).
    pub fn change(&self) -> Option<EventData> {
        serde_json::from_str(&self.data).ok()
    }
}

/// A server's event stream, or an election's. See the module docs.
#[derive(Debug)]
pub struct Events {
    http: reqwest::Client,
    url: String,
    base: String,
    /// The last id seen (of an event or a heartbeat): where a new connection resumes.
    last: Option<String>,
    response: Option<Response>,
    buffer: Vec<u8>,
}

impl Events {
    /// The stream at `url` (a path and query of `store`'s server).
    pub(crate) fn new(store: &HttpStore, http: reqwest::Client, url: String) -> Self {
        Self {
            http,
            url,
            base: store.base().to_owned(),
            last: None,
            response: None,
            buffer: Vec::new(),
        }
    }

    /// The last id seen.
    pub fn last_id(&self) -> Option<&str> {
        self.last.as_deref()
    }

    /// Connects now, if not connected yet (the first [`next`](Self::next) would): once this
    /// returns, the stream has every event from the server's answer on. An error if the
    /// server cannot be reached or refuses the stream.
    pub async fn connect(&mut self) -> Result<(), StoreError> {
        if self.response.is_none() {
            self.response = Some(self.open().await?);
        }
        Ok(())
    }

    /// The next event. When the connection ends (or the server cut the stream off with
    /// `overflow`), connects again from the last id seen, once; an error if that fails, or
    /// if the server refuses the stream.
    pub async fn next(&mut self) -> Result<Event, StoreError> {
        let mut reconnected = false;
        loop {
            if self.response.is_none() {
                self.response = Some(self.open().await?);
            }
            match self.read().await {
                Some(Message::Event(event)) if event.name == EventName::Overflow => self.response = None,
                Some(Message::Event(event)) => return Ok(event),
                Some(Message::Quiet) => {}
                None if reconnected => {
                    return Err(StoreError::Unavailable {
                        message: format!("the fencelock server at {} ended the event stream", self.base),
                        source: None,
                    });
                }
                None => {
                    self.response = None;
                    reconnected = true;
                }
            }
        }
    }

    async fn open(&self) -> Result<Response, StoreError> {
        let mut request = self.http.get(&self.url);
        if let Some(last) = &self.last {
            request = request.header("last-event-id", last);
        }
        let unreachable = |e| {
            StoreError::unavailable(
                format!("the fencelock server at {} cannot be reached", self.base),
                e,
            )
        };
        let response = request.send().await.map_err(unreachable)?;
        match response.status().as_u16() {
            200 => Ok(response),
            401 => Err(StoreError::Unauthenticated(
                response.text().await.unwrap_or_default(),
            )),
            403 => Err(StoreError::NotAllowed(response.text().await.unwrap_or_default())),
            422 => Err(StoreError::Invalid(response.text().await.unwrap_or_default())),
            status => Err(StoreError::Unavailable {
                message: format!(
                    "the fencelock server at {} answered {status}: {}",
                    self.base,
                    response.text().await.unwrap_or_default()
                ),
                source: None,
            }),
        }
    }

    /// The next message of the current connection; `None` when it ends.
    async fn read(&mut self) -> Option<Message> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|pair| pair == b"\n\n") {
                let block = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
                self.buffer.drain(..end + 2);
                return Some(self.parse(&block));
            }
            let response = self.response.as_mut()?;
            match response.chunk().await {
                Ok(Some(bytes)) => self.buffer.extend_from_slice(&bytes),
                Ok(None) | Err(_) => {
                    self.buffer.clear();
                    return None;
                }
            }
        }
    }

    /// One message: an event, or a comment (a heartbeat) whose id is kept.
    fn parse(&mut self, block: &str) -> Message {
        let (mut name, mut id, mut data) = (None, None, Vec::new());
        for line in block.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => name = EventName::parse(value),
                "id" => id = Some(value.to_owned()),
                "data" => data.push(value),
                _ => {}
            }
        }
        if let Some(id) = &id {
            self.last = Some(id.clone());
        }
        match name {
            Some(name) => Message::Event(Event {
                name,
                id,
                data: data.join("\n"),
            }),
            None => Message::Quiet,
        }
    }
}

enum Message {
    Event(Event),
    /// A heartbeat, or an event of a name this client does not know.
    Quiet,
}
