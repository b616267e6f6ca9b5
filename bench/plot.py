#!/usr/bin/env python3
"""Plot the host benchmark results with gnuplot: one PNG, three panels.

usage: plot.py QUEUE.json CACHE.json OUT.png

  1. queue pair submissions per second against threads: the lock-free pair
     and the mutex-guarded baseline of the same run;
  2. cache hits: fetch-add count over compare-and-swap count (ratio), per
     line size, against threads;
  3. cache misses: reads through the cache over the same reads done
     directly (ratio), per line size, against threads.
Ratios above 1 favour the first. Data files and the gnuplot script are
written next to OUT (OUT minus .png, plus .dat / .gp) so the plot can be
redrawn or restyled by hand."""
import os, shutil, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import load_rates, arg_order  # noqa: E402


def series(a, b=None):
    """{arg: [(threads, value)]}: rates of a, or ratios a/b where both exist."""
    out = {}
    for key in sorted(set(a) & set(b) if b is not None else a, key=arg_order):
        out.setdefault(key[0], []).append((key[1], a[key] / b[key] if b is not None else a[key]))
    return out


def load(path):
    """The rates of one result file, or exit with a message saying what is wrong."""
    try:
        return load_rates(path)
    except FileNotFoundError:
        sys.exit(f"plot.py: {path}: no such file (make bench-queue and make bench-cache write it)")
    except (OSError, ValueError, KeyError, TypeError) as e:  # unreadable, not JSON, not Google Benchmark's
        sys.exit(f"plot.py: {path}: not a Google Benchmark JSON result ({type(e).__name__}: {e})")


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    # Check the tool before the data, so a missing gnuplot is said first and plainly.
    if shutil.which("gnuplot") is None:
        print("plot.py: gnuplot not found: plot skipped (install: sudo apt-get install -y gnuplot-nox)")
        return
    queue, qctx = load(sys.argv[1])
    cache, _ = load(sys.argv[2])
    out = sys.argv[3]
    base = out[:-4] if out.endswith(".png") else out
    blocks = []  # gnuplot data blocks, addressed by index
    panels = []

    def block(points):
        blocks.append("\n".join(f"{t} {v}" for t, v in points))
        return len(blocks) - 1

    lines = []
    for name, title in (("lockfree", "lock-free pair"), ("mutex", "mutex-guarded queue (baseline)")):
        for _, pts in series(queue.get(name, {})).items():
            lines.append(f"'{base}.dat' index {block(pts)} with linespoints title '{title}'")
    panels.append(("Queue pair: submit + complete, instant controller", "operations / s", "set logscale y", lines))
    for num, den, title in (("hit_faa", "hit_cas", "Cache hits: fetch-add / CAS reference count"),
                            ("miss_cache", "miss_direct", "Cache misses: through the cache / direct reads")):
        lines = [f"'{base}.dat' index {block(pts)} with linespoints title '{arg} B lines'"
                 for arg, pts in series(cache.get(num, {}), cache.get(den, {})).items()]
        lines.append("1 with lines dashtype 2 lc rgb 'gray' title 'equal'")
        panels.append((title, "ratio", "unset logscale y", lines))

    with open(base + ".dat", "w") as f:
        f.write("\n\n\n".join(blocks) + "\n")
    gp = [f"set terminal pngcairo size 1500,480 font 'sans,10'", f"set output '{out}'",
          f"set multiplot layout 1,3 title 'gpumem host benchmarks on "
          f"{qctx.get('machine') or str(qctx.get('host_name')) + ' (' + str(qctx.get('num_cpus')) + ' CPUs)'}"
          f", make bench' font 'sans,12'",
          "set logscale x 2", "set xlabel 'threads'", "set grid", "set key top right"]
    for title, ylabel, extra, lines in panels:
        gp += [extra, f"set title '{title}'", f"set ylabel '{ylabel}'", "plot " + ", ".join(lines)]
    gp.append("unset multiplot")
    with open(base + ".gp", "w") as f:
        f.write("\n".join(gp) + "\n")
    done = subprocess.run(["gnuplot", base + ".gp"])
    if done.returncode != 0:
        sys.exit(f"plot.py: gnuplot failed on {base}.gp (status {done.returncode})")
    print(f"wrote {out} (data {base}.dat, script {base}.gp)")


if __name__ == "__main__":
    main()
