"""The restore itself: a NEW checkpoint started by the new query's own bootstrap batch,
the savepoint's state written into it at JVM speed, the batch committed.

1. The checkpoint must be new (missing or empty): a restore never mixes its state with
   another query's.
2. ``metadata`` (a new query id) and ``offsets/0``, whose every source ends where the
   new query starts (the savepoint's batch's end offsets, the journal's), with the old
   query's batch watermark, so the new query's first run, one batch (``Trigger.Once``),
   reads nothing: Spark itself writes the new query's operator metadata, state schema
   files, empty state and ``commits/0`` for the new query's own plan. The query is
   checked to run on this checkpoint before it starts, and its sink after
   (:mod:`._bootstrap`).
3. The layout: the savepoint's operators against the new checkpoint's
   (:func:`~.matching.plan_layout`); a mismatch is refused in one line, and the new
   checkpoint removed.
4. Every store of batch 0 written again, with the savepoint's state, by Spark's
   ``StateRewriter`` (through :mod:`._jvm`), repartitioned into the new query's shuffle
   partitions by the partitioning Spark's shuffle uses; ``commits/0`` written again with
   those stores' ids and the watermark the old query's next batch would have run with.

The new query then starts normally on the checkpoint: its first real batch is batch 1,
with every key's state in place. The old checkpoint is read (watermark, RocksDB bytes)
only while its ``metadata`` names the savepoint's query id: a location is reused after
a broken checkpoint is removed, and another query's batch B is not the savepoint's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..checkpoint.commits import FORMAT_CONF, ROCKSDB_PROVIDER, read_commit
from ..errors import OffsetJournalError, RestoreError
from ..formatting import first_line
from ._bootstrap import BOOTSTRAP_BATCH, Bootstrap, run_bootstrap
from ._frames import raw_frame, target_frame
from ._jvm import StateWrite, describe, helper, read_all_column_families, remove
from .layout import Layout, NewOperator, Rules, new_operators
from .matching import plan_layout

if TYPE_CHECKING:
    from ..journal import Journal
    from ..savepoint.model import Manifest, Savepoint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    """A restore done: the new checkpoint, its query id, the layout written (what
    became of every operator, the notes of every mapping), the watermarks carried, and
    how long each step took (seconds: ``bootstrap``, ``write``, ``total``).
    ``bootstrap_run_id``: the run of the new query that wrote its bootstrap batch (a
    restart plan is linked to it: the run that started from the plan's offsets);
    ``bootstrap``: that run, with its progress (to journal it where no listener did)."""

    checkpoint: str
    query_id: str
    savepoint: Savepoint
    layout: Layout
    batch_watermark_ms: int
    next_watermark_ms: int
    watermark_from: str
    partitions: int
    bootstrap_run_id: str
    seconds: dict[str, float] = field(default_factory=dict)
    bootstrap: Bootstrap | None = None

    @property
    def keys(self) -> int:
        return sum(op.keys for op in self.layout.operators if op.decision in ("restored",
                                                                               "mapped"))

    def explain(self) -> str:
        lines = [f"restored {self.savepoint.label()} (batch "
                 f"{self.savepoint.manifest.batch_id}) into {self.checkpoint}: "
                 f"{self.keys:,} keys, {self.partitions} partitions, in "
                 f"{self.seconds.get('total', 0):.1f} s"]
        for op in self.layout.operators:
            lines.append(f"  operator {op.operator_id} ({op.kind}): {op.decision} ({op.path})"
                         f": {op.how}")
        lines += [f"  note: {n}" for n in self.layout.notes]
        lines.append(f"  watermark: {self.next_watermark_ms} ms ({self.watermark_from})")
        return "\n".join(lines)


def restore_savepoint(spark: Any, savepoint: Savepoint | str | int, checkpoint: str,
                      query: Callable[[], Any], *, ends: Sequence[str] | None = None,
                      rules: Rules | None = None, journal: Journal | None = None,
                      expect_sha256: str | None = None, verify: bool = True,
                      on_start: Callable[[str], None] | None = None) -> Restored:
    """Write ``savepoint``'s state into the NEW checkpoint ``checkpoint`` of the new
    query, so that the query, started on it, goes on exactly after the savepoint's batch
    with every key's state in place (see the module for the steps).

    ``query``: a function returning the new query's ``DataStreamWriter``, its
    ``checkpointLocation`` set to ``checkpoint`` and its sources starting at the
    savepoint's end offsets (a job's ``--from-journal`` plan): called once here, for the
    bootstrap batch, and again by the caller to start the query for real. ``ends``:
    each source's start offsets as JSON, in source order (default: the savepoint's end
    offsets). ``rules``: mappings declared and state discarded (:class:`~.layout.Rules`;
    a date becomes a timestamp in ``spark``'s session time zone unless they name one).
    The savepoint is a loaded one, its directory or its id in ``journal`` (which also
    gives the savepoint's batch's watermark when the old checkpoint is gone);
    ``expect_sha256`` pins the manifest a plan was made from.
    ``on_start(run_id)`` is called as soon as the bootstrap query started, before its
    batch can be journaled: a job links its recorded plan to that run there (a link
    recorded after the run's first batch is one the audit does not take).
    RestoreError (one line) for anything that does not fit, the new checkpoint then
    removed if this restore made it (not another's, started there meanwhile); the
    savepoint and the old checkpoint are only read."""
    from ..savepoint import load_planned_savepoint

    started = time.monotonic()
    helper(spark)
    found = load_planned_savepoint(savepoint, journal, expect_sha256, verify=verify)
    manifest = found.manifest
    _require_new(checkpoint)
    offsets = list(ends) if ends is not None else _manifest_ends(manifest)
    batch_wm, next_wm, wm_from = watermarks(manifest, journal)
    claimed: list[str] = []  # the query id this restore made the checkpoint with
    try:
        boot = run_bootstrap(spark, checkpoint, offsets, batch_wm, query, on_start, claimed.append)
        bootstrapped = time.monotonic()
        new = new_operators(describe(spark, checkpoint, BOOTSTRAP_BATCH), boot.joins)
        zone = str(spark.conf.get("spark.sql.session.timeZone"))
        layout = _checked(plan_layout(manifest, new, (rules or Rules()).in_session(zone),
                                      _old_operators(spark, manifest, checkpoint)), manifest)
        partitions = _partitions(checkpoint, new)
        _write(spark, found, checkpoint, layout, partitions, next_wm)
    except BaseException as exc:
        if claimed:
            _remove(spark, checkpoint)
        if isinstance(exc, OffsetJournalError) or not isinstance(exc, Exception):
            raise
        raise RestoreError(f"cannot restore {found.label()} into {checkpoint}: "
                           f"{first_line(exc)}") from None
    done = time.monotonic()
    restored = Restored(checkpoint, boot.query_id, found, layout, batch_wm, next_wm, wm_from,
                        partitions, boot.run_id,
                        {"bootstrap": round(bootstrapped - started, 3),
                         "write": round(done - bootstrapped, 3),
                         "total": round(done - started, 3)}, boot)
    log.info("%s", restored.explain())
    return restored


def _require_new(checkpoint: str) -> None:
    """RestoreError unless ``checkpoint`` is missing or an empty directory."""
    from ..checkpoint.store import open_store

    store, root = open_store(checkpoint, None)
    kind = store.kind(root)
    if kind is None:
        return
    entries = sorted(store.files(root) + store.dirs(root)) if kind == "dir" else [root]
    if entries:
        raise RestoreError(f"{checkpoint} is not a new checkpoint (it holds "
                           f"{', '.join(entries[:3])}{'...' if len(entries) > 3 else ''}): "
                           "a restore writes into a new, empty checkpoint only")


def _manifest_ends(manifest: Manifest) -> list[str]:
    return [json.dumps(e.offset, sort_keys=True, separators=(",", ":"))
            for e in sorted(manifest.end_offsets, key=lambda e: e.index)]


def _old_operators(spark: Any, manifest: Manifest,
                   checkpoint: str) -> Sequence[NewOperator] | None:
    """The old checkpoint's operators at the savepoint's batch, when its RocksDB bytes can
    be copied: it is still there, the savepoint's query's, with that batch committed, on
    RocksDB, in the new checkpoint's format. None otherwise (the savepoint's typed rows
    are written)."""
    if manifest.provider != ROCKSDB_PROVIDER or not manifest.operators:
        return None
    other = other_query(manifest)
    if other is not None:
        log.warning("the old checkpoint's state is not copied: %s", other)
        return None
    old = _commit_version(manifest.checkpoint, manifest.batch_id)
    new = _commit_version(checkpoint, BOOTSTRAP_BATCH)
    if old is None or old != new:
        return None
    try:
        return new_operators(describe(spark, manifest.checkpoint, manifest.batch_id))
    except RestoreError as exc:
        log.info("the old checkpoint's bytes are not copied: %s", exc)
        return None


def _checked(layout: Layout, manifest: Manifest) -> Layout:
    """``layout`` checked; a refusal says so when the old checkpoint's state was not read
    because another query's checkpoint sits at its path."""
    try:
        return layout.check()
    except RestoreError as exc:
        other = other_query(manifest)
        if other is None:
            raise
        raise RestoreError(f"{exc} ({other})") from None


def other_query(manifest: Manifest) -> str | None:
    """Why the checkpoint now at the savepoint's checkpoint path is not the one the
    savepoint was taken of (None: it is, or nothing is there): its ``metadata`` names
    another query id. A location is reused after a broken checkpoint is removed; that
    checkpoint's batch B is another query's, its watermark and state not the savepoint's."""
    from ..checkpoint import read_checkpoint

    try:
        found = read_checkpoint(manifest.checkpoint).query_id
    except OffsetJournalError:
        return None
    if found == manifest.query_id:
        return None
    return (f"{manifest.checkpoint} is now the checkpoint of query id {found}, not of the "
            f"savepoint's query id {manifest.query_id}")


def _commit_version(checkpoint: str, batch_id: int) -> int | None:
    """The log version of ``commits/batch_id`` (2: RocksDB checkpoint format v2), None
    when it is not there."""
    commit = read_commit(checkpoint, batch_id)
    return commit.version if commit is not None else None


def watermarks(manifest: Manifest, journal: Journal | None) -> tuple[int, int, str]:
    """(the batch watermark of the savepoint's batch, the watermark the old query's next
    batch would have run with, where they come from): the old checkpoint's
    ``offsets/B`` and ``commits/B`` when it still has them (and is still the savepoint's
    query's: :func:`other_query`), else the journal's batch B (its watermark for both:
    no record is dropped as late that the old query kept), else 0 (no watermark)."""
    from ..checkpoint import read_checkpoint

    other = other_query(manifest)
    mine, commit = None, None
    try:
        if other is None:
            mine = read_checkpoint(manifest.checkpoint).batch(manifest.batch_id)
            found = read_commit(manifest.checkpoint, manifest.batch_id)
            commit = found.metadata if found is not None else None
    except OffsetJournalError:
        mine, commit = None, None
    if mine is not None and commit is not None and mine.batch_watermark_ms is not None:
        nxt = int(commit.get("nextBatchWatermarkMs") or mine.batch_watermark_ms)
        return (int(mine.batch_watermark_ms), nxt,
                f"the old checkpoint's batch {manifest.batch_id}")
    why = "" if other is None else f" ({other}: not read)"
    batch = (journal.batch(manifest.query_name, manifest.run_id, manifest.batch_id)
             if journal is not None else None)
    if batch is not None and batch.watermark is not None:
        ms = int(batch.watermark.timestamp() * 1000)
        return ms, ms, f"the journal's batch {manifest.batch_id}{why}"
    return 0, 0, f"none recorded (no watermark){why}"


def _partitions(checkpoint: str, new: Sequence[NewOperator]) -> int:
    """The new query's shuffle partitions: its operators' (every store has as many)."""
    counts = {op.partitions for op in new if op.partitions}
    if len(counts) != 1:
        raise RestoreError(f"the new checkpoint {checkpoint}'s operators have "
                           f"{sorted(counts) or 'no'} partitions: expected one number")
    return counts.pop()


def _write(spark: Any, found: Savepoint, checkpoint: str, layout: Layout, partitions: int,
           next_wm: int) -> None:
    from ..savepoint.spark import session_conf

    version = _commit_version(checkpoint, BOOTSTRAP_BATCH) or 1
    with session_conf(spark, FORMAT_CONF, str(version) if version >= 2 else "1"):
        writer = StateWrite(spark, checkpoint, BOOTSTRAP_BATCH, BOOTSTRAP_BATCH, partitions)
        m = found.manifest
        for op in layout.operators:
            for target in op.targets:
                writer.typed(target.operator_id, target.store, target.family,
                             target_frame(spark, found.location, target))
            for raw in op.raw:
                read = read_all_column_families(spark, m.checkpoint, m.batch_id,
                                                     raw.old_operator_id, raw.old_store)
                writer.raw(raw.operator_id, raw.store, raw_frame(spark, read, raw))
        writer.run()
        writer.commit(next_wm, replace=True)


def _remove(spark: Any, checkpoint: str) -> None:
    try:
        remove(spark, checkpoint)
    except Exception as exc:  # the error that brought us here is the one to show
        log.warning("the unfinished checkpoint %s was not removed: %s", checkpoint,
                    first_line(exc))
