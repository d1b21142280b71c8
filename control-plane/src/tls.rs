//! TLS for the control plane (rustls on ring).
//!
//! With `[tls]` in its settings a member serves its API and Raft routes
//! over HTTPS only, and reaches its peers (Raft RPCs, forwarded writes) over
//! HTTPS, checking their certificates against the cluster's CA: the cluster
//! secret and the bearer tokens then never cross the network in clear text.
//! Every member of a cluster must agree: a member with TLS cannot talk to
//! one without. Callers reach such a cluster at `https://` endpoints,
//! trusting the CA they are given ([`ClientTls`]); there are no built-in
//! roots, so a cluster's certificates come from its own CA.
//!
//! A member's certificate must name the host of its advertised address (an
//! IP address or DNS name as a subject alternative name): peers and callers
//! check it against the address they dial.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

use crate::config::ReadError;

/// Environment variable naming a PEM file of the CA certificates a process
/// trusts for `https://` control-plane endpoints, when it is not told
/// otherwise (memory nodes, gateways, `kintsugi ctl --ca-file`'s default).
pub const CA_FILE_ENV: &str = "KINTSUGI_CA_FILE";

/// Longest PEM file read, in bytes: a chain and a key fit in a few KiB;
/// the bound keeps a wrong path from being read whole.
pub const PEM_BYTES_MAX: u64 = 1 << 20;

/// The ALPN protocol members speak: reqwest is built without HTTP/2.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// `[tls]` of a member's settings: PEM files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// This member's certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA certificates that signed the members' certificates: what
    /// this member trusts when it dials a peer.
    pub ca: PathBuf,
}

/// Why TLS material was refused.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is larger than [`PEM_BYTES_MAX`].
    #[error("{path} has more than {PEM_BYTES_MAX} bytes, the most a PEM file here has")]
    TooLarge {
        /// The file.
        path: String,
    },
    /// A file holds no certificate, or a malformed one.
    #[error("{what}: no PEM certificate could be read ({why})")]
    NoCertificate {
        /// The file or source.
        what: String,
        /// The decoder's complaint.
        why: String,
    },
    /// A key file holds no usable private key.
    #[error("{path}: no PEM private key could be read ({why})")]
    NoKey {
        /// The file.
        path: String,
        /// The decoder's complaint.
        why: String,
    },
    /// rustls refused the certificate and key (a key that does not match
    /// the certificate, an unsupported algorithm).
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    /// An `https://` endpoint with no CA to check it against.
    #[error(
        "{endpoint} is https:// but no CA is given to check its certificate: pass one (e.g. \
         --ca-file) or set {CA_FILE_ENV}"
    )]
    NoCa {
        /// The endpoint.
        endpoint: String,
    },
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let shown = path.display().to_string();
    let read_err = |source| TlsError::Read {
        path: shown.clone(),
        source,
    };
    match crate::config::read_bounded(path, PEM_BYTES_MAX) {
        Ok(bytes) => Ok(bytes),
        Err(ReadError::Io(e)) => Err(read_err(e)),
        Err(ReadError::TooLarge { .. }) => Err(TlsError::TooLarge { path: shown }),
    }
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let no_cert = |why: String| TlsError::NoCertificate {
        what: what.to_owned(),
        why,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| no_cert(e.to_string()))?;
    if certs.is_empty() {
        return Err(no_cert("the file has no CERTIFICATE block".into()));
    }
    Ok(certs)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// What a member serves HTTPS with.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the certificate chain and key of `section` and checks that
    /// they match.
    pub fn load(section: &TlsSection) -> Result<Self, TlsError> {
        let mut config = Self::config_of(&section.cert, &section.key)?;
        config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        Ok(ServerTls {
            config: Arc::new(config),
        })
    }

    /// Reads a certificate chain and its key for a port that is not HTTP
    /// (a memory node's data port, a gateway's RESP port: no ALPN) and
    /// checks that they match.
    pub fn load_pair(cert: &Path, key: &Path) -> Result<Self, TlsError> {
        Ok(ServerTls {
            config: Arc::new(Self::config_of(cert, key)?),
        })
    }

    fn config_of(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, TlsError> {
        let certs = certificates(&read_pem(cert)?, &cert.display().to_string())?;
        let key_pem = read_pem(key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| TlsError::NoKey {
            path: key.display().to_string(),
            why: e.to_string(),
        })?;
        Ok(rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?)
    }

    /// The rustls configuration.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }
}

/// What a caller trusts for `https://` endpoints: the cluster's CA.
#[derive(Clone)]
pub struct ClientTls {
    roots: Arc<Vec<reqwest::Certificate>>,
    /// The same roots for the data path's TLS (`fabric::transport::TcpOptions::tls`).
    data_path: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("roots", &self.roots.len())
            .finish()
    }
}

impl ClientTls {
    /// Trusts the certificates of a PEM bundle.
    pub fn from_pem(pem: &[u8], what: &str) -> Result<Self, TlsError> {
        // rustls-pki-types checks the PEM framing (and says where it is
        // broken); reqwest then takes the DER.
        let ders = certificates(pem, what)?;
        let mut store = rustls::RootCertStore::empty();
        for der in &ders {
            store.add(der.clone())?;
        }
        let data_path = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(store)
            .with_no_client_auth();
        let roots = ders
            .into_iter()
            .map(|der| {
                reqwest::Certificate::from_der(&der).map_err(|e| TlsError::NoCertificate {
                    what: what.to_owned(),
                    why: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClientTls {
            roots: Arc::new(roots),
            data_path: Arc::new(data_path),
        })
    }

    /// These roots as the data path's TLS configuration: what a client
    /// checks a memory node that speaks TLS against.
    pub fn data_path_config(&self) -> Arc<rustls::ClientConfig> {
        self.data_path.clone()
    }

    /// Trusts the certificates of a PEM file.
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        Self::from_pem(&read_pem(path)?, &path.display().to_string())
    }

    /// The CA named by [`CA_FILE_ENV`], if set (and not empty).
    pub fn from_env() -> Result<Option<Self>, TlsError> {
        match std::env::var_os(CA_FILE_ENV) {
            Some(path) if !path.is_empty() => Self::load(Path::new(&path)).map(Some),
            _ => Ok(None),
        }
    }

    /// What this process trusts when a caller does not say: the CA set by
    /// [`ClientTls::set_process_default`] (a member's own `[tls] ca`), else
    /// [`CA_FILE_ENV`]'s.
    pub fn process_default() -> Result<Option<Self>, TlsError> {
        match PROCESS_DEFAULT.get() {
            Some(tls) => Ok(Some(tls.clone())),
            None => Self::from_env(),
        }
    }

    /// Makes `tls` what [`ClientTls::process_default`] returns; the first
    /// call wins (a process belongs to one cluster).
    pub fn set_process_default(tls: ClientTls) {
        // A second, different CA would be a bug of the caller; the first stays.
        let _ = PROCESS_DEFAULT.set(tls);
    }

    /// `builder`, made to speak only TLS checked against these roots.
    pub fn apply(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        let builder = builder
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .https_only(true);
        self.roots
            .iter()
            .fold(builder, |b, root| b.add_root_certificate(root.clone()))
    }
}

static PROCESS_DEFAULT: OnceLock<ClientTls> = OnceLock::new();

/// The URL scheme of a cluster with or without TLS.
pub fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_that_is_not_pem_is_refused_with_the_file_named() {
        let err = ClientTls::from_pem(b"not a certificate", "ca.pem").unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let missing = TlsSection {
            cert: dir.path().join("nope.pem"),
            key: dir.path().join("nope.key"),
            ca: dir.path().join("ca.pem"),
        };
        let err = ServerTls::load(&missing).unwrap_err();
        assert!(err.to_string().contains("nope.pem"), "{err}");
    }

    #[test]
    fn schemes() {
        assert_eq!(scheme(true), "https");
        assert_eq!(scheme(false), "http");
    }
}
