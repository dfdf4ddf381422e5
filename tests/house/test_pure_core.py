"""The pure core loads without the database: plans, audits, records and offsets are
decided over plain data, so they import no database module, and a machine (or a test)
without SQLAlchemy and psycopg can still compute a plan from journal rows.

Run in a fresh interpreter where importing sqlalchemy, psycopg or pyspark fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PURE = (
    "offset_journal",
    "offset_journal.errors",
    "offset_journal.redaction",
    "offset_journal.formatting",
    "offset_journal.values",
    "offset_journal.offsets",
    "offset_journal.records",
    "offset_journal.rows",
    "offset_journal.overlap",
    "offset_journal.restart.compare",
    "offset_journal.restart",
    "offset_journal.restart.model",
    "offset_journal.restart.request",
    "offset_journal.restart._inputs",
    "offset_journal.restart.decide.plan",
    "offset_journal.restart.decide.kafka_offsets",
    "offset_journal.restart.decide.translate",
    "offset_journal.kafka.mirror",
    "offset_journal.restart.decide.from_time",
    "offset_journal.restart.decide.other_sources",
    "offset_journal.restart.decide.state_aware",
    "offset_journal.restart.decide.checks",
    "offset_journal.restart.decide.start_after",
    "offset_journal.restart.decide.start_at",
    "offset_journal.restart.decide.translated",
    "offset_journal.restart.decide.refuse",
    "offset_journal.restart.decide.flagged",
    "offset_journal.restart.decide.start",
    "offset_journal.restart.decide.sources",
    "offset_journal.restart.decide.carried",
    "offset_journal.restart.decide.cluster",
    "offset_journal.restart.decide.sink",
    "offset_journal.restart.decide.sink_held",
    "offset_journal.wording",
    "offset_journal.audit.model",
    "offset_journal.audit._core",
    "offset_journal.audit._report",
)

_PROBE = textwrap.dedent("""
    import importlib, importlib.abc, json, sys

    BLOCKED = ("sqlalchemy", "psycopg", "pyspark", "alembic")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is not importable in this test")
            return None

    sys.meta_path.insert(0, Block())
    failed = {}
    for name in sys.argv[1:]:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed[name] = str(exc)
    print(json.dumps(failed))
""")


def _import_blocked(*modules: str) -> dict[str, str]:
    import json

    out = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True,
                         text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_pure_modules_load_without_the_database_driver():
    assert _import_blocked(*PURE) == {}


def test_the_probe_does_block_the_database_modules():
    # The journal is SQL: if it loaded here, the probe would be proving nothing.
    failed = _import_blocked("offset_journal.journal", "offset_journal.restart.edge")
    assert set(failed) == {"offset_journal.journal", "offset_journal.restart.edge"}
    assert all("sqlalchemy" in why for why in failed.values())


def test_a_plan_is_computed_without_the_database_driver():
    """Not only importable: the planner decides a plan from journal rows alone."""
    script = _PROBE.replace("print(json.dumps(failed))", textwrap.dedent("""
        assert not failed, failed
        from datetime import datetime, timezone
        from offset_journal.rows import Batch, SourceOffsets
        from offset_journal.offsets import partition_offsets
        from offset_journal.restart import compute_plan
        end = {"t": {"0": 7, "1": 9}}
        start = {"t": {"0": 2, "1": 3}}
        src = SourceOffsets(source_index=0, description="KafkaV2[Subscribe[t]]",
                            kind="kafka", start_offset=start, end_offset=end,
                            num_input_rows=11,
                            partitions=tuple(partition_offsets(start, end)))
        anchor = Batch(query_name="q", query_id="qid", run_id="run", batch_id=4,
                       trigger_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                       batch_duration_ms=100, num_input_rows=11, watermark=None,
                       event_time_min=None, event_time_max=None, sources=(src,))
        plan = compute_plan("q", anchor)
        assert "sqlalchemy" not in sys.modules
        print(plan.sources[0].options["startingOffsets"])
    """))
    out = subprocess.run([sys.executable, "-c", script, *PURE], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == '{"t":{"0":7,"1":9}}'


def test_a_plan_option_is_named_once():
    """PlanRequest's fields are the one list of a plan's options: compute_plan hands
    them to the request (the facts come as typed groups, named apart from them), and
    refuses any other name."""
    import dataclasses
    import inspect

    import pytest

    from offset_journal.restart import PlanInputs
    from offset_journal.restart.request import REQUEST_FIELDS, PlanRequest

    facts = {f.name for f in dataclasses.fields(PlanInputs)}
    assert REQUEST_FIELDS == {f.name for f in dataclasses.fields(PlanRequest)}
    assert not (facts - {"request"}) & REQUEST_FIELDS
    from offset_journal.restart import compute_plan

    groups = set(inspect.signature(compute_plan).parameters) - {"query_name", "asked"}
    assert groups and not groups & REQUEST_FIELDS

    with pytest.raises(TypeError, match="bogus"):
        compute_plan("q", None, bogus=1)  # type: ignore[arg-type]
