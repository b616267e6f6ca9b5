#!/usr/bin/env python3
"""Parquet or Arrow to CSV on standard output, for `build/table convert - OUT`.

    python3 tools/table_import.py trips.parquet | build/table convert - trips.table
    python3 tools/table_import.py trips.arrow --columns trip_distance,fare_amount | build/table convert - t.table

The table tool parses CSV itself; Parquet and Arrow are read here by
pyarrow (PyPI: python3 -m pip install pyarrow, or sh tools/deps.sh pyarrow)
rather than by a hand-written decoder. The file is read one record batch at
a time (Parquet: --batch-rows rows a batch), so memory stays bounded by a
batch whatever the file's size. Nulls become empty fields, which the table
tool reads as missing values; strings are quoted; every other type is
written as pyarrow's CSV writer writes it (a column that is not numeric
becomes a text column there: dictionary codes, or skipped).

Formats: .parquet (or --format parquet), an Arrow IPC file (.arrow,
.feather, .ipc) or an Arrow IPC stream (--format stream).
Exit status: 0, or 2 with a message for a file pyarrow cannot read.
"""
import argparse
import sys


def batches(path, fmt, columns, batch_rows):
    import pyarrow.ipc as ipc
    import pyarrow.parquet as pq

    if fmt == "parquet":
        yield from pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=columns)
        return
    reader = ipc.open_stream(path) if fmt == "stream" else ipc.open_file(path)
    if fmt == "stream":
        for b in reader:
            yield b.select(columns) if columns else b
    else:
        for i in range(reader.num_record_batches):
            b = reader.get_batch(i)
            yield b.select(columns) if columns else b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("--format", choices=["parquet", "file", "stream"], help="default: by the extension")
    ap.add_argument("--columns", help="only these columns, comma-separated")
    ap.add_argument("--batch-rows", type=int, default=65536)
    a = ap.parse_args()
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:
        print("table_import: needs pyarrow: python3 -m pip install pyarrow (or sh tools/deps.sh pyarrow)",
              file=sys.stderr)
        return 2
    fmt = a.format or ("parquet" if a.input.endswith(".parquet") else "file")
    columns = a.columns.split(",") if a.columns else None
    out = sys.stdout.buffer
    writer = None
    try:
        for b in batches(a.input, fmt, columns, a.batch_rows):
            if writer is None:
                writer = pcsv.CSVWriter(out, b.schema, write_options=pcsv.WriteOptions(include_header=True))
            writer.write_batch(b)
        if writer is None:
            print("table_import: %s: no record batches" % a.input, file=sys.stderr)
            return 2
        writer.close()
    except BrokenPipeError:  # the reader stopped early (head, or the table tool refused the input)
        return 1
    except (OSError, pa.ArrowException, KeyError) as e:
        print("table_import: %s: %s" % (a.input, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
