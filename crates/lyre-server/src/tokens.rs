//! JWT operation and refresh tokens (`create_authentication_tokens`,
//! `refresh_operation_token`, `Authorization: Bearer`).
//!
//! Tokens are signed with EdDSA (Ed25519) by a key pair generated at first start
//! under `<root>/keys/jwt-ed25519.pk8` (PKCS#8, readable by the owner only). Harper
//! signs with RS256; a client only carries the token back, so the algorithm is not
//! part of the wire contract, and Ed25519 signs and verifies in microseconds where
//! RSA-4096 signing takes milliseconds, with a 32-byte key instead of a 4096-bit one
//! and no padding choices to get wrong. Claims are Harper's: `username`,
//! `super_user`, `sub` (`operation` or `refresh`), `iat`, `exp`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use lyre_core::access::User;
use serde::{Deserialize, Serialize};

/// The key file's name under `<root>/keys/`.
pub const KEY_FILE: &str = "jwt-ed25519.pk8";

/// Which of the two tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// Authenticates requests (`operationTokenTimeout`, 1 day).
    Operation,
    /// Only buys new operation tokens (`refreshTokenTimeout`, 30 days).
    Refresh,
}

impl TokenKind {
    fn subject(self) -> &'static str {
        match self {
            TokenKind::Operation => "operation",
            TokenKind::Refresh => "refresh",
        }
    }
}

/// A token's claims.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Claims {
    /// Whom it authenticates.
    pub username: String,
    /// Whether the user was a super user when it was issued (informational: the
    /// user's role is looked up on every request).
    pub super_user: bool,
    /// `operation` or `refresh`.
    pub sub: String,
    /// Issued at (seconds since the epoch).
    pub iat: u64,
    /// Expires at (seconds since the epoch).
    pub exp: u64,
    /// A random id, so that two tokens issued in the same second differ.
    pub jti: String,
    /// The user's login epoch when it was issued: a token outlives no password
    /// change and no re-creation of its user.
    #[serde(default)]
    pub epoch: u64,
}

/// Why a token was not accepted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    /// Its time is up.
    #[error("token expired")]
    Expired,
    /// Anything else: a bad signature, another key, a malformed token, the other kind.
    #[error("invalid token")]
    Invalid,
}

/// Why the key pair could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// Reading or writing the key file failed.
    #[error("token key {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The key file holds no Ed25519 key.
    #[error("token key {0} is not an Ed25519 PKCS#8 key")]
    Malformed(PathBuf),
}

/// Most verified operation tokens kept at once; beyond it the cache starts over.
const MAX_VERIFIED: usize = 10_000;

/// The signing key pair and the tokens' lifetimes.
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    operation_ttl: Duration,
    refresh_ttl: Duration,
    /// Operation tokens whose signature was checked, with their claims: a client
    /// sends the same token on every request, and a signature check costs tens of
    /// microseconds. Expiry is still checked on every use.
    verified: parking_lot::Mutex<std::collections::HashMap<String, Claims>>,
}

impl Tokens {
    /// Loads the key pair from `keys_dir`, generating it on first start.
    pub fn open(keys_dir: &Path, operation_ttl: Duration, refresh_ttl: Duration) -> Result<Self, KeyError> {
        let path = keys_dir.join(KEY_FILE);
        let io = |source| KeyError::Io { path: path.clone(), source };
        let pkcs8 = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                let generated = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
                    .map_err(|_| KeyError::Malformed(path.clone()))?;
                write_private(keys_dir, &path, generated.as_ref()).map_err(io)?;
                generated.as_ref().to_vec()
            }
            Err(err) => return Err(io(err)),
        };
        let pair = Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| KeyError::Malformed(path.clone()))?;
        Ok(Self {
            encoding: EncodingKey::from_ed_der(&pkcs8),
            decoding: DecodingKey::from_ed_der(pair.public_key().as_ref()),
            operation_ttl,
            refresh_ttl,
            verified: parking_lot::Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// A new token of `kind` for `user`.
    pub fn issue(&self, user: &User, kind: TokenKind) -> Result<String, TokenError> {
        let ttl = match kind {
            TokenKind::Operation => self.operation_ttl,
            TokenKind::Refresh => self.refresh_ttl,
        };
        self.issue_for(user, kind, ttl)
    }

    /// A new token of `kind` for `user` that lasts `ttl` (`expires_in`).
    pub fn issue_for(&self, user: &User, kind: TokenKind, ttl: Duration) -> Result<String, TokenError> {
        let now = now_secs();
        let claims = Claims {
            username: user.username.clone(),
            super_user: user.is_super_user(),
            sub: kind.subject().to_string(),
            iat: now,
            exp: now.saturating_add(ttl.as_secs().max(1)),
            jti: uuid::Uuid::new_v4().simple().to_string(),
            epoch: user.login_epoch,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &self.encoding).map_err(|_| TokenError::Invalid)
    }

    /// The claims of `token` if it is a valid, unexpired token of `kind` signed by
    /// this server's key.
    pub fn verify(&self, token: &str, kind: TokenKind) -> Result<Claims, TokenError> {
        if kind == TokenKind::Operation
            && let Some(claims) = self.verified.lock().get(token)
        {
            return if claims.exp > now_secs() { Ok(claims.clone()) } else { Err(TokenError::Expired) };
        }
        let claims = self.check(token, kind)?;
        if kind == TokenKind::Operation {
            let mut verified = self.verified.lock();
            if verified.len() >= MAX_VERIFIED {
                verified.clear();
            }
            verified.insert(token.to_string(), claims.clone());
        }
        Ok(claims)
    }

    /// The signature and claims check itself.
    fn check(&self, token: &str, kind: TokenKind) -> Result<Claims, TokenError> {
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.sub = Some(kind.subject().to_string());
        match jsonwebtoken::decode::<Claims>(token, &self.decoding, &validation) {
            Ok(data) => Ok(data.claims),
            Err(err) if matches!(err.kind(), jsonwebtoken::errors::ErrorKind::ExpiredSignature) => {
                Err(TokenError::Expired)
            }
            Err(_) => Err(TokenError::Invalid),
        }
    }
}

/// Writes a private key readable by its owner only, atomically.
pub(crate) fn write_private(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    crate::files::write_atomically(path, Some(0o600), |file| file.write_all(bytes))
}

fn now_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lyre_core::Value;
    use lyre_core::access::Role;

    fn ann() -> User {
        User { username: "ann".into(), role: Role::new("r", Value::Null), active: true, login_epoch: 7 }
    }

    fn tokens(dir: &Path) -> Tokens {
        Tokens::open(dir, Duration::from_secs(60), Duration::from_secs(600)).unwrap()
    }

    #[test]
    fn a_token_verifies_only_as_its_kind_and_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let t = tokens(dir.path());
        let op = t.issue(&ann(), TokenKind::Operation).unwrap();
        let claims = t.verify(&op, TokenKind::Operation).unwrap();
        assert_eq!((claims.username.as_str(), claims.epoch), ("ann", 7), "it names the user and their login epoch");
        assert_eq!(t.verify(&op, TokenKind::Refresh), Err(TokenError::Invalid), "the other kind");
        let refresh = t.issue(&ann(), TokenKind::Refresh).unwrap();
        assert_eq!(t.verify(&refresh, TokenKind::Operation), Err(TokenError::Invalid));
        // The same key after a restart; another root's key refuses it.
        assert!(tokens(dir.path()).verify(&op, TokenKind::Operation).is_ok());
        let other = tempfile::tempdir().unwrap();
        assert_eq!(tokens(other.path()).verify(&op, TokenKind::Operation), Err(TokenError::Invalid));
        // Tampered.
        let mut forged = op.clone();
        forged.insert(forged.len() - 2, 'A');
        assert_eq!(t.verify(&forged, TokenKind::Operation), Err(TokenError::Invalid));
        assert_eq!(t.verify("not.a.token", TokenKind::Operation), Err(TokenError::Invalid));
    }

    #[test]
    fn an_expired_token_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let t = tokens(dir.path());
        let mut claims = Claims {
            username: "ann".into(),
            super_user: false,
            sub: "operation".into(),
            iat: 1,
            exp: 2,
            jti: "x".into(),
            epoch: 0,
        };
        let old = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &t.encoding).unwrap();
        assert_eq!(t.verify(&old, TokenKind::Operation), Err(TokenError::Expired));
        claims.exp = now_secs() + 100;
        let fresh = jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &t.encoding).unwrap();
        assert!(t.verify(&fresh, TokenKind::Operation).is_ok());
    }

    #[test]
    fn the_key_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        tokens(dir.path());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o077, 0);
    }
}
