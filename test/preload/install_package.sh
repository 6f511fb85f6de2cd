#!/usr/bin/env bash
# install_package.sh CMAKE BUILD_DIR CONSUMER_DIR CC GENERATOR
#
# Installs the build into a temporary prefix, moves the installed tree
# somewhere else (it must not depend on where it was installed), and
# then uses it as another project would:
#   - the files are there: header, libshoal.so with its soname links,
#     libshoal.a, shoal.pc, shoal-static.pc, the CMake package, shoal-run,
#     the manual pages (which must render without warnings);
#   - pkg-config: a program built with `pkg-config --cflags --libs shoal`
#     links libshoal.so, one built with shoal-static links libshoal.a;
#   - find_package(shoal): a CMake project links shoal::shoal and
#     shoal::shoal_static;
#   - each program checks that shoal is its allocator (consumer/main.c);
#   - the installed shoal-run preloads the installed library.
set -euo pipefail
cmake=$1 build=$2 consumer=$3 cc=$4 generator=${5:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/shoal-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$cmake" --install "$build" --prefix "$work/stage/usr" >"$work/install.log" ||
    { cat "$work/install.log" >&2; fail "cmake --install failed"; }
mv "$work/stage/usr" "$work/moved"
p=$work/moved

pc=$(find "$p" -name shoal.pc -path '*/pkgconfig/*' | head -1)
[ -n "$pc" ] || fail "no shoal.pc installed"
libdir=$(dirname "$(dirname "$pc")")
for f in include/shoal.h bin/shoal-run share/man/man3/shoal.3 share/man/man1/shoal-run.1; do
    [ -f "$p/$f" ] || fail "$f not installed"
done
# The manual pages render, without warnings, and name this version.
for page in share/man/man3/shoal.3 share/man/man1/shoal-run.1; do
    out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p/$page" 2>&1 >/dev/null) ||
        fail "man $page failed"
    [ -z "$out" ] || fail "man $page warns: $out"
    grep -q "\"shoal [0-9]" "$p/$page" || fail "$page names no version"
done
for f in libshoal.so libshoal.so.0 libshoal.a pkgconfig/shoal-static.pc \
         cmake/shoal/shoal-config.cmake cmake/shoal/shoal-config-version.cmake \
         cmake/shoal/shoal-targets.cmake; do
    [ -e "$libdir/$f" ] || fail "${libdir#$p/}/$f not installed"
done
[ -L "$libdir/libshoal.so" ] && [ -L "$libdir/libshoal.so.0" ] ||
    fail "libshoal.so and libshoal.so.0 should be symbolic links"
[ -x "$p/bin/shoal-run" ] || fail "bin/shoal-run is not executable"
soname=$(readelf -d "$libdir/libshoal.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libshoal.so.0 ] || fail "soname is '$soname', not libshoal.so.0"
echo "installed: $(cd "$p" && find . -type f -o -type l | sort | tr '\n' ' ')"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

# ---- pkg-config ----------------------------------------------------------
if command -v pkg-config >/dev/null; then
    export PKG_CONFIG_PATH=$libdir/pkgconfig
    version=$(pkg-config --modversion shoal)
    major=$(sed -n 's/^#define SHOAL_VERSION_MAJOR \([0-9]*\).*/\1/p' "$p/include/shoal.h")
    minor=$(sed -n 's/^#define SHOAL_VERSION_MINOR \([0-9]*\).*/\1/p' "$p/include/shoal.h")
    case $version in
    "$major.$minor" | "$major.$minor".*) ;;
    *) fail "shoal.pc says version $version, shoal.h $major.$minor" ;;
    esac
    flags=$(pkg-config --cflags --libs shoal)
    case " $flags " in *" -lshoal "*) ;; *) fail "pkg-config --libs shoal gives '$flags'" ;; esac
    # shellcheck disable=SC2086
    "$cc" -Wall -Wextra -o "$work/pc_shared" "$consumer/main.c" $flags -Wl,-rpath,"$libdir"
    needed "$work/pc_shared" | grep -qx libshoal.so.0 || fail "pc_shared does not need libshoal.so.0"
    "$work/pc_shared" || fail "the pkg-config (shared) program does not run on shoal"
    # shellcheck disable=SC2086
    "$cc" -Wall -Wextra -o "$work/pc_static" "$consumer/main.c" \
        $(pkg-config --cflags --libs shoal-static)
    ! needed "$work/pc_static" | grep -q libshoal || fail "pc_static needs libshoal.so"
    "$work/pc_static" || fail "the pkg-config (static) program does not run on shoal"
    echo "pkg-config: ok"
else
    fail "pkg-config is not installed (scripts/deps.sh installs it)"
fi

# ---- find_package ----------------------------------------------------------
gen=()
[ -n "$generator" ] && gen=(-G "$generator")
"$cmake" -S "$consumer" -B "$work/consumer-build" "${gen[@]}" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE=Release >"$work/consumer.log" 2>&1 ||
    { cat "$work/consumer.log" >&2; fail "find_package(shoal) project did not configure"; }
grep -F "shoal 0." "$work/consumer.log" | grep -qF "$p/" ||
    { cat "$work/consumer.log" >&2; fail "find_package found a shoal other than the installed one"; }
"$cmake" --build "$work/consumer-build" >>"$work/consumer.log" 2>&1 ||
    { cat "$work/consumer.log" >&2; fail "find_package(shoal) project did not build"; }
needed "$work/consumer-build/consumer_shared" | grep -qx libshoal.so.0 ||
    fail "consumer_shared does not need libshoal.so.0"
! needed "$work/consumer-build/consumer_static" | grep -q libshoal ||
    fail "consumer_static needs libshoal.so"
"$work/consumer-build/consumer_shared" || fail "shoal::shoal program does not run on shoal"
"$work/consumer-build/consumer_static" || fail "shoal::shoal_static program does not run on shoal"
echo "find_package: ok"

# ---- the installed launcher ----------------------------------------------------
lib=$("$p/bin/shoal-run" --library)
[ "$lib" = "$(cd "$libdir" && pwd -P)/libshoal.so.0" ] || fail "shoal-run would preload '$lib'"
maps=$("$p/bin/shoal-run" sh -c 'cat /proc/$$/maps')
grep -q "$(readlink -f "$libdir/libshoal.so.0")" <<<"$maps" ||
    fail "the installed shoal-run did not preload the installed library"
"$p/bin/shoal-run" --help | grep -q '^Usage: shoal-run' || fail "shoal-run --help"
echo "shoal-run: ok"
