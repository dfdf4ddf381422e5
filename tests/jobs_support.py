"""Helpers for end-to-end tests of the jobs in jobs/."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

JOBS = Path(__file__).resolve().parents[1] / "jobs"

SHORT_LIVED_DRIVER = {
    "PYSPARK_SUBMIT_ARGS": "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell"}
"""The environment of a Spark driver the tests start in a process of its own and that
lives a minute or less (a killed job, the demo, a benchmark at its tiny size): such a
driver never profits from the JIT's second tier, and C1 alone started and ran a small
query 15 to 25 % sooner here (two paired runs on two cores: 24 s against 21 and 17 s)."""


def load_job(name: str) -> Any:
    if str(JOBS) not in sys.path:
        sys.path.insert(0, str(JOBS))
    return importlib.import_module(name)


def run_to_end(spark: Any, listener: Any, module: Any, argv: list[str]) -> Any:
    """Run a job's query in this process until it ends (``--trigger available-now``), and
    wait until the listener has journaled its end."""
    args = module.parser().parse_args(argv)
    q = module.build_query(spark, args)
    q.awaitTermination(300)
    assert q.exception() is None, q.exception()
    assert listener.wait_terminated(q.runId, 60)
    return q


def read_parquet_outputs(spark: Any, base: Path, columns: list[str]) -> list[tuple]:
    """Rows of every per-checkpoint output directory under ``base``, each read through its
    own ``_spark_metadata`` log (files of uncommitted batches are not read). Binary
    columns as ``bytes`` (PySpark 3.5 returns ``bytearray``, which is not hashable)."""
    rows: list[tuple] = []
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        df = spark.read.parquet(str(sub))
        rows += [tuple(bytes(v) if isinstance(v, bytearray) else v for v in r)
                 for r in df.select(*columns).collect()]
    return rows


def start_driver(job: str, argv: list[str], log: Path, **env_extra: str) -> Any:
    """Start a job as its own driver process (Python and its JVM in a new session, so
    that ``os.killpg(proc.pid, SIGKILL)`` kills the whole driver)."""
    import os
    import subprocess

    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               **env_extra)
    for key, value in SHORT_LIVED_DRIVER.items():
        env.setdefault(key, value)
    return subprocess.Popen([sys.executable, str(JOBS / f"{job}.py"), *argv], env=env,
                            stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


# --------------------------------------------------------------------------- the batch in flight


class _Inotify:
    """Linux inotify on directories (through libc): a file renamed into place, created or
    closed after writing, reported as it happens, so the driver can be stopped within
    microseconds of its sink's commit."""

    def __init__(self, *dirs: Path) -> None:
        import ctypes
        import os

        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, ctypes.get_errno()
        self.dirs: dict[int, Path] = {}
        for d in dirs:  # IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(d), 0x8 | 0x80 | 0x100)
            assert wd >= 0, (d, ctypes.get_errno())
            self.dirs[wd] = d

    def names(self, timeout: float) -> list[Path]:
        import os
        import select
        import struct

        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        data, out, i = os.read(self.fd, 1 << 16), [], 0
        while i < len(data):
            wd, _mask, _cookie, n = struct.unpack_from("iIII", data, i)
            out.append(self.dirs[wd] / data[i + 16:i + 16 + n].rstrip(b"\0").decode())
            i += 16 + n
        return out

    def close(self) -> None:
        import os

        os.close(self.fd)


def sink_batch_of(path: Path, app_id: str | None) -> int | None:
    """The batch id a sink's new log file commits: a file sink's ``N`` or ``N.compact``,
    a Delta commit's txn version of ``app_id``; None for any other file (or a Delta
    commit not complete yet)."""
    import json
    import re

    if re.fullmatch(r"[0-9]+(\.compact)?", path.name):
        return int(path.name.split(".")[0])
    if app_id is None or not re.fullmatch(r"[0-9]{20}\.json", path.name):
        return None
    try:
        for line in path.read_text().splitlines():
            txn = json.loads(line).get("txn") if line.strip() else None
            if txn and txn.get("appId") == app_id:
                return int(txn["version"])
    except (OSError, ValueError):
        return None
    return None


def kill_after_sink_commit(proc: Any, log_dir: Path, checkpoint: Path, *, app_id: Any,
                           after: Any, log: Path, timeout: float = 300) -> int:
    """SIGKILL the driver (its whole process group) right after its sink committed a
    batch N and before Spark wrote ``commits/N``: on each new file of the sink's log
    (``log_dir``), the driver is SIGSTOPped, and killed if ``commits/N`` is absent and
    ``after()`` holds (else it goes on, SIGCONT). ``app_id``: a Delta sink's txn appId
    (or a function giving it), None for a file sink. Returns N."""
    import os
    import signal
    import time

    deadline = time.monotonic() + timeout
    while not log_dir.is_dir():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"no {log_dir} yet"
        time.sleep(0.1)
    watch = _Inotify(log_dir)
    try:
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "no sink commit caught before commits/N"
            for path in watch.names(1.0):
                if sink_batch_of(path, None) is None and not path.name.endswith(".json"):
                    continue
                os.killpg(proc.pid, signal.SIGSTOP)
                batch = sink_batch_of(path, app_id() if callable(app_id) else app_id)
                if (batch is not None and not (checkpoint / "commits" / str(batch)).exists()
                        and after()):
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
                    return batch
                os.killpg(proc.pid, signal.SIGCONT)
    finally:
        watch.close()
