//! `[kafka]`: the brokers, and the librdkafka settings passed through to
//! every client.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::error::{ConfigError, invalid};
use super::secret::{REDACTED, is_secret_setting};
use super::values::Scalar;

#[derive(Clone, Deserialize, serde::Serialize)]
pub struct KafkaSettings {
    /// Bootstrap brokers, `host:port[,host:port…]`.
    pub brokers: String,
    /// Any other librdkafka setting (TLS, SASL, client tuning), passed through
    /// to every client. In the environment write `_` for `.`:
    /// `DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000` sets `session.timeout.ms`.
    #[serde(flatten)]
    pub client: BTreeMap<String, ClientValue>,
}

/// A pass-through value. The settings loader reads a quoted dotted key such
/// as `"session.timeout.ms"` as nested tables, so nesting is folded back.
#[derive(Debug, Clone, Deserialize, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum ClientValue {
    Scalar(Scalar),
    Nested(BTreeMap<String, ClientValue>),
}

impl KafkaSettings {
    /// The pass-through settings with librdkafka's dotted names.
    pub fn client_settings(&self) -> Vec<(String, String)> {
        fn walk(prefix: &str, map: &BTreeMap<String, ClientValue>, out: &mut Vec<(String, String)>) {
            for (k, v) in map {
                let name =
                    if prefix.is_empty() { k.replace('_', ".") } else { format!("{prefix}.{}", k.replace('_', ".")) };
                match v {
                    ClientValue::Scalar(s) => out.push((name, s.to_string())),
                    ClientValue::Nested(inner) => walk(&name, inner, out),
                }
            }
        }
        let mut out = Vec::new();
        walk("", &self.client, &mut out);
        out
    }
}

/// Secret pass-through values (passwords, keys) are shown as [`REDACTED`].
impl fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client: BTreeMap<String, String> = self
            .client_settings()
            .into_iter()
            .map(|(k, v)| if is_secret_setting(&k) { (k, REDACTED.to_string()) } else { (k, v) })
            .collect();
        f.debug_struct("KafkaSettings").field("brokers", &self.brokers).field("client", &client).finish()
    }
}

/// The SASL mechanisms this build's librdkafka carries (OpenSSL, no Cyrus
/// SASL): what `sasl.mechanisms` may name.
pub const SASL_MECHANISMS: [&str; 4] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"];

/// What to use instead of an authentication method this build does not carry.
const USE_INSTEAD: &str = "use SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (over SASL_SSL)";

impl KafkaSettings {
    /// Refuses the authentication settings this build cannot honour, with
    /// the reason: librdkafka is built with OpenSSL but without Cyrus SASL
    /// (no GSSAPI/Kerberos) and without libcurl (no OIDC token fetch), and
    /// dedupd supplies no OAUTHBEARER token of its own. librdkafka itself
    /// would accept most of them and fail only when a client connects.
    pub(crate) fn check_auth(&self) -> Result<(), ConfigError> {
        let settings = self.client_settings();
        let get = |name: &str| settings.iter().find(|(k, _)| k == name).map(|(_, v)| v.trim().to_string());
        // `sasl.mechanism` is librdkafka's alias of `sasl.mechanisms`.
        let (mechanism_setting, mechanism) = match (get("sasl.mechanisms"), get("sasl.mechanism")) {
            (Some(m), _) => ("kafka.sasl.mechanisms", Some(m)),
            (None, Some(m)) => ("kafka.sasl.mechanism", Some(m)),
            (None, None) => ("kafka.sasl.mechanisms", None),
        };
        let protocol = get("security.protocol").unwrap_or_default().to_ascii_lowercase();
        let uses_sasl = protocol.starts_with("sasl_");
        let no_gssapi = || {
            format!(
                "GSSAPI (Kerberos) is not built in: this build's librdkafka has no Cyrus SASL library; {USE_INSTEAD}"
            )
        };
        match mechanism.as_deref() {
            Some(m) if m.eq_ignore_ascii_case("GSSAPI") => return Err(invalid(mechanism_setting, m, no_gssapi())),
            Some(m) if !SASL_MECHANISMS.iter().any(|b| b.eq_ignore_ascii_case(m)) => {
                return Err(invalid(
                    mechanism_setting,
                    m,
                    format!("one of {} (one mechanism; GSSAPI is not built in)", SASL_MECHANISMS.join(", ")),
                ));
            }
            None if uses_sasl => {
                return Err(invalid(
                    mechanism_setting,
                    "(unset: librdkafka's default, GSSAPI)",
                    format!("security.protocol = {protocol} needs a mechanism, and {}", no_gssapi()),
                ));
            }
            _ => {}
        }
        for (name, value) in &settings {
            if name.starts_with("sasl.kerberos.") {
                return Err(invalid(&format!("kafka.{name}"), value, no_gssapi()));
            }
        }
        if let Some(method) = get("sasl.oauthbearer.method")
            && method.eq_ignore_ascii_case("oidc")
        {
            return Err(invalid(
                "kafka.sasl.oauthbearer.method",
                method,
                format!(
                    "OIDC is not built in: this build's librdkafka has no libcurl to fetch tokens with; {USE_INSTEAD}"
                ),
            ));
        }
        let unsecured_jwt = get("enable.sasl.oauthbearer.unsecure.jwt").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if let Some(m) = mechanism.as_deref()
            && m.eq_ignore_ascii_case("OAUTHBEARER")
            && !unsecured_jwt
        {
            return Err(invalid(
                mechanism_setting,
                m,
                format!(
                    "this build has no OAUTHBEARER token source for production: OIDC is not built in (librdkafka \
                     without libcurl) and dedupd has no token callback; only unsigned tokens \
                     (enable.sasl.oauthbearer.unsecure.jwt = true, for test brokers) work; {USE_INSTEAD}"
                ),
            ));
        }
        Ok(())
    }
}
