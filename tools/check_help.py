#!/usr/bin/env python3
"""`make help` says the truth about the Makefile (make test runs this).

    tools/check_help.py Makefile

Every target the HELP text names (`make NAME`, and `| NAME` after one) must
be in the Makefile's one .PHONY rule, and every .PHONY target must be named
in HELP unless it is a step of another target (INTERNAL below, each with
why). Exit 1 naming each mismatch; the Makefile must also hold exactly one
.PHONY rule.
"""
import re
import sys

INTERNAL = {
    "all": "the default goal, the same as test",
    "deps-test": "make test's first step: installs what the suite needs",
    "cuda-compile": "a step of make test (every CUDA source compiled)",
    "run-tests": "a step of make test and make asan (the test programs)",
    "gpu-bench-plot": "gpu-bench's last step",
    "help-check": "a step of make test: this check",
}


def main(path):
    text = open(path).read()
    phony_rules = re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", text, re.M)
    bad = []
    if len(phony_rules) != 1:
        bad.append(f"{path}: {len(phony_rules)} .PHONY rules, want exactly one")
    phony = set(phony_rules[0].replace("\\\n", " ").split()) if phony_rules else set()
    m = re.search(r"^define HELP\n(.*?)^endef$", text, re.M | re.S)
    if not m:
        print(f"{path}: no `define HELP` ... `endef` block")
        return 1
    named = set()
    for line in m.group(1).splitlines():
        for cmd in re.findall(r"make ([a-z][a-z0-9-]*(?:\s*\|\s*[a-z][a-z0-9-]*)*)", line):
            named.update(x.strip() for x in cmd.split("|"))
    for name in sorted(named - phony):
        bad.append(f"{path}: HELP names `make {name}`, which is not a .PHONY target")
    for name in sorted(phony - named - set(INTERNAL)):
        bad.append(f"{path}: .PHONY target `{name}` is missing from HELP (or from INTERNAL in {sys.argv[0]})")
    for name in sorted(set(INTERNAL) - phony):
        bad.append(f"{sys.argv[0]}: INTERNAL lists `{name}`, which is not a .PHONY target")
    for b in bad:
        print(b)
    if not bad:
        print(f"check_help: {len(named)} targets in HELP, {len(INTERNAL)} internal, one .PHONY rule")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "Makefile"))
