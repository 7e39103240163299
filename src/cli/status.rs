//! `dedupd status --admin URL…`: what each member of a deployment is doing,
//! read from their admin endpoints (`/healthz`, `/readyz`, `/v1/slices`):
//! which member owns which slice, how far each slice is (its offset, lag,
//! event-time clock, records waiting for the watermark, replay, last
//! checkpoint) and its filter's estimated FPR and memory.

use std::fmt::Write as _;

use anyhow::bail;
use clap::Args;

use super::http::request;
use crate::admin::SliceStatus;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// A member's admin endpoint, e.g. `http://10.0.0.7:9464`; once per
    /// member (each member answers for the slices it owns).
    #[arg(long, default_value = "http://127.0.0.1:9464")]
    pub admin: Vec<String>,
    /// Print one JSON document (members and slices) instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// What one member answered.
#[derive(Debug, serde::Serialize)]
struct Member {
    admin: String,
    /// `/healthz`: "ok", or why not (or the connection error).
    health: String,
    /// `/readyz`: "ready", or why not.
    ready: String,
    slices: Vec<SliceStatus>,
}

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let members: Vec<Member> = args.admin.iter().map(|admin| ask(admin)).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "members": members }))?);
    } else {
        print!("{}", tables(&members));
    }
    let failing: Vec<&str> = members.iter().filter(|m| m.health != "ok").map(|m| m.admin.as_str()).collect();
    if !failing.is_empty() {
        bail!("not healthy or not reachable: {}", failing.join(", "));
    }
    Ok(())
}

fn ask(admin: &str) -> Member {
    let get = |path: &str| match request(admin, "GET", path, None) {
        Ok((_, body)) => body.trim_end().to_string(),
        Err(e) => format!("unreachable: {e:#}"),
    };
    let (health, ready) = (get("/healthz"), get("/readyz"));
    let slices = match request(admin, "GET", "/v1/slices", None) {
        Ok((200, body)) => serde_json::from_str(&body).unwrap_or_default(),
        _ => Vec::new(),
    };
    Member { admin: admin.to_string(), health, ready, slices }
}

/// The members' table, then one row per slice (a slice two members claim,
/// during a rebalance, has a row for each).
fn tables(members: &[Member]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{:<28} {:<10} {:<10} SLICES", "MEMBER", "HEALTH", "READY");
    for m in members {
        let slices: Vec<String> = m.slices.iter().map(|s| s.slice.to_string()).collect();
        let _ = writeln!(out, "{:<28} {:<10} {:<10} {}", m.admin, m.health, m.ready, slices.join(","));
    }
    let mut rows: Vec<(&SliceStatus, &str)> =
        members.iter().flat_map(|m| m.slices.iter().map(move |s| (s, m.admin.as_str()))).collect();
    rows.sort_by_key(|(s, admin)| (s.slice, *admin));
    let _ = writeln!(
        out,
        "\n{:<6} {:<28} {:>12} {:>9} {:<25} {:>8} {:<10} {:>12} {:>9} {:>10}",
        "SLICE",
        "MEMBER",
        "NEXT OFFSET",
        "LAG",
        "CLOCK (EVENT TIME)",
        "WAITING",
        "REPLAYING",
        "CHECKPOINT",
        "EST. FPR",
        "MEMORY"
    );
    for (s, admin) in rows {
        let _ = writeln!(
            out,
            "{:<6} {:<28} {:>12} {:>9} {:<25} {:>8} {:<10} {:>12} {:>9.2e} {:>10}",
            s.slice,
            admin,
            s.next_offset,
            s.lag,
            s.clock_ms.map_or("-".to_string(), rfc3339),
            s.waiting,
            s.replaying_until.as_deref().unwrap_or("-"),
            s.last_checkpoint_offset.map_or("-".to_string(), |o| o.to_string()),
            s.estimated_fpr,
            mebibytes(s.memory_bytes),
        );
    }
    out
}

fn mebibytes(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Milliseconds since the epoch as an RFC 3339 UTC time, to the millisecond.
fn rfc3339(ms: u64) -> String {
    let (days, rest) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    // Days to a civil date (proleptic Gregorian), after Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (rest / 3_600_000, rest / 60_000 % 60, rest / 1_000 % 60, rest % 1_000);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_003_030), "2023-11-14T22:13:23.030Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(4_107_542_399_999), "2100-02-28T23:59:59.999Z");
    }

    #[test]
    fn a_slice_two_members_claim_has_a_row_for_each() {
        let slice = |n: u32| SliceStatus { slice: n, clock_ms: Some(0), ..SliceStatus::default() };
        let members = [
            Member { admin: "http://b:1".into(), health: "ok".into(), ready: "ready".into(), slices: vec![slice(1)] },
            Member {
                admin: "http://a:1".into(),
                health: "ok".into(),
                ready: "ready".into(),
                slices: vec![slice(0), slice(1)],
            },
        ];
        let text = tables(&members);
        let rows: Vec<&str> = text.lines().skip_while(|l| !l.starts_with("SLICE")).skip(1).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[0].starts_with("0 ") && rows[1].contains("http://a:1") && rows[2].contains("http://b:1"),
            "{text}"
        );
        assert!(rows[0].contains("1970-01-01T00:00:00.000Z"), "{text}");
    }
}
