#!/usr/bin/env python3
"""Plot bench_gpu's throughput against client threads with gnuplot.

usage: plot_gpu.py GPU-RUN.jsonl OUT.png

GPU-RUN.jsonl is what bench/cuda/bench_gpu.cu appends, one measurement per
line, one file per device (build/results/gpu-run-<gpu name>.jsonl; `make
gpu-bench` calls this for each, drawing build/results/gpu-clients-<gpu
name>.png). A file holds one device's rows; rows of another device in it are
refused. One panel, commands per second against GPU client threads, log-log,
one pair each:

  - the host-thread controller with GPU clients, and the same controller's
    rate with host-thread clients in the same run (a flat line: the baseline);
  - the GPU-resident controller with the lock-free pair, and the mutex-guarded
    queue on the same rings (its baseline); the 128-pair lock-free rows too.

Rows that did not finish within their share of the time ("finished":
false; their rate is over the operations done when they were stopped), rows
whose checks failed, and rows with no rate (not run) are not drawn; they are
listed. It first prints, for rows measured by both builds (statistics on and
compiled out), the ratio of the two. A key measured twice keeps its last
row. The data file and the gnuplot script go next to OUT (.dat, .gp); the
plot is drawn with gnuplot, or with matplotlib where there is no gnuplot (a
GPU machine that reaches no package registry), or not at all (exit 3, the
data kept) where there is neither; exit 3 too where no row can be drawn.
GPUMEM_PLOT_WITH=gnuplot, matplotlib or none picks one (none: the data
files only, exit 3)."""
import json, sys

import plot_with  # bench/plot_with.py: GPUMEM_PLOT_WITH and the gnuplot/matplotlib choice

SERIES = [  # (title, group, variant, pairs)
    ("host-thread controller, GPU clients", "clients", "hostctl_gpu", 1),
    ("GPU controller, lock-free pair", "queue", "lockfree", 1),
    ("GPU controller, mutex queue (baseline)", "queue", "mutex", 1),
    ("GPU controller, lock-free, 128 pairs", "queue", "lockfree", 128),
]


def load(path):
    """{(group, variant, threads, pairs, arg, stats): row}, the last row of each key."""
    rows = {}
    gpus = set()
    try:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    r = json.loads(line)
                    key = (r["group"], r["variant"], r["threads"], r["pairs"], r["arg"], r.get("stats", True))
                except (ValueError, KeyError, TypeError) as e:
                    sys.exit(f"plot_gpu.py: {path}:{n}: not a bench_gpu row ({type(e).__name__}: {e})")
                rows[key] = r
                gpus.add(r.get("gpu"))
    except FileNotFoundError:
        sys.exit(f"plot_gpu.py: {path}: no such file (make gpu-bench writes it, on a machine with a GPU)")
    if len(gpus) > 1:
        sys.exit(f"plot_gpu.py: {path}: rows of several devices ({', '.join(sorted(map(str, gpus)))}): "
                 "one file per device")
    return rows


def why_not_drawn(r):
    """Why a row is left out of the plot, or None."""
    if not r.get("finished", True):
        return "did not finish"
    if not r.get("checks_ok", True):
        return "its checks failed"
    if not r.get("rate", 0) > 0:
        return "no rate (not run)"
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    plotter = plot_with.plotter("plot_gpu.py")
    rows = load(sys.argv[1])
    out = sys.argv[2]
    left_out = {k: why for k, why in ((k, why_not_drawn(r)) for k, r in rows.items()) if why}
    for k, why in sorted(left_out.items()):
        print(f"plot_gpu.py: not drawn ({why}): {k[0]} {k[1]} threads {k[2]} pairs {k[3]} arg {k[4]}"
              f"{'' if k[5] else ' (nostats)'}")
    rows = {k: r for k, r in rows.items() if k not in left_out}
    # Statistics on against compiled out, where both builds measured a row.
    both = [(k, r, rows.get(k[:5] + (False,))) for k, r in rows.items() if k[5]]
    both = [(k, on, off) for k, on, off in both if off]
    if both:
        print("statistics on / compiled out (same key, same run of make gpu-bench):")
        for k, on, off in sorted(both):
            print(f"  {k[0]:7} {k[1]:14} threads {k[2]:8} arg {k[4]:6}: {on['rate']:.4g} / {off['rate']:.4g}"
                  f" = {on['rate'] / off['rate']:.2f}x")
    base = out[:-4] if out.endswith(".png") else out
    columns = []
    for title, group, variant, pairs in SERIES:
        pts = sorted((k[2], r["rate"]) for k, r in rows.items()
                     if k[0] == group and k[1] == variant and k[3] == pairs and k[5])
        if pts:
            columns.append((title, pts))
    host = [r["rate"] for k, r in rows.items() if k[0] == "clients" and k[1] == "hostctl_host" and k[5]]
    if not columns:
        print(f"plot_gpu.py: {sys.argv[1]}: no client-thread rows to plot", file=sys.stderr)
        sys.exit(3)  # nothing to draw is not a failure of the run
    gpu = next(iter(rows.values()))["gpu"]
    with open(base + ".dat", "w") as f:
        for title, pts in columns:
            f.write(f"# {title}\n")
            for threads, rate in pts:
                f.write(f"{threads} {rate}\n")
            f.write("\n\n")
    plots = [f"'{base}.dat' index {i} using 1:2 with linespoints title '{t}'" for i, (t, _) in enumerate(columns)]
    if host:
        plots.append(f"{host[-1]} with lines dashtype 2 title 'host-thread controller, host clients (baseline)'")
    script = "\n".join([
        "set terminal pngcairo size 1000,620",
        f"set output '{out}'",
        f"set title 'Commands per second against GPU client threads ({gpu}; Flush, instant media)'",
        "set logscale xy",
        "set xlabel 'GPU client threads'",
        "set ylabel 'commands per second'",
        "set key bottom right",
        "set grid",
        "plot " + ", \\\n     ".join(plots),
        "",
    ])
    with open(base + ".gp", "w") as f:
        f.write(script)
    plot_with.draw("plot_gpu.py", plotter, base + ".gp",
                   lambda: plot_matplotlib(out, gpu, columns, host[-1] if host else None),
                   f"; the data is in {base}.dat")
    print(f"wrote {out}")


def plot_matplotlib(out, gpu, columns, host_rate):
    """The same plot with matplotlib; False if it is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(10, 6.2))
    for title, pts in columns:
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=title)
    if host_rate:
        ax.axhline(host_rate, linestyle="--", label="host-thread controller, host clients (baseline)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("GPU client threads")
    ax.set_ylabel("commands per second")
    ax.set_title(f"Commands per second against GPU client threads ({gpu}; Flush, instant media)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.savefig(out, dpi=100)
    return True


if __name__ == "__main__":
    main()
