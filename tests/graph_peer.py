#!/usr/bin/env python3
"""build/graph speaks the input file's ids, checked against networkx (make test).

    python3 tests/graph_peer.py [BUILD_DIR]        (default build; needs networkx:
                                                    sh tools/deps.sh networkx)

A random graph of a few components, written as SNAP (sparse ids, 5 + 7 k) and as
Matrix Market (1-based), is run through build/graph bfs, cc and pagerank with
--out. For each: every vertex's BFS level, component and rank in --out equals
networkx's (single_source_shortest_path_length, connected_components, pagerank
to a 1e-13 tolerance, against 200 iterations here), in the file's ids; the run's
header and its result line name the same source, the one given; and --source
outside the file names the file given and its ids' range, not the conversion.
Exit 1 naming the first difference.
"""
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import networkx as nx
except ImportError:
    print("graph_peer: networkx is missing: sh tools/deps.sh networkx (Debian: apt-get install python3-networkx)")
    sys.exit(1)

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
GRAPH = os.path.join(BUILD, "graph")
failures = []


def fail(what):
    failures.append(what)
    print("graph_peer: FAILED: " + what)


def run(args, want_rc=0):
    p = subprocess.run([GRAPH] + args, capture_output=True, text=True)
    if p.returncode != want_rc:
        fail(f"graph {' '.join(args)}: exit {p.returncode}, want {want_rc}\n{p.stdout}{p.stderr}")
    return p.stdout + p.stderr


def read_out(path):
    rows = {}
    if not os.path.exists(path):
        fail(f"{path}: --out wrote nothing")
        return rows
    with open(path) as f:
        first = f.readline()
        if not first.startswith("# gpumem graph "):
            fail(f"{path}: first line {first!r} is not the comment that says what the columns are")
        for line in f:
            v, value = line.rstrip("\n").split("\t")
            rows[int(v)] = value
    return rows


def peer_pagerank(g):
    """networkx's PageRank; its pure-Python form where scipy (which nx.pagerank
    uses) is not installed: the same iteration, the same answer."""
    try:
        return nx.pagerank(g, alpha=0.85, tol=1e-13, max_iter=10000)
    except ImportError:
        from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python
        return _pagerank_python(g, alpha=0.85, tol=1e-13, max_iter=10000)


def graph_of(seed):
    """Edges on 0..n-1: three random components (one a path) and a pair."""
    rnd = random.Random(seed)
    edges = set()
    blocks = [(0, 120), (120, 200), (200, 260)]
    for lo, hi in blocks:
        order = list(range(lo, hi))
        rnd.shuffle(order)
        for a, b in zip(order, order[1:]):  # connected: a random spanning path
            edges.add((min(a, b), max(a, b)))
        for _ in range((hi - lo) * 2):
            a, b = rnd.randrange(lo, hi), rnd.randrange(lo, hi)
            if a != b:
                edges.add((min(a, b), max(a, b)))
    edges.add((260, 261))
    return 262, sorted(edges)


def main():
    n, edges = graph_of(45)
    tmp = tempfile.mkdtemp(prefix="gpumem-graph-peer-")
    try:
        snap_id = lambda v: 5 + 7 * v  # noqa: E731 (sparse ids: not every one between is a vertex)
        mtx_id = lambda v: v + 1  # noqa: E731
        files = []
        path = os.path.join(tmp, "g.txt")
        with open(path, "w") as f:
            f.write("# SNAP-style edge list, tab separated\n")
            for a, b in edges:
                f.write(f"{snap_id(a)}\t{snap_id(b)}\n")
        files.append((path, snap_id))
        path = os.path.join(tmp, "g.mtx")
        with open(path, "w") as f:
            f.write("%%MatrixMarket matrix coordinate pattern general\n")
            f.write(f"{n} {n} {len(edges)}\n")
            for a, b in edges:
                f.write(f"{mtx_id(a)} {mtx_id(b)}\n")
        files.append((path, mtx_id))

        for path, fid in files:
            failed_before = len(failures)
            g = nx.Graph()
            g.add_nodes_from(fid(v) for v in range(n))
            g.add_edges_from((fid(a), fid(b)) for a, b in edges)
            common = ["--cache-dir", tmp, "--threads", "2", "--cache-mib", "0.125"]
            name = os.path.basename(path)

            # BFS from a vertex in the middle, named in the file's ids
            source = fid(141)
            out = os.path.join(tmp, "bfs.tsv")
            text = run(["bfs", path, "--source", str(source)] + common)
            header = re.search(r"BFS from vertex (\d+) ", text)
            result = re.search(r"BFS: from vertex (\d+),", text)
            if not header or int(header.group(1)) != source:
                fail(f"{name}: bfs --source {source}: the run's header says {header and header.group(0)}")
            if not result or int(result.group(1)) != source:
                fail(f"{name}: bfs --source {source}: the result line says {result and result.group(0)}")
            run(["bfs", path, "--source", str(source), "--out", out] + common)
            want = nx.single_source_shortest_path_length(g, source)
            got = read_out(out)
            if set(got) != set(g.nodes):
                fail(f"{name}: bfs --out has {len(got)} vertices, networkx {g.number_of_nodes()}")
            for v in g.nodes:
                w = str(want[v]) if v in want else "-"
                if got.get(v) != w:
                    fail(f"{name}: bfs --out: vertex {v} at level {got.get(v)}, networkx says {w}")
                    break

            # connected components: each vertex labelled by its component's smallest vertex
            out = os.path.join(tmp, "cc.tsv")
            run(["cc", path, "--out", out] + common)
            got = read_out(out)
            for comp in nx.connected_components(g):
                label = str(min(comp))
                bad = [v for v in comp if got.get(v) != label]
                if bad:
                    fail(f"{name}: cc --out: vertex {bad[0]} labelled {got.get(bad[0])}, its component's least is {label}")
                    break
            if len(set(got.values())) != nx.number_connected_components(g):
                fail(f"{name}: cc --out: {len(set(got.values()))} labels, networkx {nx.number_connected_components(g)}")

            # PageRank: 200 iterations here against networkx's converged ranks
            out = os.path.join(tmp, "pr.tsv")
            run(["pagerank", path, "--iterations", "200", "--out", out] + common)
            got = read_out(out)
            want = peer_pagerank(g)
            worst = max(abs(float(got[v]) - want[v]) / want[v] if v in got else float("inf") for v in g.nodes)
            if worst > 1e-6:
                fail(f"{name}: pagerank --out: a rank {worst:.3g} (relative) from networkx's")

            # --source the file does not have: said in its ids, about the file given
            last = fid(n - 1)
            text = run(["bfs", path, "--source", str(last + 1)] + common, want_rc=2)
            want_text = f"--source {last + 1}: no such vertex in {path}: its {n} vertices are {fid(0)}..{last}"
            if want_text not in text:
                fail(f"{name}: bfs --source {last + 1} said:\n{text}\nnot: {want_text}")
            if ".graph" in text.split("no such vertex")[1].splitlines()[0]:
                fail(f"{name}: the --source error names the conversion, not {path}: {text}")
            if len(failures) == failed_before:
                print(f"graph_peer: {name}: bfs levels, cc components and pagerank ranks (--out, {n} vertices) match "
                      f"networkx, in the file's ids; --source said in them")
    finally:
        shutil.rmtree(tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
