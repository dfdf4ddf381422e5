"""Throughput of the same streaming query with and without the journal listener.

A fixed-size file source (``--files`` Parquet files of ``--rows-per-file`` rows, one
file per micro-batch, ``availableNow``) into the noop sink, on a local[2] SparkSession.
Variants run in rounds, the order rotating each round, after one warm-up run of each;
a run's throughput is its rows over the wall time from ``start()`` to termination.

* without: no listener;
* with: the journal listener (``attach``), journaling into the embedded Postgres; its
  writer works asynchronously, so its flush is waited for (untimed) after the run;
* empty (optional): a PySpark StreamingQueryListener whose callbacks do nothing, i.e.
  what PySpark's own event wrapping costs any Python listener.

    .venv/bin/python bench/stream_overhead.py [--rounds 5 --variants without,with,empty]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import header, journal_database, minmax, postgres, quantile, rmtree, table


def make_input(spark, path: str, files: int, rows: int) -> None:  # type: ignore[no-untyped-def]
    (spark.range(0, files * rows, 1, files)
     .selectExpr("id", "id % 1000 AS k", "cast(id * 7 AS string) AS payload")
     .write.mode("overwrite").parquet(path))


def run_once(spark, src: str, work: str, name: str) -> tuple[float, int, int, str]:  # type: ignore[no-untyped-def]
    df = (spark.readStream.schema("id long, k long, payload string")
          .option("maxFilesPerTrigger", 1).parquet(src)
          .selectExpr("id", "k", "xxhash64(payload, id) AS h", "length(payload) AS n"))
    t0 = time.perf_counter()
    q = (df.writeStream.format("noop").queryName(name)
         .option("checkpointLocation", str(Path(work) / name))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    elapsed = time.perf_counter() - t0
    progress = q.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    return elapsed, rows, len(progress), str(q.runId)


def empty_listener():  # type: ignore[no-untyped-def]
    from pyspark.sql.streaming import StreamingQueryListener

    class Empty(StreamingQueryListener):
        def onQueryStarted(self, event):  # type: ignore[no-untyped-def]
            pass

        def onQueryProgress(self, event):  # type: ignore[no-untyped-def]
            pass

        def onQueryTerminated(self, event):  # type: ignore[no-untyped-def]
            pass

    return Empty()


def main(args: argparse.Namespace) -> None:

    from offset_journal.capture.listener import attach
    from offset_journal.journal import Journal
    from offset_journal.testing import make_spark_session

    header("Streaming overhead: the same query with and without the listener", args)
    work = tempfile.mkdtemp(prefix="oj-bench-stream-")
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                          "--conf spark.ui.showConsoleProgress=false pyspark-shell")
    spark = make_spark_session("offset-journal-bench")
    spark.sparkContext.setLogLevel("ERROR")
    src = str(Path(work) / "input")
    make_input(spark, src, args.files, args.rows_per_file)
    with postgres(args.admin_url) as server:
        url = journal_database(server)
        journal = Journal(url)
        variants = args.variants
        runs: dict[str, list[tuple[float, int]]] = {v: [] for v in variants}
        ratios: dict[str, list[float]] = {v: [] for v in variants if v != "without"}
        seq = 0

        def one(variant: str) -> tuple[float, int]:
            nonlocal seq
            seq += 1
            name = f"bench_{seq}_{variant}"
            listener = empty = None
            if variant == "with":
                listener = attach(spark, url, spool_dir=str(Path(work) / "spool"))
            elif variant == "empty":
                empty = empty_listener()
                spark.streams.addListener(empty)
            try:
                elapsed, rows, batches, run_id = run_once(spark, src, work, name)
                if listener is not None:
                    assert listener.wait_terminated(run_id, timeout=120), "journal not flushed"
                    journaled = len(journal.history(name))
                    if journaled != batches:
                        print(f"warning: {name}: {journaled} of {batches} batches journaled",
                              file=sys.stderr)
            finally:
                if listener is not None:
                    spark.streams.removeListener(listener)
                    listener.close()
                if empty is not None:
                    time.sleep(2)  # let the listener bus deliver what it still holds
                    spark.streams.removeListener(empty)
            thr = rows / elapsed
            print(f"{name}: {batches} batches, {rows} rows in {elapsed:.2f}s = "
                  f"{thr:,.0f} rows/s", file=sys.stderr, flush=True)
            return thr, batches

        for variant in variants:  # warm-up: JIT, caches, the first Python callbacks
            one(variant)
        for i in range(args.rounds):
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            got = {}
            for variant in order:
                got[variant] = one(variant)
                runs[variant].append(got[variant])
            for variant in ratios:
                ratios[variant].append(got[variant][0] / got["without"][0])
        journal.close()
    spark.stop()
    rmtree(work)

    rows_out = []
    names = {"without": "no listener", "with": "journal listener",
             "empty": "empty Python listener"}
    for variant in variants:
        thr = [t for t, _ in runs[variant]]
        rows_out.append([names[variant], len(thr), runs[variant][0][1],
                         f"{quantile(thr, .5):,.0f}",
                         f"{quantile(thr, .25):,.0f}-{quantile(thr, .75):,.0f}"])
    print(f"\n{args.rounds} rounds, order rotating; {args.files} batches of "
          f"{args.rows_per_file:,} rows per run.\n")
    print(table(["variant", "runs", "batches per run", "rows/s median", "rows/s p25-p75"],
                rows_out))
    out = []
    for variant, rs in ratios.items():
        med = quantile(rs, .5)
        out.append([f"{names[variant]} / no listener", f"{med:.3f}",
                    f"{quantile(rs, .25):.3f}-{quantile(rs, .75):.3f}", minmax(rs, "{:.3f}"),
                    ("yes" if med >= 0.99 else "**no**") if variant == "with" else ""])
    print()
    print(table(["throughput ratio (per round)", "median", "p25-p75", "min-max",
                 "target >= 0.99"], out))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", type=lambda s: s.split(","), default=["without", "with"],
                   help="without, with, empty (a do-nothing Python listener)")
    p.add_argument("--files", type=int, default=40, help="input files = micro-batches per run")
    p.add_argument("--rows-per-file", type=int, default=200_000)
    p.add_argument("--admin-url", help="a Postgres to create the database in (else pgserver)")
    main(p.parse_args())
