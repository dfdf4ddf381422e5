"""No command runs code another role planted.

Before PostgreSQL 15 any role may CREATE in schema ``public``. A function or operator
planted there with a closer argument type than the built-in one it shadows
(``public.cardinality(bigint[])`` beside ``pg_catalog.cardinality(anyarray)``) is picked
by every unqualified call on a search path that holds ``public``, and runs with the
caller's rights: the owner's ``prune``, ``db upgrade`` (the migrations, and the views
they create, which keep the function they were bound to), ``db grant``, the planner's
``plan``. Here the writer role plants a shadow of every function and operator the
project's SQL calls (each shadow counts its calls in a sequence of its own, which a
rollback does not undo), the database's default search path is made hostile
(``public`` before ``pg_catalog``), and every command runs: no shadow may be called.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from psycopg import sql as psql

from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.cli import main
from offset_journal.journal import Journal
from offset_journal.journal.db import make_engine, resolve_url
from offset_journal.records import PROGRESS
from tests.support import OwnPostgres, kafka_progress, ts, write_checkpoint

pytestmark = pytest.mark.services  # a Postgres of its own (PostgreSQL 13/14 defaults)

ROOT = Path(__file__).resolve().parents[2]
OWNER, WRITER, READER, PLANNER = "oj_sp_owner", "oj_sp_writer", "oj_sp_reader", "oj_sp_planner"

# What a polymorphic argument of a built-in becomes in a shadow: a type the project's
# SQL passes, which matches more closely than the pseudo-type.
CONCRETE = ("bigint", "integer", "smallint", "text", "jsonb", "timestamp with time zone",
            "numeric", "boolean", "bytea")
POLYMORPHIC = {"anyelement": "{t}", "anynonarray": "{t}", "anycompatible": "{t}",
               "anycompatiblenonarray": "{t}", '"any"': "{t}", "anyarray": "{t}[]",
               "anycompatiblearray": "{t}[]"}
OPERATORS = ("=", "<>", "<", ">", "<=", ">=", "+", "-", "*", "/", "||", "->", "->>", "#>",
             "#>>", "@>", "<@", "?", "&&", "~~")
UNPLANTABLE = re.compile(r"\b(internal|cstring|anyrange|anymultirange|anycompatiblerange|"
                         r"anycompatiblemultirange|trigger|event_trigger|language_handler|"
                         r"fdw_handler|table_am_handler|index_am_handler|tsm_handler|"
                         r"anyenum|pg_\w+)\b")


def called_names() -> set[str]:
    """Every name the project's SQL may call as a function: ``func.NAME`` and ``NAME(``
    in the library and the migrations (a superset: Python calls are caught too, and only
    names pg_catalog has are planted)."""
    names: set[str] = set()
    for path in [*(ROOT / "offset_journal").rglob("*.py"),
                 *(ROOT / "migrations").rglob("*.py")]:
        text = path.read_text()
        names |= set(re.findall(r"\bfunc\.([a-z_][a-z0-9_]*)", text))
        names |= {n.lower() for n in re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", text)}
    return names


@dataclass
class Planted:
    pg: OwnPostgres
    database: str
    shadows: int

    def url(self, role: str) -> str:
        u = sa.engine.make_url(self.pg.url_for(self.database)).set(username=role)
        return u.render_as_string(hide_password=False)

    def calls(self) -> list[str]:
        """The shadows that ran, each with how often (read on the project's own engine:
        SQLAlchemy's first-connect queries would call a shadow otherwise)."""
        engine = make_engine(self.pg.url_for(self.database), poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(
                    "SELECT signature, sequence FROM public.planted_shadows")).all()
                ran = []
                for signature, sequence in rows:
                    seq = psql.Identifier("public", sequence).as_string(
                        conn.connection.driver_connection)
                    called, value = conn.execute(sa.text(
                        f"SELECT is_called, last_value FROM {seq}")).one()  # noqa: S608
                    if called:
                        ran.append(f"{signature} x{value}")
                return ran
        finally:
            engine.dispose()


def _body(returns: str, *, setof: bool, has_out: bool) -> str:
    return "RETURN;" if setof or has_out or returns == "void" else "RETURN NULL;"


def plant(conn: sa.Connection, names: set[str]) -> int:
    """As the connection's role (the writer), create in ``public`` a shadow of every
    pg_catalog function, aggregate and operator named in ``names``/OPERATORS: the same
    signature, and each polymorphic one with every CONCRETE type. Returns how many."""
    conn.exec_driver_sql(
        "CREATE TABLE public.planted_shadows (signature text PRIMARY KEY, sequence text)")
    conn.exec_driver_sql("GRANT SELECT ON public.planted_shadows TO PUBLIC")
    made: set[str] = set()
    created = [0]

    def create(*statements: str) -> bool:
        """Run ``statements``; False (nothing made) where Postgres refuses the shadow
        (a signature that exists twice after substitution, say)."""
        try:
            with conn.begin_nested():
                for statement in statements:
                    conn.exec_driver_sql(statement)
        except sa.exc.DBAPIError:
            return False
        created[0] += 1
        return True

    def counter(signature: str) -> str:
        sequence = f"planted_{len(made)}"
        conn.exec_driver_sql(f"CREATE SEQUENCE public.{sequence}")
        conn.exec_driver_sql(f"GRANT USAGE, SELECT, UPDATE ON public.{sequence} TO PUBLIC")
        conn.execute(sa.text("INSERT INTO public.planted_shadows VALUES (:s, :q)"),
                     {"s": signature, "q": sequence})
        made.add(signature)
        return sequence

    def concrete(text: str) -> list[str]:
        text = text.replace('VARIADIC "any"', '"any"')  # one argument of the type
        if not any(p in text for p in POLYMORPHIC):
            return [text]
        out = []
        for t in CONCRETE:
            replaced = text
            for pseudo, form in POLYMORPHIC.items():
                replaced = re.sub(rf"(?<![\w\"]){re.escape(pseudo)}(?![\w\"])",
                                  form.format(t=t), replaced)
            out.append(replaced)
        return out

    functions = conn.execute(sa.text("""
        SELECT p.proname, p.prokind, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), p.proretset,
               coalesce('o' = ANY(p.proargmodes) OR 't' = ANY(p.proargmodes), false),
               coalesce(a.aggkind, 'n'), p.pronargs
        FROM pg_proc p LEFT JOIN pg_aggregate a ON a.aggfnoid = p.oid
        WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(:names)
        ORDER BY p.oid"""), {"names": sorted(names)}).all()
    for name, kind, args, result, setof, has_out, aggkind, nargs in functions:
        if kind == "p" or aggkind != "n" or UNPLANTABLE.search(f"{args} {result}"):
            continue
        pairs = list(zip(concrete(args), concrete(result), strict=False)) if (
            any(p in args for p in POLYMORPHIC)) else [(args, result)]
        for shadow_args, shadow_result in pairs:
            if kind in ("a", "w"):
                _plant_aggregate(name, shadow_args, nargs, made, counter, create)
                continue
            signature = f"{name}({shadow_args})"
            if signature in made or any(p in shadow_result for p in POLYMORPHIC):
                continue
            sequence = counter(signature)
            create(f"CREATE FUNCTION public.{psql_ident(name)}({shadow_args}) RETURNS "
                   f"{shadow_result} LANGUAGE plpgsql AS $$ BEGIN "
                   f"PERFORM pg_catalog.nextval('public.{sequence}'); "
                   f"{_body(shadow_result, setof=setof, has_out=has_out)} END $$")
    operators = conn.execute(sa.text("""
        SELECT o.oprname, format_type(o.oprleft, NULL), format_type(o.oprright, NULL),
               format_type(o.oprresult, NULL), o.oprleft = 0
        FROM pg_operator o
        WHERE o.oprnamespace = 'pg_catalog'::regnamespace AND o.oprname = ANY(:ops)
        ORDER BY o.oid"""), {"ops": list(OPERATORS)}).all()
    for op, left, right, result, prefix in operators:
        if UNPLANTABLE.search(f"{left} {right} {result}"):
            continue
        sides = f"{right}" if prefix else f"{left}, {right}"
        for shadow_sides, shadow_result in zip(concrete(sides), concrete(result),
                                               strict=False):
            signature = f"operator {op}({shadow_sides})"
            if signature in made or any(p in shadow_result for p in POLYMORPHIC):
                continue
            sequence = counter(signature)
            fn = f"public.planted_op_{sequence}"
            parts = shadow_sides.split(", ")
            arguments = (f"RIGHTARG = {parts[0]}" if prefix else
                         f"LEFTARG = {parts[0]}, RIGHTARG = {parts[1]}")
            create(f"CREATE FUNCTION {fn}({shadow_sides}) RETURNS {shadow_result} "
                   f"LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.nextval('public.{sequence}');"
                   f" RETURN NULL; END $$",
                   f"CREATE OPERATOR public.{op} ({arguments}, FUNCTION = {fn})")
    return created[0]


def _plant_aggregate(name: str, args: str, nargs: int, made: set[str],
                     counter: Callable[[str], str], create: Callable[..., bool]) -> None:
    """An aggregate shadow (a window function's too: an aggregate of the same name with
    a closer argument type is picked for ``name(x) OVER (...)``)."""
    signature = f"{name}({args or '*'}) aggregate"
    if signature in made or any(p in args for p in POLYMORPHIC) or "VARIADIC" in args:
        return
    sequence = counter(signature)
    state = args.split(", ")[0] if nargs else "bigint"
    sfunc = f"public.planted_sfunc_{sequence}"
    create(f"CREATE FUNCTION {sfunc}({state}{', ' + args if nargs else ''}) RETURNS {state} "
           f"LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.nextval('public.{sequence}'); "
           f"RETURN $1; END $$",
           f"CREATE AGGREGATE public.{psql_ident(name)}({args or '*'}) "
           f"(SFUNC = {sfunc}, STYPE = {state})")


def psql_ident(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else f'"{name}"'


@pytest.fixture(scope="module")
def planted() -> Iterator[Planted]:
    pg = OwnPostgres.create()
    try:
        admin = pg.admin_engine()
        with admin.connect() as conn:
            for role in (OWNER, WRITER, READER, PLANNER):
                conn.exec_driver_sql(f"CREATE ROLE {role} LOGIN")
            conn.exec_driver_sql(f"CREATE DATABASE journal OWNER {OWNER}")
        admin.dispose()
        journal_admin = pg.admin_engine("journal")
        with journal_admin.connect() as conn:
            # PostgreSQL 13/14's defaults: every role may create in public. And a search
            # path that puts public first, which a DBA may have set for the database.
            conn.exec_driver_sql("GRANT CREATE ON SCHEMA public TO PUBLIC")
            conn.exec_driver_sql("ALTER DATABASE journal SET search_path = public, pg_catalog")
        journal_admin.dispose()
        planted = Planted(pg, "journal", 0)
        engine = make_engine(planted.url(WRITER), poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            planted.shadows = plant(conn, called_names())
        engine.dispose()
        yield planted
    finally:
        pg.cleanup()


def _event_time(minute: float) -> dict[str, str]:
    return {"max": ts(minute - 0.5), "min": ts(minute - 2), "avg": ts(minute - 1),
            "watermark": ts(minute - 5)}


def _run(url: str, *argv: str) -> None:
    code = main(["--database-url", url, *argv])
    assert code == 0, argv


def _forecast(status: str) -> dict[str, Any]:
    """A row at the last batch's end offsets (t-0 at 40, t-1 at 12), so check reads it."""
    lost = status == "lost"
    now = datetime.now(timezone.utc)
    return {"query_name": "q", "source_index": 0, "topic": "t", "partition": 0 if lost else 1,
            "status": status, "next_offset": 40 if lost else 12,
            "log_start": 44 if lost else 9, "log_end": 50 if lost else 15,
            "unread": 6 if lost else 3, "lost": 4 if lost else 0, "first_unread_at": None,
            "loss_earliest": None if lost else now, "loss_latest": None if lost else now,
            "basis": None if lost else "time"}


def test_no_command_runs_a_function_or_operator_another_role_planted(
        planted: Planted, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert planted.shadows > 500, planted.shadows  # cardinality, unnest, =, -> ... all there
    owner, writer = planted.url(OWNER), planted.url(WRITER)
    reader, planner = planted.url(READER), planted.url(PLANNER)
    _run(owner, "db", "upgrade")
    _run(owner, "db", "grant", "--writer", WRITER, "--reader", READER, "--planner", PLANNER)
    # The listener's writer: a lone batch (one query), then two in one transaction, and
    # one the database refuses (kept in rejected_events).
    batches = [
        kafka_progress(0, None, {"t": {"0": 10, "1": 5}}, minute=0, name="q",
                       event_time=_event_time(0)),
        kafka_progress(1, {"t": {"0": 10, "1": 5}}, {"t": {"0": 40, "1": 9}}, minute=1,
                       name="q", event_time=_event_time(1)),
        kafka_progress(2, {"t": {"0": 40, "1": 9}}, {"t": {"0": 40, "1": 12}}, minute=2,
                       name="q", event_time=_event_time(2)),
    ]
    writer_ = Writer(WriterConfig(writer, str(tmp_path / "spool")))
    writer_.start()
    try:
        writer_.submit({"type": PROGRESS, "json": batches[0]})
        assert writer_.flush(30)
        for payload in batches[1:]:
            writer_.submit({"type": PROGRESS, "json": payload})
        writer_.submit({"type": PROGRESS, "json": "{this is not json"})
        assert writer_.flush(30) is False
        assert writer_.stats().journaled == 3 and writer_.stats().rejected == 1
    finally:
        writer_.close()
    checkpoint = write_checkpoint(tmp_path / "chk", "qid-c", [
        ([{"t": {"0": 3}}], True), ([{"t": {"0": 7}}], True)])
    _run(writer, "checkpoint", "import", "--query-name", "q-imported", str(checkpoint))
    # A forecast the planner recorded (retention --record), for the report and check.
    with Journal(planner) as j:
        j.record_forecasts(["q"], [_forecast("lost"), _forecast("at-risk")])
    for url, argv in [
        (owner, ["db", "current"]), (owner, ["db", "upgrade"]),
        (reader, ["starting-offsets", "q"]), (planner, ["starting-offsets", "q"]),
        (owner, ["plan", "q"]), (owner, ["plan", "q", "--as-of", "2024-01-01T00:01:30Z"]),
        (owner, ["plan", "q", "--state-aware", "--window", "5m"]),
        (owner, ["history", "q"]), (owner, ["history", "q", "--format", "json"]),
        (owner, ["runs"]), (owner, ["runs", "q"]), (owner, ["audit", "q"]),
        (owner, ["report", "q", "-o", str(tmp_path / "report.html")]),
        (owner, ["rejected", "list"]), (owner, ["rejected", "replay"]),
        (owner, ["prune", "--before", "2024-01-01T00:01:30Z", "--dry-run"]),
        (owner, ["prune", "--before", "2024-01-01T00:01:30Z"]),
        (reader, ["check", "--all", "--max-lag", "1", "--max-staleness", "1m",
                  "--min-time-to-loss", "1h"]),
        (owner, ["starting-offsets", "q"]),
    ]:
        code = main(["--database-url", url, *argv])
        out, err = capsys.readouterr()
        # audit: 3 when it finds something; rejected replay: 1, the event is still bad;
        # check: 2, critical
        expected = {("rejected", "replay"): (1,), ("check", "--all"): (2,)}.get(
            tuple(argv[:2]), (0, 3))
        assert code in expected, (argv, out, err)
        assert "Traceback" not in err, (argv, err)
    calls = planted.calls()
    assert not calls, "\n".join(calls)
    assert out.strip() == '{"t":{"0":40,"1":12}}'


def test_every_function_of_the_journal_fixes_its_search_path(planted: Planted) -> None:
    engine = make_engine(planted.url(OWNER), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            if conn.execute(sa.text("SELECT to_regnamespace('offset_journal')")).scalar() is None:
                pytest.fail("run after the upgrade test: the journal schema is missing")
            loose = conn.execute(sa.text("""
                SELECT p.oid::regprocedure::text FROM pg_proc p
                WHERE p.pronamespace = 'offset_journal'::regnamespace
                  AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY(p.proconfig),
                                   false)""")).scalars().all()
    finally:
        engine.dispose()
    assert loose == []


def test_a_planted_function_cannot_take_the_owners_rights_in_prune(
        planted: Planted, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's reproduction: the writer's cardinality(bigint[]) grants the writer
    UPDATE when the owner's prune calls it; then the writer rewrites the newest batch."""
    writer, owner = planted.url(WRITER), planted.url(OWNER)
    engine = sa.create_engine(resolve_url(writer), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"""
                CREATE OR REPLACE FUNCTION public.cardinality(bigint[]) RETURNS integer
                LANGUAGE plpgsql AS $$ BEGIN
                    EXECUTE 'GRANT UPDATE, DELETE ON offset_journal.batch_sources,
                             offset_journal.batches TO {WRITER}';
                    RETURN pg_catalog.cardinality($1);
                END $$""")
        _run(owner, "prune", "--before", "2024-01-01T00:02:30Z")
        _run(owner, "prune", "--before", "2024-01-01T00:02:30Z", "--dry-run")
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"), \
                engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE offset_journal.batch_sources SET end_offsets = '{999999, 999999}'")
    finally:
        engine.dispose()
    capsys.readouterr()
    _run(owner, "starting-offsets", "q")
    assert capsys.readouterr().out.strip() == '{"t":{"0":40,"1":12}}'


@pytest.mark.parametrize("isolation_level", ["AUTOCOMMIT", "SERIALIZABLE"])
def test_an_engine_with_an_isolation_level_connects_on_the_safe_path_too(
        planted: Planted, isolation_level: str) -> None:
    """The first-connect queries run after the isolation level is set (a hook before it
    left the connection in a transaction, and setting the level then failed)."""
    before = planted.calls()
    engine = make_engine(planted.url(OWNER), poolclass=sa.pool.NullPool,
                         isolation_level=isolation_level)
    try:
        with engine.connect() as conn:
            assert conn.execute(sa.text("SHOW search_path")).scalar() == "pg_catalog, pg_temp"
            assert conn.execute(sa.text("SELECT cardinality(ARRAY[1, 2]::bigint[])")
                                ).scalar() == 2
    finally:
        engine.dispose()
    assert planted.calls() == before


def test_db_upgrade_names_journal_objects_bound_to_code_outside_pg_catalog(
        planted: Planted, capsys: pytest.CaptureFixture[str]) -> None:
    """A journal migrated by a release before the search path was fixed, on a search
    path holding public, may have views or CHECKs bound to a planted function: `db
    upgrade` says so, in one line, naming them (nothing else can tell)."""
    from tests.support import one_error_line

    owner = planted.url(OWNER)
    _run(owner, "db", "upgrade")
    capsys.readouterr()
    engine = make_engine(owner, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:  # as such a migration would have bound it
            conn.exec_driver_sql(
                "ALTER TABLE offset_journal.spool_losses ADD CONSTRAINT bound_elsewhere "
                "CHECK (public.cardinality(ARRAY[events]::bigint[]) >= 0)")
        code = main(["--database-url", owner, "db", "upgrade"])
        line = one_error_line(code, capsys.readouterr().err)
        assert "constraint bound_elsewhere on table offset_journal.spool_losses uses " \
               "function public.cardinality(bigint[])" in line
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "ALTER TABLE offset_journal.spool_losses DROP CONSTRAINT bound_elsewhere")
        engine.dispose()
    _run(owner, "db", "upgrade")
