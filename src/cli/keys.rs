//! `dedupd keys delete KEY --admin URL`: a client of the daemon's key
//! endpoints, so that an operator needs no HTTP tool.

use anyhow::bail;
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Forget a key (`DELETE /v1/keys/{key}`): a copy of it sent next inside
    /// the window is delivered again. Needs `filter.deletable = true`.
    /// Prints the JSON answer; exits non-zero unless the key was deleted.
    Delete(DeleteArgs),
}

#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The dedup key, as the daemon extracts it (`input.key`).
    pub key: String,
    /// The admin endpoint, e.g. `http://127.0.0.1:9464`.
    #[arg(long)]
    pub admin: String,
    /// The bearer token of the key endpoints; default: $DEDUPD_ADMIN_TOKEN.
    /// (An environment variable keeps it out of the process list.)
    #[arg(long)]
    pub token: Option<String>,
}

pub fn run(command: KeysCommand) -> anyhow::Result<()> {
    match command {
        KeysCommand::Delete(args) => {
            let path = format!("/v1/keys/{}", crate::url::percent_encode(args.key.as_bytes()));
            let token = args.token.or_else(|| std::env::var(crate::config::ADMIN_TOKEN_ENV).ok());
            let (status, body) = super::http::request(&args.admin, "DELETE", &path, token.as_deref())?;
            println!("{}", body.trim_end());
            if status != 200 {
                bail!("the key was not deleted (HTTP {status})");
            }
            Ok(())
        }
    }
}
