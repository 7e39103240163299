#!/usr/bin/env bash
# Side by side with a bare relay and the peers (issues 20 and 45): one real-text stream through
# a bare consume → produce relay with dedupd's client settings, through dedupd in each slicing
# mode, and through a Quix Streams application and a Bytewax dataflow that each do an exact
# dedup (scripts/quix_dedup.py, scripts/bytewax_dedup.py), on the local broker
# (docs/dev/performance-daemon.md, "Side by side with a peer").
#
#   scripts/bench_peer.sh [--records N] [--rounds R] [--no-quix] [--no-bytewax] [--zipf ALPHA] [--systems "A B ..."]
#   scripts/bench_peer.sh --records 20000 --rounds 1 --systems "relay input-partitions bytewax"  # a smoke run
#   scripts/bench_peer.sh --zipf 1.2 --systems "repartition shared"   # issue 18's skewed run
#
# The stream (daemon_bench produce-text): N records (default 1 000 000, or RECORDS) keyed by a
# Brown Corpus sentence (scripts/text_corpus.sh), JSON payloads {"seq","id","ts"} with event
# time ts = the record's CreateTime, 1 000 records per second of event time, ~35% copies of an
# earlier record (~39 000 distinct keys per 60 s window), on 3 input partitions by key, then a
# 5 s tail; the exact event-time verdicts of the N records are computed as it is written. The
# input topic is created with retention.ms = retention.bytes = -1: Quix Streams reads the
# input's retention (DescribeConfigs) for its changelog topic, and Tansu describes only configs
# set at creation. With --zipf ALPHA the keys are instead drawn from Zipf(ALPHA) over 1 000 000
# text keys (daemon_bench produce-zipf): a few keys make most of the stream, and of one partition.
#
# Systems, in this order in each of R rounds (default 3, or ROUNDS), each on a fresh broker
# holding the same stream (the broker's memory storage slows down as it fills, docs/dev/broker.md):
#   relay             a bare relay (daemon_bench relay-group, Rust rdkafka): joins a consumer group,
#                     reads the input from the start, writes every record to the same partition of
#                     a 3-partition output topic, with dedupd's consumer and producer settings
#                     (src/kafka/clients.rs: fetch.wait.max.ms 20, fetch.queue.backoff.ms 10, a
#                     16 MiB prefetch, an idempotent producer with acks=all, librdkafka's linger and
#                     batching); no commits; its count is of records acknowledged in the output
#   input-partitions  dedupd, slicing.mode = input-partitions (3 slices = the input partitions)
#   repartition       dedupd, slicing.mode = repartition, 8 slices (or REP_SLICES: 3 compares the
#                     modes at the same slice count, i.e. the hop alone); the default slice log
#                     (batches: one slice-log record per router turn and slice)
#   repartition-records  the same with slicing.log_format = records: one slice-log record per
#                     input record
#   shared            dedupd, slicing.mode = shared: one slice judges every input partition from
#                     the routers' read-order records (docs/shared-mode.md)
#   quix              scripts/quix_dedup.py: RocksDB state with a 60 s TTL per key (not with --no-quix)
#   bytewax           scripts/bytewax_dedup.py: Bytewax 0.21.1, 1 worker, the same rule with its state
#                     in memory, no recovery, bytewax.connectors.kafka (not with --no-bytewax)
# (--systems picks some of them, in the order given. The peers install themselves on first use
# into target/quix-venv and target/bytewax-venv.)
# dedupd: window 60 s, filter.expected_keys = 40 000 (the stream's keys per window), the other
# settings config/dedupd.toml's, key json:/id, time json:/ts (scripts/bench_lib.sh start_daemon).
#
# Measured per run (daemon_bench wait / check):
#   records/s    the records judged between the first reading of the system's count that shows
#                progress and the first that shows N, over the time between (a backlog: all N
#                are in the input before the system starts; dedupd publishes its count every
#                200 ms, quix_dedup.py and bytewax_dedup.py every 1000 records, the relay every 10 ms,
#                daemon_bench wait reads it every 10 ms)
#   CPU          user + system CPU of the system's process tree (/proc) over the same interval,
#                in seconds per 1 M of the records judged in it
#   peak RSS     VmHWM of the process tree at the end of that interval (MiB)
#   FPR / FNR    of the distinct records in the output topic (read after every record, the tail
#                too, is judged and the system is stopped) against the exact verdicts; for the
#                relay, that its output holds every record (N and the tail) instead
#   × bare relay each system's CPU per 1 M records over the relay's in the same round (when the
#                relay ran), as a range over the rounds
# Writes target/bench-peer.csv (a row per run) and target/bench-peer.md (ranges over the rounds,
# and repartition's CPU per record over input-partitions', round by round), and prints the
# latter. Logs: target/bench-peer-*.log. Environment: DEDUPD_BROKER_PORT, DEDUPD_BIN_DIR, BENCH_ADMIN_PORT
# (dedupd's admin port, 19520).
set -euo pipefail
cd "$(dirname "$0")/.."
records="${RECORDS:-1000000}" rounds="${ROUNDS:-3}" quix=1 bytewax=1 rep_slices="${REP_SLICES:-8}" zipf="" chosen=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --records) records=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --no-quix) quix=0; shift ;;
    --no-bytewax) bytewax=0; shift ;;
    --zipf) zipf=$2; shift 2 ;;
    --systems) chosen=$2; shift 2 ;;
    *) echo "usage: scripts/bench_peer.sh [--records N] [--rounds R] [--no-quix] [--no-bytewax] [--zipf ALPHA] [--systems LIST]" >&2
       exit 2 ;;
  esac
done
source scripts/bench_lib.sh
run="bench-peer-$(date +%s)"
scripts/text_corpus.sh
systems=(relay input-partitions repartition repartition-records shared)
[[ $quix == 1 ]] && systems+=(quix)
[[ $bytewax == 1 ]] && systems+=(bytewax)
if [[ -n $chosen ]]; then
  read -r -a systems <<<"$chosen"
fi
for system in "${systems[@]}"; do
  case $system in
    relay | input-partitions | repartition | repartition-records | shared) ;;
    quix) python3 scripts/quix_dedup.py --install ;;
    bytewax) python3 scripts/bytewax_dedup.py --install ;;
    *) echo "bench_peer.sh: unknown system $system (relay, input-partitions, repartition, repartition-records, shared, quix, bytewax)" >&2
       exit 2 ;;
  esac
done
quix_python=target/quix-venv/bin/python bytewax_python=target/bytewax-venv/bin/python
admin="${BENCH_ADMIN_PORT:-19520}"
csv=target/bench-peer.csv md=target/bench-peer.md
echo "round,system,records,records_per_second,cpu_seconds_per_million,peak_rss_mib,fpr,fnr,outputs,repeated" >"$csv"

# field NAME FILE: the value of NAME=VALUE in what a daemon_bench command printed.
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" "$2" | head -1; }

run_one() { # round system
  local round=$1 system=$2 app="$run-$2-$1" truth="target/$run.truth" pid progress out
  fresh_broker
  topic "$app.in" 3 retention.ms=-1 retention.bytes=-1
  if [[ -n $zipf ]]; then
    $bench produce-zipf "$broker" "$app.in" "$records" "$truth" "$zipf" >"target/$app.produce"
  else
    $bench produce-text "$broker" "$app.in" "$records" "$truth" >"target/$app.produce"
  fi
  case $system in
    quix)
      out="$app.out"
      topic "$out" 3
      "$quix_python" scripts/quix_dedup.py --broker "$broker" --input "$app.in" --output "$out" --group "$app" \
        --state-dir "target/$app.state" --progress-file "target/$app.progress" >"target/$app.log" 2>&1 &
      pid=$! progress="file:target/$app.progress"
      ;;
    bytewax)
      out="$app.out"
      topic "$out" 3
      "$bytewax_python" scripts/bytewax_dedup.py --broker "$broker" --input "$app.in" --output "$out" \
        --progress-file "target/$app.progress" >"target/$app.log" 2>&1 &
      pid=$! progress="file:target/$app.progress"
      ;;
    relay)
      out="$app.out"
      topic "$out" 3
      "$bench" relay-group "$broker" "$app.in" "$out" "$app" "target/$app.progress" >"target/$app.log" 2>&1 &
      pid=$! progress="file:target/$app.progress"
      ;;
    *)
      local slices=$rep_slices mode=$system log_format=
      [[ $system == input-partitions ]] && slices=3
      [[ $system == shared ]] && slices=1
      [[ $system == repartition-records ]] && mode=repartition log_format=records
      start_daemon "$app" "$app.in" timer "$slices" "$admin" DEDUPD__SLICING__MODE="$mode" \
        DEDUPD__SLICING__LOG_FORMAT="$log_format" DEDUPD__FILTER__EXPECTED_KEYS=40000
      pid=$daemon_pid progress=$admin out="$app.out"
      ;;
  esac
  $bench wait "$progress" "$records" "$system" "$pid" >"target/$app.wait"
  # Every record judged, the tail too (dedupd releases the last ones after lateness of quiet),
  # so that the output holds every verdict on the N once the system has stopped.
  $bench wait "$progress" $((records + $(field tail "target/$app.produce"))) "$system" >/dev/null
  stop_daemon "$pid"
  rm -rf "target/$app.state"
  $bench check "$broker" "$out" "$truth" "$system" >"target/$app.check"
  cat "target/$app.wait" "target/$app.check"
  local w="target/$app.wait" c="target/$app.check" all
  all=$((records + $(field tail "target/$app.produce")))
  if [[ $system == relay && $(field outputs "$c") != "$all" ]]; then
    echo "bench_peer.sh: the relay wrote $(field outputs "$c") records of $all" >&2
  fi
  echo "$round,$system,$records,$(field records_per_second "$w"),$(field cpu_seconds_per_million "$w"),$(field peak_rss_mib "$w"),$(field fpr "$c"),$(field fnr "$c"),$(field outputs "$c"),$(field repeated "$c")" >>"$csv"
}

for ((round = 1; round <= rounds; round++)); do
  for system in "${systems[@]}"; do
    echo "== round $round: $system"
    run_one "$round" "$system"
  done
done
cat "target/$run-${systems[0]}-1.produce"

python3 - "$csv" "$md" "$run" "$rep_slices" "$zipf" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
names = {"relay": "bare relay: consume → produce, dedupd's client settings",
         "input-partitions": "dedupd input-partitions (3 slices)", "repartition": f"dedupd repartition ({sys.argv[4]} slices)",
         "repartition-records": f"dedupd repartition, slicing.log_format = records ({sys.argv[4]} slices)",
         "shared": "dedupd shared (1 slice, no copy)", "quix": "Quix Streams 3.28.1, RocksDB state, 60 s TTL",
         "bytewax": "Bytewax 0.21.1, 1 worker, state in memory, no recovery"}
def span(values, fmt):
    values = [v for v in values if v == v]  # NaN: a run shorter than the system's count steps
    if not values:
        return "n/a"
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}–{hi}"
thousands = lambda v: f"{v / 1000:.1f}k"
cpu = {(r["round"], r["system"]): float(r["cpu_seconds_per_million"]) for r in rows}
# × bare relay: a system's CPU per record over the relay's in the same round (NaN when either
# run was too short to measure).
relay_ran = any(s == "relay" for _, s in cpu)
over_relay = lambda rs: [cpu[(r["round"], r["system"])] / cpu[(r["round"], "relay")] if cpu.get((r["round"], "relay"), 0) > 0
                         else float("nan") for r in rs]
lines = ["| system | records/s | CPU s per 1 M records | peak RSS MiB | FPR / FNR |" + (" × bare relay |" if relay_ran else ""),
         "|---|---:|---:|---:|---|" + ("---:|" if relay_ran else "")]
for system in names:
    rs = [r for r in rows if r["system"] == system]
    if not rs:
        continue
    get = lambda k: [float(r[k]) for r in rs]
    accuracy = f"{span(get('fpr'), lambda v: f'{v:.4f}')} / {span(get('fnr'), lambda v: f'{v:.4f}')}"
    # The relay copies every record: FPR 0 and FNR 1 say that each of the N is in its output.
    if system == "relay":
        accuracy = "— (wrote every record)" if all(f == 0 and n == 1 for f, n in zip(get("fpr"), get("fnr"))) \
            else f"{accuracy} (a record is missing: a relay's is 0 / 1)"
    lines.append(f"| {names[system]} | {span(get('records_per_second'), thousands)} "
                 f"| {span(get('cpu_seconds_per_million'), lambda v: f'{v:.2f}')} "
                 f"| {span(get('peak_rss_mib'), lambda v: f'{v:.0f}')} | {accuracy} |"
                 + (f" {span(over_relay(rs), lambda v: f'{v:.2f}×')} |" if relay_ran else ""))
# A run too short for the count steps or the CPU clock (10 ms ticks) has no ratio.
ratios = [f"{cpu[(k, 'repartition')] / cpu[(k, s)]:.2f}×" if cpu[(k, s)] > 0 and cpu[(k, "repartition")] > 0 else "n/a"
          for k, s in cpu if s == "input-partitions" and (k, "repartition") in cpu]
if ratios:
    lines.append("| repartition / input-partitions, CPU per record (round by round; issue 20 target ≤ 2×) "
                 f"| | {' · '.join(ratios)} | | |" + (" |" if relay_ran else ""))
speed = {(r["round"], r["system"]): float(r["records_per_second"]) for r in rows}
faster = [f"{speed[(k, 'shared')] / speed[(k, s)]:.2f}×" for k, s in speed
          if s == "repartition" and (k, "shared") in speed and speed[(k, s)] > 0]
if faster:
    lines.append(f"| shared / repartition, records/s (round by round; issue 18: ≥ 1×) | {' · '.join(faster)} | | | |"
                 + (" |" if relay_ran else ""))
n = int(rows[0]["records"])
lines.append("")
stream = f"Zipf(α = {sys.argv[5]}) text keys" if sys.argv[5] else "real-text keys, ~35% copies"
lines.append(f"{n:,} records ({stream}), {len({r['round'] for r in rows})} round(s); per run: {sys.argv[3]} in target/ "
             "(the rows: target/bench-peer.csv).")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
