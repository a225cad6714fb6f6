//! Certificates for TLS tests: a [`TestCa`] made by the test, and server certificates it
//! signs for loopback, so that a test can trust exactly one CA and see a server's
//! certificate change.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// A certificate authority that lives as long as the test: its certificate is what a client
/// trusts (`--cacert`), and it signs server certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A new CA named `name` (its common name), with a fresh key.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("a CA key");
        Self {
            issuer: CertifiedIssuer::self_signed(params, key).expect("a self-signed CA certificate"),
        }
    }

    /// The CA's certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate and key for `localhost`, `127.0.0.1` and `::1`, signed by this CA.
    pub fn server_cert(&self) -> ServerCert {
        let names = ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec();
        let params = CertificateParams::new(names).expect("server certificate parameters");
        let key = KeyPair::generate().expect("a server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a signed server certificate");
        ServerCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA's certificate to `dir/file` and returns the path.
    pub fn write(&self, dir: &Path, file: &str) -> PathBuf {
        let path = dir.join(file);
        std::fs::write(&path, self.pem()).expect("write the CA certificate");
        path
    }
}

/// A server's certificate and private key, PEM.
#[derive(Debug, Clone)]
pub struct ServerCert {
    /// The certificate (signed by its [`TestCa`]).
    pub cert_pem: String,
    /// Its private key (PKCS #8).
    pub key_pem: String,
}

impl ServerCert {
    /// Writes the certificate and key to `cert` and `key` (replacing what was there).
    pub fn write(&self, cert: &Path, key: &Path) {
        std::fs::write(cert, &self.cert_pem).expect("write the server certificate");
        std::fs::write(key, &self.key_pem).expect("write the server key");
    }
}
