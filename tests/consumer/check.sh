#!/bin/sh
# SPDX-License-Identifier: MIT
# check.sh (make install-test): install gpumem into a fresh prefix under a
# temporary directory, build tests/consumer outside the tree every way a user
# would - plain Makefile with pkg-config, CMake find_package, add_subdirectory
# and FetchContent - as C11 and C++17 (built and run) and CUDA (compiled, when
# NVCC is set); build README's pkg-config and CMake lines as written
# (tests/consumer/readme.sh); then uninstall and require that no file is left
# in the prefix.
# Run from the top of the gpumem tree. NVCC, CUDA_ARCH: from the Makefile.
set -eu
repo=$(pwd)
tmp=$(mktemp -d /tmp/gpumem-install-test.XXXXXX)
prefix=$tmp/prefix
NVCC=${NVCC:-}
CUDA_ARCH=${CUDA_ARCH:-sm_90}
version=$(sed -n 's/^#define GPUMEM_VERSION_STRING "\(.*\)"/\1/p' gpumem.h)
log=$tmp/log
fail() { echo "install-test: FAILED: $*" >&2; echo "  (log: $log, files: $tmp)" >&2; exit 1; }
# quiet: run a step with its output in the log, shown only if it fails.
quiet() { "$@" >>"$log" 2>&1 || { tail -n 40 "$log" >&2; fail "$*"; }; }

make --no-print-directory install PREFIX="$prefix" >"$log" 2>&1 || { cat "$log" >&2; fail "make install"; }
echo "install-test: installed into $prefix: $(cd "$prefix" && find . -type f | sort | tr '\n' ' ')"

# The consumer's sources: README's quickstart program as C, C++ and CUDA, in a
# directory of their own so nothing of the tree is on an include path.
src=$tmp/consumer
mkdir -p "$src"
cp tests/consumer/CMakeLists.txt tests/consumer/Makefile "$src/"
for ext in c cpp cu; do cp examples/hello.c "$src/hello.$ext"; done

run_both() { # run the C and C++ programs a build made in $1
    for p in hello_c hello_cxx; do
        out=$("$1/$p") || fail "$1/$p exited non-zero"
        case $out in *"hello from block 7"*) ;; *) fail "$1/$p printed: $out" ;; esac
    done
}

# 1. plain Makefile + pkg-config
got=$(PKG_CONFIG_PATH="$prefix/share/pkgconfig" pkg-config --modversion gpumem) || fail "pkg-config finds no gpumem"
[ "$got" = "$version" ] || fail "pkg-config says version $got, gpumem.h says $version"
cp -r "$src" "$tmp/pc"
PKG_CONFIG_PATH="$prefix/share/pkgconfig" quiet make -C "$tmp/pc" NVCC="$NVCC" CUDA_ARCH="$CUDA_ARCH"
run_both "$tmp/pc"
echo "install-test: pkg-config + Makefile: C11, C++17 built and ran${NVCC:+, CUDA compiled}"

# Every header of the tree is installed, and each compiles alone from the
# prefix (with its implementation), so a header left out of the Makefile's
# HEADERS, or one that reaches for a file that is not installed, fails here.
cflags=$(PKG_CONFIG_PATH="$prefix/share/pkgconfig" pkg-config --cflags gpumem)
for h in $(cd "$repo" && ls gpumem*.h); do
    [ -f "$prefix/include/$h" ] || fail "$h is in the tree but make install did not install it"
    printf '#define _POSIX_C_SOURCE 200809L\n#define GPUMEM_IMPLEMENTATION\n#include <%s>\nint main(void) { return 0; }\n' \
        "$h" > "$tmp/alone.c"
    # shellcheck disable=SC2086 # cflags is a list of words
    quiet cc -std=c11 -Wall -Wextra -Werror $cflags -c "$tmp/alone.c" -o "$tmp/alone.o"
done
echo "install-test: every header installed and compiled alone from the prefix: $(cd "$repo" && ls gpumem*.h | tr '\n' ' ')"

# 2-4. CMake, three ways to get gpumem::gpumem
cuda_args=
if [ -n "$NVCC" ]; then
    cuda_args="-DGPUMEM_CONSUMER_CUDA=ON -DCMAKE_CUDA_COMPILER=$NVCC -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH#sm_}"
fi
# The tarball FetchContent downloads: make dist's (DIST, from the Makefile).
dist=$repo/${DIST:?the Makefile sets DIST, the tarball of make dist}
[ -f "$dist" ] || fail "no $dist: make dist first"
for mode in find_package subdirectory fetchcontent; do
    b=$tmp/build-$mode
    # shellcheck disable=SC2086 # cuda_args is a list of words
    quiet cmake -S "$src" -B "$b" -DGPUMEM_MODE=$mode -DGPUMEM_VERSION_WANTED="$version" \
        -DCMAKE_PREFIX_PATH="$prefix" -DGPUMEM_SOURCE_DIR="$repo" -DGPUMEM_URL="file://$dist" $cuda_args
    quiet cmake --build "$b"
    run_both "$b"
    echo "install-test: CMake $mode: gpumem::gpumem; C11, C++17 built and ran${NVCC:+, CUDA compiled}"
done
# README's own lines, as written (tests/consumer/readme.sh).
sh tests/consumer/readme.sh "$prefix" "$tmp" "$dist"

# find_package must refuse a version this is not (a newer minor).
next=$(echo "$version" | awk -F. '{print $1 "." $2 + 1}')
if cmake -S "$src" -B "$tmp/build-newer" -DGPUMEM_VERSION_WANTED="$next" -DCMAKE_PREFIX_PATH="$prefix" \
    >>"$log" 2>&1; then fail "find_package(gpumem $next) accepted version $version"; fi
echo "install-test: find_package(gpumem $next) refused, as it should be"

quiet make --no-print-directory uninstall PREFIX="$prefix"
left=$(cd "$prefix" && find . ! -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
left=$(cd "$prefix" && find . -name '*gpumem*')
[ -z "$left" ] || fail "make uninstall left: $left"
echo "install-test: make uninstall left no file in $prefix"
rm -rf "$tmp"
echo "install-test: ok"
