//! Certificates made at run time for this project's TLS tests: a throw-away CA
//! ([`Ca::new`]) and leaf certificates it signs ([`Ca::issue`]), written as PEM files
//! ([`Ca::write`], [`Issued::write`]), since the framework reads certificates from files.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("test-certs-doc-{}", std::process::id()));
//! let ca = test_certs::Ca::new("doc CA").unwrap();
//! let server = ca.issue("server", &["localhost", "127.0.0.1"]).unwrap();
//! let ca_file = ca.write(&dir).unwrap();
//! let (cert, key) = server.write(&dir).unwrap();
//! assert!(std::fs::read_to_string(cert).unwrap().starts_with("-----BEGIN CERTIFICATE"));
//! # let _ = (ca_file, key); std::fs::remove_dir_all(dir).unwrap();
//! ```

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority that exists for one test run.
pub struct Ca {
    name: String,
    cert: rcgen::Certificate,
    key: KeyPair,
}

/// A certificate signed by a [`Ca`], with its key.
#[derive(Debug)]
pub struct Issued {
    /// The file stem ([`Issued::write`] writes `<name>.pem` and `<name>.key`).
    pub name: String,
    /// The certificate chain, PEM (the certificate, then the CA's).
    pub cert_pem: String,
    /// The private key, PEM (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Ca {
    /// A new CA named `name` (its common name, and its file stem in [`Ca::write`]).
    ///
    /// # Errors
    /// Key generation or signing failed.
    pub fn new(name: &str) -> anyhow::Result<Ca> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            name: name.replace(' ', "-"),
            cert,
            key,
        })
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses), good for servers and
    /// clients alike, signed by this CA. `name` is its common name and file stem.
    ///
    /// # Errors
    /// Key generation or signing failed.
    pub fn issue(&self, name: &str, names: &[&str]) -> anyhow::Result<Issued> {
        let sans: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(sans)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(Issued {
            name: name.to_owned(),
            cert_pem: format!("{}{}", cert.pem(), self.cert.pem()),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes the CA's certificate to `<dir>/<name>.pem` (creating `dir`) and returns
    /// the path.
    ///
    /// # Errors
    /// The write error.
    pub fn write(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.pem", self.name));
        std::fs::write(&path, self.cert_pem())?;
        Ok(path)
    }
}

impl Issued {
    /// Writes `<dir>/<name>.pem` (the chain) and `<dir>/<name>.key`, creating `dir`, and
    /// returns their paths.
    ///
    /// # Errors
    /// The write error.
    pub fn write(&self, dir: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let cert = dir.join(format!("{}.pem", self.name));
        let key = dir.join(format!("{}.key", self.name));
        std::fs::write(&cert, &self.cert_pem)?;
        std::fs::write(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// A CA and, signed by it, a server certificate for `localhost` and `127.0.0.1` and a
/// client certificate, written into `dir` as `ca.pem`, `server.pem`/`server.key` and
/// `client.pem`/`client.key`: what the interop runs and most tests need.
///
/// # Errors
/// Generation or write failure.
pub fn write_set(dir: &Path) -> anyhow::Result<()> {
    let ca = Ca::new("ca")?;
    ca.write(dir)?;
    ca.issue("server", &["localhost", "127.0.0.1", "::1"])?
        .write(dir)?;
    ca.issue("client", &["client.test"])?.write(dir)?;
    Ok(())
}
