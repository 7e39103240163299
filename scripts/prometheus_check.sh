#!/usr/bin/env bash
# Checks dedupd's operations files with a real Prometheus:
#
#   scripts/prometheus_check.sh install          promtool and prometheus (Debian's package) if missing
#   scripts/prometheus_check.sh rules            promtool check rules grafana/alerts.yml,
#                                                promtool test rules grafana/alerts_test.yml, the
#                                                static dashboard check (below), and the coverage
#                                                check (scripts/ops_coverage.py: every metric of
#                                                src/metrics/ on the dashboard, in an alert or in
#                                                grafana/unshown-metrics.txt; every alert with for:,
#                                                a runbook_url and tests that fire and do not fire)
#   scripts/prometheus_check.sh dashboard        static dashboard check only: grafana/dedupd.json is a
#                                                well-formed dashboard, every metric its queries and the
#                                                rules name is in docs/metrics.md, and every query is
#                                                valid PromQL (promtool check rules on a generated file)
#   scripts/prometheus_check.sh live HOST:PORT   starts a throw-away Prometheus on a free loopback port
#                                                scraping http://HOST:PORT/metrics every second, waits
#                                                until the target is up and has been scraped a few times,
#                                                then runs every panel query and template-variable query
#                                                of grafana/dedupd.json through /api/v1/query until all
#                                                return series (or the deadline passes), and stops it
#   scripts/prometheus_check.sh lag HOST:PORT    the same throw-away Prometheus; passes once the
#                                                deployment's input lag in records (sum of
#                                                dedupd_input_lag) and in seconds (max of
#                                                dedupd_input_lag_seconds) have each risen above 0
#                                                and are back at 0 (start it as dedupd starts on a
#                                                backlog)
#
# Prints `ok: ...` and exits 0 when everything passes; otherwise lists each failing check or
# expression (with Prometheus's error) and exits 1. Usage errors exit 2.
#
# Environment:
#   DEDUPD_PROM_WAIT      live: seconds to wait for every query to return series, counted from
#                         the first successful scrape (default 60); lag: for the lag to rise and
#                         return to 0 (default 120)
#   DEDUPD_PROM_SCRAPES   live: scrapes of the target before the first evaluation (default 5)
#   DEDUPD_PROM_STRICT    live: 1 fails queries that answer only NaN, too (by
#                         default they are retried for up to 15 s, then pass with a note: a
#                         ratio or quantile over a window without events is 0/0)
#   DEDUPD_PROM_KEEP      live: 1 keeps the temp dir (config, TSDB, log) and prints its path
#   PROMETHEUS, PROMTOOL  binaries to use (default: from PATH, installed with apt-get if missing)
#   PYTHON                Python 3 for the JSON work (default python3; stdlib only, but for
#                         ops_coverage.py's PyYAML, installed into target/ops-coverage when missing)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
OPS="$ROOT/scripts/ops_check.py"
ALERTS="$ROOT/grafana/alerts.yml"
ALERTS_TEST="$ROOT/grafana/alerts_test.yml"
DASHBOARD="$ROOT/grafana/dedupd.json"
METRICS_DOC="$ROOT/docs/metrics.md"

say() { echo "prometheus_check: $*"; }
die() { echo "prometheus_check: error: $*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

# Debian's package: promtool and prometheus in /usr/bin. No recommends (they would pull in
# and start prometheus-node-exporter), and no service start: a policy-rc.d that denies
# every start is put in place for the install when the machine has none.
install_prometheus() {
  if command -v "${PROMETHEUS:-prometheus}" >/dev/null 2>&1 && command -v "${PROMTOOL:-promtool}" >/dev/null 2>&1; then
    return 0
  fi
  say "installing Debian's prometheus package (apt-get)"
  local policy=/usr/sbin/policy-rc.d placed=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# prometheus_check.sh: no service starts during its install\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    placed=1
  fi
  local rc=0
  {
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 prometheus
  } >/tmp/prometheus_check.apt.log 2>&1 || rc=$?
  if [ "$placed" -eq 1 ]; then as_root rm -f "$policy"; fi
  if [ "$rc" -ne 0 ]; then
    tail -n 30 /tmp/prometheus_check.apt.log >&2 || true
    die "apt-get install prometheus failed (exit $rc; log /tmp/prometheus_check.apt.log)"
  fi
  # A service started anyway (an init without policy-rc.d support) would hold :9090; the
  # checks never use it, and they do not stop what they did not start.
  command -v "${PROMTOOL:-promtool}" >/dev/null 2>&1 || die "promtool still missing after the install"
  command -v "${PROMETHEUS:-prometheus}" >/dev/null 2>&1 || die "prometheus still missing after the install"
  say "installed: $("${PROMETHEUS:-prometheus}" --version 2>&1 | head -n 1)"
}

dashboard_check() {
  # Structure, documented metric names, and every query through promtool's parser (as
  # recording rules of a generated file).
  "$PY" "$OPS" static --dashboard "$DASHBOARD" --metrics-doc "$METRICS_DOC" --rules "$ALERTS" \
    --promtool "$(command -v "${PROMTOOL:-promtool}")"
}

rules_check() {
  local failed=0
  echo "== promtool check rules grafana/alerts.yml"
  "${PROMTOOL:-promtool}" check rules "$ALERTS" || failed=1
  echo "== promtool test rules grafana/alerts_test.yml"
  (cd "$(dirname "$ALERTS_TEST")" && "${PROMTOOL:-promtool}" test rules "$(basename "$ALERTS_TEST")") || failed=1
  echo "== dashboard (static)"
  dashboard_check || failed=1
  echo "== coverage: every metric shown, every alert tested (scripts/ops_coverage.py)"
  "$PY" "$ROOT/scripts/ops_coverage.py" || failed=1
  if [ "$failed" -ne 0 ]; then
    echo "FAILED: rules"
    return 1
  fi
  local alerts tests
  alerts="$(grep -c '^ *- alert:' "$ALERTS" || true)"
  tests="$(grep -c '^ *- interval:' "$ALERTS_TEST" || true)"
  echo "ok: $alerts alerts, $tests rule test groups, dashboard queries valid"
}

free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Runs `CHECK... --prometheus URL` against a throw-away Prometheus scraping TARGET every second.
with_prometheus() {
  local target="$1"
  shift
  [[ "$target" =~ ^[^:/[:space:]]+:[0-9]+$ ]] || { echo "usage: $0 live|lag HOST:PORT" >&2; exit 2; }
  local tmp port url pid="" rc=0 attempt
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/dedupd-prometheus.XXXXXX")"
  cat >"$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 15s
scrape_configs:
  - job_name: dedupd
    metrics_path: /metrics
    static_configs:
      - targets: ["$target"]
EOF
  stop_prometheus() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
    pid=""
    if [ "${DEDUPD_PROM_KEEP:-0}" = 1 ]; then say "kept $tmp"; else rm -rf "$tmp"; fi
  }
  trap stop_prometheus EXIT
  trap 'exit 130' INT TERM

  # A free port can be taken between the probe and the bind: retry with another.
  for attempt in 1 2 3; do
    port="$(free_port)"
    url="http://127.0.0.1:$port"
    "${PROMETHEUS:-prometheus}" \
      --config.file="$tmp/prometheus.yml" \
      --storage.tsdb.path="$tmp/data" \
      --web.listen-address="127.0.0.1:$port" \
      --storage.tsdb.retention.time=1h \
      --log.level=warn >"$tmp/prometheus.log" 2>&1 &
    pid=$!
    if "$PY" "$OPS" wait-ready --prometheus "$url" --pid "$pid" --timeout 30; then break; fi
    kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
    pid=""
    if [ "$attempt" -eq 3 ]; then
      tail -n 20 "$tmp/prometheus.log" >&2 || true
      die "prometheus did not start"
    fi
  done
  say "prometheus $url scraping http://$target/metrics every 1s (pid $pid)"
  "$@" --prometheus "$url" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "-- prometheus log (last 20 lines)"
    tail -n 20 "$tmp/prometheus.log" || true
  fi
  stop_prometheus
  trap - EXIT INT TERM
  return "$rc"
}

cmd="${1:-}"
case "$cmd" in
  install)
    install_prometheus
    echo "ok: $(command -v "${PROMTOOL:-promtool}"), $(command -v "${PROMETHEUS:-prometheus}")"
    ;;
  rules)
    install_prometheus
    rules_check
    ;;
  dashboard)
    install_prometheus
    dashboard_check
    ;;
  live)
    [ $# -eq 2 ] || { echo "usage: $0 live HOST:PORT" >&2; exit 2; }
    install_prometheus
    strict=()
    [ "${DEDUPD_PROM_STRICT:-0}" = 1 ] && strict=(--strict)
    with_prometheus "$2" "$PY" "$OPS" live --dashboard "$DASHBOARD" --job dedupd \
      --scrapes "${DEDUPD_PROM_SCRAPES:-5}" --wait "${DEDUPD_PROM_WAIT:-60}" "${strict[@]}"
    ;;
  lag)
    [ $# -eq 2 ] || { echo "usage: $0 lag HOST:PORT" >&2; exit 2; }
    install_prometheus
    with_prometheus "$2" "$PY" "$OPS" rise-and-fall --expr 'sum(dedupd_input_lag{job="dedupd"})' \
      --expr 'max(dedupd_input_lag_seconds{job="dedupd"})' --wait "${DEDUPD_PROM_WAIT:-120}"
    ;;
  *)
    echo "usage: $0 install | rules | dashboard | live HOST:PORT | lag HOST:PORT" >&2
    exit 2
    ;;
esac
