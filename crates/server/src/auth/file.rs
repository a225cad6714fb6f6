//! The authentication file (`fencelock serve --auth FILE`): principals, the SHA-256 of each
//! one's bearer token, and what each may do over which names. Read from TOML and checked
//! whole before anything uses it, so a bad file changes nothing.
//!
//! ```toml
//! [[principal]]
//! name = "billing"
//! token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! grants = [{ prefix = "payment:", rights = ["read", "lock"] }]
//! ```

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use fencelock_core::Principal;
use fencelock_core::model::MAX_NAME_BYTES;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a grant allows over the names it covers, of every kind (locks, semaphores,
/// read-write locks). No right implies another: `lock` without `read` may take a lease but
/// not look at one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Right {
    /// Read one name's lease, permits or holds; see the name in a list.
    Read,
    /// Acquire, renew and release.
    Lock,
    /// Force-release, whoever holds the name.
    Admin,
}

impl Right {
    /// Every right, in the order the file lists them.
    pub const ALL: [Self; 3] = [Self::Read, Self::Lock, Self::Admin];

    /// The name in the file and in messages: `read`, `lock`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Lock => "lock",
            Self::Admin => "admin",
        }
    }
}

/// Rights over every name that starts with `prefix` (the empty prefix: every name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The start of the names covered, compared byte for byte.
    pub prefix: String,
    /// What it allows over them.
    pub rights: Vec<Right>,
}

/// One principal of the file: who a token authenticates as, and its grants.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    /// The principal's name, which its leases carry.
    pub principal: Principal,
    token_sha256: [u8; 32],
    /// What it may do, and where.
    pub grants: Vec<Grant>,
}

impl Identity {
    /// Whether some grant gives `right` over `name`.
    pub fn may(&self, right: Right, name: &str) -> bool {
        self.prefixes(right).any(|prefix| name.starts_with(prefix))
    }

    /// The prefixes of the grants that give `right`.
    pub fn prefixes(&self, right: Right) -> impl Iterator<Item = &str> {
        self.grants
            .iter()
            .filter(move |grant| grant.rights.contains(&right))
            .map(|grant| grant.prefix.as_str())
    }
}

/// Without the token's hash: a log line or a panic message must not carry it.
impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("principal", &self.principal)
            .field("grants", &self.grants)
            .finish_non_exhaustive()
    }
}

/// A checked authentication file.
#[derive(Debug, Clone)]
pub struct AuthFile {
    identities: Vec<Arc<Identity>>,
}

/// Why an authentication file was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// It could not be read.
    #[error("cannot read it: {0}")]
    Read(#[from] std::io::Error),
    /// It is not TOML of the expected shape (the message gives the line and the field).
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    /// A field of one principal is wrong.
    #[error("{principal}: {field} {message}")]
    Invalid {
        /// Which principal: `principal "billing"`, or `principal #2` when its name is the
        /// problem.
        principal: String,
        /// The field, e.g. `token_sha256` or `grants[0].rights`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No principal at all: every request would be refused.
    #[error("it names no [[principal]]: every request would be refused")]
    Empty,
}

/// The file as TOML gives it, before any check.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    principal: Vec<RawPrincipal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: String,
    token_sha256: String,
    grants: Vec<RawGrant>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGrant {
    prefix: String,
    rights: Vec<String>,
}

impl AuthFile {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, AuthFileError> {
        Self::parse(&std::fs::read_to_string(path)?)
    }

    /// Checks the TOML `text`: every principal's name valid and unique, every token hash 64
    /// hex digits and unique (a token must name one principal), every right known.
    pub fn parse(text: &str) -> Result<Self, AuthFileError> {
        let raw: RawFile = toml::from_str(text)?;
        if raw.principal.is_empty() {
            return Err(AuthFileError::Empty);
        }
        let mut identities: Vec<Arc<Identity>> = Vec::with_capacity(raw.principal.len());
        for (index, raw) in raw.principal.into_iter().enumerate() {
            let identity = identity(index + 1, raw)?;
            let invalid = |field: &str, message: String| AuthFileError::Invalid {
                principal: format!("principal {:?}", identity.principal.as_str()),
                field: field.to_owned(),
                message,
            };
            for other in &identities {
                if other.principal == identity.principal {
                    return Err(invalid("name", "is given to two principals".into()));
                }
                if other.token_sha256 == identity.token_sha256 {
                    let message = format!(
                        "is also principal {:?}'s: a token must name one principal",
                        other.principal.as_str()
                    );
                    return Err(invalid("token_sha256", message));
                }
            }
            identities.push(Arc::new(identity));
        }
        Ok(Self { identities })
    }

    /// How many principals the file has.
    pub fn len(&self) -> usize {
        self.identities.len()
    }

    /// Whether it has none (never, once checked).
    pub fn is_empty(&self) -> bool {
        self.identities.is_empty()
    }

    /// The principal whose token is `token`, if any. The token's SHA-256 is compared with
    /// every principal's in constant time, and the loop never stops at a match: how long
    /// this takes tells nothing of how close a guess came, nor which principal matched.
    pub fn authenticate(&self, token: &str) -> Option<&Arc<Identity>> {
        let hash = digest(token);
        let mut found = None;
        for identity in &self.identities {
            if bool::from(identity.token_sha256.ct_eq(&hash)) {
                found = Some(identity);
            }
        }
        found
    }
}

/// The `token_sha256` of `token`, as an authentication file gives it: its SHA-256 in
/// lowercase hex.
pub fn token_sha256(token: &str) -> String {
    digest(token).iter().map(|byte| format!("{byte:02x}")).collect()
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Checks the `number`th principal of the file.
fn identity(number: usize, raw: RawPrincipal) -> Result<Identity, AuthFileError> {
    let invalid = |principal: String, field: &str, message: String| AuthFileError::Invalid {
        principal,
        field: field.to_owned(),
        message,
    };
    let principal = Principal::new(raw.name)
        .map_err(|e| invalid(format!("principal #{number}"), "name", e.to_string()))?;
    let who = format!("principal {:?}", principal.as_str());
    let token_sha256 = sha256_hex(&raw.token_sha256).ok_or_else(|| {
        invalid(
            who.clone(),
            "token_sha256",
            "must be 64 hex digits: the SHA-256 of the token (`fencelock auth new-token` prints it)".into(),
        )
    })?;
    let grants = raw
        .grants
        .into_iter()
        .enumerate()
        .map(|(i, grant)| {
            self::grant(grant)
                .map_err(|(field, message)| invalid(who.clone(), &format!("grants[{i}].{field}"), message))
        })
        .collect::<Result<_, _>>()?;
    Ok(Identity {
        principal,
        token_sha256,
        grants,
    })
}

/// Checks one grant; an error names its field and says what is wrong.
fn grant(raw: RawGrant) -> Result<Grant, (&'static str, String)> {
    if raw.prefix.len() > MAX_NAME_BYTES || raw.prefix.chars().any(|c| c.is_ascii_control()) {
        return Err((
            "prefix",
            format!("must be at most {MAX_NAME_BYTES} bytes without control characters, as names are"),
        ));
    }
    if raw.rights.is_empty() {
        return Err(("rights", "must not be empty".into()));
    }
    let rights = raw
        .rights
        .iter()
        .map(|name| {
            Right::ALL
                .into_iter()
                .find(|right| right.as_str() == name)
                .ok_or_else(|| {
                    (
                        "rights",
                        format!("has the unknown right {name:?} (the rights are read, lock and admin)"),
                    )
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(Grant {
        prefix: raw.prefix,
        rights,
    })
}

/// 64 hex digits (either case) as 32 bytes.
fn sha256_hex(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(digits.chunks_exact(2)) {
        let digit = |d: u8| char::from(d).to_digit(16);
        *byte = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SHA-256 of `test`, as the SPEC's example has it.
    const TEST_SHA256: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    fn principal(name: &str, hash: &str, grants: &str) -> String {
        format!("[[principal]]\nname = {name:?}\ntoken_sha256 = {hash:?}\ngrants = [{grants}]\n")
    }

    fn refusal(text: &str) -> String {
        AuthFile::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn the_spec_example_reads_and_authenticates_its_token() {
        let text = principal(
            "billing",
            TEST_SHA256,
            r#"{ prefix = "payment:", rights = ["read", "lock"] }"#,
        ) + &principal(
            "ops",
            &"AB".repeat(32),
            r#"{ prefix = "", rights = ["read", "lock", "admin"] }"#,
        );
        let file = AuthFile::parse(&text).unwrap();
        assert_eq!(file.len(), 2);
        let billing = file.authenticate("test").unwrap();
        assert_eq!(billing.principal.as_str(), "billing");
        assert!(billing.may(Right::Lock, "payment:42"));
        assert!(!billing.may(Right::Admin, "payment:42"));
        assert!(!billing.may(Right::Read, "pay"));
        assert!(file.authenticate("Test").is_none());
        assert!(file.authenticate("").is_none());
        assert!(!format!("{billing:?}").contains("9f86"), "{billing:?}");
        assert_eq!(token_sha256("test"), TEST_SHA256);
    }

    #[test]
    fn a_bad_file_is_refused_naming_the_principal_and_the_field() {
        let grants = r#"{ prefix = "", rights = ["read"] }"#;
        let cases = [
            (
                principal("a", TEST_SHA256, r#"{ prefix = "", rights = ["read", "wrte"] }"#),
                r#"principal "a": grants[0].rights has the unknown right "wrte""#,
            ),
            (
                principal("a", &TEST_SHA256[1..], grants),
                r#"principal "a": token_sha256 must be 64 hex digits"#,
            ),
            (
                principal("a", &TEST_SHA256.replace('f', "g"), grants),
                r#"principal "a": token_sha256 must be 64 hex digits"#,
            ),
            (
                principal("a", TEST_SHA256, grants) + &principal("", &"0".repeat(64), grants),
                "principal #2: name must not be empty",
            ),
            (
                principal("a", TEST_SHA256, grants) + &principal("a", &"0".repeat(64), grants),
                r#"principal "a": name is given to two principals"#,
            ),
            (
                principal("a", TEST_SHA256, grants) + &principal("b", &TEST_SHA256.to_uppercase(), grants),
                r#"principal "b": token_sha256 is also principal "a"'s"#,
            ),
            (
                principal("a", TEST_SHA256, r#"{ prefix = "x", rights = [] }"#),
                r#"principal "a": grants[0].rights must not be empty"#,
            ),
            (
                principal("a", TEST_SHA256, r#"{ prefix = "\u0001", rights = ["read"] }"#),
                r#"principal "a": grants[0].prefix must be"#,
            ),
            (String::new(), "names no [[principal]]"),
            (
                principal("a", TEST_SHA256, grants).replace("token_sha256", "token_sha265"),
                "token_sha265",
            ),
            ("[[principal]\n".to_owned(), "line 1"),
        ];
        for (text, expected) in cases {
            let message = refusal(&text);
            assert!(
                message.contains(expected),
                "{text}\n→ {message}\nexpected {expected}"
            );
        }
    }
}
