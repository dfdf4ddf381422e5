"""The pure rules: a plan after the journal's last batch, held against what the
old query's sink holds by its own commit log (hand-built facts and checkpoints; the
readers of the logs and the real sinks are in test_sink_logs.py and test_sink_crash.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from offset_journal.checkpoint import read_checkpoint
from offset_journal.journal._plan_rows import recorded_plan
from offset_journal.restart import JournalFacts, OldQueryFacts, RestartError, compute_plan
from offset_journal.restart.gather.old_checkpoint import old_checkpoint_facts
from offset_journal.restart.model import SinkFacts
from offset_journal.restart.record import plan_row
from offset_journal.restart.request import PlanRequest
from offset_journal.rows import Batch, BatchRef, RealTimeTail
from tests.restart.test_restart import flat, kafka_src, mk
from tests.support import write_checkpoint

OUT = "/lake/orders"
FILE_SINK = f"FileSink[{OUT}]"


def ends(b: int) -> dict[str, dict[str, int]]:
    """Where batch ``b`` of the old checkpoint ended: 10 records a batch on orders-0,
    20 on orders-1."""
    return {"orders": {"0": 10 * (b + 1), "1": 20 * (b + 1)}}


def journaled(b: int, sink: str | None = FILE_SINK, query: str = "qid-1") -> Batch:
    """Batch ``b`` of run-1 as the listener journaled it."""
    start, end = ends(b - 1) if b else {"orders": {"0": 0, "1": 0}}, ends(b)
    parts = {("orders", p): (start["orders"][str(p)], end["orders"][str(p)]) for p in (0, 1)}
    return replace(mk(b, kafka_src(parts), query=query), sink_description=sink)


def old_checkpoint(tmp_path: Path, offsets: int, committed: int, query: str = "qid-1",
                   tweak: dict[int, dict[str, dict[str, int]]] | None = None) -> Any:
    """The old checkpoint: offsets/0..offsets, commits/0..committed."""
    tweak = tweak or {}
    batches = [([tweak.get(b, ends(b))], b <= committed) for b in range(offsets + 1)]
    root = write_checkpoint(tmp_path / "ck-v1", query, batches,
                            initial={"0": {"orders": {"0": 0, "1": 0}}})
    return read_checkpoint(root)


def file_sink(last: int | None, found_by: str = "journaled", **kw: Any) -> SinkFacts:
    return SinkFacts("file", kw.pop("path", OUT), found_by, last_batch=last, **kw)  # type: ignore[arg-type]


def plan(anchor: Batch | JournalFacts, facts: SinkFacts | None, checkpoint: Any = None,
         sink_batch: Batch | None = None, sink_run_id: str | None = None, **kw: Any) -> Any:
    return compute_plan("orders", anchor,
                        old_query=OldQueryFacts(sink=facts, checkpoint=(
                            None if checkpoint is None else old_checkpoint_facts(checkpoint)),
                                                batch=sink_batch, run_id=sink_run_id),
                        **kw)


# --------------------------------------------------------------------------- ahead


def test_batches_the_sink_holds_beyond_the_journal_are_taken_from_the_old_checkpoint(tmp_path):
    """The driver died after the file sink logged batch 5 and before commits/5; the
    listener had journaled up to 3 (4 was committed, its event lost). The plan starts
    after 5, at offsets/5's end offsets, and takes 4 and 5 with their offsets."""
    ck = old_checkpoint(tmp_path, offsets=5, committed=4)
    p = plan(journaled(3), file_sink(5), ck)
    assert p.ok, p.errors
    assert p.starting_offsets(0) == '{"orders":{"0":60,"1":120}}'
    assert [(b.run_id, b.batch_id) for b in p.sink_batches] == [("run-1", 4), ("run-1", 5)]
    four, five = p.sink_batches
    assert [(x.topic, x.partition, x.start, x.end) for x in four.sources[0].partitions] == [
        ("orders", 0, 40, 50), ("orders", 1, 80, 100)]
    assert five.sources[0].partitions[0].start == 50 and five.sink_description == FILE_SINK
    said = flat(p.explain())
    assert "holds batches 4..5 beyond the journal's last (batch 3 of run run-1)" in said
    assert "commits/ lacks batch 5" in said and "starts after batch 5" in said
    assert "Starts AFTER batch 5 of run run-1" in said
    assert p.sink["taken"] == [4, 5] and p.sink["journal_batch"] == 3
    assert p.sink["offsets"][0] == [4, 0, "orders", 0, 40, 50]


def test_without_the_old_checkpoint_the_plan_says_to_give_it(tmp_path):
    p = plan(journaled(3), file_sink(5))
    assert not p.ok and not p.sink_batches
    (error,) = p.errors
    assert "holds batches 4..5 of query id qid-1, beyond the journal's last" in error
    assert "--old-checkpoint DIR" in error and "starts after batch 5" in error


def test_a_sink_batch_whose_offsets_are_gone_is_refused_naming_both(tmp_path):
    ck_dir = tmp_path / "ck-v1"
    old_checkpoint(tmp_path, offsets=5, committed=4)
    (ck_dir / "offsets" / "4").unlink()
    with pytest.raises(RestartError) as info:
        plan(journaled(3), file_sink(5), read_checkpoint(ck_dir))
    said = str(info.value)
    assert f"the file sink at {OUT} holds batch 4, but offsets/4 of the old checkpoint " \
           f"{ck_dir} is gone" in said


def test_a_sink_batch_beyond_the_old_checkpoint_is_another_querys_sink(tmp_path):
    ck = old_checkpoint(tmp_path, offsets=4, committed=4)
    with pytest.raises(RestartError, match="holds batch 7, but the old checkpoint .* has "
                                           "offsets up to 4 only: another query's sink"):
        plan(journaled(3), file_sink(7), ck)


def test_an_old_checkpoint_that_disagrees_with_the_journal_is_refused_naming_both(tmp_path):
    ck = old_checkpoint(tmp_path, offsets=5, committed=4,
                        tweak={3: {"orders": {"0": 41, "1": 80}}})
    with pytest.raises(RestartError) as info:
        plan(journaled(3), file_sink(5), ck)
    said = str(info.value)
    assert "offsets/3 of the old checkpoint" in said and "disagrees with the journal's " \
           "batch 3 of run run-1" in said and "orders-0 ends at 41 there, 40 in the journal" in said


def test_an_old_checkpoint_of_another_query_is_refused(tmp_path):
    ck = old_checkpoint(tmp_path, offsets=5, committed=4, query="qid-other")
    with pytest.raises(RestartError, match="is the checkpoint of query id qid-other, but the "
                                           "journal's last batch .* is query id qid-1's"):
        plan(journaled(3), file_sink(5), ck)


def test_the_sink_as_far_as_the_journal_is_a_note(tmp_path):
    p = plan(journaled(3), file_sink(3), old_checkpoint(tmp_path, offsets=3, committed=3))
    assert p.ok and not p.sink_batches
    assert [w for w in p.warnings if "Kafka cluster" not in w] == []
    assert "holds batches up to 3, the journal's last: nothing was in flight" in flat(p.explain())
    assert p.starting_offsets(0) == '{"orders":{"0":40,"1":80}}'


# --------------------------------------------------------------------------- behind


def test_batches_committed_that_the_sink_lacks_are_data_loss_with_the_count(tmp_path):
    """Item 3: the journal (so Spark) committed 2 and 3, the sink's log ends at 1 (cut by
    hand, or a sink that failed after the commit): DATA LOSS, 10 + 20 records a batch."""
    ck = old_checkpoint(tmp_path, offsets=3, committed=3)
    p = plan(journaled(3), file_sink(1), ck)
    (error,) = p.errors
    assert error.startswith("DATA LOSS: the file sink at /lake/orders holds batches up to 1, "
                            "but batches 2..3 were committed")
    assert "60 records (orders-0 20, orders-1 40)" in error
    assert "--batch run-1:2" in error and "--allow-data-loss" in error
    accepted = plan(journaled(3), file_sink(1), ck, allow_data_loss=True,
                    bootstrap_servers="k:9092")
    assert accepted.ok
    assert any("As asked (--allow-data-loss)" in w and "60 records" in w
               for w in accepted.warnings)


def test_data_loss_counted_from_the_journal_without_the_old_checkpoint():
    p = plan(journaled(3), file_sink(1), sink_batch=journaled(1))
    assert "60 records (orders-0 20, orders-1 40)" in p.errors[0]
    unknown = plan(journaled(3), file_sink(1))
    assert "an unknown number of records" in unknown.errors[0]


def test_an_empty_sink_lacks_every_batch_from_the_checkpoints_start(tmp_path):
    ck = old_checkpoint(tmp_path, offsets=3, committed=3)
    p = plan(journaled(3), file_sink(None), ck)
    assert "holds batches up to none, but batches 0..3 were committed" in p.errors[0]
    assert "120 records (orders-0 40, orders-1 80)" in p.errors[0]


def test_batches_the_checkpoint_committed_beyond_sink_and_journal_are_read_again(tmp_path):
    """The checkpoint committed 5, the sink holds 4, the journal 3: the plan takes 4 and
    starts after it, so 5 is read again and written once, by the new query."""
    ck = old_checkpoint(tmp_path, offsets=5, committed=5)
    p = plan(journaled(3), file_sink(4), ck)
    assert p.ok and [b.batch_id for b in p.sink_batches] == [4]
    assert any("committed batches 5, which the file sink at /lake/orders does not hold"
               in w and "none lost, none twice" in w for w in p.warnings)


# --------------------------------------------------------------------------- refused


def test_a_given_path_that_is_not_a_sink_is_refused_and_a_journaled_one_is_a_warning():
    with pytest.raises(RestartError, match=r"--sink /lake/orders is not a sink this plan can "
                                           r"read: no _spark_metadata .* or _delta_log"):
        plan(journaled(3), file_sink(None, "given", exists=False))
    p = plan(journaled(3), file_sink(None, exists=False))
    assert p.ok and any("was not checked" in w and "--sink none" in w for w in p.warnings)


def test_another_querys_sink_is_refused():
    with pytest.raises(RestartError, match=r"--sink /lake/other: the journal says query "
                                           r"'orders' wrote to FileSink\[/lake/orders\] .*: "
                                           "another query's sink"):
        plan(journaled(3), file_sink(5, "given", path="/lake/other"))
    delta = SinkFacts("delta", OUT, "given", last_batch=3, app_id="qid-1")
    with pytest.raises(RestartError, match="another query's sink"):
        plan(journaled(3), delta)


def test_a_delta_table_without_a_txn_of_the_old_query_is_refused():
    facts = SinkFacts("delta", "/lake/t", "given", last_batch=None, app_id="qid-1",
                      app_ids=("qid-9", "qid-8"))
    with pytest.raises(RestartError, match=r"the Delta table has no txn of the old query "
                                           r"\(appId qid-1; the appIds it has: qid-9, qid-8\)"):
        plan(journaled(3, sink="DeltaSink[/lake/t]"), facts)


def test_a_foreach_batch_sink_needs_the_txn_app_id():
    facts = SinkFacts("delta", "/lake/t", "given", last_batch=None, app_id=None)
    with pytest.raises(RestartError, match="give the txnAppId its Delta writes used"):
        plan(journaled(3, sink="ForeachBatchSink"), facts)


def test_a_foreach_batch_delta_writer_is_planned_by_its_txn_app_id(tmp_path):
    facts = SinkFacts("delta", "/lake/t", "given", last_batch=4, app_id="app-1")
    p = plan(journaled(3, sink="ForeachBatchSink"), facts,
             old_checkpoint(tmp_path, offsets=4, committed=3))
    assert p.ok and [b.batch_id for b in p.sink_batches] == [4]
    assert "the Delta table at /lake/t (txn appId app-1) holds batches 4 beyond" in \
        flat(p.explain())


# --------------------------------------------------------------------------- unseen


def test_a_journaled_sink_that_cannot_be_read_is_refused_by_a_plan_after_the_journal():
    """The sink the journal names is read wherever it lives; one that cannot be (refused
    credentials, no answer, no reader for its file system) may hold the batch in flight:
    a plan after the journal's last batch is refused, naming what to give. A plan that
    reads again on purpose does not start after the sink: a warning."""
    facts = file_sink(None, path="s3a://b/out", problem="s3a://b/out: the object store "
                      "refused access (Forbidden)")
    anchor = journaled(3, sink="FileSink[s3a://b/out]")
    with pytest.raises(RestartError) as info:
        plan(anchor, facts)
    said = str(info.value)
    assert said.startswith("the old query's sink, the file sink at s3a://b/out (its "
                           "journaled description), cannot be read: s3a://b/out: the "
                           "object store refused access (Forbidden). A batch it holds "
                           "beyond the journal's last (batch 3) would be written again")
    assert said.endswith("(--sink PATH for a file sink, --sink delta:PATH for a Delta "
                         "table), or plan without the check (--sink none)")
    p = plan(JournalFacts(anchor, position="at", before=journaled(2)), facts)
    assert p.ok and any("was not checked: s3a://b/out: the object store refused access"
                        in w for w in p.warnings)


def test_old_checkpoint_batches_beyond_the_journal_no_sink_log_accounts_for_are_refused(
        tmp_path):
    """offsets/4..5 beyond the journal's last (3), commits/5 absent: the batch in flight.
    With no sink log saying what the sink holds (the journal names no file or Delta sink,
    or its sink has no log where it is named), a plan after 3 would have the new query
    write them again: refused, naming --sink; --sink none reads them again on purpose."""
    ck = old_checkpoint(tmp_path / "a", offsets=5, committed=4)
    foreach = journaled(3, sink="ForeachBatchSink")
    with pytest.raises(RestartError) as info:
        plan(foreach, None, ck)
    said = str(info.value)
    assert said.startswith(f"the old checkpoint {ck.path} has offsets/ of batches 4..5 and "
                           "no commits/ of batch 5 (in flight: ")
    assert "no sink log says whether the old query's sink holds them (the journal names " \
           "no file or Delta sink (ForeachBatchSink))" in said
    assert "a plan after batch 3 would write them again" in said
    assert "(--sink PATH for a file sink, --sink delta:PATH for a Delta table)" in said
    with pytest.raises(RestartError, match=f"the file sink at {OUT}, the journal's sink, "
                                           "has no log there"):
        plan(journaled(3), file_sink(None, exists=False), ck)

    p = plan(foreach, None, ck, old_sink="none")
    assert p.ok and p.starting_offsets(0) == '{"orders":{"0":40,"1":80}}'  # after 3
    assert any("as asked (--sink none)" in w and "offsets/ of batches 4..5" in w
               for w in p.warnings)
    assert plan(foreach, None, old_checkpoint(tmp_path / "b", offsets=3, committed=3)).ok
    assert plan(JournalFacts(foreach, position="at", before=journaled(2)), None, ck).ok
    committed = old_checkpoint(tmp_path / "c", offsets=4, committed=4)
    with pytest.raises(RestartError, match=r"has offsets/ of batch 4, beyond the journal's "
                                           r"last \(batch 3 of run run-1"):
        plan(foreach, None, committed)  # committed, its event never journaled: the same


# --------------------------------------------------------------------------- elsewhere


def test_plans_that_read_again_on_purpose_do_not_start_after_the_sink(tmp_path):
    anchor = journaled(3)
    p = plan(JournalFacts(anchor, position="at", before=journaled(2)), file_sink(5),
             old_checkpoint(tmp_path, offsets=5, committed=4))
    assert not p.sink_batches and p.starting_offsets(0) == '{"orders":{"0":30,"1":60}}'
    assert "this plan reads again on purpose" in flat(p.explain())


def test_a_real_time_run_with_a_logged_sink_is_a_note_not_a_bound():
    anchor = journaled(3)
    tail = RealTimeTail("run-1", BatchRef.of(anchor), None, False)
    without = plan(JournalFacts(anchor, real_time=tail), None)
    assert any("real-time mode" in w and "keeps no log (console, foreach, Kafka)" in w
               for w in without.warnings)
    logged = plan(JournalFacts(anchor, real_time=tail), file_sink(3))
    assert not any("real-time" in w for w in logged.warnings) and logged.real_time is None
    assert "keeps a commit log, read for this plan" in flat(logged.explain())


def test_the_sink_is_recorded_with_the_plan_and_read_back(tmp_path):
    p = plan(journaled(3), file_sink(5), old_checkpoint(tmp_path, offsets=5, committed=4))
    row = plan_row(p, PlanRequest("orders").checked(), "api")
    row.update(id=7, created_at=None, run_ids=())
    recorded = recorded_plan(row, {})
    assert recorded.ignored == ()
    assert recorded.sink["taken"] == [4, 5]
    assert recorded.sink_offsets()[("orders", 0)] == [(4, 40, 50), (5, 50, 60)]
    row["request"]["sink"]["offsets"] = [[4, 0, "orders", 0, "x", 50]]
    assert recorded_plan(row, {}).ignored and recorded_plan(row, {}).sink is None


def test_request_checks_for_the_sink_options():
    with pytest.raises(RestartError, match="give the table too"):
        PlanRequest("orders", txn_app_id="a").checked()
    with pytest.raises(RestartError, match="is the NEW checkpoint"):
        PlanRequest("orders", old_checkpoint="/c/", checkpoint="/c").checked()
    with pytest.raises(RestartError, match="bad sink"):
        PlanRequest("orders", old_sink="delta:").checked()
    assert PlanRequest("orders", old_sink="delta:/t", txn_app_id="a").checked().old_sink \
        == "delta:/t"


def test_a_later_checkpoint_killed_before_its_first_batch_was_journaled(tmp_path):
    """The journal ends at batch 3 of qid-1; the next run (qid-2, a new checkpoint
    started from the plan after batch 3) was killed after its sink logged batches 0 and
    1 and before the listener journaled any: its batches are the ones beyond the journal,
    from batch 0 on, journaled as its run's. A checkpoint that did not start there is
    another query's."""
    root = write_checkpoint(tmp_path / "ck-v2", "qid-2",
                            [([ends(4)], True), ([ends(5)], False)],
                            initial={"0": ends(3)})
    p = plan(journaled(3), file_sink(1, "given", path="/lake/v2"), read_checkpoint(root),
             sink_run_id="run-2")
    assert p.ok, p.errors
    assert [(b.run_id, b.query_id, b.batch_id) for b in p.sink_batches] == [
        ("run-2", "qid-2", 0), ("run-2", "qid-2", 1)]
    assert p.sink_batches[0].sources[0].partitions[0][2:] == (40, 50)
    assert p.starting_offsets(0) == '{"orders":{"0":60,"1":120}}'
    assert "they are of the next checkpoint, query id qid-2" in flat(p.explain())
    assert p.sink["query_id"] == "qid-2" and p.sink["run_id"] == "run-2"

    elsewhere = write_checkpoint(tmp_path / "ck-x", "qid-2", [([ends(4)], True)],
                                 initial={"0": ends(1)})
    with pytest.raises(RestartError, match="did not start where the batch ended"):
        plan(journaled(3), file_sink(0, "given", path="/lake/v2"), read_checkpoint(elsewhere))


def test_a_later_checkpoint_whose_file_sink_wrote_nothing_yet(tmp_path):
    root = write_checkpoint(tmp_path / "ck-v2", "qid-2", [([ends(4)], False)],
                            initial={"0": ends(3)})
    facts = file_sink(None, "given", path="/lake/v2", exists=False)
    p = plan(journaled(3), facts, read_checkpoint(root))
    assert p.ok and not p.sink_batches and "holds nothing yet" in flat(p.explain())
    with pytest.raises(RestartError, match="is not a sink"):
        plan(journaled(3), facts)


def test_a_later_checkpoint_whose_delta_sink_has_no_txn_of_it_yet(tmp_path):
    root = write_checkpoint(tmp_path / "ck-v2", "qid-2", [([ends(4)], False)],
                            initial={"0": ends(3)})
    facts = SinkFacts("delta", "/lake/t", "given", last_batch=None, app_id="qid-2",
                      app_ids=("qid-1",))
    p = plan(journaled(3, sink="DeltaSink[/lake/t]"), facts, read_checkpoint(root))
    assert p.ok and not p.sink_batches
    assert "holds no batch of the old query (query id qid-2) yet" in flat(p.explain())
