#!/usr/bin/env bash
# prof_pprof.sh LAUNCHER PROGRAM - heap profiles as google-pprof reads
# them: `shoal-run --profile` runs prof_sites, whose exit profile
# google-pprof --text must credit 60/30/10% to its three live sites
# (within six points; at a mean of 64 KiB between samples, some 3,200
# samples give a standard deviation of about one point - at the default
# 512 KiB it is three, too close to the bound for a test) and nothing
# to the site that freed its blocks; --svg must draw the call graph; the
# launcher must say where the profile is.  Skipped (77) without
# google-pprof or graphviz (scripts/deps.sh installs both).
set -euo pipefail
run=$1 prog=$2
command -v google-pprof >/dev/null && command -v dot >/dev/null || exit 77
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-prof.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

SHOAL_PROF_SAMPLE=64k "$run" --profile="$work/p" "$prog" >"$work/out" 2>"$work/err" ||
    fail "exit status $?"
grep -q 'prof_sites: done' "$work/out" || fail "the program's output"
grep -q "heap profiles in $work/p" "$work/err" || { cat "$work/err"; fail "no word of the profiles"; }
grep -q "google-pprof --text $prog" "$work/err" || fail "no google-pprof command"
profile=$(ls "$work"/p/prof_sites.*.leaks.heap)
[ "$(echo "$profile" | wc -l)" -eq 1 ] || fail "one process, yet profiles $profile"

google-pprof --text "$prog" "$profile" >"$work/text" 2>/dev/null
cat "$work/text"
# Lines: flat MB, flat%, sum%, cum MB, cum%, function.
share() { awk -v f="$1" '$6 == f { sub("%", "", $2); print $2 }' "$work/text"; }
check() {
    local got
    got=$(share "$1")
    [ -n "$got" ] || fail "$1 is not in the profile"
    awk -v g="$got" -v w="$2" 'BEGIN { exit !(g >= w - 6 && g <= w + 6) }' ||
        fail "$1 holds $got% of the profile, expected $2% +- 6"
}
check site_sixty 60
check site_thirty 30
check site_ten 10
[ -z "$(share site_freed)" ] || fail "site_freed freed everything, yet holds $(share site_freed)%"

google-pprof --svg "$prog" "$profile" >"$work/graph.svg" 2>/dev/null
grep -q '<svg' "$work/graph.svg" && grep -q 'site_sixty' "$work/graph.svg" ||
    fail "google-pprof --svg drew no call graph"
echo "prof_pprof: google-pprof reads shoal's profiles"
