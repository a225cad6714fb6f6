//! HTTPS: the server's certificate and key, read from PEM files, and swapped for new ones
//! without a restart ([`Tls::reload`], which `fencelock serve` calls on SIGHUP).
//!
//! The certificate is chosen per handshake by a resolver that holds the current pair, so a
//! reload changes what *new* connections are served with; connections already set up keep
//! theirs. A pair that cannot be loaded (a missing file, a key of another certificate)
//! changes nothing: the old pair stays.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Where the certificate chain and its private key are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the server's certificate first, then any intermediates.
    pub cert: PathBuf,
    /// PEM: the certificate's private key (PKCS #8, PKCS #1 or SEC1).
    pub key: PathBuf,
}

/// Why a certificate and key could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file is not the PEM it should be (or holds no certificate, or no key).
    #[error("{} {what}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The key cannot be used, or is not the certificate's.
    #[error("the key {} cannot serve the certificate {}: {source}", files.key.display(), files.cert.display())]
    Key {
        /// The pair.
        files: TlsFiles,
        /// What rustls said.
        source: rustls::Error,
    },
}

/// TLS for the server's connections: a cheap clonable handle on the acceptor and on the
/// certificate it serves.
#[derive(Clone)]
pub struct Tls {
    acceptor: TlsAcceptor,
    resolver: Arc<Reloadable>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.resolver.files)
            .finish()
    }
}

impl Tls {
    /// TLS with the certificate and key in `files` (HTTP/1.1 only, TLS 1.2 and 1.3, no
    /// client certificates).
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let current = load_pair(&files, &provider)?;
        let resolver = Arc::new(Reloadable {
            files,
            provider: provider.clone(),
            current: RwLock::new(Arc::new(current)),
        });
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("aws-lc-rs's default provider supports the default TLS versions, 1.2 and 1.3")
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            resolver,
        })
    }

    /// Reads the certificate and key again, for the connections made from now on. If they
    /// cannot be loaded, the current pair stays and the error says why.
    pub fn reload(&self) -> Result<(), TlsError> {
        let fresh = load_pair(&self.resolver.files, &self.resolver.provider)?;
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Arc::new(fresh);
        Ok(())
    }

    /// Where the certificate and key are read from.
    pub fn files(&self) -> &TlsFiles {
        &self.resolver.files
    }

    /// The TLS handshake on a new connection. No time limit of its own: the caller sets one.
    pub async fn accept<IO: AsyncRead + AsyncWrite + Unpin>(&self, stream: IO) -> io::Result<TlsStream<IO>> {
        self.acceptor.accept(stream).await
    }
}

/// The certificate resolver: every handshake gets the pair loaded last.
#[derive(Debug)]
struct Reloadable {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    /// A std lock: held for an `Arc` clone or swap, never across an `.await`.
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloadable {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }
}

/// The certificate chain and key of `files`, checked to belong together.
fn load_pair(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let cert_pem = read(&files.cert)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(&files.cert, "certificate", &e))?;
    if chain.is_empty() {
        return Err(not_pem(&files.cert, "certificate", &pem::Error::NoItemsFound));
    }
    let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?)
        .map_err(|e| not_pem(&files.key, "private key", &e))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|source| TlsError::Key {
        files: files.clone(),
        source,
    })
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// The error for a file that does not hold the PEM `what` it should.
fn not_pem(path: &Path, what: &str, error: &pem::Error) -> TlsError {
    let what = match error {
        pem::Error::NoItemsFound => format!("holds no PEM {what}"),
        other => format!("is not a PEM {what}: {other}"),
    };
    TlsError::Pem {
        path: path.to_owned(),
        what,
    }
}
