#!/usr/bin/env bash
# The main job: install what is needed (Debian), build shoal, run the quick
# benchmark suite under shoal, glibc, jemalloc, tcmalloc and mimalloc, print
# the table, then show a live statistics dump that a running program under
# shoal writes when it receives the stats signal.
#
#   scripts/demo.sh [bench/run options, e.g. --allocators shoal,glibc]
#
# Results land in bench/results/latest/ (summary.md, summary.csv, charts/).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
scripts/deps.sh demo || { echo "demo: scripts/deps.sh failed" >&2; exit 1; }
echo "ok"

step "building shoal (build/libshoal.so)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
cmake --build build --target shoal >/dev/null || exit 1     # only what the demo runs
lib="$root/build/libshoal.so"
bench/run --build-only || exit 1

step "benchmarks: bench/run --quick --quiet $* (a few minutes; failures are named)"
bench/run --quick --quiet "$@"
bench_status=$?

step "live statistics dump (SHOAL_STATS_SIGNAL=USR2, kill -USR2 <pid>)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
stats="$tmp/stats.txt"
out="$tmp/out.txt"
# json_tree builds a tree of small objects, then holds it live for a while.
SHOAL_STATS_SIGNAL=USR2 SHOAL_STATS_FILE="$stats" LD_PRELOAD="$lib" \
  bench/results/bin/json_tree --mb 8 --hold-ms 4000 >"$out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  grep -q "holding" "$out" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
dump_status=0
if grep -q "holding" "$out"; then
  echo "sending SIGUSR2 to pid $pid (json_tree under shoal, tree live)"
  kill -USR2 "$pid"
  sleep 0.5
  wait "$pid"; rc=$?
  if [ "$rc" -eq $((128 + 12)) ]; then
    echo "demo: the program was killed by SIGUSR2: this shoal build does not handle"
    echo "      SHOAL_STATS_SIGNAL yet (the signal's default action ended it)."
    dump_status=1
  elif [ "$rc" -ne 0 ]; then
    echo "demo: json_tree under shoal exited with status $rc:"; cat "$out"
    dump_status=1
  fi
  if [ -s "$stats" ]; then
    echo "--- $(basename "$stats") (SHOAL_STATS_FILE) ---"
    cat "$stats"
    echo "---"
  else
    echo "demo: no statistics were written to SHOAL_STATS_FILE"
    dump_status=1
  fi
else
  wait "$pid"; rc=$?
  echo "demo: json_tree under shoal ended (status $rc) before it was ready:"; cat "$out"
  dump_status=1
fi

step "done"
echo "tables: bench/results/latest/summary.md   charts: bench/results/latest/charts/"
echo "reading the dump: docs/stats.md"
[ "$bench_status" -eq 0 ] || echo "demo: some benchmark runs failed (listed above under 'Failed runs')"
[ "$bench_status" -eq 0 ] && [ "$dump_status" -eq 0 ]
