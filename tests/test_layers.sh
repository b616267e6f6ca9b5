#!/bin/sh
# The include-order check (tools/check_layers.py) on this tree, then on
# copies it must refuse: the old back-edge (the cache including the tier at
# its end), a header missing from the documented order; and one it must
# accept: the same back-edge listed as a documented exception.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # expect(0|1) what
    python3 "$tmp/tools/check_layers.py" "$tmp" > "$tmp/out" 2>&1
    rc=$?
    if [ "$rc" -ne "$1" ]; then
        echo "test_layers: $2: exit $rc, expected $1"; cat "$tmp/out"; fail=1
    elif [ -n "${3:-}" ] && ! grep -q "$3" "$tmp/out"; then
        echo "test_layers: $2: the message does not say '$3'"; cat "$tmp/out"; fail=1
    else
        echo "test_layers: $2: ok"
    fi
}
fresh() {
    rm -rf "$tmp/t" && mkdir -p "$tmp/docs" "$tmp/tools"
    cp "$root"/gpumem*.h "$tmp/" && cp "$root/docs/headers.md" "$tmp/docs/" && cp "$root/tools/check_layers.py" "$tmp/tools/"
}
fresh
check 0 "this tree"
printf '#include "gpumem_tier.h"\n' >> "$tmp/gpumem_cache.h"
check 1 "gpumem_cache.h including gpumem_tier.h" "gpumem_cache.h:[0-9]*: includes gpumem_tier.h"
sed -i 's|check_layers: exceptions begin -->|&\n- gpumem_cache.h -> gpumem_tier.h: a test of the exception list|' "$tmp/docs/headers.md"
check 0 "the same edge, documented as an exception"
fresh
printf '/* SPDX-License-Identifier: MIT */\n#include "gpumem.h"\n' > "$tmp/gpumem_extra.h"
check 1 "a header missing from the order" "gpumem_extra.h: not in the documented order"
exit $fail
