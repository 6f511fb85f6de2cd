#!/usr/bin/env bash
# Install what building, testing and benchmarking shoal needs, on Debian
# or Ubuntu.  Installs only what is missing; does nothing when all is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config     # build
  clang libclang-rt-14-dev                         # TSan, ASan, UBSan, libFuzzer
  libck-dev liburcu-dev libcmocka-dev              # ConcurrencyKit, liburcu, unit tests
  python3 git sqlite3 redis-server redis-tools     # real programs under shoal
  libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 # benchmark peers
  time procps valgrind python3-matplotlib          # measurement, charts
  man-db                                           # the manual pages (install test)
)

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
