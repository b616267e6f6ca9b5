#!/usr/bin/env python3
"""Compiles every USAGE block of every gpumem header, as written.

usage: tools/check_usage.py OUTDIR [CC]      (run from the repository root)

A USAGE block starts at a comment line ` * USAGE...` (its heading may run on
over several lines of prose, and blank lines may follow it) and its code is
every line from the first one indented by at least two spaces inside the
comment, up to the next line of prose (indent of one) or the end of the
comment. A block with no code at all fails.
In the code:
  - lines starting with `#` are put at file scope, in their order;
  - `// given: T a, U b` names what the example takes from its caller: they
    become the parameters of the function the code is compiled in;
  - everything else is the body of that function (`int`, so `return st;`
    works), and must be C11 as it stands: prose is written as // comments.
Each block is compiled alone with CC (default cc) as C11 with the project's
warnings (unused names allowed: an example may declare what it only shows).
Exit 1 names the header and line of the first line of each block that fails.
"""
import os
import re
import subprocess
import sys

out_dir = sys.argv[1] if len(sys.argv) > 1 else "build/usage"
cc = sys.argv[2] if len(sys.argv) > 2 else "cc"
os.makedirs(out_dir, exist_ok=True)
for old in os.listdir(out_dir):  # a block renamed or removed leaves no stale file behind
    if old.endswith((".c", ".o")):
        os.remove(os.path.join(out_dir, old))
flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wno-unused-variable",
         "-Wno-unused-but-set-variable", "-Wno-unused-parameter", "-Wno-unused-function", "-I."]


def blocks(path):
    """(first line number, [(line number, code)]) for each USAGE block of a header."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if not re.match(r"\s\*\s+USAGE\b", lines[i]):
            i += 1
            continue
        start = i + 1
        i += 1
        # The heading may run on (prose, indent 1) and be followed by blank
        # lines; the code starts at the first line indented further.
        while i < len(lines) and re.match(r"\s\*( ?\S.*)?$", lines[i]) and "*/" not in lines[i]:
            i += 1
        code = []
        while i < len(lines):
            line = lines[i]
            if "*/" in line:
                break
            m = re.match(r"\s\*( *)(.*)$", line)
            if not m:
                break
            indent, text = len(m.group(1)), m.group(2)
            if text and indent < 2:  # prose: the block has ended
                break
            code.append((i + 1, text))
            i += 1
        yield start, code


failures = 0
count = 0
for header in sorted(h for h in os.listdir(".") if re.fullmatch(r"gpumem(_\w+)?\.h", h)):
    for n, (start, code) in enumerate(blocks(header)):
        count += 1
        if not [t for _, t in code if t]:
            failures += 1
            print(f"check_usage: {header}:{start}: a USAGE heading with no code under it", file=sys.stderr)
            continue
        # The body keeps the header's line numbers (one #line, a blank line
        # for each line hoisted out), so errors point into the header.
        top, body, given = [], [], ""
        for ln, text in code:
            m = re.match(r"//\s*given:\s*(.*)$", text)
            if m:
                given = m.group(1).strip()
                body.append("")
            elif text.startswith("#"):
                top.append(f'#line {ln} "{header}"\n{text}')
                body.append("")
            else:
                body.append("    " + text)
        src = "\n".join(top) + f"\n\nint gpumem_usage_example(void);\nstatic int example({given or 'void'}) {{\n"
        src += f'#line {code[0][0] if code else start} "{header}"\n'
        src += "\n".join(body) + "\n    return 0;\n}\nint gpumem_usage_example(void) { return (int)sizeof &example; }\n"
        name = os.path.join(out_dir, f"{header}.{n}.c")
        with open(name, "w", encoding="utf-8") as f:
            f.write(src)
        r = subprocess.run([cc] + flags + ["-c", name, "-o", name + ".o"], capture_output=True, text=True)
        if r.returncode != 0:
            failures += 1
            print(f"check_usage: {header}:{start}: the USAGE block does not compile as written "
                  f"(generated {name}):\n{r.stderr}", file=sys.stderr)
        else:
            print(f"check_usage: {header}:{start}: USAGE compiles")
if count == 0:
    sys.exit("check_usage: no USAGE block found: run from the repository root")
sys.exit(1 if failures else 0)
