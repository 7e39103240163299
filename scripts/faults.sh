#!/usr/bin/env bash
# Fault suite for `dedupd run` on the local broker (issue 19, "Faults"; results in
# docs/reliability.md). Builds the release binaries, starts the broker if it is not running,
# and runs scenarios of scripts/faults.py, niced (the machine is shared):
#
#   scripts/faults.sh SCENARIO [faults.py options]
#
#   kills         kills-ip then kills-rep: >= 20 seeded SIGKILLs each (--kills N, --seed S)
#   kills-ip      SIGKILLs in input-partitions mode, output identical per partition
#   kills-rep     SIGKILLs in repartition mode, the same set of output records
#   broker-pause  the broker SIGSTOPped for --pause (30) s mid-stream (--mode as below)
#   daemon-pause  one of two group members SIGSTOPped for --pause (15) s > session timeout 6 s
#                 (--mode input-partitions|repartition)
#   storm         rebalance storm: 3 members, one killed / stopped / started every 3-5 s for
#                 --minutes (3) (--mode, --seed); output as an uninterrupted run's
#   unwritable    the output topic unwritable for --pause (60) s (--queue N, --ports TANSU PROXY)
#   soak          --minutes (30) at --rate (20000) records/s: RSS and error counters
#   all           kills, broker-pause, daemon-pause (both modes); not soak
#
# Each scenario prints `RESULT <scenario> PASS|FAIL figures...`; the exit status is 0 only if
# every scenario passed. Environment: DEDUPD_BROKER_PORT (9092), FAULTS_NO_BUILD=1 (use the
# binaries in target/release as they are). Logs: target/faults/<run>/.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
if [[ -z ${FAULTS_NO_BUILD:-} ]]; then
  nice -n 19 cargo build --release --locked --quiet --bin dedupd --example daemon_bench
fi
scripts/broker.sh status >/dev/null 2>&1 || scripts/broker.sh start
py() { nice -n 19 python3 scripts/faults.py "$@"; }
if [[ $1 == all ]]; then
  shift
  status=0
  py kills "$@" || status=1
  py broker-pause "$@" || status=1
  py daemon-pause --mode input-partitions "$@" || status=1
  py daemon-pause --mode repartition "$@" || status=1
  exit $status
fi
py "$@"
