//! The TOML configuration (docs/openadr.md).

use crate::translate::{PayloadRule, PayloadUnit};
use serde::Deserialize;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    vtn_url: String,
    /// Default: `<vtn_url's origin>/auth/token` (OpenLEADR's VTN with its built-in OAuth).
    oauth_token_url: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    credentials_file: Option<PathBuf>,
    program_name: String,
    #[serde(default = "default_payload_type")]
    payload_type: String,
    #[serde(default = "default_payload_unit")]
    payload_unit: String,
    #[serde(default)]
    baseline_cap_w: f64,
    cap_file: PathBuf,
    #[serde(default = "default_poll_s")]
    poll_s: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Credentials {
    client_id: String,
    client_secret: String,
}

fn default_payload_type() -> String {
    "IMPORT_CAPACITY_LIMIT".into()
}
fn default_payload_unit() -> String {
    "kW".into()
}
fn default_poll_s() -> u64 {
    60
}

#[derive(Debug)]
pub struct Config {
    pub vtn_url: url::Url,
    pub oauth_token_url: Option<url::Url>,
    /// (client id, secret); `None`: the VTN asks for none.
    pub credentials: Option<(String, String)>,
    pub program_name: String,
    pub rule: PayloadRule,
    pub cap_file: PathBuf,
    pub poll_s: u64,
}

fn read_credentials(path: &Path) -> Result<(String, String), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("credentials_file {}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!(
            "credentials_file {} is readable or writable by group or others (mode {:o}): chmod 600 it",
            path.display(),
            meta.permissions().mode() & 0o777
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("credentials_file {}: {e}", path.display()))?;
    let c: Credentials = toml::from_str(&text).map_err(|e| format!("credentials_file {}: {e}", path.display()))?;
    Ok((c.client_id, c.client_secret))
}

impl Config {
    pub fn parse(text: &str) -> Result<Config, String> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut vtn_url: url::Url = raw.vtn_url.parse().map_err(|e| format!("vtn_url '{}': {e}", raw.vtn_url))?;
        // The client joins relative paths ("programs", "events"): the base must end in '/'.
        if !vtn_url.path().ends_with('/') {
            vtn_url.set_path(&format!("{}/", vtn_url.path()));
        }
        let oauth_token_url = match raw.oauth_token_url {
            Some(u) => Some(u.parse().map_err(|e| format!("oauth_token_url '{u}': {e}"))?),
            None => None,
        };
        let credentials = match (raw.client_id, raw.client_secret, raw.credentials_file) {
            (Some(id), Some(secret), None) => Some((id, secret)),
            (None, None, Some(path)) => Some(read_credentials(&path)?),
            (None, None, None) => None,
            _ => return Err("give either client_id and client_secret, or credentials_file".into()),
        };
        let unit = PayloadUnit::parse(&raw.payload_unit)?;
        if !raw.baseline_cap_w.is_finite() || raw.baseline_cap_w < 0.0 {
            return Err(format!("baseline_cap_w {}: expected watts, 0 or more (0: no cap outside events)", raw.baseline_cap_w));
        }
        if raw.poll_s == 0 {
            return Err("poll_s must be at least 1".into());
        }
        if raw.program_name.is_empty() {
            return Err("program_name is empty".into());
        }
        Ok(Config {
            vtn_url,
            oauth_token_url,
            credentials,
            program_name: raw.program_name,
            rule: PayloadRule { payload_type: raw.payload_type, unit, baseline_cap_w: raw.baseline_cap_w },
            cap_file: raw.cap_file,
            poll_s: raw.poll_s,
        })
    }

    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_errors() {
        let c = Config::parse("vtn_url = \"http://127.0.0.1:3000\"\nprogram_name = \"dr\"\ncap_file = \"/tmp/cap\"\nbaseline_cap_w = 60000\n").unwrap();
        assert_eq!(c.vtn_url.as_str(), "http://127.0.0.1:3000/");
        assert_eq!(c.rule.payload_type, "IMPORT_CAPACITY_LIMIT");
        assert_eq!(c.rule.unit, PayloadUnit::KiloWatt);
        assert_eq!(c.poll_s, 60);
        assert!(c.credentials.is_none());
        let err = Config::parse("vtn_url = \"http://x\"\nprogram_name = \"dr\"\ncap_file = \"/tmp/cap\"\nclient_id = \"a\"\n").unwrap_err();
        assert!(err.contains("either client_id and client_secret"), "{err}");
        let err = Config::parse("vtn_url = \"http://x\"\nprogram_name = \"dr\"\ncap_file = \"/c\"\npayload_unit = \"MW\"\n").unwrap_err();
        assert!(err.contains("expected kW, W or fraction"), "{err}");
    }
}
