"""The Grafana dashboard (docs/grafana/): every panel's SQL, with Grafana's macros and the
query variable expanded as Grafana does, run against a real journal; the provisioning and
docker-compose files parse and point at each other. (Grafana itself is not run here.)"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

from tests.payloads import progress
from tests.support import journal_batches, journal_report_runs, journal_roles, role_url, ts

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docs" / "grafana" / "offset-journal.json"
PROVISIONING = ROOT / "docs" / "grafana" / "provisioning"
FROM = datetime(2024, 1, 1, tzinfo=timezone.utc)
TO = datetime(2024, 1, 1, 1, tzinfo=timezone.utc)
INTERVAL_S = 60

# Per panel: the columns its SQL must return (a time series: "time" first).
EXPECTED = {
    "Total lag now": ["lag"],
    "Last batch age": ["age_seconds"],
    "Freshness now": ["freshness_seconds"],
    "Runs in range": ["runs"],
    "Lag per partition (10 furthest behind)": ["time", "metric", "lag"],
    "Total lag": ["time", "max_lag", "avg_lag"],
    "Freshness": ["time", "max_freshness", "avg_freshness"],
    "Batch rate and input rows": ["time", "batches_per_minute", "input_rows_per_second"],
    "Batch duration": ["time", "avg_duration_ms", "max_duration_ms"],
    "Current lag per partition": ["topic", "partition", "end_offset", "latest_offset", "lag",
                                  "trigger_at"],
    "Runs": ["run_id", "checkpoint_query_id", "started_at", "terminated_at", "failed", "host",
             "batches", "first_batch", "last_batch"],
    "Time to data loss": ["topic", "partition", "status", "unread", "lost", "loss_earliest",
                          "seconds_left", "basis", "recorded_at"],
}


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _call_args(sql: str, start: int) -> tuple[str, int]:
    """The text between the parenthesis at ``start`` and its match, and the index after."""
    depth = 0
    for i in range(start, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[i], 0)
        if depth == 0:
            return sql[start + 1:i], i + 1
    raise AssertionError(f"unbalanced macro call in {sql[start:start + 80]!r}")


def expand(sql: str, variables: dict[str, str]) -> str:
    """Grafana's Postgres macros and template variables, as Grafana expands them."""
    frm, to = _literal(FROM.isoformat()), _literal(TO.isoformat())
    sql = sql.replace("$__timeFrom()", frm).replace("$__timeTo()", to)
    sql = sql.replace("$__interval_ms", str(INTERVAL_S * 1000))
    for macro in ("$__timeFilter", "$__timeGroupAlias"):
        while (at := sql.find(macro + "(")) >= 0:
            args, end = _call_args(sql, at + len(macro))
            if macro == "$__timeFilter":
                repl = f"{args} BETWEEN {frm} AND {to}"
            else:
                column = args.rsplit(",", 1)[0].strip()
                repl = (f"to_timestamp(floor(extract(epoch FROM {column}) / {INTERVAL_S}) "
                        f"* {INTERVAL_S}) AS \"time\"")
            sql = sql[:at] + repl + sql[end:]
    known = "|".join(re.escape(n) for n in variables)
    rest = re.sub(r"\$\{(?:" + known + r"):(?:sqlstring|percentencode)\}", "", sql) \
        if variables else sql
    assert "$" not in rest, f"a macro or variable the test does not know: {sql}"
    for name, value in variables.items():
        sql = sql.replace("${" + name + ":sqlstring}", _literal(value))
        # Grafana's percentencode: encodeURIComponent, and !'()* encoded too (RFC 3986)
        sql = sql.replace("${" + name + ":percentencode}", quote(value, safe=""))
    return sql


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def _run(url: str, sql: str, *, conforming: bool = True) -> tuple[list[str],
                                                                  list[tuple[Any, ...]]]:
    """Run ``sql`` as Grafana sends it: one text, no parameters (so psycopg does not read
    a '%' in it as a placeholder)."""
    import psycopg
    import sqlalchemy as sa

    from offset_journal.journal.db import resolve_url

    dsn = sa.engine.make_url(resolve_url(url)).set(drivername="postgresql")
    with psycopg.connect(dsn.render_as_string(hide_password=False)) as conn:
        if not conforming:  # a server configured the old way: '\\'' is an escaped quote
            conn.execute("SET standard_conforming_strings = off")
        cur = conn.execute(sql)
        return [d.name for d in cur.description or ()], [tuple(r) for r in cur.fetchall()]


def test_expand_knows_grafanas_macros() -> None:
    got = expand("SELECT $__timeGroupAlias(b.t, $__interval), $__interval_ms FROM x "
                 "WHERE n = ${query:sqlstring} AND $__timeFilter(COALESCE(max(t), s)) "
                 "AND s <= $__timeTo()", {"query": "o'rders"})
    assert "floor(extract(epoch FROM b.t) / 60) * 60) AS \"time\", 60000" in got
    assert "n = 'o''rders'" in got and "COALESCE(max(t), s) BETWEEN '2024-01-01" in got
    with pytest.raises(AssertionError):
        expand("SELECT $__unixEpochFilter(t)", {})


def _record_forecasts(url: str) -> None:
    """What `retention --record` keeps for 'orders': one partition lost, one at risk, one
    at risk and overdue (recorded a while ago)."""
    from datetime import timedelta

    from offset_journal.journal import Journal

    row = {"query_name": "orders", "source_index": 0, "topic": "orders", "unread": 400,
           "next_offset": 100, "log_end": 500, "first_unread_at": None, "loss_latest": None}
    with Journal(url) as j:
        j.record_forecasts(["orders"], [
            {**row, "partition": 1, "status": "lost", "log_start": 160, "lost": 60,
             "loss_earliest": None, "basis": None},
            {**row, "partition": 2, "status": "at-risk", "log_start": 0, "lost": 0,
             "loss_earliest": datetime.now(timezone.utc) + timedelta(hours=5),
             "loss_latest": datetime.now(timezone.utc) + timedelta(hours=6),
             "basis": "time"},
            {**row, "partition": 3, "status": "at-risk", "log_start": 0, "lost": 0,
             "loss_earliest": datetime.now(timezone.utc) - timedelta(minutes=5),
             "loss_latest": datetime.now(timezone.utc) + timedelta(minutes=1),
             "basis": "time"}])


def test_every_panel_answers_from_a_real_journal(journal_url: str) -> None:
    journal_report_runs(journal_url)
    _record_forecasts(journal_url)
    dash = _dashboard()
    [variable] = dash["templating"]["list"]
    _, names = _run(journal_url, variable["query"])
    assert names == [("orders",)]
    titles = set()
    for panel in dash["panels"]:
        titles.add(panel["title"])
        assert panel["datasource"]["uid"] == "offset-journal"
        for target in panel["targets"]:
            columns, rows = _run(journal_url, expand(target["rawSql"], {"query": "orders"}))
            assert columns == EXPECTED[panel["title"]], panel["title"]
            assert rows, f"{panel['title']}: no rows"
            if target["format"] == "time_series":
                assert columns[0] == "time" and all(r[0] is not None for r in rows)
                assert any(v is not None for r in rows for v in r[1:]), panel["title"]
    assert titles == set(EXPECTED)
    # what the panels show, checked against the journal written
    _, rows = _run(journal_url, expand(_sql(dash, "Lag per partition (10 furthest behind)"),
                                       {"query": "orders"}))
    assert max(r[2] for r in rows if r[1] == "orders-2") == 700
    assert {r[1] for r in rows} == {f"{t}-{p}" for t in ("orders", "refunds") for p in range(3)}
    _, [(runs,)] = _run(journal_url, expand(_sql(dash, "Runs in range"), {"query": "orders"}))
    assert runs == 3
    _, rows = _run(journal_url, expand(_sql(dash, "Time to data loss"), {"query": "orders"}))
    assert [(r[1], r[2], r[4]) for r in rows] == [(1, "lost", 60), (3, "at-risk", 0),
                                                   (2, "at-risk", 0)]
    assert rows[1][6] == 0 and 4.9 * 3600 < rows[2][6] <= 5 * 3600  # overdue: 0, not < 0


def test_time_to_data_loss_keeps_a_recorded_loss_until_dealt_with(journal_url: str) -> None:
    """Once the query read on past records retention deleted (failOnDataLoss=false), the
    next `retention --record` no longer says them lost: the panel must still show them,
    from the recorded losses, as `check` does, until a person acknowledges them or a
    restart plan after the same batch accepted data loss there."""
    from offset_journal.journal import Journal
    from offset_journal.restart import PlanRequest, plan_restart
    from offset_journal.restart.record import plan_row

    journal_report_runs(journal_url)
    row = {"query_name": "orders", "source_index": 0, "topic": "orders", "log_end": 900,
           "first_unread_at": None, "loss_earliest": None, "loss_latest": None,
           "basis": None}
    lost = [{**row, "partition": p, "status": "lost", "next_offset": 100,
             "log_start": 100 + n, "unread": 900 - 100 - n, "lost": n}
            for p, n in ((0, 60), (1, 30), (2, 20))]
    caught_up = [{**row, "partition": p, "status": "caught-up", "next_offset": 900,
                  "log_start": 500, "unread": 0, "lost": 0} for p in range(3)]
    sql = expand(_sql(_dashboard(), "Time to data loss"), {"query": "orders"})
    with Journal(journal_url) as j:
        anchor = j.last_batch("orders")
        assert anchor is not None
        j.record_forecasts(["orders"], lost, {"orders": (anchor.run_id, anchor.batch_id)})
        said = _run(journal_url, sql)[1]
        assert [(r[1], r[2], r[4]) for r in said] == [(0, "lost", 60), (1, "lost", 30),
                                                      (2, "lost", 20)]  # said once each
        j.record_forecasts(["orders"], caught_up)  # the job read on past them
        said = _run(journal_url, sql)[1]
        assert [(r[1], r[2], r[3], r[4], r[6]) for r in said] == [
            (0, "lost", None, 60, 0), (1, "lost", None, 30, 0), (2, "lost", None, 20, 0),
            (0, "caught-up", 0, 0, 0), (1, "caught-up", 0, 0, 0), (2, "caught-up", 0, 0, 0)]
        assert {r[7] for r in said if r[2] == "lost"} == {"recorded, not acknowledged"}
        by_partition = {x.partition: x for x in j.recorded_losses("orders")}
        # partition 1: 10 of its 30 acknowledged, then all; partition 2: a plan accepted it
        j.record_acknowledgements([{"loss_id": by_partition[1].id, "end_offset": 110,
                                    "reason": "replayed 100..109", "host": None,
                                    "os_user": None}])
        assert [(r[1], r[4]) for r in _run(journal_url, sql)[1] if r[2] == "lost"] == [
            (0, 60), (1, 20), (2, 20)]
        j.record_acknowledgements([{"loss_id": by_partition[1].id, "end_offset": 130,
                                    "reason": "replayed the rest", "host": None,
                                    "os_user": None}])
        plan = plan_row(plan_restart(journal_url, "orders", record=False),
                        PlanRequest("orders", allow_data_loss=True), "starting-offsets")
        j.record_plan({**plan, "kafka_offsets": [  # a plan naming partition 2 only
            o for o in plan["kafka_offsets"] if (o[1], o[2]) == ("orders", 2)]})
        said = _run(journal_url, sql)[1]
        assert [(r[1], r[4]) for r in said if r[2] == "lost"] == [(0, 60)]
        [facts] = j.check_facts(["orders"], None)  # what check says open, the same
        assert [(x.partition, x.unacknowledged) for x in facts.losses] == [(0, 60)]
    _writer, reader, _planner = journal_roles(journal_url)  # the role Grafana reads as
    assert _run(role_url(journal_url, reader), sql)[1] == said


HOSTILE = ["\\' OR true --", "\\'; DROP TABLE offset_journal.batches; --",
           "o'rders\\", "orders\n' OR ''='", "$$ OR true --", "%27 OR true --"]


def test_a_query_name_cannot_change_a_panels_sql(journal_url: str) -> None:
    """Grafana's ${var:sqlstring} doubles quotes but leaves backslashes: on a server with
    standard_conforming_strings=off a name like \\' OR true -- ends the string and the
    rest runs as SQL (the stat panels then show every query's data). Each panel, for
    each hostile name, must answer exactly as for a name the journal does not hold."""
    journal_report_runs(journal_url)
    _record_forecasts(journal_url)
    hostile_journaled = "ord\\'ers$$ --"
    journal_batches(journal_url, [progress(0, name=hostile_journaled, run_id="h1",
                                           timestamp=ts(5))])
    for panel in _dashboard()["panels"]:
        for target in panel["targets"]:
            sql = target["rawSql"]
            for conforming in (True, False):
                absent = _run(journal_url, expand(sql, {"query": "no such query"}),
                              conforming=conforming)
                for name in HOSTILE:
                    got = _run(journal_url, expand(sql, {"query": name}),
                               conforming=conforming)
                    assert got == absent, (panel["title"], name, conforming)
                if panel["title"] == "Last batch age":  # a journaled name is found
                    for name in ("orders", hostile_journaled):
                        _, [(age,)] = _run(journal_url, expand(sql, {"query": name}),
                                           conforming=conforming)
                        assert age is not None, (name, conforming)
    assert _run(journal_url, "SELECT count(*) FROM offset_journal.batches")[1][0][0] > 1


def _sql(dash: dict[str, Any], title: str) -> str:
    [panel] = [p for p in dash["panels"] if p["title"] == title]
    return str(panel["targets"][0]["rawSql"])


def test_compose_provisions_grafana_with_the_dashboard() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    grafana = compose["services"]["grafana"]
    mounts = {m.split(":")[1]: m.split(":")[0] for m in grafana["volumes"]}
    assert (ROOT / mounts["/etc/grafana/provisioning"]).resolve() == PROVISIONING.resolve()
    dashboards_at = "/var/lib/grafana/dashboards/offset-journal.json"
    assert (ROOT / mounts[dashboards_at]).resolve() == DASHBOARD.resolve()
    assert set(compose["services"]) >= {"postgres", "kafka", "grafana"}
    env = grafana["environment"]
    [source] = yaml.safe_load((PROVISIONING / "datasources" / "offset-journal.yml")
                              .read_text(encoding="utf-8"))["datasources"]
    assert source["uid"] == "offset-journal" and "postgresql" in source["type"]
    # the data source's settings come from the service's environment
    used = set(re.findall(r"\$\{(\w+)\}", json.dumps(source)))
    assert used and used <= set(env)
    pg = compose["services"]["postgres"]["environment"]
    assert env["OFFSET_JOURNAL_PG_DATABASE"] == pg["POSTGRES_DB"]
    [provider] = yaml.safe_load((PROVISIONING / "dashboards" / "offset-journal.yml")
                                .read_text(encoding="utf-8"))["providers"]
    assert dashboards_at.startswith(provider["options"]["path"] + "/")
