#!/usr/bin/env python3
"""Plot `build/graph gnn-sweep`'s table: feature rows gathered per second in
each mode against the feature cache's size and against the row size.

usage: plot_gnn.py GNN-SWEEP.tsv OUT.png

Two panels, one line per gathering mode: (a) through the cache, (b) direct
reads on the queue pairs, (c) host threads' pread. The left one at the
sweep's row size, from 1/32 of the feature table cached to all of it; the
right one from 256-byte to 16 KiB rows with 1/8 of the table cached. The
table is always printed. The plot is drawn with gnuplot, or with matplotlib
where there is no gnuplot, as bench/plot_gpu.py picks (GPUMEM_PLOT_WITH=
gnuplot, matplotlib or none chooses one); where neither is there it says so
and exits 3, the table printed and the gnuplot script kept next to OUT."""
import sys

import plot_with  # bench/plot_with.py: GPUMEM_PLOT_WITH and the gnuplot/matplotlib choice

MODES = ["(a) through the cache", "(b) direct reads, queue pairs", "(c) pread, host threads"]


def load(path):
    """(comment lines, cache rows, row-size rows); each row (fraction, row_bytes, [rates], hit, amp_a, amp_b)."""
    notes, by_cache, by_row = [], [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#"):
                notes.append(line[1:].strip())
                continue
            if not line.strip():
                continue
            cols = line.rstrip("\n").split("\t")
            try:
                if len(cols) != 9 or cols[0] not in ("cache", "row"):
                    raise ValueError(f"{len(cols)} columns, first '{cols[0]}'")
                row = (float(cols[1]), int(cols[2]), [float(c) for c in cols[3:6]], float(cols[6]),
                       float(cols[7]), float(cols[8]))
            except ValueError as e:
                sys.exit(f"plot_gnn.py: {path}:{n}: expected 9 tab-separated columns of gnn-sweep, found: {e}")
            (by_cache if cols[0] == "cache" else by_row).append(row)
    if not by_cache and not by_row:
        sys.exit(f"plot_gnn.py: {path}: no rows")
    return notes, sorted(by_cache), sorted(by_row, key=lambda r: r[1])


def table(by_cache, by_row):
    lines = [f"{'cache':>8} {'row B':>6} " + " ".join(f"{m[:20]:>21}" for m in MODES) +
             f" {'hit (a)':>8} {'read/needed (a)':>16} {'(b)':>6}"]
    for frac, rb, rates, hit, amp_a, amp_b in by_cache + by_row:
        lines.append(f"{'1/%g' % (1 / frac):>8} {rb:>6} " + " ".join(f"{r:>21.0f}" for r in rates) +
                     f" {100 * hit:>7.1f}% {amp_a:>16.2f} {amp_b:>6.2f}")
    return "\n".join(lines)


def plot_matplotlib(out, title, by_cache, by_row):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, rows, x, xlabel in ((axes[0], by_cache, lambda r: r[0], "feature cache / feature table"),
                                (axes[1], by_row, lambda r: r[1], "row bytes (cache 1/8 of the table)")):
        for i, mode in enumerate(MODES):
            ax.plot([x(r) for r in rows], [r[2][i] for r in rows], marker="o", label=mode)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("rows gathered per second")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(out, dpi=100)
    return True


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    plotter = plot_with.plotter("plot_gnn.py")
    src, out = sys.argv[1], sys.argv[2]
    try:
        notes, by_cache, by_row = load(src)
    except FileNotFoundError:
        sys.exit(f"plot_gnn.py: {src}: no such file (build/graph gnn-sweep writes it)")
    print("\n".join(notes))
    print(table(by_cache, by_row))
    machine = next((n.split(":", 1)[1].strip() for n in notes if n.startswith("machine:")), "")
    title = "gpumem graph gnn: feature gathering, rows/s" + (f" ({machine[:60]})" if machine else "")
    base = out[:-4] if out.endswith(".png") else out
    with open(base + ".gp", "w") as f:
        f.write("\n".join([
            "set terminal pngcairo size 1100,460 font 'sans,10'",
            f"set output '{out}'",
            f"set multiplot layout 1,2 title \"{title}\"",
            "set logscale xy 2", "set grid", "set key bottom left", "set ylabel 'rows gathered per second'",
            "set xlabel 'feature cache / feature table'",
            "plot " + ", ".join(f"'< grep ^cache {src}' using 2:{4 + i} with linespoints title '{m}'"
                                 for i, m in enumerate(MODES)),
            "set xlabel 'row bytes (cache 1/8 of the table)'",
            "plot " + ", ".join(f"'< grep ^row {src}' using 3:{4 + i} with linespoints title '{m}'"
                                 for i, m in enumerate(MODES)),
            "unset multiplot", ""]))
    plot_with.draw("plot_gnn.py", plotter, base + ".gp", lambda: plot_matplotlib(out, title, by_cache, by_row),
                   f": the table above is the result; the gnuplot script is {base}.gp")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
