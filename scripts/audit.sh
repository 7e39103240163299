#!/usr/bin/env bash
# Checks the lock files against the RustSec advisory database with cargo-audit (offline for the
# advisories; the yanked check reads crates.io's index, which `cargo fetch` brings).
#
#   scripts/audit.sh            check Cargo.lock and fuzz/Cargo.lock (CI: .ci/run); exit 1 on
#                               any finding not ignored in .cargo/audit.toml, or if a lock file
#                               names a crate the vendored advisories were not taken for
#   scripts/audit.sh --install  only install cargo-audit if it is missing (CI builds it in the
#                               background while the lints run)
#   scripts/audit.sh --refresh  first re-take the vendored advisories from a local mirror
#
# The database: CI has no network beyond package registries, so the advisories of the crates in
# the lock files are vendored in vendor/rustsec/ (crates/<name>/RUSTSEC-*.md as in the database,
# SNAPSHOT naming the database commit and date, CRATES listing every crate name of the lock files
# they were taken for). A crate with no advisories has no directory, which is why CRATES says
# which crates were looked up. `--refresh` copies them again from the database git directory
# $RUSTSEC_MIRROR (default /work/.mirror/rustsec+advisory-db/repo, a snapshot of
# github.com/rustsec/advisory-db); commit the result.
#
# cargo-audit reads a database only from a git repository, so the check builds a throw-away one
# from vendor/rustsec/ in a temporary directory. It is installed with `cargo install --locked`
# (crates.io) if `cargo audit` is missing. `--stale`: the vendored snapshot is as old as its
# last refresh by design; SNAPSHOT says how old. A finding that is accepted rather than fixed
# goes into .cargo/audit.toml (`[advisories] ignore = ["RUSTSEC-…"]`, with a comment giving the
# reason) and docs/security.md ("Dependency audit"); at the last refresh there was none.
set -euo pipefail
cd "$(dirname "$0")/.."
VENDOR=vendor/rustsec
# The lock files to check: the daemon's and the fuzz targets' (AUDIT_LOCK: another one instead,
# e.g. to see the check fail on an old version).
read -r -a LOCKS <<<"${AUDIT_LOCK:-Cargo.lock fuzz/Cargo.lock}"
MIRROR="${RUSTSEC_MIRROR:-/work/.mirror/rustsec+advisory-db/repo}"
CARGO_AUDIT_VERSION=0.22.2

say() { echo "audit.sh: $*"; }
die() { echo "audit.sh: error: $*" >&2; exit 1; }

lock_crates() { sed -n 's/^name = "\(.*\)"$/\1/p' "${LOCKS[@]}" | sort -u; }

refresh() {
  [[ -d $MIRROR ]] || die "no advisory database at $MIRROR (set RUSTSEC_MIRROR)"
  local commit date tmp
  commit="$(git --git-dir="$MIRROR" rev-parse HEAD)"
  date="$(git --git-dir="$MIRROR" log -1 --format=%cI HEAD)"
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/crates"
  lock_crates >"$tmp/CRATES"
  while read -r name; do
    if git --git-dir="$MIRROR" cat-file -e "HEAD:crates/$name" 2>/dev/null; then
      mkdir -p "$tmp/crates/$name"
      git --git-dir="$MIRROR" archive HEAD "crates/$name" | tar -x -C "$tmp"
    fi
  done <"$tmp/CRATES"
  printf 'repository https://github.com/rustsec/advisory-db\ncommit %s\ndate %s\n' "$commit" "$date" >"$tmp/SNAPSHOT"
  rm -rf "$VENDOR"
  mkdir -p "$(dirname "$VENDOR")"
  mv "$tmp" "$VENDOR"
  say "vendored $(find "$VENDOR/crates" -name "*.md" | wc -l) advisories of" \
    "$(ls "$VENDOR/crates" | wc -l) of $(wc -l <"$VENDOR/CRATES") crates (database $commit, $date)"
}

install_cargo_audit() {
  cargo audit --version >/dev/null 2>&1 && return 0
  say "installing cargo-audit $CARGO_AUDIT_VERSION (crates.io)"
  # No binary scanning (the default feature): only lock files are audited here.
  cargo install --locked --quiet --no-default-features cargo-audit --version "$CARGO_AUDIT_VERSION"
}

if [[ ${1:-} == --install ]]; then
  install_cargo_audit
  exit 0
elif [[ ${1:-} == --refresh ]]; then
  refresh
elif [[ -d $MIRROR && -f $VENDOR/SNAPSHOT ]] &&
  [[ "$(git --git-dir="$MIRROR" rev-parse HEAD)" != "$(sed -n 's/^commit //p' "$VENDOR/SNAPSHOT")" ]]; then
  # CI checks what is committed; a newer local database is pointed out, not taken silently.
  say "note: $MIRROR is at another commit than $VENDOR/SNAPSHOT: scripts/audit.sh --refresh to take it"
fi

[[ -f $VENDOR/SNAPSHOT ]] || die "$VENDOR is missing: run scripts/audit.sh --refresh where the database is"
missing="$(comm -23 <(lock_crates) "$VENDOR/CRATES")"
[[ -z $missing ]] || die "${LOCKS[*]} name crates the vendored advisories were not looked up for:" \
  "$(echo "$missing" | tr '\n' ' ')— run scripts/audit.sh --refresh where the database is, and commit $VENDOR"

install_cargo_audit
# The yanked check looks every crate up in cargo's copy of the crates.io index: fetch each lock
# file's crates first, or the crates that no build here downloads (the fuzz targets') are
# reported as "not found" and go unchecked.
for lock in "${LOCKS[@]}"; do
  cargo fetch --locked --quiet --manifest-path "$(dirname "$lock")/Cargo.toml"
done

db="$(mktemp -d)"
trap 'rm -rf "$db"' EXIT
cp -r "$VENDOR/." "$db/"
git -C "$db" init --quiet
git -C "$db" add -A
git -C "$db" -c user.name=audit -c user.email=audit@localhost -c commit.gpgsign=false \
  commit --quiet -m "vendored RustSec advisories ($(sed -n 's/^commit //p' "$VENDOR/SNAPSHOT"))"
say "database: $(tr '\n' ' ' <"$VENDOR/SNAPSHOT")"
say "crates in ${LOCKS[*]}: $(lock_crates | wc -l), with advisories on record: $(ls "$VENDOR/crates" | wc -l)"
# --deny warnings: unmaintained, unsound and yanked findings fail the check as vulnerabilities do,
# unless .cargo/audit.toml ignores them with a reason.
status=0
for lock in "${LOCKS[@]}"; do
  out="$(cargo audit --db "$db" --no-fetch --stale --deny warnings --file "$lock" 2>&1)" || status=1
  echo "$out"
  # A check cargo-audit could not run (e.g. "couldn't check if the package is yanked") is printed
  # as an error but does not change its exit code: fail on it rather than pass unchecked.
  if grep -q 'error:' <<<"$out"; then
    say "$lock: cargo-audit reported an error (above); the audit is not complete"
    status=1
  fi
done
exit $status
