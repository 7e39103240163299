//! Which settings file `dedupd run` reads ([`SettingsFile::locate`]).

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

use super::error::ConfigError;

/// The environment variable that names the settings file when `--config` does not.
pub const CONFIG_ENV: &str = "DEDUPD_CONFIG";

/// Where `dedupd run` looks for a settings file when neither `--config` nor
/// [`CONFIG_ENV`] names one, in order: `config/dedupd.toml` under the working
/// directory (a checkout), then `/etc/dedupd/dedupd.toml` (the container image
/// and the Helm chart put it there).
pub const SEARCH_PATH: [&str; 2] = ["config/dedupd.toml", "/etc/dedupd/dedupd.toml"];

/// How the settings file was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    /// The `--config` flag.
    Flag,
    /// A command's argument (`dedupd check-config FILE`).
    Argument,
    /// The [`CONFIG_ENV`] variable.
    Env,
    /// The first of the search path that exists.
    Search,
}

impl fmt::Display for ChosenBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChosenBy::Flag => f.write_str("named by --config"),
            ChosenBy::Argument => f.write_str("named on the command line"),
            ChosenBy::Env => write!(f, "named by {CONFIG_ENV}"),
            ChosenBy::Search => f.write_str("found on the search path"),
        }
    }
}

/// The settings file `dedupd run` reads, and how it was chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingsFile {
    /// `path` exists.
    Found { path: PathBuf, by: ChosenBy },
    /// No file: built-in defaults and the environment only. `looked_in` is the
    /// search path as searched (relative entries made absolute).
    NotFound { looked_in: Vec<PathBuf> },
}

impl SettingsFile {
    /// Picks the settings file: the `--config` flag (`flag`), else the value of
    /// [`CONFIG_ENV`] (`env`; empty counts as unset), else the first of
    /// `search` (normally [`SEARCH_PATH`]) that is a file, else none. A file
    /// named by the flag or the variable must exist: its absence is an error
    /// naming it, never a silent fall-back to the defaults.
    pub fn locate(flag: Option<&Path>, env: Option<&OsStr>, search: &[PathBuf]) -> Result<Self, ConfigError> {
        let named = match (flag, env.filter(|v| !v.is_empty())) {
            (Some(path), _) => Some((path, ChosenBy::Flag)),
            (None, Some(value)) => Some((Path::new(value), ChosenBy::Env)),
            (None, None) => None,
        };
        if let Some((path, by)) = named {
            return Self::named(path, by);
        }
        match search.iter().find(|p| p.is_file()) {
            Some(path) => Ok(SettingsFile::Found { path: path.clone(), by: ChosenBy::Search }),
            None => Ok(SettingsFile::NotFound { looked_in: search.iter().map(|p| absolute(p)).collect() }),
        }
    }

    /// The file `path`, named as `by` says; an error naming it if it does not exist.
    pub fn named(path: &Path, by: ChosenBy) -> Result<Self, ConfigError> {
        if !path.exists() {
            let shown = absolute(path);
            return Err(ConfigError::Load(format!("the settings file {} ({by}) does not exist", shown.display())));
        }
        Ok(SettingsFile::Found { path: path.to_path_buf(), by })
    }

    /// [`SettingsFile::locate`] with this process's `--config`, environment and [`SEARCH_PATH`].
    pub fn locate_default(flag: Option<&Path>) -> Result<Self, ConfigError> {
        let search: Vec<PathBuf> = SEARCH_PATH.iter().map(PathBuf::from).collect();
        Self::locate(flag, std::env::var_os(CONFIG_ENV).as_deref(), &search)
    }

    pub fn path(&self) -> Option<&Path> {
        match self {
            SettingsFile::Found { path, .. } => Some(path),
            SettingsFile::NotFound { .. } => None,
        }
    }
}

/// What `dedupd run` logs at start-up.
impl fmt::Display for SettingsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsFile::Found { path, by } => {
                write!(f, "reading settings from {} ({by}) and the environment", absolute(path).display())
            }
            SettingsFile::NotFound { looked_in } => {
                let places: Vec<String> = looked_in.iter().map(|p| p.display().to_string()).collect();
                write!(
                    f,
                    "no settings file found (looked in --config, {CONFIG_ENV}, {}); using built-in defaults and the \
                     environment",
                    places.join(", ")
                )
            }
        }
    }
}

/// `path` made absolute against the working directory, for messages.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
