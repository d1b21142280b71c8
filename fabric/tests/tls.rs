//! TLS on the tcp data path (`server::serve_tls`, `TcpOptions::tls`): a
//! client that trusts the cluster's CA is admitted and served over it; one
//! that speaks plain TCP, or trusts another CA, gets nowhere and hangs
//! nowhere; the node serves the good client throughout.

use std::sync::Arc;
use std::time::Duration;

use fabric::transport::TcpOptions;
use fabric::{
    AdmissionKey, Batch, Client, FabricError, Gate, GlobalAddr, Holder, MemoryNode, RegionSpec, TcpTransport,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Turns a hang into a failure; never decides an outcome.
const HANG: Duration = Duration::from_secs(30);

fn key() -> AdmissionKey {
    AdmissionKey::derive(b"tls-test-secret-0123456789abcdef")
}

/// A CA, and a certificate it signed for 127.0.0.1.
fn pki() -> (
    CertificateDer<'static>,
    CertificateDer<'static>,
    PrivateKeyDer<'static>,
) {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let node_key = rcgen::KeyPair::generate().unwrap();
    let node = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&node_key, &ca, &ca_key)
        .unwrap();
    (
        ca.der().clone(),
        node.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(node_key.serialize_der())),
    )
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn client_config(ca: CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca).unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

async fn client(addr: &str, tls: Option<Arc<rustls::ClientConfig>>) -> Result<Client, FabricError> {
    let options = TcpOptions {
        tls,
        ..TcpOptions::with_credential(key().issue(Holder::Service { id: 1 }))
    };
    let (t, map) = TcpTransport::discover_with(&[addr.to_owned()], options).await?;
    Ok(Client::new(map, t.into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trusting_the_clusters_ca_is_served_over_tls_and_others_get_nowhere() {
    let (ca, cert, node_key) = pki();
    let server = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], node_key)
            .unwrap(),
    );
    let node = Arc::new(MemoryNode::anonymous(1, &[RegionSpec { id: 1, size: 4096 }]).unwrap());
    node.set_gate(Gate::keyed(key()));
    let (listener, addr) = fabric::server::bind("127.0.0.1:0").await.unwrap();
    tokio::spawn(fabric::server::serve_tls(
        listener,
        node,
        fabric::server::Limits::default(),
        Some(server),
        std::future::pending(),
    ));
    let plain_addr = addr.to_string();
    // The endpoint a node served over TLS registers.
    let addr = format!("{}{plain_addr}", fabric::transport::TLS_SCHEME);

    let mut good = client(&addr, Some(client_config(ca)))
        .await
        .expect("admitted over TLS");
    let word = GlobalAddr::new(1, 8);
    let mut b = Batch::new();
    b.write(word, &42u64.to_le_bytes());
    good.execute(&mut b).await.expect("a write over TLS");

    // Plain TCP against a TLS node (an endpoint without the scheme): its
    // HELLO is not a handshake.
    let plain = tokio::time::timeout(HANG, client(&plain_addr, None))
        .await
        .expect("no hang");
    assert!(plain.is_err(), "a plain client is not served by a TLS node");
    // A TLS endpoint and no CA: said so, without dialling.
    match client(&addr, None).await {
        Err(FabricError::Protocol { reason, .. }) => assert!(reason.contains("no CA"), "{reason}"),
        other => panic!("a client without a CA reached a TLS node: {other:?}"),
    }
    // Another cluster's CA: the node's certificate does not verify.
    let (other_ca, _, _) = pki();
    let stranger = tokio::time::timeout(HANG, client(&addr, Some(client_config(other_ca))))
        .await
        .expect("no hang");
    match stranger {
        Err(FabricError::Disconnected { reason, .. }) => assert!(reason.contains("TLS"), "{reason}"),
        other => panic!("a client that does not trust the node's certificate connected: {other:?}"),
    }

    let mut b = Batch::new();
    let h = b.read(word, 8);
    good.execute(&mut b).await.expect("still served");
    assert_eq!(b.read_result(h).unwrap(), &42u64.to_le_bytes()[..]);
}
