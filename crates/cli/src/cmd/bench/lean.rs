//! A lean HTTP/1.1 session for `fencelock bench --server http://…`: one keep-alive connection
//! per client, spoken with hyper's connection API directly — no pool, no redirects, no
//! per-request builder — so that the load generator costs the server about what the Redis
//! client costs Redis. The bodies and answers are the wire crate's, as the client library's,
//! and so is the `Authorization` header of a token ([`AuthToken::authorization`]).

use std::sync::Arc;

use anyhow::{Context, bail};
use async_trait::async_trait;
use fencelock_client::AuthToken;
use fencelock_core::{AcquireOutcome, Claim, HoldOutcome, Owner, Resource, Ttl};
use fencelock_wire::hold::{HoldAcquireRequest, HoldAcquireResponse, collection};
use fencelock_wire::{AcquireRequest, AcquireResponse, ReleaseRequest, TtlFields, outcome, parse};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::Session;
use crate::cmd::common::{Failure, exit};

/// The `host:port` of a plain `http://host:port` server address, or `None` for anything
/// else (https, a path), which the client library's session serves instead (with TLS).
pub fn authority(server: &str) -> Option<&str> {
    let rest = server.strip_prefix("http://")?.trim_end_matches('/');
    (!rest.is_empty() && !rest.contains('/')).then_some(rest)
}

/// One client's connection and what it asks for.
pub struct LeanSession {
    send: SendRequest<Full<Bytes>>,
    authority: String,
    /// The path of each resource, for its kind.
    paths: Arc<Vec<String>>,
    owner: Owner,
    ttl: Ttl,
    claim: Option<Claim>,
    /// `Bearer TOKEN`, sent with every request, for a server with authentication on.
    authorization: Option<HeaderValue>,
}

impl LeanSession {
    /// Connects to `authority` for `owner`, sending `token` (if any) with every request.
    pub async fn connect(
        authority: &str,
        names: &[Resource],
        owner: Owner,
        ttl: Ttl,
        claim: Option<Claim>,
        token: Option<&AuthToken>,
    ) -> Result<Self, Failure> {
        let unreachable =
            |e: &dyn std::fmt::Display| Failure::new(exit::UNREACHABLE, format!("http://{authority}: {e}"));
        let stream = TcpStream::connect(authority).await.map_err(|e| unreachable(&e))?;
        stream.set_nodelay(true).map_err(|e| unreachable(&e))?;
        let (send, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
        // The connection's own task drives it until the session drops its sender.
        tokio::spawn(connection);
        let base = claim.map_or("/locks", |c| collection(c.kind()));
        let paths = names
            .iter()
            .map(|name| format!("{base}/{}", parse::encode_segment(name.as_str())))
            .collect();
        Ok(Self {
            send,
            authority: authority.to_owned(),
            paths: Arc::new(paths),
            owner,
            ttl,
            claim,
            authorization: token.map(AuthToken::authorization),
        })
    }

    async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<(StatusCode, Bytes)> {
        self.send.ready().await.context("the connection closed")?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, &self.authority)
            .header(CONTENT_TYPE, "application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        let request = request.body(Full::new(Bytes::from(body)))?;
        let response = self.send.send_request(request).await?;
        let status = response.status();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    }
}

#[async_trait]
impl Session for LeanSession {
    async fn try_acquire(&mut self, resource: usize) -> anyhow::Result<Option<u64>> {
        let body = match self.claim {
            Some(claim) => serde_json::to_vec(&HoldAcquireRequest::new(
                &self.owner,
                claim,
                self.ttl,
                None,
                Default::default(),
            )),
            None => serde_json::to_vec(&AcquireRequest {
                owner: self.owner.to_string(),
                ttl: TtlFields::ms(self.ttl.as_millis()),
                wait_ms: None,
                max_hold_ms: None,
                meta: None,
            }),
        }?;
        let paths = self.paths.clone();
        let (status, answer) = self.call(Method::POST, &paths[resource], body).await?;
        if status != StatusCode::OK {
            bail!("acquire answered {status}");
        }
        let token = match self.claim {
            Some(_) => {
                match outcome::decode_hold_acquire(serde_json::from_slice::<HoldAcquireResponse>(&answer)?)? {
                    HoldOutcome::Granted { hold, .. } | HoldOutcome::Extended(hold) => {
                        Some(hold.lease.token.0)
                    }
                    HoldOutcome::Busy(_) | HoldOutcome::LimitMismatch { .. } => None,
                }
            }
            None => match outcome::decode_acquire(serde_json::from_slice::<AcquireResponse>(&answer)?)? {
                AcquireOutcome::Granted { lease, .. } | AcquireOutcome::Extended(lease) => {
                    Some(lease.token.0)
                }
                AcquireOutcome::Held { .. } | AcquireOutcome::Delayed { .. } => None,
            },
        };
        Ok(token)
    }

    async fn release(&mut self, resource: usize, token: u64) -> anyhow::Result<bool> {
        let body = serde_json::to_vec(&ReleaseRequest {
            owner: self.owner.to_string(),
            fencing_token: Some(token),
        })?;
        let paths = self.paths.clone();
        let (status, _) = self.call(Method::DELETE, &paths[resource], body).await?;
        Ok(status == StatusCode::NO_CONTENT)
    }
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn only_plain_http_host_and_port_goes_the_lean_way() {
        assert_eq!(authority("http://127.0.0.1:7070"), Some("127.0.0.1:7070"));
        assert_eq!(authority("http://localhost:7070/"), Some("localhost:7070"));
        assert_eq!(authority("https://127.0.0.1:7070"), None);
        assert_eq!(authority("http://host:1/prefix"), None);
        assert_eq!(authority("http://"), None);
    }
}
