#!/usr/bin/env bash
# Local Kafka-protocol test broker (Nisshi, the successor of Tansu) for dedupd's integration tests.
#
#   scripts/broker.sh install | start | stop | restart | status
#
# Listens on 127.0.0.1:${DEDUPD_BROKER_PORT:-9092}. Memory storage by default: a restart
# loses every topic. Environment:
#   DEDUPD_BROKER_PORT     port (default 9092)
#   DEDUPD_BROKER_STORAGE  --storage-engine URL (default memory://tansu/)
#   DEDUPD_BROKER_BIN       broker binary to use (default: target/tools/nisshi, built by `install`
#                          from crates.io's nisshi with its memory and SQLite storage)
#   DEDUPD_BROKER_CACHE     where that build is kept between clones (default
#                          ${XDG_CACHE_HOME:-~/.cache}/dedupd); the first build takes 12-22 min on 2 cores
#   DEDUPD_BROKER_DIR      pid and log files (default target/broker)
#   DEDUPD_BROKER_TIMEOUT  seconds `start` waits for the broker to answer (default 30)
#   PYTHON                 interpreter for pip and the readiness probe (default python3)
# See docs/dev/broker.md for what the broker does and does not do, and why this one.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${DEDUPD_BROKER_PORT:-9092}"
STORAGE="${DEDUPD_BROKER_STORAGE:-memory://tansu/}"
BIN="${DEDUPD_BROKER_BIN:-$ROOT/target/tools/nisshi}"
DIR="${DEDUPD_BROKER_DIR:-$ROOT/target/broker}"
TIMEOUT="${DEDUPD_BROKER_TIMEOUT:-30}"
PY="${PYTHON:-python3}"
PIDFILE="$DIR/broker-$PORT.pid"
LOG="$DIR/broker-$PORT.log"
# The Python client the scripts and tests use, with its schema registry serializers (Avro,
# Protobuf, JSON Schema: tests/formats/serializers.py) and what they import.
PIP_PKGS=("confluent-kafka[avro,protobuf,json]>=2.3")
PIP_PROBE='import confluent_kafka, fastavro, google.protobuf, jsonschema
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer' 
# The broker: Nisshi (Tansu, renamed upstream) from crates.io, with its memory storage (what the
# tests and benchmarks run on) and SQLite (libsql: the SASL tests need stored users). Tansu 0.6.0's
# group coordinator wedged consumer groups (docs/dev/broker.md, "Why Nisshi 0.8.1"). Its packages
# declare rust-version 1.96 but build with 1.95 (--ignore-rust-version), pinned by its Cargo.lock.
BROKER_CRATE=nisshi
BROKER_VERSION=0.8.1
BROKER_FEATURES=dynostore,libsql

say() { echo "broker.sh: $*"; }
die() { echo "broker.sh: error: $*" >&2; exit 1; }

pip_install() {
  local args=(-m pip install --quiet --disable-pip-version-check "$@")
  PIP_ROOT_USER_ACTION=ignore "$PY" "${args[@]}" 2>/dev/null ||
    # A Debian-managed interpreter (PEP 668) refuses global installs: use the user site.
    PIP_ROOT_USER_ACTION=ignore "$PY" "${args[@]}" --user --break-system-packages
}

# While the process $1 runs, a progress line: the time so far and the crates built in the target
# directory $2. On a terminal one line rewritten every 5 s; otherwise (a log) a line a minute.
progress() {
  local pid="$1" target="$2" start=$SECONDS every=60 end=$'\n' n elapsed
  if [[ -t 1 ]]; then every=5 end=""; fi
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    elapsed=$((SECONDS - start))
    ((elapsed % every == 0)) || continue
    n="$(find "$target" -mindepth 3 -maxdepth 3 -type d -path '*/.fingerprint/*'  2>/dev/null | wc -l)"
    [[ -t 1 ]] && printf '\r\033[K'
    printf 'broker.sh: building %s: %d min %02d s, %d crates compiled (12-22 min on 2 cores)%s' \
      "$BROKER_CRATE" $((elapsed / 60)) $((elapsed % 60)) "$n" "$end"
  done
}

# Builds the broker into $1/bin (once per machine and version; a fresh clone copies it from there).
build_broker() {
  local cache="$1" pid shown rc=0 start=$SECONDS
  say "building $BROKER_CRATE $BROKER_VERSION ($BROKER_FEATURES) from crates.io into $cache (once per machine; 12-22 min on 2 cores)"
  cargo install --quiet --locked --ignore-rust-version --no-default-features --features "$BROKER_FEATURES" \
    --root "$cache" --target-dir "$cache/target" "$BROKER_CRATE@$BROKER_VERSION" &
  pid=$!
  progress "$pid" "$cache/target" &
  shown=$!
  trap 'kill "$pid" "$shown" 2>/dev/null || true' EXIT
  wait "$pid" || rc=$?
  kill "$shown" 2>/dev/null || true
  wait "$shown" 2>/dev/null || true
  trap - EXIT
  [[ -t 1 ]] && echo
  ((rc == 0)) || die "building $BROKER_CRATE $BROKER_VERSION failed (see the cargo output above)"
  say "built $BROKER_CRATE in $(((SECONDS - start) / 60)) min $(((SECONDS - start) % 60)) s"
  rm -rf "$cache/target"
}

install() {
  if ! "$PY" -c "$PIP_PROBE" 2>/dev/null; then
    say "installing confluent-kafka with its serializers (python)"
    pip_install "${PIP_PKGS[0]}"
  fi
  if [[ -n "${DEDUPD_BROKER_BIN:-}" ]]; then
    [[ -x "$BIN" ]] || die "DEDUPD_BROKER_BIN=$BIN is not executable"
    return 0
  fi
  local want="$BROKER_CRATE $BROKER_VERSION" cache
  [[ -x "$BIN" && "$("$BIN" --version 2>/dev/null)" == "$want" ]] && return 0
  cache="${DEDUPD_BROKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dedupd}/$BROKER_CRATE-$BROKER_VERSION-$BROKER_FEATURES"
  [[ -x "$cache/bin/$BROKER_CRATE" ]] || build_broker "$cache"
  mkdir -p "$(dirname "$BIN")"
  cp "$cache/bin/$BROKER_CRATE" "$BIN.tmp" && chmod +x "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  say "broker: $BIN ($("$BIN" --version))"
}

pid_running() { # prints the pid of our broker on $PORT if it is alive
  local pid
  [[ -f "$PIDFILE" ]] || return 1
  pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$(basename "$BIN")" || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; }

kafka_ready() { # a metadata request answered within 2 s
  "$PY" - "$PORT" <<'EOF' 2>/dev/null
import sys
from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": f"127.0.0.1:{sys.argv[1]}", "log_level": 0})
a.list_topics(timeout=2)
EOF
}

start() {
  local pid
  if pid="$(pid_running)"; then say "already running (pid $pid, 127.0.0.1:$PORT)"; return 0; fi
  port_open && die "127.0.0.1:$PORT is already in use by another process (set DEDUPD_BROKER_PORT)"
  install
  mkdir -p "$DIR"
  echo "=== $(date -u +%FT%TZ) start $BIN storage=$STORAGE" >>"$LOG"
  # setsid: the broker outlives the shell that started it and ignores its terminal's signals.
  setsid "$BIN" broker --listener-url "tcp://127.0.0.1:$PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$PORT" --storage-engine "$STORAGE" \
    </dev/null >>"$LOG" 2>&1 &
  pid=$!
  echo "$pid" >"$PIDFILE"
  local deadline=$((SECONDS + TIMEOUT))
  until port_open && kafka_ready; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      die "tansu exited during start-up; last lines of $LOG:"$'\n'"$(tail -n 30 "$LOG")"
    fi
    if ((SECONDS >= deadline)); then
      kill "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      die "tansu did not answer on 127.0.0.1:$PORT within ${TIMEOUT}s; last lines of $LOG:"$'\n'"$(tail -n 30 "$LOG")"
    fi
    sleep 0.2
  done
  say "started (pid $pid, 127.0.0.1:$PORT, log $LOG)"
}

stop() {
  local pid i
  if ! pid="$(pid_running)"; then rm -f "$PIDFILE"; say "not running (port $PORT)"; return 0; fi
  kill "$pid"
  for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; sleep 0.2; fi
  rm -f "$PIDFILE"
  say "stopped (pid $pid)"
}

status() {
  local pid
  if pid="$(pid_running)"; then say "running (pid $pid, 127.0.0.1:$PORT)"; return 0; fi
  say "not running (port $PORT)"
  return 1
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  restart) stop && start ;;
  status) status ;;
  *) echo "usage: $0 install|start|stop|restart|status" >&2; exit 2 ;;
esac
