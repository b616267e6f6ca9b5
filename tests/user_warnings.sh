#!/bin/sh
# SPDX-License-Identifier: MIT
# user_warnings.sh (make user-warnings, part of make test): a user's file, as
# gpumem_cache.h's USAGE block writes it, that gets and puts 1-, 2-, 4-, 8-
# and 16-byte elements through gpumem_cache_ref_get/_put, built by every C
# and C++ compiler here at -O0..-O3 with -Wall -Wextra -Werror, and run. Every
# USAGE block uses double, so the header checks never built a 4-byte get: GCC
# 12 at -O2 failed it inside gpumem_copy_value (-Warray-bounds, issue 45).
# Usage: sh tests/user_warnings.sh BUILD_DIR   (exit 1 on a warning or a wrong value)
set -eu
out=${1:-build}/user-warnings
mkdir -p "$out"
src=$out/user.c
cat > "$src" <<'C'
#define _POSIX_C_SOURCE 200809L
#define GPUMEM_IMPLEMENTATION
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpumem_cache.h"

typedef struct pair16 {
    uint64_t lo, hi;
} pair16;

/* One get and one put of each element size, as separate functions that the
 * compiler inlines the header into (which is where the warning was). */
#define ROUND_TRIP(T, name)                                                         \
    void put_##name(gpumem_cache_ref *r, uint64_t i, T x) { gpumem_cache_ref_put(r, i, &x); } \
    T get_##name(gpumem_cache_ref *r, uint64_t i) {                                  \
        T y;                                                                         \
        memset(&y, 0, sizeof y);                                                     \
        gpumem_cache_ref_get(r, i, &y);                                              \
        return y;                                                                    \
    }
ROUND_TRIP(unsigned char, u8)
ROUND_TRIP(uint16_t, u16)
ROUND_TRIP(uint32_t, u32)
ROUND_TRIP(uint64_t, u64)
ROUND_TRIP(pair16, p16)

static unsigned char data[1 << 16]; /* 16 lines of 4 KiB behind the cache */

static gpumem_cache_ref ref_of(gpumem_cache *c, gpumem_cache_array *a, uint32_t elem_bytes) {
    *a = gpumem_cache_array_make(c, elem_bytes, 0, sizeof data / elem_bytes);
    return gpumem_cache_ref_make(a);
}

int main(void) {
    gpumem_cache_desc d = gpumem_cache_desc_default();
    gpumem_cache *c;
    gpumem_cache_array a;
    gpumem_cache_ref r;
    pair16 p = {0x0102030405060708u, 0x1112131415161718u}, q;
    int bad = 0;
    d.n_lines = sizeof data / 4096;
    d.line_bytes = 4096;
    d.n_slots = 4;
    d.backing = gpumem_cache_backing_memory(data);
    if (gpumem_cache_create(&d, &c) != GPUMEM_OK) return 1;
#define CHECK(T, name, value, at)                                                   \
    r = ref_of(c, &a, sizeof(T));                                                    \
    put_##name(&r, at, value);                                                       \
    bad |= get_##name(&r, at) != (value);                                            \
    gpumem_cache_ref_drop(&r);
    CHECK(unsigned char, u8, 0xa5, 4097)
    CHECK(uint16_t, u16, 0xbeef, 3001)
    CHECK(uint32_t, u32, 0xdeadbeefu, 5000)
    CHECK(uint64_t, u64, 0x0123456789abcdefu, 7000)
    r = ref_of(c, &a, sizeof(pair16));
    put_p16(&r, 3000, p);
    q = get_p16(&r, 3000);
    bad |= q.lo != p.lo || q.hi != p.hi;
    gpumem_cache_ref_drop(&r);
    if (gpumem_cache_destroy(c) != GPUMEM_OK) return 1;
    if (bad) fprintf(stderr, "user_warnings: an element read back other than it was written\n");
    return bad;
}
C
n=0
for cc in gcc clang g++ clang++; do
    command -v "$cc" >/dev/null || { echo "user-warnings: $cc not found, skipped"; continue; }
    case $cc in *++) lang="-std=c++17 -x c++" ;; *) lang="-std=c11" ;; esac
    for o in -O0 -O1 -O2 -O3; do
        bin=$out/user-$cc$o
        # shellcheck disable=SC2086 # lang is a list of words
        if ! "$cc" $lang $o -Wall -Wextra -Werror -I. "$src" -o "$bin" -pthread 2>"$bin.log"; then
            grep -m 3 -E "error|warning" "$bin.log" || head -n 5 "$bin.log"
            echo "user-warnings: FAILED: $cc $o -Wall -Wextra -Werror on a user's get/put of 1..16-byte elements"
            echo "  (source $src, log $bin.log)"
            exit 1
        fi
        "$bin" || { echo "user-warnings: FAILED: $bin (built by $cc $o) read back other values"; exit 1; }
        n=$((n + 1))
    done
done
echo "user-warnings: $n builds (gcc, clang, g++, clang++ at -O0..-O3, -Wall -Wextra -Werror) of a user's 1-, 2-, 4-, 8-, 16-byte get/put: no warning, every value read back"
