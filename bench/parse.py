"""Parse against its floor: progress JSON -> BatchRecord vs. the standard library's
``json.loads`` of the same payload, at 100 to 10,000 Kafka partitions.

Per round and size, alternating which goes first:

* floor: ``json.loads(payload)``;
* parse: ``batch_from_progress(payload)`` (what the writer thread does per event: the
  JSON, the Kafka offsets checked and converted, the partition rows paired, the
  metrics read);
* ratio: parse / floor of the same round.

Two payload shapes: ``objects``, the offsets as JSON objects inside the progress JSON
(what Spark's ``StreamingQueryProgress.json`` gives: ``SourceProgress.jsonValue``
parses each offset string with ``tryParse``), and ``strings``, the offsets as JSON text
inside the progress JSON (what ``parse_offset_json`` also takes, for a source whose
offset text Spark could not parse). For ``strings`` the floor is the outer
``json.loads`` alone, and ``floor, inner too`` adds the three inner ``json.loads``.

    .venv/bin/python bench/parse.py [--rounds 40 --sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import header, kafka_progress, quantile, table

OFFSET_KEYS = ("startOffset", "endOffset", "latestOffset")


def strings_payload(text: str) -> str:
    """The same progress with each source's offsets as JSON text."""
    data = json.loads(text)
    for source in data["sources"]:
        for key in OFFSET_KEYS:
            source[key] = json.dumps(source[key])
    return json.dumps(data)


def loads_all(text: str) -> Any:
    data = json.loads(text)
    for source in data["sources"]:
        for key in OFFSET_KEYS:
            json.loads(source[key])
    return data


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def cell(xs: list[float], scale: float = 1e3, fmt: str = "{:.2f}") -> str:
    return (f"{fmt.format(quantile(xs, .5) * scale)} ({fmt.format(quantile(xs, .25) * scale)}-"
            f"{fmt.format(quantile(xs, .75) * scale)})")


def measure(payload: str, variants: dict[str, Callable[[str], Any]], rounds: int,
            warmup: int) -> dict[str, list[float]]:
    names = list(variants)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + rounds):
        order = names[r % len(names):] + names[:r % len(names)]  # rotate who goes first
        times = {}
        for name in order:
            fn = variants[name]
            gc.collect()
            times[name] = timed(lambda fn=fn: fn(payload))  # type: ignore[misc]
        if r >= warmup:
            for name in names:
                out[name].append(times[name])
    return out


def main(args: argparse.Namespace) -> None:
    from offset_journal import records
    from offset_journal.records import batch_from_progress

    if args.no_orjson:  # the standard library's json alone (what runs without orjson)
        records._orjson = None
    header("Parse per event vs. json.loads", args)
    rows = []
    for size in args.sizes:
        base = kafka_progress(7, size)
        for shape, payload in (("objects", base), ("strings", strings_payload(base))):
            rec = batch_from_progress(payload)
            assert len(rec.sources[0].partitions) == size and not rec.problems
            variants: dict[str, Callable[[str], Any]] = {
                "floor": json.loads, "parse": batch_from_progress}
            if shape == "strings":
                variants["floor_all"] = loads_all
            t = measure(payload, variants, args.rounds, args.warmup)
            ratios = [p / f for p, f in zip(t["parse"], t["floor"], strict=True)]
            ratio_cell = cell(ratios, 1, "{:.2f}")
            ok = quantile(ratios, .5) <= 1.5
            all_cell = cell(t["floor_all"]) if "floor_all" in t else "-"
            rows.append([f"{size:,}", shape, f"{len(payload) / 1e3:,.0f}", cell(t["floor"]),
                         all_cell, cell(t["parse"]), ratio_cell,
                         "yes" if ok else "**no**"])
            print(f"{size} {shape}: parse/floor {ratio_cell}", file=sys.stderr, flush=True)
    print(f"\n{args.rounds} rounds per size and shape (after {args.warmup} warm-up), variants "
          "rotating; ms, median (p25-p75).\n")
    print(table(["partitions", "offsets as", "payload kB", "floor: json.loads ms",
                 "floor, inner too ms", "parse ms", "parse / floor", "<= 1.5"], rows))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                   default=[100, 1000, 10_000])
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--no-orjson", action="store_true",
                   help="parse as without orjson installed (the standard library only)")
    main(p.parse_args())
