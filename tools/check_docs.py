#!/usr/bin/env python3
"""What README.md and docs/*.md name exists (make docs-check, a step of make test).

    tools/check_docs.py [ROOT]        (default: the current directory)

A user pastes what the documents say, so each of these must be true of the
tree it comes with:
  - every link [text](path) to a file of the repository exists;
  - every repository path in code (`tools/deps.sh`, examples/cuda/gnn.cu in a
    code block, a bare header name such as `gpumem_cache.h`) exists: a path
    whose first part is a folder of the repository (or notes/, shared/, which
    are not in it), or a file name with a source or document extension, found
    at that path or, for a bare name, anywhere in the tree;
  - every `make TARGET` in code is a target of the Makefile;
  - every `--option` given to one of the repository's programs in code
    (build/graph, build/gpumem-doctor, ...; DOCTOR_ARGS) is in that program's
    sources, and an option in code on its own is in some program's sources;
  - every version that claims to be the current one (find_package(gpumem V),
    "gpumem": "V", **Status (V)**, GIT_TAG vV, gpumem-V) is gpumem.h's
    GPUMEM_VERSION_STRING (or its major.minor where a request names two
    parts), and no version anywhere is newer than it (an older one is history).
  - README.md links every docs/*.md (its list of documents is complete).
docs/headers.md is checked too. Generated paths (build/..., PREFIX/...,
DIR/..., placeholders with <>, * or {}) are not looked for.
Exit 1 with FILE:LINE: what is wrong, for each finding.
"""
import glob
import os
import re
import sys

SOURCE_EXTS = ("h", "c", "cu", "cpp", "md", "py", "sh", "gp", "pml", "cmake", "in", "txt", "supp")
# First path parts that are generated or belong to the machine, not the tree.
NOT_TREE = {"build", "PREFIX", "DIR", "dev", "sys", "proc", "etc", "usr", "m", "OUT", "third_party"}
# Folders outside the repository that documents have cited as if they were in it.
NOT_IN_REPO = {"notes", "shared", "seeds"}
# Programs of other projects: their options are theirs.
EXTERNAL = {"cmake", "pkg-config", "cc", "c++", "gcc", "g++", "clang", "clang++", "nvcc", "fio", "git", "tar",
            "spin", "compute-sanitizer", "apt-get", "sudo", "qemu-system-x86_64", "nvme", "python3", "pip",
            "cp", "mkdir", "ls", "sh", "bash", "modprobe", "echo", "ncu", "nsys", "cuobjdump", "curl"}


def code_parts(text):
    """(line number, code text, is_block) for every inline code span and every
    line of a fenced or indented code block."""
    parts = []
    in_fence = False
    prev_blank = True
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence or (line.startswith("    ") and prev_blank is not None and not line.lstrip().startswith(("-", "*"))
                        and indented_block(text, n)):
            parts.append((n, line.strip(), True))
        else:
            for span in re.findall(r"`([^`]+)`", line):
                parts.append((n, span, False))
        prev_blank = line.strip() == ""
    return parts


_indented_cache = {}


def indented_block(text, n):
    """Whether line n (1-based) is in an indented code block: it and every
    line back to a blank one are indented by 4, and a blank line precedes."""
    key = id(text)
    if key not in _indented_cache:
        lines = text.splitlines()
        inside = set()
        block = False
        for i, line in enumerate(lines, 1):
            if line.strip() == "":
                block = block  # a blank line neither opens nor closes a block by itself
                prev_blank = True
                continue
            if line.startswith("    ") and (block or (i == 1 or lines[i - 2].strip() == "")):
                prev_item = any(lines[j].lstrip().startswith(("- ", "* ", "1.", "2.", "3.", "4.", "5."))
                                for j in range(max(0, i - 8), i - 1) if lines[j].strip())
                if block or not prev_item:
                    block = True
                    inside.add(i)
                    continue
            block = False
        _indented_cache[key] = inside
    return n in _indented_cache[key]


def makefile_targets(root):
    text = open(os.path.join(root, "Makefile")).read()
    text = text.replace("\\\n", " ")
    targets = set()
    for m in re.finditer(r"^([^\s#=:][^=:]*?)\s*:(?!=)", text, re.M):
        for t in m.group(1).split():
            targets.add(t)
    phony = re.search(r"^\.PHONY:(.*)$", text, re.M)
    if phony:
        targets.update(phony.group(1).split())
    return targets


def tree_files(root):
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "build")]
        for f in filenames:
            out.add(os.path.relpath(os.path.join(dirpath, f), root))
    return out


def program_sources(root, prog):
    """The text of the sources of the repository's program `prog` (build/NAME
    or NAME): examples/NAME.c, tools/NAME.c or bench/NAME.c, the headers of its
    folder and the library's headers. None when the repository has no such program."""
    name = os.path.basename(prog)
    srcs = [p for d in ("examples", "tools", "bench", "tests") for p in (os.path.join(root, d, name + ".c"),)
            if os.path.exists(p)]
    if not srcs:
        return None
    texts = []
    for s in srcs:
        texts.append(open(s, errors="replace").read())
        for h in glob.glob(os.path.join(os.path.dirname(s), "*.h")):
            texts.append(open(h, errors="replace").read())
    for h in glob.glob(os.path.join(root, "gpumem*.h")):
        texts.append(open(h, errors="replace").read())
    return "\n".join(texts)


def all_program_sources(root):
    texts = []
    for pat in ("examples/*.c", "examples/*.h", "tools/*.c", "tools/*.py", "tools/*.sh", "bench/*.c", "bench/*.py",
                "gpumem*.h", "tests/qemu/*.sh", "tests/spin/*.sh"):
        for p in glob.glob(os.path.join(root, pat)):
            texts.append(open(p, errors="replace").read())
    return "\n".join(texts)


def version_tuple(v):
    return tuple(int(x) for x in v.split("."))


def check_file(root, rel, targets, files, basenames, version, findings):
    text = open(os.path.join(root, rel)).read()
    here = os.path.dirname(rel)

    def bad(n, what):
        findings.append(f"{rel}:{n}: {what}")

    # links
    for n, line in enumerate(text.splitlines(), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#")[0]
            full = os.path.normpath(os.path.join(here, path))
            if not os.path.exists(os.path.join(root, full)):
                bad(n, f"link to {target}: no such file in the repository")

    all_srcs = None
    for n, code, is_block in code_parts(text):
        if code.startswith("#include <"):
            continue  # the system's headers
        # paths
        for tok in re.findall(r"[A-Za-z0-9_.][A-Za-z0-9_./+-]*", code):
            tok = tok.rstrip(".,:;")
            if re.search(r"[<>*{}…]", tok) or tok.startswith(("/", "-")):
                continue
            first = tok.split("/")[0]
            ext = tok.rsplit(".", 1)[-1] if "." in os.path.basename(tok) else ""
            if "/" in tok:
                if first in NOT_TREE or first in ("", ".", ".."):
                    continue
                if first in NOT_IN_REPO:
                    bad(n, f"{tok}: not in the repository ({first}/ is outside it)")
                    continue
                if not os.path.exists(os.path.join(root, first)):
                    continue  # not a repository path (a test name, a sysfs path, a flag pair)
                if not os.path.exists(os.path.join(root, tok.rstrip("/"))):
                    bad(n, f"{tok}: no such file or folder in the repository")
            elif ext in SOURCE_EXTS and re.match(r"[A-Za-z0-9_-]+\.[a-z]+$", tok) and not tok[0].isdigit():
                if not re.match(r"(gpumem\w*\.h|[A-Z]+\.md|[a-z_]+\.(pml|cu|c|h|py|sh|gp))$", tok):
                    continue
                if tok not in files and tok not in basenames:
                    bad(n, f"{tok}: no file of that name in the repository")
        # make targets
        for m in re.finditer(r"(?:^|[\s;&|(])make\s+((?:[A-Z_]+=\S+\s+)*)([a-z][a-z0-9_-]*)", code):
            t = m.group(2)
            if t not in targets:
                bad(n, f"make {t}: no such target in the Makefile")
        # options
        words = code.split()
        if not words:
            continue
        prog_words = [w for w in words if re.match(r"(\$\(BUILD\)|build)/[\w-]+$", w)]
        if "DOCTOR_ARGS" in code:
            prog_words.append("build/gpumem-doctor")
        opts = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", code)
        if not opts:
            continue
        if prog_words:
            srcs = program_sources(root, prog_words[0].replace("$(BUILD)", "build"))
            if srcs is None:
                continue
            for o in opts:
                if o not in srcs:
                    bad(n, f"{o}: {prog_words[0]} has no such option")
        elif words[0].startswith("--") or (words[0] in ("graph", "gpumem-doctor")):
            if all_srcs is None:
                all_srcs = all_program_sources(root)
            for o in opts:
                if o not in all_srcs:
                    bad(n, f"{o}: no program of the repository has this option")
        elif words[0] not in EXTERNAL:
            pass
    # versions
    cur = version_tuple(version)
    claims = [
        (r"find_package\(gpumem\s+(\d+\.\d+(?:\.\d+)?)", "find_package"),
        (r"\"gpumem\":\s*\"(\d+\.\d+\.\d+)\"", "the JSON's gpumem version"),
        (r"\*\*Status \((\d+\.\d+(?:\.\d+)?)\)", "the status line"),
        (r"GIT_TAG\s+v(\d+\.\d+\.\d+)", "GIT_TAG"),
        (r"gpumem-(\d+\.\d+\.\d+)", "the tarball's name"),
    ]
    for n, line in enumerate(text.splitlines(), 1):
        for pat, what in claims:
            for v in re.findall(pat, line):
                parts = version_tuple(v)
                if parts != cur[:len(parts)]:
                    bad(n, f"{what} says {v}; gpumem.h is {version}")
        for v in re.findall(r"(?<![\d.])(\d+\.\d+\.\d+)(?![\d.])", line):
            if version_tuple(v) > cur and version_tuple(v)[0] == 0:
                bad(n, f"version {v} is newer than gpumem.h's {version}")


def main(root):
    h = open(os.path.join(root, "gpumem.h")).read()
    m = re.search(r'^#define GPUMEM_VERSION_STRING "([^"]+)"', h, re.M)
    if not m:
        print("check_docs: gpumem.h has no GPUMEM_VERSION_STRING")
        return 1
    version = m.group(1)
    targets = makefile_targets(root)
    files = tree_files(root)
    basenames = {os.path.basename(f) for f in files}
    docs = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    findings = []
    readme = open(os.path.join(root, "README.md")).read()
    for rel in docs[1:]:
        if f"]({rel})" not in readme:
            findings.append(f"README.md: its list of documents leaves out {rel}")
    for rel in docs:
        check_file(root, rel, targets, files, basenames, version, findings)
    for f in findings:
        print(f)
    if findings:
        print(f"check_docs: {len(findings)} finding(s) in README.md and docs/*.md (version {version})")
        return 1
    print(f"check_docs: {len(docs)} documents: every link, path, make target and option named exists; "
          f"every current version is {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
