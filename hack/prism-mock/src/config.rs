//! Configuration of a mock instance: where it listens, credentials, the seed, timings, guest misbehaviours.

use std::fmt;
use std::net::SocketAddr;

use crate::behaviour::{GuestBehaviour, Timings};
use crate::seed::Seed;

/// Credentials the mock accepts. `Debug` never shows the secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Basic-auth user name.
    pub username: String,
    /// Basic-auth password.
    pub password: String,
    /// Value accepted in the `X-ntnx-api-key` header; `None` disables API-key auth.
    pub api_key: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Default for Credentials {
    fn default() -> Self {
        Self {
            username: "admin".to_owned(),
            password: "mock-password".to_owned(),
            api_key: Some("mock-api-key".to_owned()),
        }
    }
}

/// Everything needed to start a mock.
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Address to bind; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Serve HTTPS with a generated CA (default) or plain HTTP.
    pub tls: bool,
    /// Accepted credentials.
    pub credentials: Credentials,
    /// Entities present at start.
    pub seed: Seed,
    /// Seed of the one random-number generator (UUIDs, MACs, session tokens, fault draws).
    /// `None` uses the seed file's `rng_seed`, else 0.
    pub rng_seed: Option<u64>,
    /// Durations of simulated work.
    pub timings: Timings,
    /// Guest misbehaviours.
    pub guest: GuestBehaviour,
    /// Lifetime of a session cookie (real Prism Central: about 15 minutes).
    pub session_ttl_secs: u64,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: true,
            credentials: Credentials::default(),
            seed: Seed::default(),
            rng_seed: None,
            timings: Timings::for_tests(),
            guest: GuestBehaviour::default(),
            session_ttl_secs: 900,
        }
    }
}
