#!/usr/bin/env bash
# The repartition checks of two routers meeting, run again and again on fresh brokers
# (docs/dev/broker.md, finding 12): the two-routers test with a busy loop on one core beside it,
# the two repartition rebalance storms, and a router joining and leaving. Prints one line a run
# (name, test, ok/FAIL, seconds); a failed run's output is kept in target/two-routers-check/.
#
#   scripts/two_routers_check.sh            # 30 two-routers runs, 5 of each storm, 5 join/leave
#   TWO=10 STORMS=2 JOINS=2 scripts/two_routers_check.sh
#
# Builds the test binaries first (cargo test --no-run). Uses its own broker on
# DEDUPD_BROKER_PORT (default 19201), restarted every 10 runs.
set -uo pipefail
cd "$(dirname "$0")/.."
export DEDUPD_BROKER_PORT="${DEDUPD_BROKER_PORT:-19201}"
OUT=target/two-routers-check
mkdir -p "$OUT"
cargo test --workspace --locked --no-run >/dev/null 2>&1 || { echo "the test build failed" >&2; exit 1; }
bin() { ls -t target/debug/deps/"$1"-* | grep -v '\.d$' | head -1; }
ET=$(bin event_time)
FT=$(bin faults)
run() { # label binary test
  local s r
  s=$(date +%s)
  if "$2" --exact "$3" --test-threads 1 >"$OUT/$1.log" 2>&1; then r=ok; rm -f "$OUT/$1.log"; else r=FAIL; fi
  echo "$1 $3 $r $(( $(date +%s) - s ))s"
}
fresh() { scripts/broker.sh restart >/dev/null 2>&1 || scripts/broker.sh start >/dev/null 2>&1; }
( while true; do :; done ) &
BUSY=$!
trap 'kill $BUSY 2>/dev/null; scripts/broker.sh stop >/dev/null 2>&1' EXIT
for i in $(seq 1 "${TWO:-30}"); do
  [ $(( (i - 1) % 10 )) -eq 0 ] && fresh
  run "two-$i" "$ET" two_routers_with_partitions_a_second_apart
done
kill $BUSY 2>/dev/null
for i in $(seq 1 "${STORMS:-5}"); do
  fresh
  run "storm-$i" "$FT" a_rebalance_storm_changes_no_output_in_repartition_mode
  run "cuckoo-$i" "$FT" a_rebalance_storm_changes_no_output_with_the_cuckoo_kind
done
fresh
for i in $(seq 1 "${JOINS:-5}"); do
  run "join-$i" "$ET" a_router_joining_and_leaving_while_records_flow
done
