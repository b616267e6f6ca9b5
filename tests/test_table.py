#!/usr/bin/env python3
"""build/table's answers against DuckDB's on the same CSV (make test).

    python3 tests/test_table.py [build/table]

Each CSV is converted by `table convert`, queried by `table query` (which
checks its three modes against its own reference and prints each answer's
exact bits), and the same query is asked of DuckDB (PyPI; sh tools/deps.sh
duckdb pyarrow installs it) over the CSV itself: Q0's count must be equal,
Qk's average within a relative 1e-9 and its count of terms equal. Cases:
the generated taxi table with missing values at both of the dissertation's
bounds, a bound no row passes (empty: NULL), one every row passes, a
one-row table, a hand-written CSV with quotes, CRLF, NA and text, and the
generated table read from Parquet through tools/table_import.py (pyarrow).
Prints 'N passed, N failed'; exit 1 on any failure.
"""
import math
import os
import re
import subprocess
import sys
import tempfile

TABLE = sys.argv[1] if len(sys.argv) > 1 else "build/table"
HERE = os.path.dirname(os.path.abspath(__file__))
IMPORT = os.path.join(HERE, "..", "tools", "table_import.py")
COLUMNS = ["fare_amount", "surcharge", "hail_fee", "tolls_amount", "tax"]
passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)


def run(*args, stdin=None):
    p = subprocess.run(list(args), stdin=stdin, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p.stdout


def table_answers(table_file, filt, cols, bound):
    out = run(TABLE, "query", table_file, "--filter", filt, "--columns", ",".join(cols), "--min", repr(bound),
              "--threads", "3")
    check("every answer of every mode equal to the reference" in out, "%s: modes disagree:\n%s" % (table_file, out))
    got = {}
    for k, s, terms, passing in re.findall(r"^answer Q(\d) sum (\S+) terms (\d+) passing (\d+)$", out, re.M):
        got[int(k)] = (float(s), int(terms), int(passing))
    return got


def duckdb_answers(con, csv, filt, cols, bound, numeric):
    rel = "read_csv('%s', header=true, nullstr=['NA', ''], types={%s})" % (
        csv, ", ".join("'%s': 'DOUBLE'" % c for c in numeric))
    want = {0: (con.execute("select count(*) from %s where %s >= ?" % (rel, filt), [bound]).fetchone()[0],)}
    for k in range(1, len(cols) + 1):
        expr = "(%s) / %s" % (" + ".join(cols[:k]), filt)
        want[k] = con.execute("select avg(%s), count(%s) from %s where %s >= ?" % (expr, expr, rel, filt),
                              [bound]).fetchone()
    return want


def compare(name, got, want):
    check(sorted(got) == sorted(want), "%s: queries %s, DuckDB %s" % (name, sorted(got), sorted(want)))
    for k in want:
        if k not in got:
            continue
        s, terms, passing = got[k]
        if k == 0:
            check(passing == want[0][0] and terms == passing, "%s Q0: %d rows pass, DuckDB %d" % (name, passing,
                                                                                               want[0][0]))
            continue
        avg, count = want[k]
        check(terms == count, "%s Q%d: %d terms, DuckDB %d" % (name, k, terms, count))
        if count == 0:
            check(avg is None and s == 0, "%s Q%d: empty, DuckDB says %r, table sum %r" % (name, k, avg, s))
            continue
        mine = s / terms
        check(mine == avg or (math.isfinite(avg) and abs(mine - avg) <= 1e-9 * abs(avg)),
              "%s Q%d: %.17g, DuckDB %.17g" % (name, k, mine, avg))


def case(con, tmp, name, csv, filt, cols, bounds, numeric, convert_args=()):
    tab = os.path.join(tmp, name + ".table")
    try:
        run(TABLE, "convert", csv, tab, *convert_args)
        for b in bounds:
            compare("%s (%s >= %g)" % (name, filt, b), table_answers(tab, filt, cols, b),
                    duckdb_answers(con, csv, filt, cols, b, numeric))
    except RuntimeError as e:  # a run that failed (exit 1: its modes disagreed) is a failure, the rest still run
        check(False, "%s: %s" % (name, e))
    return tab


def main():
    try:
        import duckdb
    except ImportError:
        print("test_table.py: needs DuckDB: python3 -m pip install duckdb (sh tools/deps.sh duckdb pyarrow)")
        return 1
    con = duckdb.connect()
    numeric = ["trip_distance"] + COLUMNS + ["passenger_count"]
    with tempfile.TemporaryDirectory(prefix="gpumem-test-table-") as tmp:
        taxi = os.path.join(tmp, "taxi.csv")
        run(TABLE, "gen", taxi, "--rows", "60000", "--missing", "0.03", "--tail", "0.05,0.01")
        tab = case(con, tmp, "taxi", taxi, "trip_distance", COLUMNS, [20, 30, 1e9, 0], numeric)
        # a filter that is not the first column, fewer columns, another order
        case(con, tmp, "taxi2", taxi, "fare_amount", ["tolls_amount", "trip_distance"], [60], numeric)
        one = os.path.join(tmp, "one.csv")
        with open(one, "w") as f:
            f.write("trip_distance,fare_amount\n31,12.5\n")
        case(con, tmp, "one", one, "trip_distance", ["fare_amount"], [30, 40], ["trip_distance", "fare_amount"])
        hand = os.path.join(tmp, "hand.csv")
        with open(hand, "w", newline="") as f:
            f.write('id,"d",a,b,note\r\n1,31.5,10,NA,"x, ""quoted"""\r\n2,NA,3,4,y\r\n3,40,,1,"two\nlines"\r\n'
                    '4,35,20,2.5,NA\r\n5,0,1,1,z\r\n6,-2,1e2,-1.5e-3,z\r\n')
        case(con, tmp, "hand", hand, "d", ["a", "b"], [30, 0.5, -5], ["id", "d", "a", "b"])
        try:
            import pyarrow.csv as pcsv
            import pyarrow.parquet as pq
        except ImportError:
            check(False, "pyarrow missing: python3 -m pip install pyarrow")
        else:
            pq.write_table(pcsv.read_csv(taxi), os.path.join(tmp, "taxi.parquet"), row_group_size=10000)
            pipe = subprocess.Popen([sys.executable, IMPORT, os.path.join(tmp, "taxi.parquet")],
                                    stdout=subprocess.PIPE)
            run(TABLE, "convert", "-", os.path.join(tmp, "pq.table"), stdin=pipe.stdout)
            pipe.stdout.close()
            check(pipe.wait() == 0, "table_import.py failed")
            for b in [20, 30]:
                check(table_answers(os.path.join(tmp, "pq.table"), "trip_distance", COLUMNS, b) ==
                      table_answers(tab, "trip_distance", COLUMNS, b), "Parquet and CSV answers differ at %g" % b)
    print("test_table.py: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
