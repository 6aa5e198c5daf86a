//! What every protocol shares: the application state (the engine, its services, the
//! loaded components, the settings requests need), and the protocol-neutral step
//! from credentials to a user. HTTP parses its headers into [`Credentials`]; MQTT and
//! WebSocket will parse theirs, and all resolve users here.

use std::net::IpAddr;
use std::sync::Arc;

use lyre_core::access::User;
use lyre_core::{Engine, Services};

use crate::components::Components;
use crate::tokens::{TokenError, TokenKind, Tokens};

/// What every handler can reach.
pub struct AppState {
    /// Signs and checks the JWT operation and refresh tokens.
    pub tokens: Tokens,
    /// How long a `login` session lasts; `None` when sessions are off.
    pub sessions: Option<std::time::Duration>,
    /// The open databases and users.
    pub engine: Arc<Engine>,
    /// The background services (jobs, log consumers).
    pub services: Arc<Services>,
    /// The loaded applications and the tables they export.
    pub components: Arc<Components>,
    /// Whether loopback requests without credentials act as the super user.
    pub authorize_local: bool,
    /// Password verifications wait for their turn here, on the async side, so a
    /// burst of logins holds no blocking threads (which searches and large decodes
    /// share) while it waits; core runs one verification at a time anyway.
    pub verifying: tokio::sync::Mutex<()>,
    /// Largest Operations API body, in bytes.
    pub ops_body_limit: usize,
    /// Largest REST body, in bytes.
    pub rest_body_limit: usize,
    /// The largest blob an upload may store (`storage.maxBlobSize`).
    pub max_blob_size: u64,
    /// How long a request body may take to arrive (`http.timeout`).
    pub body_timeout: std::time::Duration,
    /// The memory request bodies may hold, across every request.
    pub body_memory: crate::http::body::BodyMemory,
    /// Whether REST answers cross-origin requests.
    pub cors: bool,
    /// Whether the Operations API answers cross-origin requests.
    pub ops_cors: bool,
    /// Turns of the CSV loads running at once (each holds a blocking thread while
    /// it reads): [`MAX_LOADS`]; the others wait.
    pub loads: Arc<tokio::sync::Semaphore>,
    /// The configuration it started with; restart requests.
    pub control: Arc<crate::control::Control>,
    /// Request metrics (Prometheus and Harper's analytics).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Turns `true` when the server starts shutting down: long-lived connections
    /// (WebSocket and event-stream subscriptions) end then, instead of holding the
    /// shutdown up.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// The MQTT broker, for MQTT over WebSocket (set once it is open; weak, as
    /// the broker holds this state).
    pub mqtt: std::sync::OnceLock<std::sync::Weak<dyn MqttService>>,
    /// The caching tables' calls to their sources and the origins' notes.
    pub cache: Arc<crate::cache::Cache>,
    /// GraphQL documents already parsed, by their text.
    pub graphql_documents: crate::http::graphql::documents::Documents,
}

/// Serves MQTT over a byte stream: the broker, as the HTTP side sees it (MQTT
/// over WebSocket hands it the stream its binary frames carry).
pub trait MqttService: Send + Sync {
    /// Serves one MQTT connection over `stream`, from a client at `peer`.
    fn serve(
        self: Arc<Self>,
        stream: tokio::io::DuplexStream,
        peer: std::net::SocketAddr,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;
}

/// CSV loads that run at once; more wait their turn (their job says so).
pub const MAX_LOADS: usize = 2;

/// What a client presented to say who it is, whatever the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// Nothing.
    None,
    /// A user name and password (HTTP Basic, an MQTT CONNECT).
    Password {
        /// The login name.
        username: String,
        /// The password.
        password: String,
    },
    /// A bearer token (a JWT).
    Token(String),
    /// A session id (the `login` cookie).
    Session(String),
    /// The user a verified client certificate names (mTLS).
    Certificate(String),
    /// Credentials of a kind this server does not take (another HTTP scheme, an
    /// empty one): never mistaken for no credentials at all.
    Unsupported,
    /// Credentials of a kind it takes that cannot be read.
    Malformed,
}

/// Why credentials did not resolve to a user.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credentials where some are needed.
    #[error("Must login")]
    MustLogin,
    /// Unreadable credentials.
    #[error("Login failed")]
    LoginFailed,
    /// A token that is not valid: another key, tampered, the other kind, unreadable.
    #[error("invalid token")]
    InvalidToken,
    /// A token whose time is up.
    #[error("token expired")]
    ExpiredToken,
    /// Looking the user up failed.
    #[error(transparent)]
    Core(#[from] lyre_core::Error),
}

impl AppState {
    /// The user a verified token names, now: refused (`LoginFailed`) when the user
    /// is gone, or was made again or changed password since the token was issued.
    pub fn token_user(&self, claims: &crate::tokens::Claims) -> Result<Arc<User>, lyre_core::Error> {
        let user = self.engine.users().resolve(&claims.username)?;
        match user.login_epoch == claims.epoch {
            true => Ok(user),
            false => Err(lyre_core::Error::LoginFailed),
        }
    }

    /// The user `credentials` name, from a client at `peer`: the super user for a
    /// credential-less loopback client when `authorizeLocal` is on. A password not
    /// verified within the cache TTL costs an argon2 verification, run off the async
    /// threads.
    pub async fn user(&self, credentials: Credentials, peer: IpAddr) -> Result<Arc<User>, AuthError> {
        match credentials {
            Credentials::None if self.authorize_local && peer.is_loopback() => Ok(Arc::new(User::system())),
            Credentials::None | Credentials::Unsupported => Err(AuthError::MustLogin),
            Credentials::Malformed => Err(AuthError::LoginFailed),
            Credentials::Token(token) => {
                let claims = self.tokens.verify(&token, TokenKind::Operation).map_err(|err| match err {
                    TokenError::Expired => AuthError::ExpiredToken,
                    TokenError::Invalid => AuthError::InvalidToken,
                })?;
                match self.token_user(&claims) {
                    Ok(user) => Ok(user),
                    // A token for a user since dropped (or whose password changed)
                    // authenticates no one.
                    Err(lyre_core::Error::LoginFailed) => Err(AuthError::InvalidToken),
                    Err(err) => Err(err.into()),
                }
            }
            Credentials::Certificate(name) => match self.engine.users().resolve(&name) {
                Ok(user) => Ok(user),
                Err(lyre_core::Error::LoginFailed) => Err(AuthError::LoginFailed),
                Err(err) => Err(err.into()),
            },
            Credentials::Session(id) => match Box::pin(self.engine.users().session_user(&id)).await? {
                Some(user) => Ok(user),
                // An ended or expired session is no login.
                None if self.authorize_local && peer.is_loopback() => Ok(Arc::new(User::system())),
                None => Err(AuthError::MustLogin),
            },
            // A login verified within the cache TTL answers at once; the slow path
            // is boxed, so every request's future does not carry its state.
            Credentials::Password { username, password } => match self.engine.users().cached(&username, &password) {
                Some(user) => Ok(user),
                None => Ok(Box::pin(self.verify_password(username, password, peer)).await?),
            },
        }
    }

    /// The user a name and password log in, from a client at `peer`: a login
    /// verified within the cache TTL at once, else one argon2 verification off the
    /// async threads, in turn (the failed-login limit applies).
    pub async fn verify_password(
        &self,
        username: String,
        password: String,
        peer: IpAddr,
    ) -> Result<Arc<User>, lyre_core::Error> {
        if let Some(user) = self.engine.users().cached(&username, &password) {
            return Ok(user);
        }
        let _turn = self.verifying.lock().await;
        let engine = self.engine.clone();
        tokio::task::spawn_blocking(move || engine.users().authenticate(&username, &password, Some(peer)))
            .await
            .map_err(|e| lyre_core::Error::Stopped(e.to_string()))?
    }
}
