#!/usr/bin/env bash
# Daemon end to end on the local broker (issue 5): `dedupd run` in repartition mode on a
# 3-partition input of small JSON records with 50% duplicates (docs/dev/performance-daemon.md).
#
#   scripts/bench_daemon.sh [N] [PART...]       N records (default 10000000)
#
# Parts (default: all, in this order; each starts from a fresh memory broker, so Tansu's
# memory does not grow across parts):
#   throughput  broker produce-only and consume-only of the N records, then `dedupd run` with
#               filter.kind = timer and = passthrough on them (ROUNDS times, alternating),
#               records/s from the first to the last reading of the verdict count (daemon_bench
#               wait), the process's CPU and resident memory over the run
#               (THROUGHPUT_KINDS="passthrough" runs one kind only)
#   latency     a producer paced at RATE records/s (default: half the timer run's rate, or
#               LATENCY_RATE) with real-time timestamps: first the broker alone for 30 s (the
#               producer's acknowledgement latency, and one hop produce → consume), then
#               through dedupd for LATENCY_SECONDS (60): end-to-end latency quantiles over the
#               last 40 s, from dedupd_end_to_end_latency_seconds, and of each stage
#               (dedupd_stage_latency_seconds); LATENCY_RATES="10000 25000 …" repeats it per rate
#   checkpoint  filter.expected_keys = CKPT_KEYS (default 90 000 000: ~1 GiB of cells over 8
#               slices), a paced input (CKPT_RATE, 20000/s) for CKPT_SECONDS (120) with
#               checkpoint.interval = 30s: the longest pause of the worker per snapshot (copied
#               in chunks while the slice goes on), how long the writes took, latency meanwhile; then SIGTERM
#               (a final snapshot) and a restart that restores every slice: time to ready and
#               dedupd_restore_duration_seconds
#   sidebyside  dedupd's added latency (issue 14): per slicing mode (SIDE_MODES, default
#               "input-partitions repartition"; shared runs 1 slice), first the mode's maximum
#               rate on a backlog of SIDE_N (2000000) records, then a producer paced at half of it (or at each of SIDE_RATES, ROUNDS times)
#               with real-time timestamps for SIDE_SECONDS (60) into an input topic read at
#               the same time by dedupd and by a bare relay (daemon_bench relay: consume →
#               produce, dedupd's client settings, no filter): record timestamp → consumed
#               from each one's output topic over the last 40 s, and the difference
#   cpu         CPU seconds per 1 M records of input-partitions (3 slices) against repartition
#               (8 slices) mode on one backlog of N records, ROUNDS times alternating, per thread
#               name, and their ratio (issue 20: repartition at most 2x); PERF_RECORD=HZ also
#               samples each run with `perf record -a -F HZ` (target/<run>-cpu-<mode>-<round>.perf;
#               `perf report --pid PID` with the pid printed: the daemon starts by exec, and
#               `perf record -p` would miss the threads it starts later)
#   cpu_ab      CPU seconds per 1 M records of two builds, A and B (AB_DIRS="DIR_A DIR_B", each
#               holding a dedupd binary and the dedupd.toml it runs with), in input-partitions (3
#               slices) and repartition (8 slices) mode (AB_MODES to choose; shared runs 1 slice) on one backlog of N records, ROUNDS times
#               alternating A, B within each mode (B first in even rounds): each run's figure,
#               then per mode the median of A's, of B's and B/A (a change's CPU per record), the
#               pairs' B/A over rounds A ran first and B ran first, and their geometric mean
#               (balanced: the order's own cost cancels with an even ROUNDS)
#   scaling     the first SCALE_N (2000000) records with 1, 2, 4, 8 slices in one process, and
#               8 slices over two processes (one group)
#
# Environment: DEDUPD_BROKER_PORT (9092), ROUNDS (1), DEDUPD_BIN_DIR (scripts/bench_lib.sh), DAEMON_ENV (more
# VAR=VALUE for every daemon, e.g. MALLOC_CONF=dirty_decay_ms:0 for jemalloc), DAEMON_NICE (0; e.g. -10 as root: the
# daemon's threads before the broker's when both want a core). Logs: target/bench-*.log.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-10000000}"
shift || true
parts=("$@")
[[ ${#parts[@]} -gt 0 ]] || parts=(throughput latency checkpoint scaling)
source scripts/bench_lib.sh

timer_rate=""

part_throughput() {
  fresh_broker
  topic "$run.in" 3
  $bench produce "$broker" "$run.in" "$n" 3
  $bench consume "$broker" "$run.in" 3
  local round kind out
  for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
    for kind in ${THROUGHPUT_KINDS:-timer passthrough}; do
      start_daemon "$run-$kind-$round" "$run.in" "$kind" 8 19500
      out=$($bench wait 19500 "$n" "dedupd_${kind}" "$daemon_pid")
      echo "$out"
      echo "dedupd_${kind} thread_cpu_seconds$(thread_cpu "$daemon_pid")"
      stop_daemon "$daemon_pid"
      if [[ $kind == timer && -z $timer_rate ]]; then
        timer_rate=$(echo "$out" | sed -n 's/.*records_per_second=\([0-9]*\).*/\1/p' | head -1)
      fi
    done
  done
}

part_latency() {
  local rates="${LATENCY_RATES:-${LATENCY_RATE:-$((${timer_rate:-100000} / 2))}}" secs="${LATENCY_SECONDS:-60}" rate
  for rate in $rates; do
    fresh_broker
    local app="$run-latency-$rate"
    # The broker alone at the same rate: acknowledgements, and one hop produce → consume
    # (LATENCY_RAW=0 skips it).
    if [[ ${LATENCY_RAW:-1} != 0 ]]; then
      topic "$run.raw$rate" 3
      $bench produce "$broker" "$run.raw$rate" $((rate * 30)) 3 "$rate" &
      local raw=$!
      sleep 5
      $bench consume-live "$broker" "$run.raw$rate" 3 20
      wait "$raw"
    fi
    topic "$app.in" 3
    start_daemon "$app" "$app.in" timer 8 19502
    wait_ready 19502 60
    sleep 5 # the router's group too
    $bench produce "$broker" "$app.in" $((rate * secs)) 3 "$rate" &
    local producer=$!
    sleep $((secs - 42))
    # Meanwhile one plain consumer of the input topic: the broker's one hop under the same
    # load (LATENCY_PROBE=0 leaves it out; it adds a little load of its own).
    local live="" broker_pid cpu0 cpu1 dcpu0 dcpu1
    if [[ ${LATENCY_PROBE:-1} != 0 ]]; then
      $bench consume-live "$broker" "$app.in" 3 40 | sed "s/^/latency_at_${rate}_per_s input_hop_under_load /" &
      live=$!
    fi
    broker_pid=$(cat "target/broker/broker-$port.pid")
    cpu0=$(cpu_ticks "$broker_pid") dcpu0=$(cpu_ticks "$daemon_pid")
    $bench latency 19502 40 "latency_at_${rate}_per_s"
    cpu1=$(cpu_ticks "$broker_pid") dcpu1=$(cpu_ticks "$daemon_pid")
    [[ -z $live ]] || wait "$live"
    echo "latency_at_${rate}_per_s cpu_cores broker=$(cores "$cpu0" "$cpu1" 40) dedupd=$(cores "$dcpu0" "$dcpu1" 40)"
    wait "$producer"
    stop_daemon "$daemon_pid"
  done
}

# What a latency probe printed: "consume_live records=N p50_ms=A p99_ms=B max_ms=C" → "A B".
probe_quantiles() { sed -n 's/.*p50_ms=\([0-9.]*\) p99_ms=\([0-9.]*\).*/\1 \2/p' "$1"; }

part_sidebyside() {
  local mode secs="${SIDE_SECONDS:-60}" m="${SIDE_N:-2000000}"
  for mode in ${SIDE_MODES:-input-partitions repartition}; do
    local slices=8 rates="${SIDE_RATES:-}"
    [[ $mode == input-partitions ]] && slices=3
    [[ $mode == shared ]] && slices=1
    local env=(DEDUPD__SLICING__MODE="$mode")
    if [[ -z $rates ]]; then
      local app="$run-side-$mode"
      fresh_broker
      topic "$app.backlog" 3
      $bench produce "$broker" "$app.backlog" "$m" 3 >/dev/null
      start_daemon "$app-max" "$app.backlog" timer "$slices" 19507 "${env[@]}"
      local out
      out=$($bench wait 19507 "$m" "side_${mode}_max")
      echo "$out"
      stop_daemon "$daemon_pid"
      rates=$(($(echo "$out" | sed -n 's/.*records_per_second=\([0-9]*\).*/\1/p' | head -1) / 2))
    fi
    local rate round
    for rate in $rates; do
      for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
        local app="$run-side-$mode-$rate-$round"
        fresh_broker
        topic "$app.in" 3
        topic "$app.relay" 3
        start_daemon "$app" "$app.in" timer "$slices" 19507 "${env[@]}"
        wait_ready 19507 60
        sleep 5 # the router's group too
        $bench relay "$broker" "$app.in" "$app.relay" 3 $((secs + 10)) >"target/$app.relay.log" &
        local relay=$!
        sleep 2
        $bench produce "$broker" "$app.in" $((rate * secs)) 3 "$rate" >"target/$app.produce.log" &
        local producer=$!
        sleep $((secs - 42))
        $bench consume-live "$broker" "$app.relay" 3 40 "target/$app.relay.dump" >"target/$app.relay-probe.log" &
        local probe=$!
        $bench consume-live "$broker" "$app.out" "$slices" 40 "target/$app.dedupd.dump" >"target/$app.dedupd-probe.log"
        wait "$probe" "$producer" "$relay"
        stop_daemon "$daemon_pid"
        local r d
        r=($(probe_quantiles "target/$app.relay-probe.log"))
        d=($(probe_quantiles "target/$app.dedupd-probe.log"))
        echo "side_$mode round=$round rate=$rate $(cat "target/$app.produce.log" | tr '\n' ' ')"
        echo "side_$mode relay $(cat "target/$app.relay-probe.log") $(cat "target/$app.relay.log")"
        echo "side_$mode dedupd $(cat "target/$app.dedupd-probe.log")"
        awk -v r50="${r[0]:-nan}" -v r99="${r[1]:-nan}" -v d50="${d[0]:-nan}" -v d99="${d[1]:-nan}" -v m="$mode" \
          'BEGIN {printf "side_%s added_by_dedupd p50_ms=%.1f p99_ms=%.1f\n", m, d50 - r50, d99 - r99}'
        echo "side_$mode $($bench paired "target/$app.relay.dump" "target/$app.dedupd.dump")"
        rm -f "target/$app.relay.dump" "target/$app.dedupd.dump"
      done
    done
  done
}

part_checkpoint() {
  fresh_broker
  local keys="${CKPT_KEYS:-90000000}" rate="${CKPT_RATE:-20000}" secs="${CKPT_SECONDS:-120}"
  local app="$run-ckpt" env=()
  env=(DEDUPD__FILTER__EXPECTED_KEYS="$keys" DEDUPD__CHECKPOINT__INTERVAL=30s DEDUPD__SHUTDOWN__TIMEOUT=300s)
  topic "$app.in" 3
  start_daemon "$app" "$app.in" timer 8 19503 "${env[@]}"
  wait_ready 19503 120
  sleep 5
  echo "checkpoint filter_memory_bytes=$(metric_sum 19503 dedupd_filter_memory_bytes)"
  $bench produce "$broker" "$app.in" $((rate * secs)) 3 "$rate" &
  local producer=$!
  sleep 10
  $bench latency 19503 $((secs - 15)) "checkpoint_latency_at_${rate}_per_s"
  wait "$producer"
  sleep 2
  echo "checkpoint rss_mib=$(($(awk '/VmRSS/ {print $2}' "/proc/$daemon_pid/status") / 1024))"
  stop_daemon "$daemon_pid"
  # Snapshot pauses and write times, from the worker's debug log: for each periodic snapshot
  # the longest single pause of the worker (copy-on-write copies in chunks), how long the copy
  # took while the slice went on; the final ones at shutdown (copied at release) apart.
  awk 'match($0, /longest_pause_ms=[0-9.]+/) { v = substr($0, RSTART + 17, RLENGTH - 17) + 0
         if ($0 ~ /copied at release/) { r++; if (v > rm) rm = v; next }
         n++; s += v; if (v > m) m = v; if (v > 100) over++
         if (match($0, /copied in [0-9.]+ ms/)) { c = substr($0, RSTART + 10, RLENGTH - 13) + 0; cs += c; if (c > cm) cm = c } }
       match($0, /write_ms=[0-9.]+/) { v = substr($0, RSTART + 9, RLENGTH - 9) + 0; w++; ws += v; if (v > wm) wm = v }
       END { printf "checkpoint snapshots=%d longest_pause_ms_max=%.2f longest_pause_ms_mean=%.2f over_100ms=%d copy_wall_ms_max=%.0f copy_wall_ms_mean=%.0f at_release=%d at_release_pause_ms_max=%.1f written=%d write_ms_max=%.0f write_ms_mean=%.0f\n", n, m, n ? s / n : 0, over, cm, n ? cs / n : 0, r, rm, w, wm, w ? ws / w : 0 }' \
    "target/$app.log"
  # Restore: the same app again.
  local t0
  t0=$(date +%s%N)
  start_daemon "$app" "$app.in" timer 8 19503 "${env[@]}"
  wait_ready 19503 600
  echo "restore ready_after_ms=$((($(date +%s%N) - t0) / 1000000)) restore_seconds_sum=$(metric_sum 19503 dedupd_restore_duration_seconds_sum) restores=$(metric_sum 19503 dedupd_restores_total) rss_mib=$(($(awk '/VmRSS/ {print $2}' "/proc/$daemon_pid/status") / 1024))"
  stop_daemon "$daemon_pid"
}

part_cpu() {
  fresh_broker
  topic "$run.cpu" 3
  $bench produce "$broker" "$run.cpu" "$n" 3 >/dev/null
  local round mode slices out ip="" rp=""
  for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
    for mode in input-partitions repartition; do
      slices=8
      [[ $mode == input-partitions ]] && slices=3
      start_daemon "$run-cpu-$mode-$round" "$run.cpu" timer "$slices" 19508 DEDUPD__SLICING__MODE="$mode"
      local before
      before=$(cpu_ticks "$daemon_pid")
      local perf_pid=""
      if [[ -n ${PERF_RECORD:-} ]]; then
        perf record -q -a -F "${PERF_RECORD}" -o "target/$run-cpu-$mode-$round.perf" >/dev/null 2>&1 &
        perf_pid=$!
      fi
      out=$($bench wait 19508 "$n" "cpu_$mode" "$daemon_pid")
      local after threads
      after=$(cpu_ticks "$daemon_pid")
      if [[ -n $perf_pid ]]; then
        kill -INT "$perf_pid" && wait "$perf_pid" || true
        echo "cpu_$mode round=$round profile=target/$run-cpu-$mode-$round.perf pid=$daemon_pid"
      fi
      threads=$(thread_cpu "$daemon_pid")
      stop_daemon "$daemon_pid"
      local per_m
      per_m=$(awk -v a="$before" -v b="$after" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", (b - a) / hz / n * 1000000}')
      echo "cpu_$mode round=$round cpu_seconds_per_million=$per_m $(echo "$out" | grep -o 'records_per_second=[0-9]*\|peak_rss_mib=[0-9]*' | tr '\n' ' ')"
      echo "cpu_$mode round=$round thread_cpu_seconds$threads"
      if [[ $mode == input-partitions ]]; then ip=$per_m; else rp=$per_m; fi
    done
    awk -v a="$ip" -v b="$rp" -v r="$round" 'BEGIN {printf "cpu_ratio round=%d repartition_over_input_partitions=%.2f\n", r, b / a}'
  done
}

part_cpu_ab() {
  local dirs
  read -r -a dirs <<<"${AB_DIRS:?set AB_DIRS=\"DIR_A DIR_B\"}"
  fresh_broker
  topic "$run.cpu" 3
  $bench produce "$broker" "$run.cpu" "$n" 3 >/dev/null
  local round mode slices build before after per_m out results=()
  local own_bin="$dedupd_bin" own_config="$config"
  for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
    for mode in ${AB_MODES:-input-partitions repartition}; do
      slices=8
      [[ $mode == input-partitions ]] && slices=3
      [[ $mode == shared ]] && slices=1
      # A then B in odd rounds, B then A in even ones: neither build always
      # meets the broker warmer (each round runs faster than the one before).
      local order=(0 1)
      ((round % 2 == 0)) && order=(1 0)
      for build in "${order[@]}"; do
        dedupd_bin="${dirs[$build]}/dedupd" config="${dirs[$build]}/dedupd.toml"
        start_daemon "$run-ab$build-$mode-$round" "$run.cpu" timer "$slices" 19508 DEDUPD__SLICING__MODE="$mode"
        before=$(cpu_ticks "$daemon_pid")
        out=$($bench wait 19508 "$n" "cpu_ab_$mode" "$daemon_pid")
        after=$(cpu_ticks "$daemon_pid")
        stop_daemon "$daemon_pid"
        per_m=$(awk -v a="$before" -v b="$after" -v n="$n" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.3f", (b - a) / hz / n * 1000000}')
        echo "cpu_ab build=$([[ $build == 0 ]] && echo A || echo B) mode=$mode round=$round cpu_seconds_per_million=$per_m $(echo "$out" | grep -o 'records_per_second=[0-9]*' | tr '\n' ' ')"
        results+=("$build $mode $per_m")
      done
    done
  done
  dedupd_bin="$own_bin" config="$own_config"
  printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    build, mode, per_m = line.split()
    runs.setdefault((mode, build), []).append(float(per_m))
for mode in sorted({mode for mode, _ in runs}):
    a, b = statistics.median(runs[(mode, "0")]), statistics.median(runs[(mode, "1")])
    # The run second in a pair tends to cost more (the broker holds more by then): the
    # geometric mean of the pairs ratios over A-first and B-first rounds alike cancels
    # that, when there are as many of each (an even ROUNDS).
    pairs = [y / x for x, y in zip(runs[(mode, "0")], runs[(mode, "1")])]
    first = statistics.geometric_mean(pairs[0::2])
    second = statistics.geometric_mean(pairs[1::2]) if len(pairs) > 1 else first
    balanced = statistics.geometric_mean([first, second])
    print(f"cpu_ab mode={mode} median_a={a:.3f} median_b={b:.3f} b_over_a={b / a:.3f} "
          f"a_first={first:.3f} b_first={second:.3f} balanced={balanced:.3f}")
'
}

part_scaling() {
  fresh_broker
  local m="${SCALE_N:-2000000}" s
  topic "$run.scale" 3
  $bench produce "$broker" "$run.scale" "$m" 3
  for s in 1 2 4 8; do
    start_daemon "$run-s$s" "$run.scale" timer "$s" 19504
    $bench wait 19504 "$m" "slices_$s"
    stop_daemon "$daemon_pid"
  done
  # Two processes in one group: each owns about half the slices (and one router).
  start_daemon "$run-x2" "$run.scale" timer 8 19505
  local first=$daemon_pid
  start_daemon "$run-x2" "$run.scale" timer 8 19506
  local second=$daemon_pid
  local t0="" a b
  while :; do
    a=$(curl -s 127.0.0.1:19505/v1/slices | python3 -c 'import json,sys; print(sum(s["distinct"]+s["duplicates"]+s["invalid"]+s["resends"] for s in json.load(sys.stdin)))' 2>/dev/null || echo 0)
    b=$(curl -s 127.0.0.1:19506/v1/slices | python3 -c 'import json,sys; print(sum(s["distinct"]+s["duplicates"]+s["invalid"]+s["resends"] for s in json.load(sys.stdin)))' 2>/dev/null || echo 0)
    [[ -z $t0 && $((a + b)) -gt 0 ]] && t0=$(date +%s%N)
    [[ $((a + b)) -ge $m ]] && break
    sleep 0.1
  done
  local ms=$((($(date +%s%N) - t0) / 1000000))
  echo "two_processes_8_slices records=$m seconds=$((ms / 1000)).$((ms % 1000 / 100)) records_per_second=$((m * 1000 / ms))"
  stop_daemon "$first"
  stop_daemon "$second"
}

for part in "${parts[@]}"; do
  echo "== $part"
  "part_$part"
done
