#!/usr/bin/env bash
# Daemon end to end on the local broker (issue 5, first part): N small records with 50%
# duplicates in a 3-partition topic, then `dedupd run` (8 slices, repartition mode) with the
# timer filter and with filter.kind = passthrough on the same input, against the broker's raw
# produce-only and consume-only rates; peak resident memory of each daemon run.
#
#   scripts/bench_daemon.sh [N]        (default 2000000)
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-2000000}"
port="${DEDUPD_BROKER_PORT:-9092}"
broker="127.0.0.1:$port"
run="bench-$(date +%s)"
scripts/broker.sh start >/dev/null
cargo build --release --quiet --bin dedupd --example daemon_bench
python3 scripts/kafka_client.py create-topic --broker "$broker" --topic "$run.in" --partitions 3 >/dev/null
target/release/examples/daemon_bench produce "$broker" "$run.in" "$n" 3
target/release/examples/daemon_bench consume "$broker" "$run.in" 3

daemon() { # kind label admin_port
  local kind=$1 label=$2 admin=$3 app="$run-$2"
  DEDUPD__APP__ID="$app" DEDUPD__KAFKA__BROKERS="$broker" DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000 \
  DEDUPD__INPUT__TOPICS="$run.in" DEDUPD__INPUT__KEY=json:/id DEDUPD__INPUT__TIME=json:/ts \
  DEDUPD__FILTER__KIND="$kind" DEDUPD__FILTER__SLICES=8 DEDUPD__FILTER__WINDOW=60s \
  DEDUPD__FILTER__EXPECTED_KEYS=400000 DEDUPD__OUTPUT__TOPIC="$app.out" \
  DEDUPD__OUTPUT__DEAD_LETTER_TOPIC="$app.dlq" DEDUPD__CHECKPOINT__TOPIC="$app.ckpt" \
  DEDUPD__ADMIN__LISTEN="127.0.0.1:$admin" RUST_LOG=warn \
    target/release/dedupd run --config config/dedupd.toml >"target/$app.log" 2>&1 &
  local pid=$! peak=0
  ( while kill -0 $pid 2>/dev/null; do
      rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null || echo 0)
      echo "$rss"; sleep 0.5
    done ) >"target/$app.rss" &
  target/release/examples/daemon_bench wait "$admin" "$n" "$label"
  kill -TERM $pid; wait $pid || true
  peak=$(sort -n "target/$app.rss" | tail -1)
  echo "$label peak_rss_kib=$peak"
}
daemon timer dedupd_timer 19500
daemon passthrough dedupd_passthrough 19501
