#!/usr/bin/env bash
# pg_backend_memory.sh [LIB...] - the memory of one PostgreSQL backend
# that runs a big sort, a hash join and a count(DISTINCT), then waits for
# its next query: its peak (VmHWM, shared buffers included) and its
# anonymous memory (RssAnon) 4 s into the wait, with its thread count,
# under each allocator given (a library to LD_PRELOAD, or "glibc"),
# by default shoal (build/libshoal.so), glibc, jemalloc, mimalloc and
# tcmalloc as Debian installs them.  The figures in docs/options.md and
# docs/design.md come from it.  Needs PostgreSQL 15 (Debian's
# postgresql-15) and root, to run the server as the postgres user; a
# private cluster in a temporary directory, on a private socket.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=/usr/lib/postgresql/15/bin
[ -x "$bin/postgres" ] || { echo "pg_backend_memory: needs postgresql-15" >&2; exit 77; }
[ "$(id -u)" = 0 ] || { echo "pg_backend_memory: run as root (the server runs as postgres)" >&2; exit 77; }
libs=("$@")
if [ ${#libs[@]} -eq 0 ]; then
    d=/usr/lib/x86_64-linux-gnu
    libs=("$root/build/libshoal.so" glibc "$d/libjemalloc.so.2" "$d/libmimalloc.so.2"
          "$d/libtcmalloc_minimal.so.4")
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-pg.XXXXXX")
chown postgres "$work"
port=$((20000 + RANDOM % 20000))
as_pg() { runuser -u postgres -- env ${preload:+LD_PRELOAD=$preload} "$@"; }
stop() { as_pg "$bin/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null 2>&1 || true; }
trap 'stop; rm -rf "$work"' EXIT

cat >"$work/q.sql" <<'EOF'
SELECT pg_backend_pid() AS pid \gset
SET work_mem = '256MB';
SELECT md5(string_agg(x::text, ',')) FROM (SELECT abalance::text || aid AS x FROM pgbench_accounts ORDER BY abalance, aid) s;
SELECT count(*), sum(a.abalance + b.abalance) FROM pgbench_accounts a JOIN pgbench_accounts b ON a.aid = b.aid + 1;
SELECT count(DISTINCT filler || aid) FROM pgbench_accounts;
\setenv PID :pid
\! grep VmHWM /proc/$PID/status; sleep 4; grep -E 'RssAnon|Threads' /proc/$PID/status
EOF
printf '%-28s %12s %14s %8s\n' allocator "VmHWM (MB)" "idle anon (MB)" threads
for lib in "${libs[@]}"; do
    preload=$lib
    [ "$lib" = glibc ] && preload=
    [ -z "$preload" ] || [ -e "$preload" ] || { echo "pg_backend_memory: no $preload" >&2; continue; }
    rm -rf "$work/data"
    as_pg "$bin/initdb" -D "$work/data" -A trust -U postgres >/dev/null
    printf "port=%d\nunix_socket_directories='%s'\nlisten_addresses=''\n" "$port" "$work" \
        >>"$work/data/postgresql.conf"
    as_pg "$bin/pg_ctl" -D "$work/data" -l "$work/log" -w start >/dev/null
    as_pg "$bin/pgbench" -h "$work" -p "$port" -i -s 10 postgres >/dev/null 2>&1
    out=$(as_pg "$bin/psql" -h "$work" -p "$port" -d postgres -X -q -A -t -f "$work/q.sql")
    stop
    awk -v name="$(basename "$lib")" '
        /^VmHWM/ { hwm = $2 } /^RssAnon/ { anon = $2 } /^Threads/ { thr = $2 }
        END { printf "%-28s %12.0f %14.1f %8s\n", name, hwm / 1024, anon / 1024, thr }' <<<"$out"
done
