#!/usr/bin/env bash
# redis.sh - redis-server under shoal, on 127.0.0.1 and a free high port,
# with persistence off (--save '' --appendonly no) and I/O threads on.
#
#   1. load known data with redis-cli: strings of many sizes (some of
#      1 MiB), lists (LPUSH), hashes, counters;
#   2. drive it with redis-benchmark (also under shoal, two threads);
#      every test must report its rate and no errors;
#   3. read everything back (GET, LRANGE, HGETALL, GET of the counters)
#      and compare with what was written;
#   4. BGSAVE (the server forks a child that writes the dataset) and
#      check it succeeded, FLUSHALL ASYNC (a background thread frees what
#      the main thread allocated), load and check again;
#   5. SHUTDOWN NOSAVE: the server must exit 0, with shoal in its maps
#      while it ran and its statistics written at exit.
# Only loopback traffic.  Every wait is a deadline, generous enough for a
# machine busy with other tests (ctest -j8): it ends the test only when
# the server never answers, never finishes, or hangs.
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark awk

cli() { bounded 120 redis-cli -h 127.0.0.1 -p "$port" "$@"; }

server_pid=""
stop_server() {
    [ -n "$server_pid" ] || return 0
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
}
cleanup_hooks+=(stop_server)

# ---- start, on a port nobody else has -------------------------------------
started=""
for attempt in 1 2 3 4 5 6 7 8; do
    port=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
    : >"$work/redis.log"
    with_shoal bounded 900 redis-server --bind 127.0.0.1 --port "$port" \
        --save '' --appendonly no --dir "$work" --dbfilename dump.rdb \
        --logfile "$work/redis.log" --daemonize no --io-threads 2 \
        --lazyfree-lazy-user-flush yes >"$work/redis.out" 2>&1 &
    server_pid=$!
    for i in $(seq 1 600); do
        if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then
            started=yes
            break
        fi
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$started" ] && break
    stop_server
    server_pid=""
    if ! grep -qiE 'address already in use|could not create server tcp' "$work/redis.log"; then
        cat "$work/redis.out" "$work/redis.log" >&2
        fail "redis-server under shoal did not start"
    fi
done
[ -n "$started" ] || fail "no free port found for redis-server"
echo "redis-server under shoal on 127.0.0.1:$port"

rpid=$(cli info server | tr -d '\r' | awk -F: '$1 == "process_id" { print $2 }')
lib_real=$(readlink -f "$TEST_SHOAL_LIB")
grep -qF "$lib_real" "/proc/$rpid/maps" || fail "libshoal is not mapped in redis-server (pid $rpid)"

# ---- the data ---------------------------------------------------------------
# Commands and the replies redis-cli prints for the reads, both made by awk.
gen_data() {
    awk -v mode="$1" 'BEGIN {
        srand(5);
        for (i = 0; i < 3000; i++) {
            n = (i % 10 == 0) ? int(rand() * 20000) : int(rand() * 300) + 1;
            v = sprintf("v%d-", i);
            while (length(v) < n) v = v sprintf("%x", i * 7 + length(v));
            if (mode == "write") print "SET shoal:str:" i " " v;
            else if (mode == "read") print "GET shoal:str:" i;
            else print v;
        }
        for (j = 0; j < 200; j++) {
            cmd = "LPUSH shoal:list:" j;
            m = 1 + (j * 37) % 150;
            for (k = 0; k < m; k++) { item[k] = "item-" j "-" k; cmd = cmd " " item[k]; }
            if (mode == "write") print cmd;
            else if (mode == "read") print "LRANGE shoal:list:" j " 0 -1";
            else for (k = m - 1; k >= 0; k--) print item[k];
        }
        for (h = 0; h < 200; h++) {
            cmd = "HSET shoal:hash:" h;
            for (f = 0; f < 20; f++) cmd = cmd " f" f " " (h * 1000 + f);
            if (mode == "write") print cmd;
            else if (mode == "read") print "HGET shoal:hash:" h " f" (h % 20);
            else print h * 1000 + h % 20;
        }
        for (c = 0; c < 100; c++) {
            if (mode == "write") for (r = 0; r <= c % 7; r++) print "INCRBY shoal:ctr:" c " " c;
            else if (mode == "read") print "GET shoal:ctr:" c;
            else print c * (c % 7 + 1);
        }
    }'
}
gen_data write >"$work/write.cmds"
gen_data read >"$work/read.cmds"
gen_data expect >"$work/expected"
# Big values: 1 MiB and 3 MiB strings (huge blocks in shoal).
awk 'BEGIN { for (i = 0; i < 65536; i++) printf "%016x", i }' >"$work/big1"
awk 'BEGIN { for (i = 0; i < 196608; i++) printf "%016x", i * 3 }' >"$work/big3"
{ cat "$work/big1"; echo; } >"$work/big1.expect"
{ cat "$work/big3"; echo; } >"$work/big3.expect"

load_and_check() {
    local what=$1
    cli <"$work/write.cmds" >"$work/write.out"
    if grep -q ERR "$work/write.out"; then
        grep ERR "$work/write.out" | head -3 >&2
        fail "$what: writes failed"
    fi
    cli -x SET shoal:big1 <"$work/big1" >/dev/null
    cli -x SET shoal:big3 <"$work/big3" >/dev/null
    check_data "$what"
}

check_data() {
    cli <"$work/read.cmds" >"$work/read.out"
    compare "$work/expected" "$work/read.out" "redis data ($1)" >/dev/null
    # --raw prints the value and a newline.
    cli --raw GET shoal:big1 >"$work/big1.out"
    cli --raw GET shoal:big3 >"$work/big3.out"
    cmp -s "$work/big1.expect" "$work/big1.out" || fail "$1: the 1 MiB value came back different"
    cmp -s "$work/big3.expect" "$work/big3.out" || fail "$1: the 3 MiB value came back different"
    echo "$1: all data read back intact"
}

load_and_check "after loading"

# ---- benchmark ----------------------------------------------------------------
tests="set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,lrange_100,mset"
with_shoal bounded 600 redis-benchmark -h 127.0.0.1 -p "$port" -q -n 20000 -c 20 -P 4 \
    -r 10000 -d 100 --threads 2 -t "$tests" >"$work/bench.raw" 2>&1 ||
    { cat "$work/bench.raw" >&2; fail "redis-benchmark exited with an error"; }
tr '\r' '\n' <"$work/bench.raw" | grep 'requests per second' >"$work/bench.out" || true
if tr '\r' '\n' <"$work/bench.raw" | grep -qiE 'error|err '; then
    tr '\r' '\n' <"$work/bench.raw" | grep -iE 'error|err ' | head -5 >&2
    fail "redis-benchmark reported errors"
fi
want=$(echo "$tests" | tr ',' '\n' | wc -l)
got=$(wc -l <"$work/bench.out")
[ "$got" -ge "$want" ] || { cat "$work/bench.raw" >&2; fail "redis-benchmark finished $got of $want tests"; }
cut -d, -f1 "$work/bench.out"

check_data "after the benchmark"

# ---- fork (BGSAVE) and lazy free ----------------------------------------------
cli bgsave >/dev/null
for i in $(seq 1 3000); do
    cli info persistence | tr -d '\r' | grep -q '^rdb_bgsave_in_progress:0' && break
    sleep 0.1
done
status=$(cli info persistence | tr -d '\r' | awk -F: '$1 == "rdb_last_bgsave_status" { print $2 }')
[ "$status" = ok ] || fail "BGSAVE (a forked child of redis-server) failed: status '$status'"
[ -s "$work/dump.rdb" ] || fail "BGSAVE wrote no dump.rdb"
echo "BGSAVE in a forked child: ok ($(wc -c <"$work/dump.rdb") bytes)"
check_data "after BGSAVE"

cli flushall async >/dev/null
[ "$(cli dbsize)" = 0 ] || fail "FLUSHALL ASYNC left keys"
load_and_check "after FLUSHALL ASYNC and reloading"
cli memory purge >/dev/null 2>&1 || true

# ---- shut down -------------------------------------------------------------------
cli shutdown nosave >/dev/null 2>&1 || true
rc=0
wait "$server_pid" || rc=$?
server_pid=""
if [ $rc -ne 0 ] || grep -qE 'crashed|Guru Meditation|shoal: ' "$work/redis.log" "$work/redis.out"; then
    tail -30 "$work/redis.log" "$work/redis.out" >&2
    fail "redis-server under shoal exited $rc or reported a crash"
fi
echo "redis-server shut down cleanly"
shoal_was_loaded 2
