//! `[kafka]`: the brokers, and the librdkafka settings passed through to
//! every client.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

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
