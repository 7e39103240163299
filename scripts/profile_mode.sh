#!/usr/bin/env bash
# profile_mode.sh SYSTEM [N]: a perf profile of one system of the side-by-side bench
# (scripts/bench_peer.sh: relay, input-partitions, repartition, repartition-records, shared)
# judging a backlog of N (default 1 000 000) real-text records on a fresh broker: perf attached
# to the process while it works (call graphs from DWARF), then the shares per thread and the top
# entries by self time, within the process, in target/profile-SYSTEM.txt. Environment: as
# bench_lib.sh (DEDUPD_BROKER_PORT, DEDUPD_BIN_DIR), PERF_HZ (499).
set -euo pipefail
cd "$(dirname "$0")/.."
system=${1:?usage: profile_mode.sh SYSTEM [N]} records=${2:-1000000}
source scripts/bench_lib.sh
scripts/text_corpus.sh
admin="${BENCH_ADMIN_PORT:-19521}" app="$run-$system" truth="target/$run.truth"
fresh_broker
topic "$app.in" 3 retention.ms=-1 retention.bytes=-1
$bench produce-text "$broker" "$app.in" "$records" "$truth" >/dev/null
case $system in
  relay)
    topic "$app.out" 3
    "$bench" relay-group "$broker" "$app.in" "$app.out" "$app" "target/$app.progress" >"target/$app.log" 2>&1 &
    pid=$! progress="file:target/$app.progress"
    ;;
  *)
    slices=8 mode=$system log_format=
    [[ $system == input-partitions ]] && slices=3
    [[ $system == shared ]] && slices=1
    [[ $system == repartition-records ]] && mode=repartition log_format=records
    start_daemon "$app" "$app.in" timer "$slices" "$admin" DEDUPD__SLICING__MODE="$mode" \
      DEDUPD__SLICING__LOG_FORMAT="$log_format" DEDUPD__FILTER__EXPECTED_KEYS=40000
    pid=$daemon_pid progress=$admin
    ;;
esac
data="target/profile-$system.perf"
# Once its threads run (perf -p follows the threads present when it attaches).
sleep 2
perf record -q -F "${PERF_HZ:-499}" --call-graph dwarf,8192 -p "$pid" -o "$data" >/dev/null 2>&1 &
perf_pid=$!
$bench wait "$progress" "$records" "$system" "$pid"
kill -INT "$perf_pid" && wait "$perf_pid" || true
kill -TERM "$pid" 2>/dev/null || true
wait "$pid" || true
{
  echo "== threads"
  perf report -i "$data" --no-children --sort comm --stdio -g none 2>/dev/null | grep -v '^#' | grep . | head -12
  echo "== self, within the process"
  perf report -i "$data" --no-children --sort comm,sym --stdio -g none 2>/dev/null | grep -v '^#' | grep . | head -60
} >"target/profile-$system.txt"
cat "target/profile-$system.txt"
