#!/usr/bin/env bash
# One-command demo: starts the local broker, builds dedupd, produces a click stream with
# double-clicks, retries, late replays and a burst, runs `dedupd run` on it (catching up on the
# backlog) and prints a summary against the exact answer.
#
#   scripts/demo.sh [--keep] [--kind timer|cuckoo] [CLICKS]
#
# --kind picks filter.kind (the timer filter by default; the demo's accuracy bounds hold for both).
# --keep leaves dedupd running afterwards so you can look at http://127.0.0.1:9464/metrics,
# /v1/slices and /v1/lookup?key=... (with the bearer token it prints); Ctrl-C stops it. On first use
# it installs the test broker (scripts/broker.sh install: 12-22 min on 2 cores, with a progress
# line, then cached) and builds dedupd in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
kind=timer
while [[ "${1:-}" == --* ]]; do
  case "$1" in
    --keep) keep=true; shift ;;
    --kind) kind="${2:?--kind needs timer or cuckoo}"; shift 2 ;;
    *) echo "usage: $0 [--keep] [--kind timer|cuckoo] [CLICKS]" >&2; exit 2 ;;
  esac
done
clicks="${1:-200000}"
port="${DEDUPD_BROKER_PORT:-9092}"
admin_port="${DEDUPD_DEMO_ADMIN_PORT:-9464}"
broker="127.0.0.1:$port"
run="demo-$(date +%s)"
# A fresh admin token for this run: /v1/lookup answers only with it.
token="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"

echo "== broker on $broker (built on first use: 12-22 min on 2 cores, then cached)"
scripts/broker.sh start
echo "== building dedupd (release)"
cargo build --release --quiet --bin dedupd --example demo
python3 scripts/kafka_client.py create-topic --broker "$broker" --topic "$run.clicks" --partitions 3 >/dev/null
echo "== producing $clicks clicks into $run.clicks (3 partitions)"
target/release/examples/demo produce "$broker" "$run.clicks" "$run.distinct" "$admin_port" "$clicks" 60000

echo "== dedupd run (app $run, filter.kind = $kind, 4 slices, window 60s; log: target/demo/$run.log)"
mkdir -p target/demo
DEDUPD__APP__ID="$run" \
DEDUPD__KAFKA__BROKERS="$broker" \
DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000 \
DEDUPD__INPUT__TOPICS="$run.clicks" \
DEDUPD__INPUT__KEY=json:/click_id \
DEDUPD__INPUT__TIME=json:/ts \
DEDUPD__FILTER__KIND="$kind" \
DEDUPD__FILTER__WINDOW=60s \
DEDUPD__FILTER__EXPECTED_KEYS=200000 \
DEDUPD__FILTER__SLICES=4 \
DEDUPD__OUTPUT__TOPIC="$run.distinct" \
DEDUPD__OUTPUT__DEAD_LETTER_TOPIC="$run.dead-letter" \
DEDUPD__CHECKPOINT__TOPIC="$run.checkpoints" \
DEDUPD__ADMIN__LISTEN="127.0.0.1:$admin_port" \
DEDUPD_ADMIN_TOKEN="$token" \
  target/release/dedupd run --config config/dedupd.toml >"target/demo/$run.log" 2>&1 &
dedupd_pid=$!
trap 'kill -TERM $dedupd_pid 2>/dev/null || true; wait $dedupd_pid 2>/dev/null || true' EXIT
# A clean run logs no WARN or ERROR line: fail with them if it did.
check_log() {
  local bad
  bad="$(grep -E '^\[[^ ]+ (WARN|ERROR) ' "target/demo/$run.log" || true)"
  if [[ -n "$bad" ]]; then
    echo "demo: FAILED: dedupd logged WARN/ERROR lines (target/demo/$run.log):" >&2
    echo "$bad" >&2
    exit 1
  fi
}
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$admin_port/readyz" >/dev/null 2>&1 && break
  kill -0 $dedupd_pid 2>/dev/null || { echo "dedupd exited:"; tail -20 "target/demo/$run.log"; exit 1; }
  sleep 0.5
done
target/release/examples/demo check "$broker" "$run.clicks" "$run.distinct" "$admin_port" "$clicks" 60000
if $keep; then
  check_log
  echo
  echo "dedupd keeps running: http://127.0.0.1:$admin_port/metrics  /v1/slices  (Ctrl-C stops it)"
  echo "  curl -H 'Authorization: Bearer $token' 'http://127.0.0.1:$admin_port/v1/lookup?key=click-...'"
  wait $dedupd_pid
else
  kill -TERM $dedupd_pid 2>/dev/null || true
  status=0
  wait $dedupd_pid || status=$?
  trap - EXIT
  if [[ $status -ne 0 ]]; then
    echo "demo: FAILED: dedupd exited with status $status on SIGTERM:" >&2
    tail -20 "target/demo/$run.log" >&2
    exit 1
  fi
  check_log
  echo "== dedupd stopped cleanly; its log has no WARN or ERROR line"
fi
