# Shared by the benchmark scripts (bench_daemon.sh, bench_peer.sh): the binaries, a fresh local
# broker, topics, starting and stopping `dedupd run`, and reading a process's CPU from /proc.
# Source it from the repository's top directory. Sets: port, broker, run (a unique prefix for
# app ids and topics), config, dedupd_bin, bench (daemon_bench). Environment: DEDUPD_BROKER_PORT
# (9092), DEDUPD_BIN_DIR (below), DAEMON_ENV, DAEMON_NICE (see start_daemon).
port="${DEDUPD_BROKER_PORT:-9092}"
broker="127.0.0.1:$port"
run="bench-$(date +%s)"
# DEDUPD_BIN_DIR: run binaries built earlier (dedupd and daemon_bench copied there), so that a
# run waiting for the benchmark lock does not build whatever the tree holds by then.
# A dedupd.toml there is used instead of config/dedupd.toml.
config=config/dedupd.toml
if [[ -n ${DEDUPD_BIN_DIR:-} ]]; then
  dedupd_bin="$DEDUPD_BIN_DIR/dedupd" bench="$DEDUPD_BIN_DIR/daemon_bench"
  [[ -f $DEDUPD_BIN_DIR/dedupd.toml ]] && config="$DEDUPD_BIN_DIR/dedupd.toml"
else
  dedupd_bin=target/release/dedupd bench=target/release/examples/daemon_bench
  # Niced: the machine is shared, and a build is not what is measured.
  nice -n 19 cargo build --release --quiet --bin dedupd --example daemon_bench
fi

fresh_broker() {
  scripts/broker.sh stop >/dev/null 2>&1 || true
  # Not with our open files: run under `flock LOCK scripts/bench_daemon.sh`, the broker (a
  # daemon) would inherit the lock's descriptor and hold the lock after this script ends.
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      [[ $fd -gt 2 ]] && eval "exec $fd>&-"
    done
    exec scripts/broker.sh start >/dev/null
  )
}
# The broker goes when the script does.
trap 'scripts/broker.sh stop >/dev/null 2>&1 || true' EXIT

topic() { # name partitions [config=value...]
  local name=$1 partitions=$2 c args=()
  shift 2
  for c in "$@"; do args+=(--config "$c"); done
  python3 scripts/kafka_client.py create-topic --broker "$broker" --topic "$name" --partitions "$partitions" \
    "${args[@]}" >/dev/null
}

# start_daemon APP TOPIC KIND SLICES ADMIN_PORT [VAR=VALUE...]: starts `dedupd run` in the
# background; its pid is in $daemon_pid.
start_daemon() {
  local app=$1 input=$2 kind=$3 slices=$4 admin=$5
  shift 5
  env DEDUPD__APP__ID="$app" DEDUPD__KAFKA__BROKERS="$broker" DEDUPD__KAFKA__SESSION_TIMEOUT_MS=6000 \
    DEDUPD__INPUT__TOPICS="$input" DEDUPD__INPUT__KEY=json:/id DEDUPD__INPUT__TIME=json:/ts \
    DEDUPD__FILTER__KIND="$kind" DEDUPD__FILTER__SLICES="$slices" DEDUPD__FILTER__WINDOW=60s \
    DEDUPD__FILTER__EXPECTED_KEYS=400000 DEDUPD__OUTPUT__TOPIC="$app.out" \
    DEDUPD__OUTPUT__DEAD_LETTER_TOPIC="$app.dlq" DEDUPD__CHECKPOINT__TOPIC="$app.ckpt" \
    DEDUPD__ADMIN__LISTEN="127.0.0.1:$admin" \
    RUST_LOG="${RUST_LOG:-info,dedupd::kafka::worker=debug,dedupd::cli::run=debug,librdkafka=error,rdkafka=error}" ${DAEMON_ENV:-} "$@" \
    nice -n "${DAEMON_NICE:-0}" "$dedupd_bin" run --config "$config" >>"target/$app.log" 2>&1 &
  daemon_pid=$!
}

stop_daemon() { # pid
  kill -TERM "$1" 2>/dev/null || true
  wait "$1" || true
}

wait_ready() { # admin_port seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    curl -sf "127.0.0.1:$1/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "not ready after $2 s" >&2
  return 1
}

metric_sum() { # admin_port name: the sum of every series of a metric
  curl -s "127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%.3f", s}'
}

# CPU time (user + system, clock ticks) of a process, and cores used between two readings.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
cores() { awk -v a="$1" -v b="$2" -v s="$3" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) / hz / s}'; }

# CPU seconds of a process's threads, by thread name (numbers in names folded: rdk:broker*).
thread_cpu() {
  local t hz
  hz=$(getconf CLK_TCK)
  for t in /proc/"$1"/task/*; do
    echo "$(sed 's/[-0-9]*$//; s/ /_/g' "$t/comm") $(sed 's/.*) //' "$t/stat" | awk '{print $12 + $13}')"
  done | awk -v hz="$hz" '{s[$1] += $2; all += $2} END {for (n in s) printf " %s=%.1f", n, s[n] / hz; printf " total=%.1f\n", all / hz}'
}
