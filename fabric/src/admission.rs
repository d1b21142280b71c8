//! Admission to a memory node's data path: who may say HELLO, and whose
//! frames a node still runs.
//!
//! The control plane issues each registered client a [`Credential`]: its
//! [`Holder`] (client id and owner-id block) and an HMAC-SHA256 over it under
//! the [`AdmissionKey`], which is derived from the cluster secret. Services
//! that are not leased clients (an operator's tool, a standalone bench)
//! get a credential of kind service. A memory node that holds the key checks
//! a credential without a round trip; a HELLO without a valid one gets a
//! refusal that names the reason, and no region keys.
//!
//! The fence. Client ids are never reused (the control plane counts them
//! up), so "client 7 expired" is fenced for good by refusing id 7. A node
//! follows the control plane's client table as a [`FenceView`]: a client is
//! admitted only while it is live in the view, or newer than the view (it
//! registered after the node last looked, so it cannot have expired yet in
//! anything the node acknowledged). The control plane forgets an expired
//! client, and gives its owner ids to an heir, only after every live node has
//! acknowledged a view in which it is expired (`docs/txn.md` §8), and a node
//! checks its gate before every batch: a frame the expired client sent,
//! however late it arrives, runs no verb once its ids could have an heir.
//!
//! ```text
//! credential = version: u8 (1) | kind: u8 (1 client, 2 service) | id: u64
//!            | owners_first: u16 | owners_count: u16 | mac: [u8; 32]
//! mac        = HMAC-SHA256(admission key, the 22 bytes before it)
//! key        = HMAC-SHA256(cluster secret, "kintsugi data-path admission v1")
//! ```

use ring::hmac;

/// Bytes of an encoded [`Credential`].
pub const CREDENTIAL_BYTES: usize = HOLDER_BYTES + MAC_BYTES;
/// Bytes of the holder part, which the MAC covers.
const HOLDER_BYTES: usize = 1 + 1 + 8 + 2 + 2;
/// HMAC-SHA256's tag.
const MAC_BYTES: usize = 32;
/// The credential layout's version: a node refuses any other, so a layout
/// change never reads one holder as another.
const CREDENTIAL_VERSION: u8 = 1;
const KIND_CLIENT: u8 = 1;
const KIND_SERVICE: u8 = 2;
/// What the admission key is derived under: a key that only this use of the
/// cluster secret yields (the secret also authenticates Raft traffic).
const KEY_CONTEXT: &[u8] = b"kintsugi data-path admission v1";
/// Live clients a [`FenceView`] names at most: every client holds at least
/// one of the 2^16 owner ids.
pub const FENCE_LIVE_CLIENTS_MAX: usize = 1 << 16;

/// The key memory nodes check credentials with, derived from the cluster
/// secret. Never logged.
#[derive(Clone)]
pub struct AdmissionKey(hmac::Key, [u8; 32]);

impl std::fmt::Debug for AdmissionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdmissionKey(<redacted>)")
    }
}

impl AdmissionKey {
    /// The key of the cluster whose secret is `secret`.
    pub fn derive(secret: &[u8]) -> Self {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), KEY_CONTEXT);
        let mut raw = [0u8; 32];
        raw.copy_from_slice(tag.as_ref());
        Self::from_bytes(raw)
    }

    /// A key handed over as its bytes (what a memory node receives from the
    /// control plane).
    pub fn from_bytes(raw: [u8; 32]) -> Self {
        AdmissionKey(hmac::Key::new(hmac::HMAC_SHA256, &raw), raw)
    }

    /// The key's bytes, to hand to a memory node.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.1
    }

    /// A credential for `holder`.
    pub fn issue(&self, holder: Holder) -> Credential {
        let head = holder.encode();
        let mut mac = [0u8; MAC_BYTES];
        mac.copy_from_slice(hmac::sign(&self.0, &head).as_ref());
        Credential { holder, mac }
    }

    /// The holder of `bytes` if they are a credential this key issued.
    pub fn verify(&self, bytes: &[u8]) -> Result<Holder, Refusal> {
        if bytes.is_empty() {
            return Err(Refusal::NoCredential);
        }
        if bytes.len() != CREDENTIAL_BYTES {
            return Err(Refusal::Malformed("a credential is 46 bytes"));
        }
        let (head, mac) = bytes.split_at(HOLDER_BYTES);
        // Checked before the holder is decoded: a forged credential teaches
        // its sender nothing about the layout.
        hmac::verify(&self.0, head, mac).map_err(|_| Refusal::BadMac)?;
        Holder::decode(head)
    }
}

/// Who a credential admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    /// A client registered with the control plane: fenced once it expires.
    Client {
        /// Its client id (never reused).
        id: u64,
        /// Its first owner id.
        owners_first: u16,
        /// How many owner ids from `owners_first` it holds.
        owners_count: u16,
    },
    /// A service that holds no lease (an operator's tool, a standalone
    /// bench, a memory node copying a region): never fenced, so issued only
    /// to operators' tokens.
    Service {
        /// Chosen by the issuer, for the logs.
        id: u64,
    },
}

impl Holder {
    fn encode(&self) -> [u8; HOLDER_BYTES] {
        let (kind, id, first, count) = match *self {
            Holder::Client {
                id,
                owners_first,
                owners_count,
            } => (KIND_CLIENT, id, owners_first, owners_count),
            Holder::Service { id } => (KIND_SERVICE, id, 0, 0),
        };
        let mut b = [0u8; HOLDER_BYTES];
        b[0] = CREDENTIAL_VERSION;
        b[1] = kind;
        b[2..10].copy_from_slice(&id.to_le_bytes());
        b[10..12].copy_from_slice(&first.to_le_bytes());
        b[12..14].copy_from_slice(&count.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Result<Holder, Refusal> {
        let b: &[u8; HOLDER_BYTES] = b.try_into().map_err(|_| Refusal::Malformed("holder length"))?;
        if b[0] != CREDENTIAL_VERSION {
            return Err(Refusal::Malformed("unknown credential version"));
        }
        let id = u64::from_le_bytes([b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9]]);
        let first = u16::from_le_bytes([b[10], b[11]]);
        let count = u16::from_le_bytes([b[12], b[13]]);
        match b[1] {
            KIND_CLIENT => Ok(Holder::Client {
                id,
                owners_first: first,
                owners_count: count,
            }),
            KIND_SERVICE if first == 0 && count == 0 => Ok(Holder::Service { id }),
            _ => Err(Refusal::Malformed("unknown holder kind")),
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Client { id, .. } => write!(f, "client {id}"),
            Holder::Service { id } => write!(f, "service {id}"),
        }
    }
}

/// A holder and the MAC that proves the control plane issued it.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    holder: Holder,
    mac: [u8; MAC_BYTES],
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The MAC is a bearer secret: whoever has it is admitted.
        write!(f, "Credential({}, <mac redacted>)", self.holder)
    }
}

impl Credential {
    /// Whom it admits.
    pub fn holder(&self) -> Holder {
        self.holder
    }

    /// Its bytes, as HELLO carries them.
    pub fn to_bytes(&self) -> [u8; CREDENTIAL_BYTES] {
        let mut b = [0u8; CREDENTIAL_BYTES];
        b[..HOLDER_BYTES].copy_from_slice(&self.holder.encode());
        b[HOLDER_BYTES..].copy_from_slice(&self.mac);
        b
    }

    /// A credential from its bytes, unchecked (only a node with the key can
    /// check it): what a client receives from the control plane.
    pub fn from_bytes(bytes: &[u8]) -> Result<Credential, Refusal> {
        if bytes.len() != CREDENTIAL_BYTES {
            return Err(Refusal::Malformed("a credential is 46 bytes"));
        }
        let holder = Holder::decode(&bytes[..HOLDER_BYTES])?;
        let mut mac = [0u8; MAC_BYTES];
        mac.copy_from_slice(&bytes[HOLDER_BYTES..]);
        Ok(Credential { holder, mac })
    }

    /// Lower-case hex of [`Credential::to_bytes`]: how the control plane's
    /// API carries it.
    pub fn to_hex(&self) -> String {
        hex(&self.to_bytes())
    }

    /// The inverse of [`Credential::to_hex`].
    pub fn from_hex(s: &str) -> Result<Credential, Refusal> {
        Credential::from_bytes(&unhex(s).ok_or(Refusal::Malformed("not hex"))?)
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The bytes of lower- or upper-case hex; `None` if `s` is not hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Why a node refused a connection or a frame. Sent to the peer, so it
/// names the reason and never a secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// HELLO carried no credential.
    #[error(
        "no credential: this memory node admits only holders of a credential issued by its control plane"
    )]
    NoCredential,
    /// The credential's bytes are not a credential.
    #[error("malformed credential: {0}")]
    Malformed(&'static str),
    /// The MAC does not verify: forged, or issued by another cluster.
    #[error("credential not issued by this cluster (its MAC does not verify)")]
    BadMac,
    /// The client expired: its ids are, or will be, another client's.
    #[error("client {client} is fenced: its lease expired; join again as a new client")]
    Fenced {
        /// The client.
        client: u64,
    },
    /// The node cannot check credentials yet (it has not received the
    /// admission key or the fence from its control plane).
    #[error("memory node not admitting yet: {0}")]
    NotReady(&'static str),
    /// The node serves as many connections as it may.
    #[error("memory node at its limit of {limit} connections")]
    Full {
        /// The limit.
        limit: usize,
    },
    /// A batch before HELLO, or HELLO too large or too late.
    #[error("protocol: {0}")]
    Protocol(&'static str),
    /// A batch arrived past its deadline (`crate::deadline`): its client
    /// has given it up, and may have moved on.
    #[error(
        "batch arrived {late_ms} ms past its deadline, held in the network (or the client's \
         clock is behind this node's): not run"
    )]
    Expired {
        /// By how much, by the node's clock.
        late_ms: u64,
    },
}

impl Refusal {
    /// Whether the same credential may be admitted later: the node is not
    /// ready yet, or full. Any other refusal holds for good.
    pub fn is_transient(&self) -> bool {
        matches!(self, Refusal::NotReady(_) | Refusal::Full { .. })
    }
}

/// The control plane's client table as a node follows it for the fence.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FenceView {
    /// The control plane's fence sequence this view is at: raised by every
    /// expiry. What a node acknowledges.
    pub seq: u64,
    /// The next client id the control plane will give: ids from here on
    /// registered after this view, so none of them expired in it.
    pub next_client: u64,
    /// Live clients' ids, ascending.
    pub live: Vec<u64>,
}

impl FenceView {
    /// Checks the view's own invariants (it came over the network).
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.live.len() > FENCE_LIVE_CLIENTS_MAX {
            return Err("more live clients than owner ids");
        }
        if !self.live.windows(2).all(|w| w[0] < w[1]) {
            return Err("live clients not strictly ascending");
        }
        if self.live.last().is_some_and(|&l| l >= self.next_client) {
            return Err("a live client at or past next_client");
        }
        Ok(())
    }

    /// Whether client `id` may run verbs by this view.
    pub fn admits(&self, id: u64) -> bool {
        id >= self.next_client || self.live.binary_search(&id).is_ok()
    }
}

/// What a node admits. [`Gate::open`] for nodes that nobody outside the
/// process reaches (tests, in-process clusters); `kintsugi memnode` runs
/// [`Gate::placed`] or [`Gate::keyed`].
#[derive(Clone, Debug)]
pub struct Gate {
    mode: Mode,
}

#[derive(Clone, Debug)]
enum Mode {
    Open,
    Guarded {
        // Boxed: ring's key is a few hundred bytes, the open gate none.
        key: Option<Box<AdmissionKey>>,
        fence: Fence,
    },
}

#[derive(Clone, Debug)]
enum Fence {
    /// No control plane leases clients here: nothing to fence.
    None,
    /// Followed from the control plane: nobody is admitted before the first view.
    Awaiting,
    Following(FenceView),
}

impl Gate {
    /// Admits everyone: no credential is asked for.
    pub fn open() -> Self {
        Gate { mode: Mode::Open }
    }

    /// Admits holders of credentials under `key`; fences nobody (a node with
    /// its own regions and no control plane).
    pub fn keyed(key: AdmissionKey) -> Self {
        Gate {
            mode: Mode::Guarded {
                key: Some(Box::new(key)),
                fence: Fence::None,
            },
        }
    }

    /// A node placed by a control plane: admits nobody until it has the key
    /// ([`Gate::set_key`]) and a first fence view ([`Gate::follow`]).
    pub fn placed() -> Self {
        Gate {
            mode: Mode::Guarded {
                key: None,
                fence: Fence::Awaiting,
            },
        }
    }

    /// Whether this gate asks for credentials.
    pub fn is_open(&self) -> bool {
        matches!(self.mode, Mode::Open)
    }

    /// Takes the key credentials are checked with.
    pub fn set_key(&mut self, new: AdmissionKey) {
        if let Mode::Guarded { key, .. } = &mut self.mode {
            *key = Some(Box::new(new));
        }
    }

    /// The fence view followed, if any.
    pub fn view(&self) -> Option<&FenceView> {
        match &self.mode {
            Mode::Guarded {
                fence: Fence::Following(v),
                ..
            } => Some(v),
            _ => None,
        }
    }

    /// Follows `view` unless the gate is at a newer one; returns whether it
    /// took it. A view never moves backwards: a member that lags answers
    /// with an older one, and forgetting may already rest on the newer.
    pub fn follow(&mut self, view: FenceView) -> bool {
        let Mode::Guarded { fence, .. } = &mut self.mode else {
            return false;
        };
        match fence {
            Fence::Following(now) if now.seq > view.seq || now.next_client > view.next_client => false,
            _ => {
                *fence = Fence::Following(view);
                true
            }
        }
    }

    /// Checks a HELLO's credential bytes; `Ok(None)` from an open gate.
    pub fn admit(&self, credential: &[u8]) -> Result<Option<Holder>, Refusal> {
        let Mode::Guarded { key, .. } = &self.mode else {
            return Ok(None);
        };
        let key = key
            .as_ref()
            .ok_or(Refusal::NotReady("no admission key from the control plane yet"))?;
        let holder = key.verify(credential)?;
        self.admits(Some(holder))?;
        Ok(Some(holder))
    }

    /// Whether `holder`, admitted before, may still run verbs: what a node
    /// checks before each batch.
    pub fn admits(&self, holder: Option<Holder>) -> Result<(), Refusal> {
        let Mode::Guarded { fence, .. } = &self.mode else {
            return Ok(());
        };
        match (holder, fence) {
            (None, _) => Err(Refusal::NoCredential),
            (Some(Holder::Service { .. }), _) | (Some(Holder::Client { .. }), Fence::None) => Ok(()),
            (Some(Holder::Client { .. }), Fence::Awaiting) => {
                Err(Refusal::NotReady("no fence view from the control plane yet"))
            }
            (Some(Holder::Client { id, .. }), Fence::Following(v)) if v.admits(id) => Ok(()),
            (Some(Holder::Client { id, .. }), Fence::Following(_)) => Err(Refusal::Fenced { client: id }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AdmissionKey {
        AdmissionKey::derive(b"admission-test-secret-0123456789")
    }

    const CLIENT: Holder = Holder::Client {
        id: 7,
        owners_first: 33,
        owners_count: 16,
    };

    #[test]
    fn a_credential_encodes_as_its_layout_says() {
        let c = key().issue(CLIENT);
        let b = c.to_bytes();
        assert_eq!(b.len(), 46);
        assert_eq!(b[0], 1, "version");
        assert_eq!(b[1], 1, "kind: client");
        assert_eq!(&b[2..10], &7u64.to_le_bytes());
        assert_eq!(&b[10..12], &33u16.to_le_bytes());
        assert_eq!(&b[12..14], &16u16.to_le_bytes());
        let mac = hmac::sign(&key().0, &b[..14]);
        assert_eq!(&b[14..], mac.as_ref());
        assert_eq!(Credential::from_bytes(&b), Ok(c.clone()));
        assert_eq!(Credential::from_hex(&c.to_hex()), Ok(c));
        let s = key().issue(Holder::Service { id: 3 }).to_bytes();
        assert_eq!((s[1], &s[10..14]), (2, &[0u8; 4][..]));
    }

    #[test]
    fn a_key_admits_its_own_credentials_only() {
        let c = key().issue(CLIENT).to_bytes();
        assert_eq!(key().verify(&c), Ok(CLIENT));
        let other = AdmissionKey::derive(b"another-clusters-secret-0123456");
        assert_eq!(other.verify(&c), Err(Refusal::BadMac));
        for at in 0..CREDENTIAL_BYTES {
            let mut forged = c;
            forged[at] ^= 1;
            assert_eq!(key().verify(&forged), Err(Refusal::BadMac), "bit flipped at {at}");
        }
        assert_eq!(key().verify(&[]), Err(Refusal::NoCredential));
        assert!(matches!(key().verify(&c[..45]), Err(Refusal::Malformed(_))));
        assert_ne!(format!("{:?}", key()), format!("{:?}", key().1));
        assert!(!format!("{:?}", key().issue(CLIENT)).contains(&hex(&c[14..])));
    }

    #[test]
    fn a_fence_view_admits_live_and_newer_clients_only() {
        let v = FenceView {
            seq: 4,
            next_client: 10,
            live: vec![2, 7],
        };
        assert_eq!(v.validate(), Ok(()));
        let admitted: Vec<u64> = (0..12).filter(|&c| v.admits(c)).collect();
        assert_eq!(admitted, [2, 7, 10, 11]);
        let bad = |live: Vec<u64>| FenceView { live, ..v.clone() }.validate();
        assert!(bad(vec![7, 2]).is_err());
        assert!(bad(vec![2, 2]).is_err());
        assert!(bad(vec![10]).is_err());
    }

    #[test]
    fn a_placed_gate_admits_nobody_until_it_has_key_and_view_and_fences_expired_clients() {
        let cred = key().issue(CLIENT).to_bytes();
        let mut g = Gate::placed();
        assert!(matches!(g.admit(&cred), Err(Refusal::NotReady(_))));
        g.set_key(key());
        assert!(matches!(g.admit(&cred), Err(Refusal::NotReady(_))));
        assert!(g.follow(FenceView {
            seq: 1,
            next_client: 8,
            live: vec![7],
        }));
        assert_eq!(g.admit(&cred), Ok(Some(CLIENT)));
        // Client 7 expires: the next view fences it, an older one is ignored.
        assert!(g.follow(FenceView {
            seq: 2,
            next_client: 9,
            live: vec![8],
        }));
        assert!(!g.follow(FenceView {
            seq: 1,
            next_client: 8,
            live: vec![7],
        }));
        assert_eq!(g.admits(Some(CLIENT)), Err(Refusal::Fenced { client: 7 }));
        assert_eq!(g.admit(&cred), Err(Refusal::Fenced { client: 7 }));
        assert_eq!(g.admits(Some(Holder::Service { id: 1 })), Ok(()));
        assert_eq!(g.admits(None), Err(Refusal::NoCredential));
        assert_eq!(Gate::open().admit(&[]), Ok(None));
        assert_eq!(Gate::keyed(key()).admit(&cred), Ok(Some(CLIENT)));
    }
}
