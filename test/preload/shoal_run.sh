#!/usr/bin/env bash
# shoal_run.sh LAUNCHER INTERPOSE_CHECK - the shoal-run launcher (the
# build-tree copy; install_package.sh runs the installed one):
# --help, --version, --library, preloading (interpose_check sees shoal),
# LD_PRELOAD prepended once, -o/--option/-s exporting SHOAL_* (and shoal
# acting on them), arguments and exit status passed through unchanged,
# errors for bad usage, and a launcher reached through a symbolic link.
set -euo pipefail
run=$1 check=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() {
    local want=$1 rc=0
    shift
    "$@" >"$work/out" 2>"$work/err" || rc=$?
    [ "$rc" -eq "$want" ] || { cat "$work/err" >&2; fail "'$*' exited $rc, expected $want"; }
}

expect_rc 0 "$run" --help
grep -q '^Usage: shoal-run' "$work/out" || fail "--help shows no usage"
grep -q 'SHOAL_PURGE_DELAY_MS' "$work/out" || fail "--help does not list the options"
expect_rc 0 "$run" --version
grep -q '^shoal-run (shoal) [0-9]' "$work/out" || fail "--version"
expect_rc 2 "$run"
grep -q '^Usage' "$work/err" || fail "no command: no usage on stderr"

lib=$("$run" --library)
[ -f "$lib" ] || fail "--library names $lib, which does not exist"

# The preload works: interpose_check finds shoal's symbols, counters, brk.
unset LD_PRELOAD
expect_rc 0 "$run" "$check" preload
cat "$work/out"

# LD_PRELOAD: shoal first, what was there after it, never twice.
out=$(LD_PRELOAD=/nonexistent/other.so "$run" sh -c 'printf %s "$LD_PRELOAD"' 2>/dev/null)
[ "$out" = "$lib:/nonexistent/other.so" ] || fail "LD_PRELOAD became '$out'"
out=$(LD_PRELOAD=$lib "$run" sh -c 'printf %s "$LD_PRELOAD"')
[ "$out" = "$lib" ] || fail "LD_PRELOAD with shoal already first became '$out'"

# Options: exported, and the library acts on them (statistics to a file).
out=$("$run" -o purge_delay_ms=123 -o STATS_JSON=0 --option=verbose=0 -s sh -c 'env' |
    grep '^SHOAL_' | sort | tr '\n' ' ')
[ "$out" = "SHOAL_PURGE_DELAY_MS=123 SHOAL_SHOW_STATS=1 SHOAL_STATS_JSON=0 SHOAL_VERBOSE=0 " ] ||
    fail "options exported as '$out'"
SHOAL_PREFAULT=0 "$run" sh -c 'test "$SHOAL_PREFAULT" = 0' || fail "SHOAL_* from the environment"
"$run" -s -o stats_file="$work/stats" true
grep -q 'statistics' "$work/stats" || fail "-s with -o stats_file=: no statistics written"
# -s with a program that closes stderr before it exits (coreutils do):
# the report still reaches the stderr the program was started with.
"$run" -s ls / >/dev/null 2>"$work/err" || fail "ls under shoal-run -s failed"
grep -q 'statistics' "$work/err" || fail "-s: no report from a program that closes stderr"
expect_rc 0 "$run" -o no_such_option=1 true
grep -q 'warning: NO_SUCH_OPTION' "$work/err" || fail "no warning for an unknown option"
expect_rc 127 "$run" -o novalue true
expect_rc 127 "$run" --no-such-flag true

# Arguments and exit status pass through.
out=$("$run" printf '[%s]' 'a b' '' "c'd" '$HOME')
[ "$out" = "[a b][][c'd][\$HOME]" ] || fail "arguments changed: $out"
expect_rc 7 "$run" sh -c 'exit 7'
expect_rc 0 "$run" -- sh -c 'exit 0'
expect_rc 127 "$run" /nonexistent/command

# --profile: the command keeps standard input; a relative directory is
# made absolute (a command that changes directory still writes there);
# TERM sent to the launcher goes on to the command, whose status comes
# back.
out=$(echo hi | "$run" --profile="$work/p1" sh -c 'read x; echo "[$x]"' 2>/dev/null)
[ "$out" = "[hi]" ] || fail "--profile: the command read '$out', not its input"
(cd "$work" && "$run" --profile=rel sh -c 'cd / && exec ls >/dev/null') 2>"$work/err" ||
    fail "--profile=rel: exit status"
ls "$work"/rel/*.leaks.heap >/dev/null 2>&1 || { cat "$work/err" >&2; fail "--profile=rel: no leak report after a chdir"; }
grep -q "heap profiles in $work/rel" "$work/err" || fail "--profile=rel: not named absolute"
"$run" --profile="$work/p2" sh -c 'trap "exit 3" TERM; echo up; sleep 20 & wait' >"$work/out" 2>/dev/null &
launcher=$!
for _ in $(seq 100); do grep -q up "$work/out" && break; sleep 0.1; done
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
[ "$rc" -eq 3 ] || fail "--profile: TERM to the launcher gave status $rc, not the command's 3"
expect_rc 127 "$run" --profile= true

# Through a symbolic link (as from /usr/local/bin).
mkdir "$work/bin"
ln -s "$run" "$work/bin/shoal-run"
[ "$("$work/bin/shoal-run" --library)" = "$lib" ] || fail "through a symlink: wrong library"
echo "shoal-run: ok"
