#!/usr/bin/env bash
# profile_redis.sh [OUT_DIR] - the example of docs/profiling.md, to repeat
# anywhere: redis-server under `shoal-run --profile`, loaded by
# redis-benchmark (SET of 100,000 keys with 1 KiB values, LPUSH of lists,
# HSET), a heap profile taken with the stats signal, and google-pprof's
# top sites by live bytes (OUT_DIR/redis_profile.txt) and call graph
# (OUT_DIR/redis_profile.png).  Needs a build (build/) and scripts/deps.sh's
# packages.  OUT_DIR defaults to docs/img.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/docs/img}
run=$root/build/shoal-run
port=$((20000 + RANDOM % 20000))
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-redis-prof.XXXXXX")
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$out"

"$run" --profile="$work/p" -o stats_signal=USR2 -o stats_file="$work/stats" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    >"$work/redis.log" 2>&1 &
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p "$port" -q -P 16 -n 100000 -r 100000 -d 1024 -t set >/dev/null
redis-benchmark -p "$port" -q -P 16 -n 200000 -r 1000 -t lpush >/dev/null
redis-benchmark -p "$port" -q -P 16 -n 100000 -r 100000 -t hset >/dev/null
pid=$(redis-cli -p "$port" info server | awk -F: '/^process_id/ { print $2 }' | tr -d '\r')
redis-cli -p "$port" info memory | grep -E '^used_memory_human' | tr -d '\r'
kill -USR2 "$pid"
sleep 1
profile=$(ls "$work"/p/redis-server.*.0.heap)
# Flat: the allocating functions (redis' zmalloc wrappers); cumulative:
# the code that called them.
{
    echo "== flat (the top 6 functions that allocated the live bytes)"
    google-pprof --text /usr/bin/redis-server "$profile" 2>/dev/null | head -7
    echo "== cumulative (the top 18 callers, main and below)"
    google-pprof --text --cum /usr/bin/redis-server "$profile" 2>/dev/null | sed -n 2,19p
} | tee "$out/redis_profile.txt"
google-pprof --dot --nodecount=20 /usr/bin/redis-server "$profile" 2>/dev/null | dot -Tpng >"$out/redis_profile.png"
echo "profile_redis: $out/redis_profile.txt, $out/redis_profile.png"
