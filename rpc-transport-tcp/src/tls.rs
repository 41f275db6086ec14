//! TLS (rustls): [`TlsConfig`], certificates and keys from PEM files, and the client and
//! server handshakes over a TCP stream.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpStream;

use crate::Socket;

/// The ALPN protocol id of this framework's frames (TCP transport, RDMA side channel).
pub const ALPN_FRAMES: &[u8] = b"rpc-frames/1";
/// The ALPN protocol id of HTTP/2 (gRPC).
pub const ALPN_H2: &[u8] = b"h2";

/// Whether and how a TLS server asks its clients for certificates (mutual TLS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ClientAuth {
    /// Clients are not asked for a certificate (the default).
    #[default]
    None,
    /// A client may present a certificate, which must then verify against
    /// [`TlsConfig::ca`]; one without is served too.
    Optional,
    /// Every client must present a certificate that verifies against [`TlsConfig::ca`].
    Required,
}

impl FromStr for ClientAuth {
    type Err = String;
    fn from_str(s: &str) -> Result<ClientAuth, String> {
        match s {
            "none" => Ok(ClientAuth::None),
            "optional" => Ok(ClientAuth::Optional),
            "required" => Ok(ClientAuth::Required),
            other => Err(format!(
                "unknown client_auth {other:?} (expected none, optional or required)"
            )),
        }
    }
}

/// TLS settings: this side's certificate and key, and whom it trusts, from PEM files.
///
/// A server needs [`TlsConfig::cert`] and [`TlsConfig::key`]; with
/// [`TlsConfig::client_auth`] it also verifies clients against [`TlsConfig::ca`]. A client
/// verifies the server against [`TlsConfig::ca`] (or, without one, the system's roots)
/// and the endpoint's host name (or [`TlsConfig::server_name`]); it presents
/// `cert` and `key` when both are set (mutual TLS). Files are read when a listener binds
/// and on every dial, so renewed certificates are picked up by new connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TlsConfig {
    /// This side's certificate chain (PEM), its own certificate first.
    pub cert: Option<PathBuf>,
    /// This side's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// Certificates (PEM) the peer's chain must lead to: the server's on a client, the
    /// clients' on a server asking for them.
    pub ca: Option<PathBuf>,
    /// On a server: whether clients must present certificates.
    pub client_auth: ClientAuth,
    /// On a client: the name the server's certificate must carry, instead of the
    /// endpoint's host.
    pub server_name: Option<String>,
    /// On a client: accept any server certificate, unverified (the handshake's
    /// signature is still checked). Default `false`. For load tests against servers with
    /// throw-away certificates (ghz's `--skipTLS`); it gives up the server's
    /// authentication, so never use it where that matters.
    pub skip_verify: bool,
}

/// Why TLS could not be set up, or a handshake failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file named in the settings could not be read or holds nothing usable.
    #[error("TLS {what} file {path}: {reason}")]
    File {
        /// What the file was for (`certificate`, `private key`, `CA`).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it is unusable.
        reason: String,
    },
    /// A setting is missing or contradicts another.
    #[error("TLS settings: {0}")]
    Settings(String),
    /// rustls refused the certificates or keys.
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    /// The handshake with a peer failed (e.g. its certificate did not verify).
    #[error("TLS handshake with {peer} failed: {reason}")]
    Handshake {
        /// The peer.
        peer: String,
        /// What went wrong, as the TLS library said it, with a hint where there is one.
        reason: String,
    },
}

impl From<TlsError> for rdmarpc_core::TransportError {
    fn from(e: TlsError) -> Self {
        rdmarpc_core::TransportError::Other(e.to_string())
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |reason: String| TlsError::File {
        what,
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::File {
        what: "private key",
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

fn roots(ca: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs("CA", ca)? {
        roots.add(cert).map_err(|e| TlsError::File {
            what: "CA",
            path: ca.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(roots)
}

impl TlsConfig {
    /// Sets [`TlsConfig::cert`] and [`TlsConfig::key`].
    pub fn identity(&mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> &mut Self {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// Sets [`TlsConfig::ca`].
    pub fn ca(&mut self, ca: impl Into<PathBuf>) -> &mut Self {
        self.ca = Some(ca.into());
        self
    }

    /// Sets [`TlsConfig::client_auth`].
    pub fn client_auth(&mut self, auth: ClientAuth) -> &mut Self {
        self.client_auth = auth;
        self
    }

    /// Sets [`TlsConfig::server_name`].
    pub fn server_name(&mut self, name: impl Into<String>) -> &mut Self {
        self.server_name = Some(name.into());
        self
    }

    /// Sets [`TlsConfig::skip_verify`].
    pub fn skip_verify(&mut self, skip: bool) -> &mut Self {
        self.skip_verify = skip;
        self
    }

    /// The server side, for a listener: reads the files now.
    ///
    /// # Errors
    /// A missing certificate or key, an unreadable file, [`ClientAuth`] without a CA.
    pub fn acceptor(&self, alpn: &[&[u8]]) -> Result<TlsAcceptor, TlsError> {
        let (Some(cert), Some(key)) = (&self.cert, &self.key) else {
            return Err(TlsError::Settings(
                "a TLS server needs a certificate and a key ([tls] cert and key, or RPC_TLS_CERT and RPC_TLS_KEY)".into(),
            ));
        };
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = match (self.client_auth, &self.ca) {
            (ClientAuth::None, _) => builder.with_no_client_auth(),
            (_, None) => {
                return Err(TlsError::Settings(
                    "client_auth needs a CA to verify clients against ([tls] ca)".into(),
                ))
            }
            (auth, Some(ca)) => {
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider());
                let verifier = if auth == ClientAuth::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                builder.with_client_cert_verifier(
                    verifier
                        .build()
                        .map_err(|e| TlsError::Settings(e.to_string()))?,
                )
            }
        };
        let mut config =
            builder.with_single_cert(read_certs("certificate", cert)?, read_key(key)?)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor(tokio_rustls::TlsAcceptor::from(Arc::new(
            config,
        ))))
    }

    /// The client side, for a dial: reads the files now.
    ///
    /// # Errors
    /// An unreadable file, only one of certificate and key, no roots to verify with.
    pub fn connector(&self, alpn: &[&[u8]]) -> Result<TlsConnector, TlsError> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?;
        let builder = if self.skip_verify {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider())))
        } else {
            builder.with_root_certificates(match &self.ca {
                Some(ca) => roots(ca)?,
                None => system_roots()?,
            })
        };
        let mut config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                builder.with_client_auth_cert(read_certs("certificate", cert)?, read_key(key)?)?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(TlsError::Settings(
                    "a client certificate needs both cert and key".into(),
                ))
            }
        };
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsConnector {
            inner: tokio_rustls::TlsConnector::from(Arc::new(config)),
            server_name: self.server_name.clone(),
        })
    }
}

/// The system's trusted roots, for a client without [`TlsConfig::ca`].
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(TlsError::Settings(format!(
            "no CA given ([tls] ca) and no system roots found{}",
            found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        )));
    }
    Ok(roots)
}

/// [`TlsConfig::skip_verify`]: any certificate is taken, but the handshake's signatures
/// are still verified (with the provider's algorithms), so the peer holds the key of the
/// certificate it sent.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The server side of TLS, built once per listener ([`TlsConfig::acceptor`]).
#[derive(Clone)]
pub struct TlsAcceptor(tokio_rustls::TlsAcceptor);

impl fmt::Debug for TlsAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsAcceptor")
    }
}

impl TlsAcceptor {
    /// Runs the server's handshake on an accepted stream.
    ///
    /// # Errors
    /// The handshake's failure (a client without a valid certificate under mutual TLS, a
    /// client that does not speak TLS).
    pub async fn accept(&self, stream: TcpStream) -> Result<Socket, TlsError> {
        let peer = peer_name(&stream);
        self.0
            .accept(stream)
            .await
            .map(|s| Socket::Tls(s.into()))
            .map_err(|e| TlsError::Handshake {
                peer,
                reason: e.to_string(),
            })
    }
}

/// The client side of TLS, built per dial ([`TlsConfig::connector`]).
#[derive(Clone)]
pub struct TlsConnector {
    inner: tokio_rustls::TlsConnector,
    server_name: Option<String>,
}

impl fmt::Debug for TlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConnector")
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl TlsConnector {
    /// Runs the client's handshake on a connected stream to `address` (`host:port`): the
    /// server's certificate must verify for the host (or the configured server name).
    ///
    /// # Errors
    /// A host that is not a valid name or IP address, or the handshake's failure (a
    /// certificate that does not verify, a server that does not speak TLS).
    pub async fn connect(&self, address: &str, stream: TcpStream) -> Result<Socket, TlsError> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => host_of(address).to_owned(),
        };
        let server_name = ServerName::try_from(name.clone()).map_err(|e| {
            TlsError::Settings(format!("{name:?} is not a valid TLS server name: {e}"))
        })?;
        let peer = peer_name(&stream);
        self.inner
            .connect(server_name, stream)
            .await
            .map(|s| Socket::Tls(s.into()))
            .map_err(|e| TlsError::Handshake {
                reason: hint(&e),
                peer,
            })
    }
}

/// The error, with what to check for the usual causes.
fn hint(e: &io::Error) -> String {
    let text = e.to_string();
    let hint = if text.contains("UnknownIssuer") {
        " (the server's certificate is not signed by a trusted CA: check [tls] ca)"
    } else if text.contains("NotValidForName") || text.contains("not valid for name") {
        " (the server's certificate does not name this host: connect by a name it carries, or set [tls] server_name)"
    } else if text.contains("CertificateRequired") {
        " (the server requires a client certificate: set [tls] cert and key)"
    } else if text.contains("corrupt message") || text.contains("InvalidContentType") {
        " (the server does not seem to speak TLS)"
    } else {
        ""
    };
    format!("{text}{hint}")
}

fn peer_name(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// The host of `host:port` (without the brackets of an IPv6 literal).
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_strips_ports_and_brackets() {
        assert_eq!(host_of("example.com:443"), "example.com");
        assert_eq!(host_of("10.0.0.1:7000"), "10.0.0.1");
        assert_eq!(host_of("[::1]:7000"), "::1");
    }

    #[test]
    fn client_auth_parses() {
        assert_eq!("required".parse(), Ok(ClientAuth::Required));
        assert!("yes".parse::<ClientAuth>().is_err());
    }
}
