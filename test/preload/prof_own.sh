#!/usr/bin/env bash
# prof_own.sh PROF_OWN - a program that frees all it allocates leaves an
# empty leak report, also when shoal starts its purger thread (whose
# TLS table the C library allocates inside shoal's malloc) while every
# allocation is sampled.
. "$(dirname "$0")/lib.sh"
prog=$1
mkdir "$work/p"
SHOAL_PROF=1 SHOAL_PROF_SAMPLE=64 SHOAL_PROF_LEAKS=1 SHOAL_PURGE_THREAD=always \
    SHOAL_PURGE_DELAY_MS=10 SHOAL_PROF_PREFIX="$work/p/own" \
    with_shoal bounded 60 "$prog" >"$work/out" 2>"$work/err" || { cat "$work/err" >&2; fail "exit status"; }
cat "$work/out"
pid=$(sed -n 's/^prof_own: pid \([0-9]*\),.*/\1/p' "$work/out")
report=$work/p/own.$pid.leaks.heap
[ -n "$pid" ] && [ -f "$report" ] || fail "no leak report of the program"
head -1 "$report"
read -r _ _ objs bytes _ < <(head -1 "$report" | tr -d ':[]')
[ "$objs" = 0 ] && [ "$bytes" = 0 ] ||
    { cat "$report" >&2; fail "the leak report holds $objs blocks, $bytes bytes: none was leaked"; }
shoal_was_loaded 2         # the program and timeout
