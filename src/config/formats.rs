//! `input.format`, `input.schemas` and `input.schema_registry`: the decoder
//! of Avro and Protobuf payloads, built once at start-up.

use std::sync::Arc;
use std::time::Duration;

use super::error::{ConfigError, invalid};
use super::sections::InputSettings;
use crate::engine::formats::{self, Decoder, Format, Registry, Schemas};
use crate::schema_registry::{Access, HttpRegistry, Setting};

/// How long a failed schema fetch is remembered before its id is asked again.
pub const SCHEMA_RETRY: Duration = Duration::from_secs(30);

/// The decoder the input's settings call for; `None`: JSON.
pub(super) fn input_decoder(input: &InputSettings) -> Result<Option<Arc<Decoder>>, ConfigError> {
    let format: Format = input.format.parse().map_err(|e| invalid("input.format", &input.format, e))?;
    if input.schema_registry.is_empty() && !input.schema_registry_user.is_empty() {
        return Err(invalid("input.schema_registry_user", &input.schema_registry_user, "needs input.schema_registry"));
    }
    if input.schema_registry.is_empty() && !input.schema_registry_token.is_empty() {
        return Err(invalid(
            "input.schema_registry_token",
            &input.schema_registry_token,
            "needs input.schema_registry",
        ));
    }
    for (setting, value) in [
        ("input.schema_registry_ca_file", &input.schema_registry_ca_file),
        ("input.schema_registry_cert_file", &input.schema_registry_cert_file),
        ("input.schema_registry_key_file", &input.schema_registry_key_file),
    ] {
        if input.schema_registry.is_empty() && !value.is_empty() {
            return Err(invalid(setting, value, "needs input.schema_registry"));
        }
    }
    if input.schema_registry_user.is_empty() && !input.schema_registry_password.is_empty() {
        return Err(invalid(
            "input.schema_registry_password",
            &input.schema_registry_password,
            "needs input.schema_registry_user",
        ));
    }
    if format == Format::Json {
        for (setting, value) in [("input.schemas", &input.schemas), ("input.schema_registry", &input.schema_registry)] {
            if !value.is_empty() {
                return Err(invalid(setting, value, "only for input.format = \"avro\" or \"protobuf\""));
            }
        }
        return Ok(None);
    }
    if input.schemas.is_empty() && input.schema_registry.is_empty() && format != Format::JsonSchema {
        return Err(invalid(
            "input.format",
            &input.format,
            "needs input.schemas (a directory of schema files) or input.schema_registry (a registry URL)",
        ));
    }
    let mut schemas = Schemas::default();
    if !input.schemas.is_empty() {
        schemas = Schemas::from_dir(std::path::Path::new(&input.schemas))
            .map_err(|e| invalid("input.schemas", &input.schemas, e))?;
        if schemas.is_empty() && input.schema_registry.is_empty() {
            return Err(invalid("input.schemas", &input.schemas, "no <id>.avsc, <id>.proto or <id>.json file in it"));
        }
    }
    let registry = if input.schema_registry.is_empty() {
        None
    } else {
        fn file(f: &str) -> Option<&std::path::Path> {
            Some(std::path::Path::new(f)).filter(|_| !f.is_empty())
        }
        let access = Access {
            url: &input.schema_registry,
            user: Some(input.schema_registry_user.as_str()).filter(|u| !u.is_empty()),
            password: Some(input.schema_registry_password.expose()),
            token: Some(input.schema_registry_token.expose()).filter(|t| !t.is_empty()),
            ca_file: file(&input.schema_registry_ca_file),
            cert_file: file(&input.schema_registry_cert_file),
            key_file: file(&input.schema_registry_key_file),
        };
        let http = HttpRegistry::new(&access).map_err(|(setting, why)| match setting {
            Setting::Url => invalid("input.schema_registry", &input.schema_registry, why),
            Setting::Token => invalid("input.schema_registry_token", &input.schema_registry_token, why),
            Setting::CaFile => invalid("input.schema_registry_ca_file", &input.schema_registry_ca_file, why),
            Setting::CertFile => invalid("input.schema_registry_cert_file", &input.schema_registry_cert_file, why),
            Setting::KeyFile => invalid("input.schema_registry_key_file", &input.schema_registry_key_file, why),
        })?;
        Some(Arc::new(Registry::new(Box::new(http), SCHEMA_RETRY)))
    };
    formats::limit_avro_allocations(input.max_record_bytes);
    Ok(Some(Arc::new(Decoder { format, schemas, registry })))
}
