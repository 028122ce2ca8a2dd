//! The bootstrap secret and the mutual challenge–response handshake.
//!
//! At every start `gloved` draws 32 random bytes and writes them, as 64
//! lowercase hex characters and a newline, to `bootstrap-secret` in the
//! runtime directory (mode 0600, written to a temporary name, synced and
//! renamed into place). Only processes of the service's user can read it.
//! The secret never crosses the socket:
//!
//! 1. the server sends `hello` with a fresh 32-byte `server_nonce`;
//! 2. the client draws a 32-byte `client_nonce` and sends `authenticate`
//!    with it and `client_mac = HMAC-SHA-256(secret, "glove-control-client-v1"
//!    || 0x00 || server_nonce || client_nonce)`;
//! 3. the server verifies the MAC in constant time, refuses a client nonce
//!    it has already accepted (a bounded, process-lifetime set), and answers
//!    `server_mac = HMAC-SHA-256(secret, "glove-control-server-v1" || 0x00 ||
//!    server_nonce || client_nonce)`, which the client verifies in turn.
//!
//! Nonces are raw bytes inside the MAC and hex on the wire. The two domains
//! differ, so neither side's proof can be reflected as the other's.
//! [`Authenticated`] is the proof that step 3 succeeded; request dispatch
//! requires it.

use glove_types::codes::control::*;
use glove_types::digest::to_hex;
use glove_types::{Rejection, Sha256Digest};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::{HashSet, VecDeque};
use subtle::ConstantTimeEq;

/// Bytes of the secret.
pub const SECRET_LEN: usize = 32;
/// Bytes of each nonce.
pub const NONCE_LEN: usize = 32;
/// Domain of the client's MAC.
pub const CLIENT_DOMAIN: &[u8] = b"glove-control-client-v1";
/// Domain of the server's MAC.
pub const SERVER_DOMAIN: &[u8] = b"glove-control-server-v1";
/// The secret file's name in the runtime directory.
pub const SECRET_FILE: &str = "bootstrap-secret";

/// A 32-byte nonce.
pub type Nonce = [u8; NONCE_LEN];

/// The per-start bootstrap secret. `Debug` never shows it; it is
/// overwritten when dropped.
pub struct BootstrapSecret([u8; SECRET_LEN]);

impl core::fmt::Debug for BootstrapSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("BootstrapSecret(..)")
    }
}

impl Drop for BootstrapSecret {
    fn drop(&mut self) {
        self.0.fill(0);
    }
}

pub use glove_control::random_bytes;

impl BootstrapSecret {
    /// A fresh secret from the system random source.
    pub fn generate() -> Result<Self, Rejection> {
        random_bytes().map(BootstrapSecret)
    }

    /// Wraps known bytes (tests and the fuzz target).
    pub fn from_bytes(b: [u8; SECRET_LEN]) -> Self {
        BootstrapSecret(b)
    }

    /// Parses the secret file: 64 lowercase hex characters and an optional
    /// newline.
    pub fn parse_file(bytes: &[u8]) -> Result<Self, Rejection> {
        let bad = || {
            Rejection::new(
                AUTH_SECRET_INVALID,
                "the bootstrap secret must be 64 lowercase hex characters",
            )
        };
        let trimmed = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let s = core::str::from_utf8(trimmed).map_err(|_| bad())?;
        let d = Sha256Digest::parse(s).map_err(|_| bad())?;
        Ok(BootstrapSecret(*d.as_bytes()))
    }

    /// The file contents: hex and a newline.
    pub fn file_contents(&self) -> String {
        format!("{}\n", to_hex(&self.0))
    }

    fn mac(&self, domain: &[u8], server: &Nonce, client: &Nonce) -> [u8; 32] {
        // HMAC zero-pads a key shorter than the 64-byte block, so keying
        // with the padded block is HMAC keyed with the 32 bytes (and cannot
        // fail, unlike `new_from_slice`).
        let mut block = [0u8; 64];
        block[..SECRET_LEN].copy_from_slice(&self.0);
        let mut m = <Hmac<Sha256> as hmac::digest::KeyInit>::new(&block.into());
        block.fill(0);
        m.update(domain);
        m.update(&[0]);
        m.update(server);
        m.update(client);
        m.finalize().into_bytes().into()
    }

    /// The client's proof.
    pub fn client_mac(&self, server: &Nonce, client: &Nonce) -> [u8; 32] {
        self.mac(CLIENT_DOMAIN, server, client)
    }

    /// The server's proof.
    pub fn server_mac(&self, server: &Nonce, client: &Nonce) -> [u8; 32] {
        self.mac(SERVER_DOMAIN, server, client)
    }
}

/// Constant-time comparison of a received MAC with the expected one.
pub fn mac_matches(expected: &[u8; 32], received: &[u8]) -> bool {
    received.len() == expected.len() && bool::from(expected.ct_eq(received))
}

/// Parses 64 lowercase hex characters into 32 bytes.
pub fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    Sha256Digest::parse(s).ok().map(|d| *d.as_bytes())
}

/// Client nonces already accepted, bounded; the oldest is forgotten first.
#[derive(Debug)]
pub struct ReplayGuard {
    seen: HashSet<Nonce>,
    order: VecDeque<Nonce>,
    capacity: usize,
}

impl ReplayGuard {
    /// A guard remembering at most `capacity` nonces.
    pub fn new(capacity: usize) -> Self {
        ReplayGuard {
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Records `nonce`; false if it was already recorded.
    pub fn admit(&mut self, nonce: Nonce) -> bool {
        if self.seen.contains(&nonce) {
            return false;
        }
        if self.order.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        self.seen.insert(nonce);
        self.order.push_back(nonce);
        true
    }
}

/// Proof that a connection completed the handshake. Only
/// [`ServerHandshake::verify`] makes one.
#[derive(Debug)]
pub struct Authenticated {
    client: glove_control::Caller,
}

/// The client label of connections that do not name one.
pub const DEFAULT_CLIENT: &str = "default";

impl Authenticated {
    /// The client label this connection presented at the handshake
    /// ([`DEFAULT_CLIENT`] when it named none). Sessions remember the label
    /// of the client that started them and refuse streams and control from
    /// other labels. All clients hold the same secret, so the label
    /// separates cooperating controllers; it is not a boundary against a
    /// hostile process of the same user.
    pub fn client_id(&self) -> &str {
        self.client.client_id()
    }

    /// The caller the service's dispatch takes.
    pub fn caller(&self) -> &glove_control::Caller {
        &self.client
    }

    /// The same proof, for a connection that came through the owner socket.
    pub fn into_owner(self) -> Authenticated {
        Authenticated {
            client: glove_control::Caller::owner(self.client.client_id()),
        }
    }
}

/// The server's side of one connection's handshake.
#[derive(Debug)]
pub struct ServerHandshake {
    server_nonce: Nonce,
}

/// The `authenticate` parameters.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthenticateParams {
    /// Hex client nonce.
    pub client_nonce: String,
    /// Hex client MAC.
    pub client_mac: String,
    /// The client's label (an identifier); absent means [`DEFAULT_CLIENT`].
    #[serde(default)]
    pub client_id: Option<String>,
}

impl ServerHandshake {
    /// Starts a handshake with a fresh server nonce.
    pub fn start() -> Result<Self, Rejection> {
        Ok(ServerHandshake {
            server_nonce: random_bytes()?,
        })
    }

    /// Starts a handshake with a given nonce (the fuzz target).
    pub fn with_nonce(server_nonce: Nonce) -> Self {
        ServerHandshake { server_nonce }
    }

    /// The server nonce to send in `hello`.
    pub fn server_nonce(&self) -> &Nonce {
        &self.server_nonce
    }

    /// The `hello` parameters.
    pub fn hello_params(&self) -> serde_json::Value {
        serde_json::json!({
            "protocol_version": super::protocol::PROTOCOL_VERSION,
            "server_nonce": to_hex(&self.server_nonce),
        })
    }

    /// Checks the client's proof; on success remembers its nonce and returns
    /// the server's proof with the [`Authenticated`] token.
    pub fn verify(
        self,
        secret: &BootstrapSecret,
        params: &AuthenticateParams,
        replay: &std::sync::Mutex<ReplayGuard>,
    ) -> Result<([u8; 32], Authenticated), Rejection> {
        let failed = || Rejection::new(AUTH_FAILED, "the handshake MAC does not verify");
        let client_nonce = parse_hex32(&params.client_nonce).ok_or_else(failed)?;
        let client_mac = parse_hex32(&params.client_mac).ok_or_else(failed)?;
        let client = match &params.client_id {
            Some(c) => {
                glove_types::ids::check_id(c).map_err(|_| {
                    Rejection::new(
                        AUTH_FAILED,
                        "client_id must be an identifier ([a-z0-9._-], 1-64 bytes)",
                    )
                })?;
                c.clone()
            }
            None => DEFAULT_CLIENT.to_owned(),
        };
        let expected = secret.client_mac(&self.server_nonce, &client_nonce);
        if !mac_matches(&expected, &client_mac) {
            return Err(failed());
        }
        let fresh = replay
            .lock()
            .map(|mut g| g.admit(client_nonce))
            .unwrap_or(false);
        if !fresh {
            return Err(Rejection::new(
                AUTH_REPLAYED,
                "this client nonce was already used; draw a fresh one",
            ));
        }
        Ok((
            secret.server_mac(&self.server_nonce, &client_nonce),
            Authenticated {
                client: glove_control::Caller::new(client),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn handshake_and_replay() {
        let secret = BootstrapSecret::from_bytes([7; 32]);
        let guard = Mutex::new(ReplayGuard::new(4));
        let hs = ServerHandshake::with_nonce([1; 32]);
        let client = [2u8; 32];
        let mac = secret.client_mac(hs.server_nonce(), &client);
        let p = AuthenticateParams {
            client_nonce: to_hex(&client),
            client_mac: to_hex(&mac),
            client_id: None,
        };
        let (server_mac, _auth) = hs.verify(&secret, &p, &guard).expect("verifies");
        assert_eq!(server_mac, secret.server_mac(&[1; 32], &client));
        assert_ne!(server_mac, mac);
        // The same client nonce with a correct MAC for a new server nonce.
        let hs = ServerHandshake::with_nonce([3; 32]);
        let mac = secret.client_mac(hs.server_nonce(), &client);
        let p = AuthenticateParams {
            client_nonce: to_hex(&client),
            client_mac: to_hex(&mac),
            client_id: None,
        };
        let e = hs.verify(&secret, &p, &guard).expect_err("replayed");
        assert_eq!(e.code(), AUTH_REPLAYED);
        // A wrong secret.
        let hs = ServerHandshake::with_nonce([4; 32]);
        let other = BootstrapSecret::from_bytes([8; 32]);
        let p = AuthenticateParams {
            client_nonce: to_hex(&[5; 32]),
            client_mac: to_hex(&other.client_mac(&[4; 32], &[5; 32])),
            client_id: None,
        };
        assert_eq!(
            hs.verify(&secret, &p, &guard).expect_err("wrong").code(),
            AUTH_FAILED
        );
    }

    #[test]
    fn guard_is_bounded() {
        let mut g = ReplayGuard::new(2);
        assert!(g.admit([1; 32]));
        assert!(!g.admit([1; 32]));
        assert!(g.admit([2; 32]));
        assert!(g.admit([3; 32]));
        assert!(g.admit([1; 32]), "the oldest was forgotten");
    }

    #[test]
    fn secret_file_round_trip() {
        let s = BootstrapSecret::from_bytes([0xab; 32]);
        let back = BootstrapSecret::parse_file(s.file_contents().as_bytes()).expect("parse");
        assert_eq!(back.0, s.0);
        assert!(BootstrapSecret::parse_file(b"zz").is_err());
        assert_eq!(format!("{s:?}"), "BootstrapSecret(..)");
    }
}
