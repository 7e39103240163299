//! `[admin]`: the admin endpoint's address, and who may use its key
//! endpoints (key lookups, counts, provenance, deletes): the bearer token,
//! from the settings, a file or [`ADMIN_TOKEN_ENV`].

use serde::Deserialize;

use super::error::{ConfigError, invalid};
use super::secret::{REDACTED, Secret};

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSettings {
    /// Address of the HTTP admin endpoint (`/metrics`, `/healthz`, `/readyz`,
    /// `/v1/slices`, and the key endpoints such as `/v1/lookup`).
    pub listen: String,
    /// Address of a port answering `/healthz` and `/readyz` alone, with
    /// connection slots of its own (point liveness and readiness probes
    /// here); empty: none (the probes use `listen`).
    pub health_listen: String,
    /// Bearer token the key endpoints require; empty: none. Prefer `token_file`.
    pub token: Secret,
    /// A file holding the bearer token, read at start-up (a trailing newline
    /// is dropped); empty: none. Not together with `token`.
    pub token_file: String,
    /// The endpoints that reveal or change keys (`/v1/lookup`): `off` (404),
    /// `token` (bearer token required) or `auto` (`token` when a token is
    /// set, else `off`).
    pub key_endpoints: String,
}

/// Who may use the admin endpoints that reveal or change keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyEndpoints {
    /// They answer 404.
    Off,
    /// They answer only requests with `Authorization: Bearer <token>`.
    Token(Secret),
}

/// Bounds of a bearer token: long enough not to be guessed, and characters a
/// header carries unchanged (visible ASCII, no spaces).
const TOKEN_RULE: &str = "16 to 4096 visible ASCII characters (no spaces or control characters)";

fn valid_token(token: &str) -> bool {
    (16..=4096).contains(&token.len()) && token.bytes().all(|b| b.is_ascii_graphic())
}

impl AdminSettings {
    /// The bearer token (from `token` or `token_file`) and what it guards.
    pub(super) fn key_endpoints(&self) -> Result<KeyEndpoints, ConfigError> {
        // Never the value itself in an error: its length is enough to spot a stray character.
        let shown = |t: &str| format!("{REDACTED} ({} bytes)", t.len());
        let token = match (self.token.is_empty(), self.token_file.is_empty()) {
            (false, false) => {
                return Err(invalid(
                    "admin.token",
                    REDACTED,
                    format!("set admin.token or admin.token_file ({}), not both", self.token_file),
                ));
            }
            (false, true) if !valid_token(self.token.expose()) => {
                return Err(invalid("admin.token", shown(self.token.expose()), TOKEN_RULE));
            }
            (false, true) => Some(self.token.clone()),
            (true, false) => {
                let file = &self.token_file;
                let text = std::fs::read_to_string(file)
                    .map_err(|e| invalid("admin.token_file", file, format!("a readable file with the token ({e})")))?;
                let token = text.trim_end_matches(['\n', '\r']);
                if !valid_token(token) {
                    return Err(invalid(
                        "admin.token_file",
                        file,
                        format!("the token in it ({}): {TOKEN_RULE}", shown(token)),
                    ));
                }
                Some(Secret::new(token))
            }
            (true, true) => None,
        };
        match (self.key_endpoints.as_str(), token) {
            ("auto" | "token", Some(token)) => Ok(KeyEndpoints::Token(token)),
            ("auto" | "off", _) => Ok(KeyEndpoints::Off),
            ("token", None) => Err(invalid(
                "admin.key_endpoints",
                "token",
                "needs a bearer token: set admin.token_file (or admin.token)",
            )),
            (other, _) => Err(invalid("admin.key_endpoints", other, "expected auto, off or token")),
        }
    }
}

/// The environment variable of the admin bearer token: `admin.token` for
/// the daemon, and the token `dedupd keys` sends. The settings' own
/// variable, `DEDUPD__ADMIN__TOKEN`, is read too.
pub const ADMIN_TOKEN_ENV: &str = "DEDUPD_ADMIN_TOKEN";

/// The settings' own environment variable of `admin.token`.
const ADMIN_TOKEN_SETTING_ENV: &str = "DEDUPD__ADMIN__TOKEN";

/// Reads [`ADMIN_TOKEN_ENV`] in `env` as `admin.token`
/// ([`ADMIN_TOKEN_SETTING_ENV`]): both set to different tokens is an error
/// naming both (never the tokens); empty counts as unset.
pub(super) fn admin_token_env(env: &mut Vec<(String, String)>) -> Result<(), ConfigError> {
    let value = |name: &str| env.iter().rev().find(|(k, v)| k == name && !v.is_empty()).map(|(_, v)| v.clone());
    match (value(ADMIN_TOKEN_ENV), value(ADMIN_TOKEN_SETTING_ENV)) {
        (Some(short), Some(long)) if short != long => Err(invalid(
            "admin.token",
            REDACTED,
            format!(
                "{ADMIN_TOKEN_ENV} and {ADMIN_TOKEN_SETTING_ENV} are both set, to different tokens: set one of them \
                 ({ADMIN_TOKEN_ENV}, the variable `dedupd keys` reads too)"
            ),
        )),
        (Some(token), None) => {
            env.push((ADMIN_TOKEN_SETTING_ENV.to_string(), token));
            Ok(())
        }
        _ => Ok(()),
    }
}
