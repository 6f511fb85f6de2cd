# lib.sh - sourced by the real-program tests.
#
# Each test runs a workload twice, once with the C library's malloc and
# once with shoal preloaded, and compares what the two runs printed.  A
# run under shoal must also show that shoal really was in the processes
# (the dynamic linker only warns and carries on when it cannot preload a
# library): every process started with SHOAL_SHOW_STATS=1 appends a
# statistics report to $work/shoal-stats when it exits.
#
# Environment: TEST_SHOAL_LIB, the absolute path of libshoal.so (set by ctest);
# TEST_SHOAL_KEEP_WORK=1 keeps the work directory (its path is printed).

set -euo pipefail
export LC_ALL=C TZ=UTC
# Both runs start from the same clean environment: no preload and no
# shoal options of the caller's.
unset LD_PRELOAD
for v in $(compgen -e); do
    case $v in
    TEST_SHOAL_LIB | TEST_SHOAL_KEEP_WORK) ;;
    SHOAL_*) unset "$v" ;;
    esac
done

: "${TEST_SHOAL_LIB:?TEST_SHOAL_LIB must be the absolute path of libshoal.so}"
[ -f "$TEST_SHOAL_LIB" ] || { echo "FAIL: $TEST_SHOAL_LIB does not exist" >&2; exit 1; }
case $TEST_SHOAL_LIB in
/*) ;;
*) echo "FAIL: TEST_SHOAL_LIB must be an absolute path" >&2; exit 1 ;;
esac

test_name=$(basename "$0" .sh)
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-$test_name.XXXXXX")
cleanup_hooks=()
cleanup() {
    local h
    for h in "${cleanup_hooks[@]}"; do eval "$h" || true; done
    if [ -n "${TEST_SHOAL_KEEP_WORK:-}" ]; then
        echo "work directory kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

skip() {
    echo "SKIP: $*"
    exit 77
}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# need PROGRAM...: skip the test (with the reason) when one is missing.
need() {
    local c
    for c; do
        command -v "$c" >/dev/null 2>&1 ||
            skip "$c is not installed (scripts/deps.sh installs it)"
    done
}

# with_shoal CMD...: CMD and everything it starts, with shoal preloaded.
with_shoal() {
    LD_PRELOAD="$TEST_SHOAL_LIB${LD_PRELOAD:+:$LD_PRELOAD}" SHOAL_SHOW_STATS=1 \
        SHOAL_STATS_FILE="$work/shoal-stats" "$@"
}

# bounded SECONDS CMD...: CMD, killed if it runs longer (exit 124).
bounded() {
    local t=$1
    shift
    timeout -k 5 "$t" "$@"
}

# run_both NAME SECONDS CMD...: run CMD without and with shoal; stdout to
# $work/NAME.glibc.out and $work/NAME.shoal.out (stderr to .err), then
# compare the outputs byte for byte.
run_both() {
    local name=$1 t=$2 rc
    shift 2
    rc=0
    bounded "$t" "$@" >"$work/$name.glibc.out" 2>"$work/$name.glibc.err" || rc=$?
    [ $rc -eq 0 ] || { tail -20 "$work/$name.glibc.err" >&2; fail "$name without shoal exited $rc"; }
    rc=0
    with_shoal bounded "$t" "$@" >"$work/$name.shoal.out" 2>"$work/$name.shoal.err" || rc=$?
    if [ $rc -ne 0 ]; then
        tail -20 "$work/$name.shoal.err" >&2
        [ $rc -eq 124 ] && fail "$name under shoal did not finish in $t s"
        fail "$name under shoal exited $rc"
    fi
    check_no_shoal_messages "$work/$name.shoal.err" "$name"
    compare "$work/$name.glibc.out" "$work/$name.shoal.out" "$name"
}

# compare EXPECTED ACTUAL WHAT
compare() {
    if ! cmp -s "$1" "$2"; then
        echo "--- without shoal / +++ with shoal ($3):" >&2
        diff -u "$1" "$2" | head -40 >&2 || true
        fail "$3: output differs under shoal"
    fi
    [ -s "$1" ] || fail "$3: produced no output at all"
    echo "$3: same output with and without shoal ($(wc -c <"$1") bytes)"
}

# Warnings or errors shoal printed (a fault in warn mode, a bad option).
check_no_shoal_messages() {
    if grep -q '^shoal: ' "$1"; then
        grep '^shoal: ' "$1" | head -5 >&2
        fail "$2: shoal reported problems"
    fi
}

# shoal_was_loaded MIN: at least MIN processes under shoal wrote their
# report; prints the count.
shoal_was_loaded() {
    local n=0
    [ -f "$work/shoal-stats" ] && n=$(grep -c '^shoal.*statistics' "$work/shoal-stats" || true)
    [ "$n" -ge "$1" ] ||
        fail "only $n processes ran with shoal (expected at least $1): was it preloaded?"
    echo "shoal was loaded in $n processes"
}
