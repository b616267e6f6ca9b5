#!/usr/bin/env python3
"""Checks that no gpumem header includes one above it in docs/headers.md's order.

usage: tools/check_layers.py [ROOT]     (ROOT: the repository root, default .)

Exit 0: every edge points down the list (or is a documented exception).
Exit 1: an edge points up, a header is missing from the list, or the list is
unreadable; each problem is named with the file and line.
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
doc_path = os.path.join(root, "docs", "headers.md")
problems = []


def section(lines, name):
    """The lines between the check_layers markers `name begin` and `name end`."""
    begin = end = None
    for i, line in enumerate(lines):
        if f"check_layers: {name} begin" in line:
            begin = i
        elif f"check_layers: {name} end" in line:
            end = i
    if begin is None or end is None or end < begin:
        sys.exit(f"{doc_path}: the markers 'check_layers: {name} begin/end' are missing")
    return [(n + 1, lines[n]) for n in range(begin + 1, end)]


try:
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read().split("\n")
except OSError as e:
    sys.exit(f"{doc_path}: cannot read the documented order: {e.strerror}")

order = {}
for n, line in section(doc, "order"):
    m = re.match(r"\s*\d+\.\s+`([\w.]+\.h)`", line)
    if m:
        order[m.group(1)] = len(order)
    elif line.strip():
        sys.exit(f"{doc_path}:{n}: expected '<number>. `header.h` - what', found {line.strip()!r}")

allowed = set()
for n, line in section(doc, "exceptions"):
    m = re.match(r"\s*-\s+`?([\w.]+\.h)`?\s*->\s*`?([\w.]+\.h)`?\s*:", line)
    if m:
        allowed.add((m.group(1), m.group(2)))
    elif line.strip():
        sys.exit(f"{doc_path}:{n}: expected '- A.h -> B.h: why', found {line.strip()!r}")

headers = sorted(h for h in os.listdir(root) if re.fullmatch(r"gpumem(_\w+)?\.h", h))
for h in headers:
    if h not in order:
        problems.append(f"{h}: not in the documented order ({doc_path}): add it where it belongs")
        continue
    with open(os.path.join(root, h), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r'\s*#\s*include\s+"(gpumem(?:_\w+)?\.h)"', line)
            if not m:
                continue
            inc = m.group(1)
            if inc not in order:
                problems.append(f"{h}:{n}: includes {inc}, which is not in the documented order")
            elif order[inc] >= order[h] and (h, inc) not in allowed:
                problems.append(f"{h}:{n}: includes {inc}, which comes after it in {doc_path} "
                                f"(a header may include only those listed before it)")

for p in problems:
    print(f"check_layers: {p}", file=sys.stderr)
if problems:
    sys.exit(1)
print(f"check_layers: {len(headers)} headers, every include points down the documented order")
