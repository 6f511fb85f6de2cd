#!/usr/bin/env bash
# Install what building, testing and benchmarking shoal needs, on Debian
# or Ubuntu.  Installs only what is missing; does nothing when all is there.
#
#   scripts/deps.sh          everything: build, tests, benchmarks
#   scripts/deps.sh demo     what scripts/demo.sh runs: the build and the
#                            benchmarks, not the test tools
set -euo pipefail

build=(build-essential cmake ninja-build pkg-config  # build
       libck-dev liburcu-dev)                        # ConcurrencyKit, liburcu (headers)
bench=(python3 python3-matplotlib procps             # bench/run, its charts
       redis-server redis-tools                      # workload 9
       libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0)     # the peers
tests=(clang libclang-rt-14-dev                      # TSan, ASan, UBSan, libFuzzer
       libcmocka-dev                                 # unit tests
       git sqlite3                                   # real programs under shoal
       google-perftools graphviz                     # google-pprof reads heap profiles
       time valgrind                                 # measurement
       gdb                                           # backtraces of a hung fork child
       man-db)                                       # the manual pages (install test)
case "${1:-all}" in
  all) packages=("${build[@]}" "${bench[@]}" "${tests[@]}") ;;
  demo) packages=("${build[@]}" "${bench[@]}") ;;
  *) echo "usage: scripts/deps.sh [all|demo]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "shoal: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# Another apt (unattended upgrades, a second build) may hold the lock:
# wait for it rather than fail.
lock=(-o DPkg::Lock::Timeout=600)
$SUDO apt-get "${lock[@]}" update -qq
$SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
