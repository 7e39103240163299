//! Secrets among the settings: [`Secret`] (the admin bearer token) and the
//! librdkafka settings that hold one; all show as [`REDACTED`].

use std::fmt;

use serde::{Deserialize, Deserializer};

use super::values::Scalar;

/// What dedupd shows in place of a secret.
pub const REDACTED: &str = "[redacted]";

/// Whether a librdkafka setting (dotted name) holds a secret: any name with
/// `password`, `secret`, `passphrase`, `token` or `private` in it, private
/// keys in PEM (`ssl.key.pem`) and `sasl.oauthbearer.config` (which may carry
/// client credentials). dedupd never logs or returns such a value. Erring on
/// the side of redaction costs nothing: these values are never needed in a log.
pub fn is_secret_setting(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "secret", "passphrase", "token", "private", "key.pem", "oauthbearer.config"]
        .iter()
        .any(|part| name.contains(part))
}

/// A setting value that never appears in logs, error messages or `Debug`
/// output (the admin bearer token): all three show [`REDACTED`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Serialised as [`REDACTED`] (empty as empty): `dedupd check-config
/// --print-resolved` prints the settings without it.
impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { REDACTED })
    }
}

/// Read through [`Scalar`], whose errors do not echo the value (serde's
/// "invalid type: integer `123`, expected a string" would).
impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Scalar::deserialize(d).map(|s| Secret(s.to_string()))
    }
}
