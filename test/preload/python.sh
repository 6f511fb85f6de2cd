#!/usr/bin/env bash
# python.sh dicts|threads - CPython under shoal: a JSON- and dict-heavy
# script, or a threaded one (queues between threads, a thread pool,
# fork and subprocess from a threaded process).  The output (digests and
# counts, deterministic) must match the run without shoal, and the
# script checks from inside that shoal is (or is not) the allocator.
. "$(dirname "$0")/lib.sh"
here=$(cd "$(dirname "$0")" && pwd)
kind=${1:?usage: python.sh dicts|threads}

need python3
# The real interpreter, not a wrapper script (pyenv shims are bash).
py=$(python3 -c 'import sys; print(sys.executable)')
[ -x "$py" ] || skip "cannot find the python3 executable"
export PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1

script="$here/py_$kind.py"
[ -f "$script" ] || fail "no $script"

rc=0
bounded 60 "$py" "$script" glibc >"$work/glibc.out" 2>"$work/glibc.err" || rc=$?
[ $rc -eq 0 ] || { cat "$work/glibc.err" >&2; fail "python3 without shoal exited $rc"; }
rc=0
with_shoal bounded 60 "$py" "$script" shoal >"$work/shoal.out" 2>"$work/shoal.err" || rc=$?
[ $rc -eq 0 ] || { cat "$work/shoal.err" >&2; fail "python3 under shoal exited $rc"; }
check_no_shoal_messages "$work/shoal.err" "python3 $kind"
compare "$work/glibc.out" "$work/shoal.out" "python3 $kind"
shoal_was_loaded 1
