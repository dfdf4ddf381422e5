"""Shared helpers for the benchmarks: statistics, markdown tables, a Postgres, payloads.

Not a benchmark itself. Every script imports it as ``from _common import ...`` (the
scripts run as ``.venv/bin/python bench/<name>.py``, so bench/ is on sys.path).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the package and tests/ without installing anything
    sys.path.insert(0, str(ROOT))

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
    from offset_journal.db import upgrade

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
    """A progress JSON shaped as Spark's Kafka source reports it (one KafkaV2 source)."""
    start = kafka_offsets(partitions, batch_id * 1000)
    end = kafka_offsets(partitions, (batch_id + 1) * 1000)
    topics = ",".join(sorted(end))
    body = {
        "id": query_id, "runId": run_id, "name": name, "timestamp": timestamp,
        "batchId": batch_id, "batchDuration": 812, "numInputRows": 1000 * partitions,
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
            "startOffset": start, "endOffset": end, "latestOffset": end,
            "numInputRows": 1000 * partitions, "inputRowsPerSecond": 1234.5,
            "processedRowsPerSecond": 2345.6,
            "metrics": {"avgOffsetsBehindLatest": "0.0", "maxOffsetsBehindLatest": "0",
                        "minOffsetsBehindLatest": "0"},
        }],
        "sink": {"description": "DeltaSink[s3://bucket/table]", "numOutputRows": 1000},
    }
    return json.dumps(body)


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
