"""Which savepoint a lost or broken checkpoint is recovered from, and which of the old
query's batches are read again after it (pure).

A savepoint holds the state at its batch B; the old query went on to batch L, and its
sink holds what B+1..L wrote. The recovery restores B into a new checkpoint and then
runs the new query once per old batch B+1..L, each on that batch's own end offsets,
batch watermark and batch timestamp (the new checkpoint's ``offsets/N``, which Spark
re-executes as the batch it had not committed), with its sink swapped for ``noop``:
the state ends where the old query's did, batch by batch (a watermarked operator drops
and evicts exactly what it dropped and evicted), and nothing the sink already holds is
written again. One batch over B+1..L would be cheaper but not equal: the watermark
moves between batches, and a late record one batch kept another drops.

The savepoint chosen is the newest usable one of the query: recorded, not deleted by
retention, its files matching their checksums, its batch journaled. None usable is
refused in one line naming the newest and why, with the plan that needs no state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import RestoreError
from ..rows import Batch
from ..wording import ids_text


@dataclass(frozen=True)
class Candidate:
    """A savepoint looked at for a recovery: its id, batch, and why it cannot be used
    (None: usable)."""

    savepoint_id: int
    batch_id: int
    problem: str | None = None


@dataclass(frozen=True)
class Replay:
    """One old batch read again into the new checkpoint's state: the old batch id, the
    new checkpoint's batch id that runs it, each source's end offsets (JSON, in source
    order; None for a source with none), and the batch watermark and timestamp it ran
    with (ms)."""

    old_batch_id: int
    new_batch_id: int
    ends: tuple[str | None, ...]
    watermark_ms: int
    timestamp_ms: int


def choose(query_name: str, candidates: Sequence[Candidate]) -> Candidate:
    """The first usable of ``candidates`` (newest first); RestoreError naming the newest
    one and why it is unusable, and the plan without state, when none is."""
    for found in candidates:
        if found.problem is None:
            return found
    offer = (f"a stateless plan is what is left: `offset-journal plan {query_name}` (the "
             "query starts after the journal's last batch with empty state)")
    if not candidates:
        raise RestoreError(f"no savepoint of query {query_name!r} is recorded: nothing to "
                           f"recover its state from; {offer}")
    newest = candidates[0]
    more = (f" (nor any of the {len(candidates) - 1} older)" if len(candidates) > 1 else "")
    raise RestoreError(f"no usable savepoint of query {query_name!r}: the newest, savepoint "
                       f"{newest.savepoint_id} (batch {newest.batch_id}), {newest.problem}"
                       f"{more}; {offer}")


def end_json(value: Any) -> str | None:
    """A journaled end offset as an ``offsets/N`` line holds it."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def replays(savepoint_batch: int, batches: Sequence[Batch],
            old_metadata: Mapping[int, tuple[int | None, int | None]] | None = None,
            old_ends: Mapping[int, Sequence[Any]] | None = None) -> tuple[Replay, ...]:
    """The old batches after ``savepoint_batch`` to read again, in order, from the
    journal's and the sink's batches of the savepoint's checkpoint (``batches``, any
    order; one per id kept). The watermark and timestamp come from the old checkpoint's
    ``offsets/N`` (``old_metadata``: batch id -> (watermark ms, timestamp ms)) when it
    still has them, else the journal's batch. RestoreError when an id between is
    missing: a batch the journal and the sink both lack cannot be replayed as it ran;
    and when a batch's end offsets differ from that ``offsets/N``'s (``old_ends``: batch
    id -> each source's, parsed)."""
    by_id = {b.batch_id: b for b in batches if b.batch_id > savepoint_batch}
    if not by_id:
        return ()
    last = max(by_id)
    for old, ends in (old_ends or {}).items():
        if old in by_id:
            _same_ends(by_id[old], ends)
    missing = [i for i in range(savepoint_batch + 1, last) if i not in by_id]
    if missing:
        raise RestoreError(f"the journal lacks the old query's {ids_text(missing)} between "
                           f"the savepoint's batch {savepoint_batch} and batch {last}: they "
                           "cannot be read again as they ran; journal them from the old "
                           "checkpoint (`checkpoint import`) first")
    meta = old_metadata or {}
    out = []
    for n, old in enumerate(range(savepoint_batch + 1, last + 1), start=1):
        batch = by_id[old]
        wm, ts = meta.get(old, (None, None))
        out.append(Replay(old, n, tuple(end_json(s.end_offset) for s in
                                        sorted(batch.sources, key=lambda s: s.source_index)),
                          wm if wm is not None else _ms(batch.watermark),
                          ts if ts is not None else _ms(batch.trigger_at)))
    return tuple(out)


def _same_ends(batch: Batch, ends: Sequence[Any]) -> None:
    """RestoreError when the journal's batch ended elsewhere than the old checkpoint's
    ``offsets/N`` for it (JSON objects compared, source by source): the journal's batch
    N is another run's (a copy of the checkpoint run under the same query id), and
    replaying it would read records the old sink never got, or skip some it did."""
    journaled = [_parsed(s.end_offset) for s in
                 sorted(batch.sources, key=lambda s: s.source_index)]
    if len(journaled) != len(ends):
        return  # offsets_file refuses another source count
    for index, (mine, theirs) in enumerate(zip(journaled, ends, strict=True)):
        if isinstance(mine, dict) and isinstance(theirs, dict) and mine != theirs:
            raise RestoreError(
                f"the journal's batch {batch.batch_id} (run {batch.run_id}) ended source "
                f"{index} at {end_json(mine)}, the old checkpoint's offsets/{batch.batch_id} "
                f"at {end_json(theirs)}: the journal's batch is not the one the checkpoint "
                "ran (another copy of it, run under the same query id?); replaying it would "
                "lose or duplicate records")


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _ms(when: datetime | None) -> int:
    return 0 if when is None else int(when.timestamp() * 1000)


def offsets_file(previous: str, replay: Replay) -> str:
    """The new checkpoint's ``offsets/N`` for ``replay``, from its ``offsets/N-1``
    (``previous``, as Spark wrote it): the same log version and session settings, the
    replayed batch's watermark, timestamp and end offsets. Spark re-executes such a
    batch on its next start (no ``commits/N``) exactly as the file says."""
    lines = previous.split("\n")
    if len(lines) < 2 or lines[0].strip() != "v1":
        raise RestoreError(f"the new checkpoint's offsets log is {lines[0].strip()!r}, not "
                           "v1: a replayed batch cannot be written in it")
    meta = json.loads(lines[1])
    meta["batchWatermarkMs"] = replay.watermark_ms
    meta["batchTimestampMs"] = replay.timestamp_ms
    sources = len(lines) - 2
    if sources != len(replay.ends):
        raise RestoreError(f"old batch {replay.old_batch_id} has {len(replay.ends)} sources, "
                           f"the new query {sources}: it cannot be replayed")
    body = ["-" if e is None else e for e in replay.ends]
    return "\n".join(["v1", json.dumps(meta, separators=(",", ":")), *body])


def explain(savepoint_id: int | None, savepoint_batch: int,
            done: Sequence[Replay], reread_sink: bool) -> str:
    """The decision in one line, as the plan's note and the audit say it."""
    label = f"savepoint {savepoint_id}" if savepoint_id is not None else "a savepoint"
    if not done:
        return (f"recovered from {label} (batch {savepoint_batch}): no batch after it to "
                "read again")
    span = ids_text(r.old_batch_id for r in done)
    how = (f"written again to the sink ({len(done)} batch(es) it sees twice)" if reread_sink
           else "not written")
    return f"recovered from {label} (batch {savepoint_batch}): {span} read again into state, {how}"
