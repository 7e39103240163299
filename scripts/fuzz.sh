#!/usr/bin/env bash
# Runs each cargo-fuzz target of fuzz/ for a bounded time, niced, and prints
# per target the executions, their rate, the corpus size and the crashes.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s each, every target)
#
# cargo-fuzz needs a nightly compiler for its sanitizer and coverage flags;
# with only the stable toolchain, RUSTC_BOOTSTRAP=1 lets stable accept them
# (set here). `cargo install cargo-fuzz` once. The build goes to
# target/fuzz, logs to target/fuzz-logs; corpora grow in fuzz/corpus/TARGET
# and crashing inputs are saved in fuzz/artifacts/TARGET (both ignored by
# git: a crash found is fixed and its input kept as a regression test in
# the ordinary test suite, see docs/reliability.md).
#
# Exit status: 0 when no target crashed, 1 when one did, 2 when one could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
all=(extract formats nesting slice_records snapshot_bytes snapshot_mutated config)
targets=("${@:-${all[@]}}")

command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is missing: cargo install cargo-fuzz" >&2; exit 2; }
export RUSTC_BOOTSTRAP=1

mkdir -p target
echo "== building the fuzz targets (release, debug assertions, AddressSanitizer)"
if ! nice -n 19 cargo fuzz build --fuzz-dir fuzz --target-dir target/fuzz >target/fuzz-build.log 2>&1; then
  cat target/fuzz-build.log >&2
  echo "the fuzz build failed" >&2
  exit 2
fi
bin=target/fuzz/x86_64-unknown-linux-gnu/release

# The snapshot targets start from real encodings.
"$bin/seeds" fuzz/corpus/snapshot_bytes

mkdir -p target/fuzz-logs
# Each run's table is also appended to target/fuzz-logs/summary.txt, under
# the date and the commit fuzzed.
summary=target/fuzz-logs/summary.txt
echo "== $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+changes')" >>"$summary"
row() { printf "$@" | tee -a "$summary"; }
row '%-18s %8s %12s %10s %8s %8s\n' target seconds execs execs/s corpus crashes
status=0
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
  before=$(find "fuzz/artifacts/$t" -type f | wc -l)
  touch "target/fuzz-logs/$t.start"
  extra=()
  [ "$t" = config ] && extra+=(-dict=fuzz/config.dict)
  log="target/fuzz-logs/$t.log"
  # -timeout: an input taking longer than 10 s counts as a hang (a crash);
  # -rss_limit_mb: so does one that needs more than 2 GiB.
  # The binaries built above, run directly (what `cargo fuzz run` runs,
  # without its rebuild: an edit made during a long run cannot change the
  # targets under it).
  nice -n 19 "$bin/$t" "fuzz/corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${extra[@]}" \
    >"$log" 2>&1 || true
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  if [ -z "$execs" ]; then
    row '%-18s did not run: see %s\n' "$t" "$log"
    tail -n 5 "$log" | sed 's/^/    /'
    status=2
    continue
  fi
  corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
  after=$(find "fuzz/artifacts/$t" -type f | wc -l)
  crashes=$((after - before))
  row '%-18s %8s %12s %10s %8s %8s\n' "$t" "$seconds" "$execs" "$rate" "$corpus" "$crashes"
  if [ "$crashes" -gt 0 ]; then
    [ "$status" -eq 0 ] && status=1
    find "fuzz/artifacts/$t" -type f -newer "target/fuzz-logs/$t.start" | sed 's/^/    new input: /'
    grep -m1 -A3 'panicked at\|ERROR: AddressSanitizer\|ERROR: libFuzzer' "$log" | sed 's/^/    /' || true
  fi
done
exit "$status"
