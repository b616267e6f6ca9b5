#!/usr/bin/env python3
"""The analytics sweep's table as text: one row a (bound, line size, query).

    python3 bench/analytics_table.py build/results/analytics-sweep.tsv

For a terminal without gnuplot (make analytics-sweep prints it then): each
row gives the selectivity, bytes read / bytes needed in the three modes,
the tiled mode's bytes over the cache's, and the three times.
"""
import sys


def main(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                if "machine" in line or "rows" in line:
                    print(line.rstrip())
                continue
            rows.append(line.split("\t"))
    print("%6s %9s %6s %3s %9s %9s %9s %8s %9s %9s %9s %8s" % (
        "min", "selected", "line", "Q", "(a) r/n", "(b) r/n", "(c) r/n", "(b)/(a)", "(a) s", "(b) s", "(c) s", "hits"))
    for r in rows:
        m, sel, line, k, a, b, c, ba, sa, sb, sc, hit = r[:12]
        print("%6s %8.4f%% %6s %3s %9.3f %9.3f %9.3f %7.2fx %9.3f %9.3f %9.3f %7.1f%%" % (
            m, 100 * float(sel), line, "Q" + k, float(a), float(b), float(c), float(ba), float(sa), float(sb),
            float(sc), 100 * float(hit)))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
