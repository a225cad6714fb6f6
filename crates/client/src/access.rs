//! What a client shows a server, and which servers it trusts: its bearer [`AuthToken`], and
//! the [`CaCertificates`] that sign the certificate of an `https://` server.

use std::fmt;

use reqwest::header::HeaderValue;

/// A bearer token for a server with authentication on, sent as `Authorization: Bearer TOKEN`
/// on every request. Never shown: its `Debug` prints `AuthToken(…)`.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthToken(String);

/// Why a string is not a bearer token.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid auth token: {0} (a token is letters, digits and - . _ ~ + /, optionally ending in =, as `fencelock auth new-token` prints it)"
)]
pub struct InvalidAuthToken(&'static str);

impl AuthToken {
    /// The longest token taken, in bytes: far more than a 256-bit token needs, and well
    /// within a server's header limit.
    pub const MAX_LEN: usize = 1024;

    /// The token `token`: an RFC 6750 `b64token` (letters, digits, `-._~+/`, then any `=`),
    /// at most [`Self::MAX_LEN`] bytes. Surrounding whitespace (a token file's newline) is
    /// dropped.
    pub fn new(token: &str) -> Result<Self, InvalidAuthToken> {
        let token = token.trim();
        if token.is_empty() {
            return Err(InvalidAuthToken("it is empty"));
        }
        if token.len() > Self::MAX_LEN {
            return Err(InvalidAuthToken("it is longer than 1024 bytes"));
        }
        let body = token.trim_end_matches('=');
        let fits = |c: char| c.is_ascii_alphanumeric() || "-._~+/".contains(c);
        if body.is_empty() || !body.chars().all(fits) {
            return Err(InvalidAuthToken("it has a character a bearer token cannot have"));
        }
        Ok(Self(token.to_owned()))
    }

    /// The token itself, for whoever must send it (a client of its own): keep it out of logs.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The `Authorization` header's value, `Bearer TOKEN`, marked sensitive (HTTP/2 would not
    /// index it; debug output hides it).
    pub fn authorization(&self) -> HeaderValue {
        // A b64token is visible ASCII: always a valid header value.
        let mut value =
            HeaderValue::try_from(format!("Bearer {}", self.0)).expect("a b64token is a valid header value");
        value.set_sensitive(true);
        value
    }
}

impl fmt::Debug for AuthToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthToken(…)")
    }
}

impl std::str::FromStr for AuthToken {
    type Err = InvalidAuthToken;

    fn from_str(token: &str) -> Result<Self, Self::Err> {
        Self::new(token)
    }
}

/// The certificates of the CAs an `https://` client trusts, in place of the system's: the
/// server's certificate must be signed by one of them (e.g. a private CA, or a self-signed
/// server certificate itself).
#[derive(Debug, Clone)]
pub struct CaCertificates(Vec<reqwest::Certificate>);

/// Why PEM text gave no CA certificate.
#[derive(Debug, thiserror::Error)]
#[error("invalid CA certificate: {0}")]
pub struct InvalidCaCertificate(String);

impl CaCertificates {
    /// Every certificate in `pem` (one or more `BEGIN CERTIFICATE` blocks); at least one.
    pub fn from_pem(pem: &[u8]) -> Result<Self, InvalidCaCertificate> {
        let certificates =
            reqwest::Certificate::from_pem_bundle(pem).map_err(|e| InvalidCaCertificate(e.to_string()))?;
        if certificates.is_empty() {
            return Err(InvalidCaCertificate(
                "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
            ));
        }
        Ok(Self(certificates))
    }

    /// The certificates, for the HTTP client.
    pub(crate) fn certificates(&self) -> impl Iterator<Item = reqwest::Certificate> + '_ {
        self.0.iter().cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_a_b64token_and_never_shown() {
        let token = AuthToken::new(" 0f3a-._~+/x==\n").unwrap();
        assert_eq!(token.expose(), "0f3a-._~+/x==");
        assert_eq!(token.authorization(), "Bearer 0f3a-._~+/x==");
        assert!(token.authorization().is_sensitive());
        assert_eq!(format!("{token:?}"), "AuthToken(…)");
        for bad in ["", "  ", "==", "a b", "Bearer x", "tök", "a=b", &"x".repeat(1025)] {
            assert!(AuthToken::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn ca_pem_needs_a_certificate() {
        let error = CaCertificates::from_pem(b"not a certificate").unwrap_err();
        assert!(error.to_string().contains("no PEM certificate"), "{error}");
    }
}
