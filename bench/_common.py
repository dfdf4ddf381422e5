"""Shared helpers for the benchmarks: statistics, markdown tables, a Postgres, payloads.

Not a benchmark itself. Every script imports it as ``from _common import ...`` (the
scripts run as ``.venv/bin/python bench/<name>.py``, so bench/ is on sys.path).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
TREE_ENV = "OFFSET_JOURNAL_BENCH_TREE"
"""Set in a TreeProcess child: the exported tree whose offset_journal it imports."""
_TREE = os.environ.get(TREE_ENV) or str(ROOT)
if _TREE not in sys.path:  # the package and tests/ without installing anything
    sys.path.insert(0, _TREE)

# Spark drivers the benchmarks start stay on loopback, as their servers do.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

QUERY_ID = "ce011fdc-8762-4dcb-84eb-a77333e28109"
RUN_ID = "88e2ff94-ede0-45a8-b687-6316fbef529a"


# ------------------------------------------------------------------ statistics


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in [0, 1]) of ``values``."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    """p25-p75 of ``values``, formatted."""
    return f"{fmt.format(quantile(values, 0.25))}-{fmt.format(quantile(values, 0.75))}"


def minmax(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


# ------------------------------------------------------------------ the machine


def machine() -> str:
    """A markdown block describing where the numbers come from."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        free = subprocess.run(["free", "-h"], capture_output=True, text=True).stdout.strip()
    except OSError:
        free = "?"
    try:
        import pyspark

        spark = pyspark.__version__
    except ImportError:
        spark = "not installed"
    mem = free.splitlines()[1].split()[1] if free.count("\n") else free
    return (f"nproc {os.cpu_count()}, {cpu}, memory {mem} (free -h), "
            f"Python {platform.python_version()}, PySpark {spark}, {platform.system()} "
            f"{platform.release()}")


def header(title: str, args: Any) -> None:
    print(f"## {title}\n")
    print(f"Machine: {machine()}  ")
    print(f"Command: `{' '.join(['.venv/bin/python', *sys.argv])}`  ")
    print(f"Arguments: {vars(args)}\n", flush=True)


# ------------------------------------------------------------------ Postgres


@contextmanager
def postgres(admin_url: str | None = None) -> Iterator[Any]:
    """A Postgres server to create throwaway databases in (offset_journal.testing's
    start_postgres: pgserver here unless OFFSET_JOURNAL_TEST_ADMIN_URL / ``admin_url``)."""
    from offset_journal.testing import PostgresServer, start_postgres

    server = PostgresServer(admin_url, "external") if admin_url else start_postgres()
    try:
        yield server
    finally:
        server.stop()


def journal_database(server: Any, prefix: str = "oj_bench") -> str:
    """A new database with the journal schema migrated to head."""
    from offset_journal.journal.db import upgrade

    url = server.create_database(prefix)
    upgrade(url)
    return url


def unix_socket(url: str) -> str | None:
    """The Unix socket path a ``?host=/dir`` URL connects to (pgserver's), else None."""
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    host = u.query.get("host")
    if isinstance(host, str) and host.startswith("/"):
        return os.path.join(host, f".s.PGSQL.{u.port or 5432}")
    return None


def tcp_url(url: str, port: int, host: str = "127.0.0.1") -> str:
    """``url`` pointed at host:port over TCP instead of its Unix socket."""
    import sqlalchemy as sa

    u = sa.engine.make_url(url)
    u = u.set(host=host, port=port, query={k: v for k, v in u.query.items() if k != "host"})
    return u.render_as_string(hide_password=False)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def delay_proxy(target: str, rtt_ms: float) -> Iterator[int]:
    """Run bench/delay_proxy.py in its own process (so that its threads do not compete
    for this process's GIL); yields the local TCP port it listens on."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("delay_proxy.py")),
                             "--listen", str(port), "--target", target,
                             "--rtt-ms", str(rtt_ms)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if not ready.startswith("listening"):
            raise RuntimeError(f"delay proxy did not start: {ready!r}")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


# ------------------------------------------------------------------ the previous release

PREVIOUS_RELEASE = "79f8003"
"""The last commit before the storage change (Kafka offsets as per-source arrays
instead of one kafka_partitions row per partition): what ``--previous`` defaults to."""


def _git(*args: str) -> str:
    """``git -C ROOT args`` (the bench's own checkout); its stdout, stripped."""
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True)
    return done.stdout.strip()


def previous_release(rev: str = PREVIOUS_RELEASE) -> Path:
    """The repository's tree at git revision ``rev``, exported once (``git archive | tar
    -x``) into ~/.cache/offset-journal/releases/<full sha>/. Exits with one line when
    ``rev`` is not in this checkout (a shallow clone, a tarball)."""
    try:
        sha = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except (OSError, subprocess.CalledProcessError):
        try:
            shallow = _git("rev-parse", "--is-shallow-repository") == "true"
        except (OSError, subprocess.CalledProcessError):  # no git, or not a repository
            shallow = False
        hint = ("it is a shallow clone: `git fetch --unshallow` first" if shallow else
                "pass another revision")
        raise SystemExit(f"bench: git revision {rev!r} is not in {ROOT} ({hint})") from None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    dest = cache / "offset-journal" / "releases" / sha
    if (dest / "offset_journal" / "__init__.py").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha}-", dir=dest.parent))
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", "--format=tar", sha],
                               stdout=subprocess.PIPE)
    untar = subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() or untar.returncode:
        rmtree(tmp)
        raise SystemExit(f"bench: could not export {rev} ({sha}) from {ROOT} to {dest}")
    try:
        tmp.rename(dest)  # atomic: a concurrent export of the same sha may have won
    except OSError:
        rmtree(tmp)
    return dest


def tree_module(new: str, old: str) -> Any:
    """A module of the tree this child imports, by its path since 0.2.0 (``new``) or, in
    a previous release's tree, by its path before (``old``): the comparing benchmarks run
    the same child code against both layouts."""
    import importlib

    try:
        return importlib.import_module(new)
    except ModuleNotFoundError as exc:
        if not exc.name or not new.startswith(exc.name):
            raise
        return importlib.import_module(old)


def add_tree_options(parser: argparse.ArgumentParser) -> None:
    """``--previous REV`` and ``--current REV`` for the scripts comparing two releases."""
    parser.add_argument("--previous", default=PREVIOUS_RELEASE, metavar="REV",
                        help="git revision of the previous release (default %(default)s)")
    parser.add_argument("--current", metavar="REV",
                        help="compare with this revision instead of the working tree (e.g. "
                             "the previous one again: both sides should then match)")


def trees(args: argparse.Namespace) -> tuple[Path, Path]:
    """(previous, current) source trees from ``add_tree_options``' options."""
    return (previous_release(args.previous),
            previous_release(args.current) if args.current else ROOT)


def describe_tree(tree: Path) -> str:
    """Which code a tree is, for the report."""
    if tree != ROOT:
        return f"revision {tree.name[:10]} (exported to {tree})"
    try:
        dirty = " with uncommitted changes" if _git("status", "--porcelain") else ""
        return f"the working tree {ROOT} (HEAD {_git('rev-parse', '--short', 'HEAD')}{dirty})"
    except (OSError, subprocess.CalledProcessError):
        return f"the working tree {ROOT}"


class TreeProcess:
    """A Python child whose ``import offset_journal`` is ``tree``'s (PYTHONPATH; the
    current venv's dependencies), serving calls to the functions of one bench module:
    ``call(fn, **kwargs)`` runs ``module.fn(**kwargs)`` there. Arguments and results go
    as JSON lines over its stdin/stdout; whatever it prints goes to stderr. The module
    keeps any state (an open journal) between calls."""

    def __init__(self, tree: Path, module: str, label: str) -> None:
        self.label = label
        env = {**os.environ, TREE_ENV: str(tree),
               "PYTHONPATH": os.pathsep.join([str(tree), str(BENCH)])}
        # cwd: the tree, so that the '' sys.path entry of ``-c`` is not this checkout
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import _common; _common.serve({module!r})"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree)

    def call(self, fn: str, **kwargs: Any) -> Any:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps({"fn": fn, "kwargs": kwargs}) + "\n")
            stdin.flush()
        except BrokenPipeError:
            pass  # reported below
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"{self.label}: its process ended (exit {self.proc.wait()}), "
                               "see its stderr above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.label}: {fn}: {reply['error']} (traceback above)")
        return reply["result"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> TreeProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(module: str) -> None:
    """TreeProcess's child: answer calls on stdin until it closes."""
    import importlib
    import traceback

    out: IO[str] = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # prints (and C-level writes) go to stderr, the protocol has fd 1
    sys.stdout = sys.stderr
    import offset_journal

    tree = Path(os.environ[TREE_ENV]).resolve()
    if not Path(offset_journal.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"bench: offset_journal came from {offset_journal.__file__}, "
                         f"not from {tree}")
    mod = importlib.import_module(module)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            reply = {"result": getattr(mod, request["fn"])(**request["kwargs"])}
        except Exception as e:  # the parent reports it, the traceback goes to stderr
            traceback.print_exc()
            reply = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# ------------------------------------------------------------------ payloads


def kafka_offsets(partitions: int, base: int, per_topic: int = 100) -> dict[str, dict[str, int]]:
    """``partitions`` Kafka partitions over topics of up to ``per_topic`` partitions."""
    out: dict[str, dict[str, int]] = {}
    for i in range(partitions):
        topic = f"topic-{i // per_topic:03d}"
        out.setdefault(topic, {})[str(i % per_topic)] = base + i * 7
    return out


def kafka_progress(batch_id: int, partitions: int, *, name: str = "bench_q",
                   run_id: str = RUN_ID, query_id: str = QUERY_ID,
                   timestamp: str = "2026-01-01T00:00:00.000Z") -> str:
    """A progress JSON shaped as Spark's Kafka source reports it (one KafkaV2 source).

    Uniform offsets: batch_id * 1000 + 7 * i for partition i (small, the same advance
    everywhere) and latestOffset == endOffset. See realistic_progress for data that
    does not flatter compression."""
    end = kafka_offsets(partitions, (batch_id + 1) * 1000)
    return progress_json(batch_id, kafka_offsets(partitions, batch_id * 1000), end, end,
                          rows=1000 * partitions, lags=None, name=name, run_id=run_id,
                          query_id=query_id, timestamp=timestamp)


REALISTIC = ("realistic offsets: each partition's own base in [10^8, 10^10] (seeded RNG), "
             "the log growing 0-2,000 records per partition and batch, the batch ending "
             "0-500 records behind latestOffset for 80% of partitions (at it for the rest)")


def realistic_progress(partitions: int, batches: int, *, seed: int, name: str = "bench_q",
                       run_id: str = RUN_ID, query_id: str = QUERY_ID,
                       timestamp: Callable[[int], str] = lambda b: "2026-01-01T00:00:00.000Z",
                       ) -> Iterator[str]:
    """Progress JSONs of batches 0 .. ``batches`` - 1 of one run (see REALISTIC), the
    same for the same (seed, partitions, name, run_id). Topics as kafka_offsets. Each
    batch starts where the previous one ended; latestOffset is the log's end, which
    never goes back; the metrics are the batch's real offsets behind latest."""
    rng = random.Random(f"{seed}/{partitions}/{name}/{run_id}")
    keys = [(f"topic-{i // 100:03d}", str(i % 100)) for i in range(partitions)]
    log_end = [rng.randint(10 ** 8, 10 ** 10) for _ in keys]
    end = list(log_end)

    def nest(values: list[int]) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for (topic, partition), v in zip(keys, values, strict=True):
            out.setdefault(topic, {})[partition] = v
        return out

    for batch_id in range(batches):
        start = end
        log_end = [e + rng.randint(0, 2000) for e in log_end]
        end = [max(s, e - (rng.randint(0, 500) if rng.random() < 0.8 else 0))
               for s, e in zip(start, log_end, strict=True)]
        yield progress_json(batch_id, nest(start), nest(end), nest(log_end),
                             rows=sum(end) - sum(start),
                             lags=[e - x for e, x in zip(log_end, end, strict=True)],
                             name=name, run_id=run_id, query_id=query_id,
                             timestamp=timestamp(batch_id))


def progress_json(batch_id: int, start: dict[str, dict[str, int]],
                   end: dict[str, dict[str, int]], latest: dict[str, dict[str, int]], *,
                   rows: int, lags: list[int] | None, name: str, run_id: str, query_id: str,
                   timestamp: str) -> str:
    """A progress JSON of one Kafka source reading ``start`` to ``end`` (topic ->
    partition -> offset), Spark's shape; ``lags``: its offsets-behind-latest metrics."""
    topics = ",".join(sorted(end))
    metrics = ({"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0",
                "minOffsetsBehindLatest": "0"} if lags is None else
               {"avgOffsetsBehindLatest": str(sum(lags) / len(lags)),
                "maxOffsetsBehindLatest": str(max(lags)),
                "minOffsetsBehindLatest": str(min(lags))})
    body = {
        "id": query_id, "runId": run_id, "name": name, "timestamp": timestamp,
        "batchId": batch_id, "batchDuration": 812, "numInputRows": rows,
        "inputRowsPerSecond": 1234.5, "processedRowsPerSecond": 2345.6,
        "durationMs": {"addBatch": 650, "commitOffsets": 40, "getBatch": 1,
                       "latestOffset": 12, "queryPlanning": 30, "triggerExecution": 812,
                       "walCommit": 45},
        "eventTime": {"avg": "2026-01-01T00:00:00.000Z", "max": "2026-01-01T00:00:01.000Z",
                      "min": "2025-12-31T23:59:59.000Z",
                      "watermark": "2025-12-31T23:50:00.000Z"},
        "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 5120,
                            "numRowsUpdated": 120, "memoryUsedBytes": 1048576}],
        "sources": [{
            "description": f"KafkaV2[Subscribe[{topics[:200]}]]",
            "startOffset": start, "endOffset": end, "latestOffset": latest,
            "numInputRows": rows, "inputRowsPerSecond": 1234.5,
            "processedRowsPerSecond": 2345.6, "metrics": metrics,
        }],
        "sink": {"description": "DeltaSink[s3://bucket/table]", "numOutputRows": 1000},
    }
    return json.dumps(body)


# The columns of a batch_sources row that hold a Kafka source's offsets (migration 0013).
STORED_OFFSETS = ("description", "kind", "start_offset", "end_offset", "latest_offset",
                  "num_input_rows", "problem", "kafka_layout", "end_offsets", "read_spans",
                  "latest_lags", "read_spans_wide", "latest_lags_wide")


def check_stored_as_journaled(url: str, batch_pk: int, progress: str) -> None:
    """Exit with one line unless the source rows a benchmark loaded in SQL for batch
    ``batch_pk`` hold what the journal's own writer stores for ``progress`` (that
    batch's progress JSON, under a run of its own): the same offsets columns, and the
    same partitions through the kafka_partitions view. The writer's batch is written in
    a transaction that is rolled back. A loader that writes another storage than the
    journal's (as restart_planning's did after migration 0013) stops here."""
    import sqlalchemy as sa

    from offset_journal.journal import Journal
    from offset_journal.journal.schema import batch_sources, batches, kafka_partitions
    from offset_journal.records import batch_from_progress

    s, k = batch_sources.c, kafka_partitions.c

    def stored(conn: Any, pk: int) -> list[Any]:
        return [conn.execute(sa.select(s.source_index, *(s[c] for c in STORED_OFFSETS))
                             .where(s.batch_pk == pk).order_by(s.source_index)).all(),
                conn.execute(sa.select(k.source_index, k.topic, k.partition, k.start_offset,
                                       k.end_offset, k.latest_offset)
                             .where(k.batch_pk == pk)
                             .order_by(k.source_index, k.topic, k.partition)).all()]

    rec = batch_from_progress(progress)
    with Journal(url) as journal, journal.engine.connect() as conn:
        tx = conn.begin()
        try:
            journal.record_batch(rec, conn)
            probe = conn.execute(sa.select(batches.c.id).where(
                batches.c.run_id == rec.run_id, batches.c.batch_id == rec.batch_id)).scalar_one()
            loaded, written = stored(conn, batch_pk), stored(conn, probe)
        finally:
            tx.rollback()
    if not loaded[1] or loaded != written:
        raise SystemExit(f"bench: batch {batch_pk} as loaded is not what the journal stores "
                         f"for it: {loaded} != {written}")


class Progress:
    """What the listener reads off a QueryProgressEvent: ``event.progress.json``."""

    def __init__(self, text: str) -> None:
        self.json = text


class ProgressEvent:
    def __init__(self, text: str) -> None:
        self.progress = Progress(text)


def rss_bytes() -> int:
    """Resident set size of this process now (from /proc/self/statm)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def dir_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of the files under ``path`` (files removed while counting count 0)."""
    total = 0
    for f in Path(path).rglob("*"):
        try:
            total += f.stat().st_size if f.is_file() else 0
        except FileNotFoundError:
            pass
    return total


def rmtree(path: str | os.PathLike[str]) -> None:
    shutil.rmtree(path, ignore_errors=True)


def totals_processor(initial: bool = True) -> Any:
    """The benches' transformWithState: per key (n, max, total) in one value state,
    seeded from ``initial_state`` rows (key, n, max, total) when ``initial``."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Totals(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.t = handle.getValueState("totals", StructType(
                [StructField(n, LongType()) for n in ("n", "mx", "total")]))

        def handleInitialState(self, key: Any, row: Any, timerValues: Any) -> None:
            if initial:
                self.t.update((row[1], row[2], row[3]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            n, mx, total = self.t.get() if self.t.exists() else (0, None, 0)
            for r in rows:
                n, total = n + 1, total + r.v
                mx = r.v if mx is None or r.v > mx else mx
            self.t.update((n, mx, total))
            yield Row(key=key[0], n=n)

        def close(self) -> None:
            pass

    return Totals()
