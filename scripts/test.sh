#!/usr/bin/env bash
# The whole test suite: installs what it needs (Debian), builds shoal with
# gcc and runs every test, then builds it with clang's ThreadSanitizer and
# runs the tests again (through the alloc_* API: TSan owns malloc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=$(nproc)
echo "== shoal: release build (gcc)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure --timeout 600

echo "== shoal: benchmark suite, smoke mode (no timing is checked)"
bench/run --smoke --no-install --no-charts --out build/bench-smoke

echo "== shoal: ThreadSanitizer build (clang)"
CC=clang cmake -S . -B build-tsan -G Ninja -DSHOAL_SANITIZE=thread \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-tsan -j"$jobs"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/test/tsan.supp" \
  ctest --test-dir build-tsan --output-on-failure --timeout 900

# AddressSanitizer and UndefinedBehaviorSanitizer builds of the unit tests
# (the fork and stress programs run in the two builds above); the ASan
# build also runs the libFuzzer harness for a bounded time.
for san in address undefined; do
  echo "== shoal: ${san} sanitizer build of the unit tests (clang)"
  fuzz=OFF
  [ "$san" = address ] && fuzz=ON
  CC=clang cmake -S . -B "build-$san" -G Ninja -DSHOAL_SANITIZE="$san" -DSHOAL_FUZZ="$fuzz" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "build-$san" -j"$jobs"
  ASAN_OPTIONS="halt_on_error=1 detect_leaks=1" \
  UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 suppressions=$PWD/test/ubsan.supp" \
    ctest --test-dir "build-$san" --output-on-failure --timeout 900 -LE "drop_in|stress"
done
