#!/usr/bin/env bash
# userns.sh USERNS_CHECK - unshare(CLONE_NEWUSER) after allocating must
# work under shoal whenever it works without it (it needs a
# single-threaded process).  Skipped where user namespaces are not
# available at all (container, sysctl).
. "$(dirname "$0")/lib.sh"
check=$1
bounded 30 "$check" >"$work/glibc.out" 2>"$work/glibc.err" ||
    skip "user namespaces are not available here: $(tail -1 "$work/glibc.err")"
rc=0
with_shoal bounded 30 "$check" >"$work/shoal.out" 2>"$work/shoal.err" || rc=$?
[ $rc -eq 0 ] || { cat "$work/shoal.err" >&2; fail "unshare(CLONE_NEWUSER) fails under shoal (exit $rc)"; }
cat "$work/shoal.out"
shoal_was_loaded 1
