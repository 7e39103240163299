#!/usr/bin/env bash
# The cost of availability.policy = "wait" (docs/availability.md): end-to-end latency while a
# second member joins the group and restores its share of a large filter.
#
#   scripts/bench_rebalance.sh
#
# One member (admin 19611) with filter.expected_keys = KEYS (default 20 000 000: ~250 MiB of
# cells over 8 slices) judges a paced input (RATE records/s, default 10 000, real-time
# timestamps) for SECS (default 80) seconds. After 20 s its end-to-end latency is measured for 15 s
# (no rebalance); then a second member (admin 19612) joins: the first snapshots the slices it
# releases, the second restores them. Latency of both over the next 30 s, the time until the
# second is ready, and the restores it logged. Environment: DEDUPD_BROKER_PORT, DEDUPD_BIN_DIR
# (scripts/bench_lib.sh). Logs: target/<run>-rebalance.log (both members).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench_lib.sh
keys="${KEYS:-20000000}" rate="${RATE:-10000}" secs="${SECS:-80}"
app="$run-rebalance"
env=(DEDUPD__FILTER__EXPECTED_KEYS="$keys" DEDUPD__CHECKPOINT__INTERVAL=30s DEDUPD__SHUTDOWN__TIMEOUT=300s)
fresh_broker
topic "$app.in" 3
start_daemon "$app" "$app.in" timer 8 19611 "${env[@]}"
first=$daemon_pid
wait_ready 19611 120
echo "rebalance filter_memory_bytes=$(metric_sum 19611 dedupd_filter_memory_bytes)"
$bench produce "$broker" "$app.in" $((rate * secs)) 3 "$rate" &
producer=$!
sleep 5
$bench latency 19611 15 "steady_first_member"
restored_before=$(grep -c "restored in" "target/$app.log" || true)
t0=$(date +%s%N)
start_daemon "$app" "$app.in" timer 8 19612 "${env[@]}"
second=$daemon_pid
$bench latency 19611 30 "rebalance_first_member" &
watch1=$!
wait_ready 19612 300
echo "rebalance second_ready_after_ms=$((($(date +%s%N) - t0) / 1000000))"
$bench latency 19612 20 "rebalance_second_member" || true
wait "$watch1"
wait "$producer"
echo "rebalance restores: $(tail -n +"$((restored_before + 1))" <(grep "restored in" "target/$app.log") | grep -o 'slice [0-9]*: restored in [0-9]* ms' | tr '\n' ';')"
echo "rebalance restore_seconds_sum_second=$(metric_sum 19612 dedupd_restore_duration_seconds_sum)"
stop_daemon "$second"
stop_daemon "$first"
