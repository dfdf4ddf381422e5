"""What a restore converts, field by field, proven on Spark: a struct's fields declared
in another order are written by name (Spark's own cast between structs is positional),
and a date that became a timestamp is keyed at midnight of the zone the new query runs
in, declared or the job's session's, never the restoring session's. Real Spark 4.2 with
its Kafka connector on the test broker, real Postgres."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from offset_journal import Journal
from tests import restore_support as rs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SESSION_ZONE = "spark.sql.session.timeZone"


def _savepoint(journal_url: str, capsys: Any, name: str, checkpoint: Path, to: Path) -> None:
    code, _out, err = rs.cli(capsys, "--database-url", journal_url, "savepoint", "create",
                             name, "--checkpoint", str(checkpoint), "--to", str(to))
    assert code == 0, err


# --------------------------------------------------------------------------- structs


def _nested(spark: Any, servers: str, topic: str, starting: str, swapped: bool) -> Any:
    """An aggregation keyed by ``info: struct<a, b>`` keeping ``max: struct<ts, v>``
    (all four ints or longs: a positional cast of the other order is silent);
    ``swapped``: both structs declared in the other order."""
    from pyspark.sql import functions as F

    events = rs.events(spark, servers, topic, starting)
    a = F.substring("grp", 2, 3).cast("int").alias("a")
    b = (F.col("amount") % 3).cast("int").alias("b")
    ts = ((F.col("amount") * 13) % 17).alias("ts")
    v = F.col("amount").alias("v")
    info = F.struct(b, a) if swapped else F.struct(a, b)
    mx = F.struct(v, ts) if swapped else F.struct(ts, v)
    out = (events.select(info.alias("info"), mx.alias("m")).groupBy("info")
           .agg(F.max("m").alias("max")))
    return out.writeStream.outputMode("update").format("noop")


def _by_name(spark: Any, checkpoint: Path) -> dict[tuple[int, int], tuple[int, int]]:
    """Each key's (a, b) and its max's (ts, v), read by field name."""
    return {(r.key.info.a, r.key.info.b): (r.value.max.ts, r.value.max.v)
            for r in rs.state(spark, checkpoint)}


def test_struct_fields_in_another_order_are_restored_by_name(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1 keys by ``info: struct<a, b>`` and keeps ``max: struct<ts, v>``; v2 declares
    ``struct<b, a>`` and ``struct<v, ts>``. The restore says it takes both by name, and
    every key's fields and its max read back by name from v2's checkpoint are v1's."""
    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
    from offset_journal.state import restore_savepoint

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    kafka_cluster.produce(kafka_topic, 60, value=rs.amounts)
    with session_conf(spark, PROVIDER_CONF, rs.HDFS):
        rs.run(_nested(spark, servers, kafka_topic, "earliest", False), "nested",
               tmp_path / "ck-v1", listener)
    _savepoint(journal_url, capsys, "nested", tmp_path / "ck-v1", tmp_path / "sp")
    v1 = _by_name(spark, tmp_path / "ck-v1")
    assert len(v1) == 21 and any(a != b for a, b in v1), "a swap would show"
    assert any(ts != v for ts, v in v1.values())

    def v2() -> Any:
        return (_nested(spark, servers, kafka_topic, rs.ends(journal_url, str(tmp_path / "sp")),
                        True).queryName("nested")
                .option("checkpointLocation", str(tmp_path / "ck-v2")))

    with Journal(journal_url) as journal:
        restored = restore_savepoint(spark, str(tmp_path / "sp"), str(tmp_path / "ck-v2"), v2,
                                     journal=journal)
    assert _by_name(spark, tmp_path / "ck-v2") == v1
    notes = " ".join(restored.layout.notes)
    assert "the key: field 'info': its fields taken by name, in the new query's order " \
           "(b, a)" in notes
    assert "the value: field 'max': its fields taken by name, in the new query's order " \
           "(v, ts)" in notes


# --------------------------------------------------------------------------- dates


DAYS = ("2026-03-07", "2026-03-08", "2026-03-09")  # New York moves to summer time on the 8th
NEW_YORK = "America/New_York"


def _day_value(i: int) -> str:
    return f"{DAYS[i % 3]},{(i * 37) % 101}"


DAY_QUERY = '''
from pyspark.sql import functions as F


def v2(spark, checkpoint, starting):
    """v2 keys each record by its day as a timestamp: midnight in its session's zone."""
    values = F.split(F.col("value").cast("string"), ",")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", {servers!r})
              .option("subscribe", {topic!r}).option("startingOffsets", starting[0])
              .option("maxOffsetsPerTrigger", "25").load()
              .select(F.to_timestamp(values[0]).alias("day"),
                      values[1].cast("long").alias("amount")))
    totals = events.groupBy("day").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    return (totals.writeStream.outputMode("update").format("noop").queryName("days")
            .option("checkpointLocation", checkpoint))
'''


def _v1_days(spark: Any, servers: str, topic: str) -> Any:
    from pyspark.sql import functions as F

    values = F.split(F.col("value").cast("string"), ",")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", servers)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "25").load()
              .select(F.to_date(values[0]).alias("day"), values[1].cast("long").alias("amount")))
    totals = events.groupBy("day").agg(F.count("*").alias("n"), F.sum("amount").alias("total"))
    return totals.writeStream.outputMode("update").format("noop")


def _midnight(day: str, zone: str) -> int:
    """Epoch seconds of ``day``'s midnight in ``zone``."""
    return int(datetime.combine(date.fromisoformat(day), datetime.min.time(),
                                ZoneInfo(zone)).timestamp())


def _day_state(spark: Any, checkpoint: Path) -> dict[int, tuple[int, int]]:
    """A state's keys as instants (epoch seconds), each with its buffer (count, sum)."""
    from pyspark.sql import functions as F

    spark.streams.active  # noqa: B018 - the StateStoreCoordinator
    rows = (spark.read.format("statestore").load(str(checkpoint))
            .select(F.unix_seconds("key.day").alias("s"), "value.*").collect())
    return {r[0]: (r[1], r[2]) for r in rows}


def _totals(produced: list[tuple[int, int, bytes, bytes]],
            zone: str) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for *_x, value in produced:
        day, amount = value.decode().split(",")
        n, total = out.get(_midnight(day, zone), (0, 0))
        out[_midnight(day, zone)] = (n + 1, total + int(amount))
    return out


def test_a_date_key_that_became_a_timestamp_is_restored_in_the_new_querys_zone(
        journaled_spark, journal_url, kafka_cluster, kafka_topic, tmp_path, capsys):
    """v1 keys by ``day: date``; v2 by the day as a timestamp, in a session on New York
    time. ``state restore`` runs in a session of its own (here UTC): without
    ``--time-zone`` it is refused in one line naming the flag (its session's zone would
    key each day at 00:00Z, where v2 never looks); with ``--time-zone
    America/New_York`` (recorded with the plan) every day is keyed at New York's
    midnight, and v2, run on, ends with one key per day holding every record's count
    and sum. The same restore through the Python API in v2's own session takes that
    session's zone and names it. ``plan --restore`` names the command that restores."""
    import runpy

    from offset_journal.savepoint.spark import PROVIDER_CONF, session_conf
    from offset_journal.state import restore_savepoint

    spark, listener = journaled_spark
    servers = kafka_cluster.bootstrap_servers
    sp = tmp_path / "sp"
    produced = kafka_cluster.produce(kafka_topic, 45, value=_day_value)
    with session_conf(spark, PROVIDER_CONF, rs.HDFS), session_conf(spark, SESSION_ZONE, "UTC"):
        rs.run(_v1_days(spark, servers, kafka_topic), "days", tmp_path / "ck-v1", listener)
    _savepoint(journal_url, capsys, "days", tmp_path / "ck-v1", sp)
    produced += kafka_cluster.produce(kafka_topic, 30, start=45, value=_day_value)
    query = tmp_path / "v2.py"
    query.write_text(DAY_QUERY.format(servers=servers, topic=kafka_topic))
    restore = ["--database-url", journal_url, "state", "restore", str(sp), "--query",
               f"{query}:v2"]

    with session_conf(spark, SESSION_ZONE, "UTC"):
        code, out, err = rs.cli(capsys, *restore, "--to", str(tmp_path / "ck-refused"))
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert ("the key: field 'day' is date in the savepoint and timestamp in the new "
                "query: a date becomes the timestamp of its midnight") in err
        assert err.strip().endswith("(--time-zone ZONE, the new query's "
                                    "spark.sql.session.timeZone)")
        assert "Rules(" not in err and not (tmp_path / "ck-refused").exists()

        code, out, err = rs.cli(capsys, "--database-url", journal_url, "plan", "days",
                                "--savepoint", str(sp), "--restore")
        assert code == 0, err
        assert "restored: `offset-journal state restore" in out and "restore_savepoint" not in out

        code, out, err = rs.cli(capsys, *restore, "--to", str(tmp_path / "ck-v2"),
                                "--time-zone", NEW_YORK)
        assert code == 0, err
    assert ("field 'day' widened from date to timestamp: each date at midnight in "
            "America/New_York") in out
    with Journal(journal_url) as journal:
        recorded = journal.recorded_plans("days")[-1]
    assert recorded.command == "state-restore"
    assert recorded.request["restore_rules"] == {"time_zone": NEW_YORK}
    v1_totals = _totals(produced[:45], NEW_YORK)
    assert _day_state(spark, tmp_path / "ck-v2") == v1_totals

    v2 = runpy.run_path(str(query))["v2"]
    with session_conf(spark, SESSION_ZONE, NEW_YORK):
        rs.run(v2(spark, str(tmp_path / "ck-v2"), [rs.ends(journal_url, str(sp))]), "days",
               tmp_path / "ck-v2", listener)
        with Journal(journal_url) as journal:
            restored = restore_savepoint(
                spark, str(sp), str(tmp_path / "ck-api"),
                lambda: v2(spark, str(tmp_path / "ck-api"), [rs.ends(journal_url, str(sp))]),
                journal=journal)
    assert _day_state(spark, tmp_path / "ck-v2") == _totals(produced, NEW_YORK)
    assert len(_totals(produced, NEW_YORK)) == 3
    assert any("each date at midnight in America/New_York" in n
               for n in restored.layout.notes)
    assert _day_state(spark, tmp_path / "ck-api") == v1_totals
    assert set(v1_totals).isdisjoint(_totals(produced[:45], "UTC")), "UTC's keys differ"
