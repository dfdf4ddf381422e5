"""Tests for offset_journal.checkpoint: hand-made checkpoints, real Spark ones, properties.

The hand-made directories mirror what Spark writes byte for byte where it matters (no
final newline, the Kafka initial-offsets NUL byte, ``.N.crc`` files next to each log
file), so the reader is checked against the format and not against itself.
"""

from __future__ import annotations

import json
import logging
import os
import string
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offset_journal.checkpoint import (
    Checkpoint,
    CheckpointError,
    file_sink_metadata,
    is_new_checkpoint,
    kafka_end_offsets,
    read_checkpoint,
)

QUERY_ID = "3f1c5a52-7d5e-4b8e-9a53-0f6a1c2d9e11"
META = (
    '{"batchWatermarkMs":0,"batchTimestampMs":1674623173851,"conf":{'
    '"spark.sql.streaming.stateStore.providerClass":'
    '"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",'
    '"spark.sql.streaming.multipleWatermarkPolicy":"min",'
    '"spark.sql.shuffle.partitions":"200"}}'
)
KAFKA_LINE = '{"topic_name_from_kafka":{"0":400000, "1":300000}}'
DELTA_LINE = (
    '{"sourceVersion":1,"reservoirId":"3c2f6a0e-6f0a-4d3b-8a8e-1d2c3b4a5f60",'
    '"reservoirVersion":5,"index":-1,"isStartingVersion":false}'
)


def write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def write_offsets(chk: Path, batch_id: int, *sources: str, meta: str = META) -> None:
    """An offsets file as OffsetSeqLog writes it: no final newline."""
    write(chk / "offsets" / str(batch_id), "\n".join(["v1", meta, *sources]))


def write_commit(chk: Path, batch_id: int) -> None:
    write(chk / "commits" / str(batch_id), 'v1\n{"nextBatchWatermarkMs":0}')


def make_checkpoint(
    chk: Path, lines_per_batch: list[list[str]], committed: int | None = None
) -> Path:
    """Batches 0..n-1 with the given source lines; commits up to ``committed`` (default all)."""
    write(chk / "metadata", json.dumps({"id": QUERY_ID}, separators=(",", ":")))
    last_commit = len(lines_per_batch) - 1 if committed is None else committed
    for batch_id, lines in enumerate(lines_per_batch):
        write_offsets(chk, batch_id, *lines)
        if batch_id <= last_commit:
            write_commit(chk, batch_id)
    return chk


def kafka_json(offsets: dict[str, dict[int, int]]) -> str:
    """Kafka's offset JSON: partitions as string keys."""
    return json.dumps(
        {t: {str(p): o for p, o in parts.items()} for t, parts in offsets.items()},
        separators=(",", ":"),
    )


def kafka_line(topic: str, offsets: dict[int, int]) -> str:
    return kafka_json({topic: offsets})


# ----------------------------------------------------------------- hand-made checkpoints


def test_kafka_checkpoint_as_in_the_seed(tmp_path: Path) -> None:
    chk = make_checkpoint(
        tmp_path / "chk",
        [
            [kafka_line("topic_name_from_kafka", {0: 100, 1: 50})],
            [kafka_line("topic_name_from_kafka", {0: 200000, 1: 150000})],
            [KAFKA_LINE],
        ],
    )
    cp = read_checkpoint(chk)

    assert cp.query_id == QUERY_ID
    assert cp.path == str(chk)
    assert [b.batch_id for b in cp.batches] == [0, 1, 2]
    assert all(b.committed for b in cp.batches)
    assert cp.problems == ()
    last = cp.last_committed
    assert last is not None and last.batch_id == 2
    assert cp.last_planned == last
    assert last.version == 1
    assert last.batch_timestamp_ms == 1674623173851
    assert last.batch_watermark_ms == 0
    assert last.conf["spark.sql.shuffle.partitions"] == "200"
    assert last.offsets == ({"topic_name_from_kafka": {"0": 400000, "1": 300000}},)
    assert last.raw_offsets == (KAFKA_LINE,)
    assert last.source_ids == ("0",)
    assert kafka_end_offsets(last) == {0: {"topic_name_from_kafka": {0: 400000, 1: 300000}}}
    assert cp.has_offsets
    assert not is_new_checkpoint(chk)


def test_delta_source_is_parsed_but_not_taken_for_kafka(tmp_path: Path) -> None:
    cp = read_checkpoint(make_checkpoint(tmp_path / "chk", [[DELTA_LINE]]))
    batch = cp.batches[0]
    assert batch.offsets[0]["reservoirVersion"] == 5
    assert batch.offsets[0]["isStartingVersion"] is False
    assert kafka_end_offsets(batch) == {}


def test_two_sources_keep_their_order(tmp_path: Path) -> None:
    second_kafka = kafka_line("events", {0: 7, 3: 9})
    cp = read_checkpoint(
        make_checkpoint(tmp_path / "chk", [[KAFKA_LINE, DELTA_LINE], [DELTA_LINE, second_kafka]])
    )
    first, second = cp.batches
    assert first.raw_offsets == (KAFKA_LINE, DELTA_LINE)
    assert first.source_ids == ("0", "1")
    assert list(kafka_end_offsets(first)) == [0]
    assert kafka_end_offsets(second) == {1: {"events": {0: 7, 3: 9}}}
    assert cp.start_offsets_of(1) == first.offsets


def test_dash_marks_a_source_without_offsets(tmp_path: Path) -> None:
    cp = read_checkpoint(make_checkpoint(tmp_path / "chk", [["-", KAFKA_LINE]]))
    batch = cp.batches[0]
    assert batch.offsets[0] is None
    assert batch.raw_offsets == ("-", KAFKA_LINE)
    assert list(kafka_end_offsets(batch)) == [1]


def test_uncommitted_last_batch(tmp_path: Path) -> None:
    lines = [[kafka_line("t", {0: n * 10})] for n in range(4)]
    cp = read_checkpoint(make_checkpoint(tmp_path / "chk", lines, committed=2))

    assert [b.committed for b in cp.batches] == [True, True, True, False]
    assert cp.last_committed is not None and cp.last_committed.batch_id == 2
    assert cp.last_planned is not None and cp.last_planned.batch_id == 3
    assert [b.batch_id for b in cp.committed_batches()] == [0, 1, 2]
    assert cp.problems == ()
    # The unfinished batch 3 starts where committed batch 2 ended.
    assert cp.start_offsets_of(3) == ({"t": {"0": 20}},)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("", id="empty"),
        pytest.param("v1", id="version-only"),
        pytest.param("v1\n" + META[:40], id="cut-in-metadata"),
        pytest.param("v1\n" + META, id="cut-before-sources"),
        pytest.param("v1\n" + META + '\n{"t":{"0":4', id="cut-in-offset"),
        pytest.param(b"\x00\x00\x00\x00", id="zeros"),
        pytest.param(b"\xff\xfe garbage", id="binary"),
    ],
)
def test_torn_last_offsets_file_is_an_unfinished_batch(
    tmp_path: Path, content: str | bytes, caplog: pytest.LogCaptureFixture
) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[kafka_line("t", {0: 1})], [kafka_line("t", {0: 2})]])
    write(chk / "offsets" / "2", content)

    with caplog.at_level(logging.WARNING, logger="offset_journal.checkpoint"):
        cp = read_checkpoint(chk)

    torn = cp.batches[-1]
    assert torn.batch_id == 2 and not torn.committed and not torn.readable
    assert torn.offsets == () and torn.problem
    assert len(cp.problems) == 1 and cp.problems[0].startswith("offsets/2:")
    assert cp.last_committed is not None and cp.last_committed.batch_id == 1
    assert cp.last_planned is not None and cp.last_planned.batch_id == 1
    assert cp.has_offsets
    assert cp.start_offsets_of(3) is None  # nothing to start after a torn batch
    assert any("offsets/2" in r.getMessage() for r in caplog.records)


def test_last_file_cut_at_a_line_boundary_is_caught_by_source_count(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE, DELTA_LINE]])
    write_offsets(chk, 1, KAFKA_LINE)  # second source line never made it to disk

    cp = read_checkpoint(chk)
    assert not cp.batches[1].readable
    assert "truncated" in (cp.batches[1].problem or "")
    assert cp.last_planned is not None and cp.last_planned.batch_id == 0
    assert len(cp.problems) == 1


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "non-final"])
def test_garbage_in_a_finished_batch_is_an_error(tmp_path: Path, committed: bool) -> None:
    lines = [[KAFKA_LINE]] * 3
    chk = make_checkpoint(tmp_path / "chk", lines, committed=2 if committed else 0)
    write(chk / "offsets" / "1", "v1\n" + META + "\nnot json at all")

    with pytest.raises(CheckpointError) as info:
        read_checkpoint(chk)
    message = str(info.value)
    assert "offsets" in message and "batch 1" in message and "\n" not in message


def test_unknown_offset_log_version_in_a_committed_batch(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE]])
    write(chk / "offsets" / "0", "v9\n" + META + "\n" + KAFKA_LINE)
    with pytest.raises(CheckpointError, match="unsupported offset log version v9"):
        read_checkpoint(chk)


def test_v2_offset_map_lines(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    write(chk / "metadata", json.dumps({"id": QUERY_ID}))
    # Spark 4.1+ OffsetMap: "<sourceId>:<offset>", written in map order.
    write(
        chk / "offsets" / "0", "\n".join(["v2", META, "10:-", "2:" + DELTA_LINE, "0:" + KAFKA_LINE])
    )
    write_commit(chk, 0)

    batch = read_checkpoint(chk).batches[0]
    assert batch.version == 2
    assert batch.source_ids == ("0", "2", "10")
    assert batch.raw_offsets == (KAFKA_LINE, DELTA_LINE, "-")
    assert batch.offsets[2] is None
    assert list(kafka_end_offsets(batch)) == [0]


def test_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CheckpointError, match="does not exist"):
        read_checkpoint(missing)
    assert is_new_checkpoint(missing)


def test_directory_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    other = tmp_path / "data"
    write(other / "part-0000.parquet", b"PAR1")
    write(other / "_SUCCESS", "")
    with pytest.raises(CheckpointError, match="not a Spark checkpoint"):
        read_checkpoint(other)
    # Spark would start a query there from startingOffsets: it is a "new" checkpoint.
    assert is_new_checkpoint(other)


def test_a_file_is_not_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "chk"
    write(path, "hello")
    with pytest.raises(CheckpointError, match="not a directory"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match="not a directory"):
        is_new_checkpoint(path)


@pytest.mark.parametrize("content", ["", "{not json", '{"name":"q"}', "[1,2]"])
def test_garbage_metadata_is_an_error(tmp_path: Path, content: str) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE]])
    write(chk / "metadata", content)
    with pytest.raises(CheckpointError, match="metadata"):
        read_checkpoint(chk)


def test_started_query_without_batches(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    write(chk / "metadata", json.dumps({"id": QUERY_ID}))
    (chk / "offsets").mkdir()
    (chk / "commits").mkdir()

    cp = read_checkpoint(chk)
    assert cp.query_id == QUERY_ID
    assert cp.batches == ()
    assert not cp.has_offsets
    assert cp.last_committed is None and cp.last_planned is None
    assert cp.start_offsets_of(0) is None
    assert is_new_checkpoint(chk)


def test_missing_metadata_file_gives_no_query_id(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE]])
    (chk / "metadata").unlink()
    assert read_checkpoint(chk).query_id is None


def test_crc_and_temp_files_are_ignored(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE], [KAFKA_LINE]], committed=0)
    for sub in ("offsets", "commits"):
        for name in (".0.crc", ".1.crc", ".2.crc", ".2.4f9d1c.tmp", "2.tmp", "README", "-1"):
            write(chk / sub / name, "garbage")
    (chk / "offsets" / "7").mkdir()  # a directory named like a batch is not a batch
    write(chk / ".metadata.crc", "garbage")

    cp = read_checkpoint(chk)
    assert [b.batch_id for b in cp.batches] == [0, 1]
    assert [b.committed for b in cp.batches] == [True, False]
    assert cp.problems == ()


def test_only_crc_files_is_still_a_new_checkpoint(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    write(chk / "offsets" / ".0.crc", "x")
    write(chk / "offsets" / ".0.1b2c.tmp", "x")
    assert is_new_checkpoint(chk)
    assert is_new_checkpoint(tmp_path)  # an empty (pre-created) location


def test_gaps_and_purged_history(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    write(chk / "metadata", json.dumps({"id": QUERY_ID}))
    for batch_id in (5, 6, 8):  # 0-4 purged by Spark; 7 missing
        write_offsets(chk, batch_id, kafka_line("t", {0: batch_id}))
        write_commit(chk, batch_id)
    write_commit(chk, 9)

    cp = read_checkpoint(chk)
    assert [b.batch_id for b in cp.batches] == [5, 6, 8]
    assert any("missing for batches 7" in p for p in cp.problems)
    assert any("commits without offsets for batches 9" in p for p in cp.problems)
    assert cp.start_offsets_of(5) is None  # batch 4 was purged
    assert cp.start_offsets_of(9) == ({"t": {"0": 8}},)


def test_torn_last_commit_file_is_reported(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE], [KAFKA_LINE]])
    write(chk / "commits" / "1", "")
    cp = read_checkpoint(chk)
    assert cp.last_committed is not None and cp.last_committed.batch_id == 1
    assert len(cp.problems) == 1 and cp.problems[0].startswith("commits/1:")


def test_batch_zero_starts_from_kafka_initial_offsets(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE, DELTA_LINE]])
    initial = kafka_line("topic_name_from_kafka", {0: 0, 1: 12})
    # KafkaSourceInitialOffsetWriter: a NUL byte, the version line, then the JSON.
    write(chk / "sources" / "0" / "0", b"\x00v1\n" + initial.encode())
    write(chk / "sources" / "0" / ".0.crc", b"crc")
    # The Delta source keeps no initial offsets; a file source keeps its file list there.
    write(chk / "sources" / "1" / "0", 'v1\n{"path":"file:///in/a.json","timestamp":1,"batchId":0}')

    cp = read_checkpoint(chk)
    assert cp.initial_offsets == {"0": json.loads(initial)}
    assert cp.start_offsets_of(0) == (json.loads(initial), None)
    assert cp.start_offsets_of(1) == cp.batches[0].offsets


def test_batch_zero_without_initial_offsets(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [['{"logOffset":0}']])
    write(chk / "sources" / "0" / "0", "v1\n1795328272671")  # rate: its creation time
    cp = read_checkpoint(chk)
    assert cp.initial_offsets == {}
    assert cp.start_offsets_of(0) == (None,)
    with pytest.raises(ValueError):
        cp.start_offsets_of(-1)


def test_to_dict_is_json(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE, "-"], [KAFKA_LINE, DELTA_LINE]], 0)
    write(chk / "sources" / "0" / "0", b"\x00v1\n" + KAFKA_LINE.encode())
    out = json.loads(json.dumps(read_checkpoint(chk).to_dict()))
    assert out["query_id"] == QUERY_ID
    assert out["last_committed"] == 0 and out["last_planned"] == 1
    assert out["has_offsets"] is True
    assert out["batches"][0]["offsets"] == [json.loads(KAFKA_LINE), None]
    assert out["batches"][1]["committed"] is False
    assert out["initial_offsets"]["0"] == json.loads(KAFKA_LINE)


def test_file_url_is_read_like_a_local_path(tmp_path: Path) -> None:
    chk = make_checkpoint(tmp_path / "chk", [[KAFKA_LINE]])
    for url in (chk.as_uri(), "file:" + str(chk)):  # file:///x and Spark's file:/x
        cp = read_checkpoint(url)
        assert [b.batch_id for b in cp.batches] == [0]
        assert cp.path == url


def test_remote_url_without_fsspec_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import fsspec` fail as on a machine without it.
    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(CheckpointError, match="pip install fsspec"):
        read_checkpoint("hdfs://namenode/checkpoints/q1")


def test_memory_filesystem_through_fsspec() -> None:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"/oj-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        fs.pipe(
            {
                f"{root}/chk/metadata": json.dumps({"id": QUERY_ID}).encode(),
                f"{root}/chk/offsets/0": f"v1\n{META}\n{KAFKA_LINE}".encode(),
                f"{root}/chk/offsets/.0.crc": b"crc",
                f"{root}/chk/offsets/1": b"",
                f"{root}/chk/commits/0": b'v1\n{"nextBatchWatermarkMs":0}',
                f"{root}/chk/sources/0/0": b"\x00v1\n" + KAFKA_LINE.encode(),
                f"{root}/out/_spark_metadata/9.compact": b"v1",
                f"{root}/out/_spark_metadata/10": b"v1",
            }
        )
        cp = read_checkpoint(f"memory://{root}/chk")
        assert cp.query_id == QUERY_ID
        assert [(b.batch_id, b.committed, b.readable) for b in cp.batches] == [
            (0, True, True),
            (1, False, False),
        ]
        assert cp.start_offsets_of(0) == (json.loads(KAFKA_LINE),)
        assert not is_new_checkpoint(f"memory://{root}/chk")
        assert is_new_checkpoint(f"memory://{root}/elsewhere")
        assert file_sink_metadata(f"memory://{root}/out") == 10
        assert read_checkpoint(f"{root}/chk", fs=fs).query_id == QUERY_ID
    finally:
        fs.rm(root, recursive=True)


def test_file_sink_metadata(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert file_sink_metadata(out) is None  # no output yet
    write(out / "part-00000.parquet", b"PAR1")
    assert file_sink_metadata(out) is None  # written by a batch job: no sink log
    (out / "_spark_metadata").mkdir()
    assert file_sink_metadata(out) is None
    for name in ["0", "1", "8", "9.compact", "10", "11"]:
        write(out / "_spark_metadata" / name, 'v1\n{"path":"x","action":"add"}')
    for name in [".11.crc", ".12.3fa1.tmp", "12.tmp", "99x"]:
        write(out / "_spark_metadata" / name, "x")
    assert file_sink_metadata(out) == 11
    (out / "_spark_metadata" / "10").unlink()
    (out / "_spark_metadata" / "11").unlink()
    assert file_sink_metadata(out) == 9  # compacted log still counts


def test_checkpoint_is_frozen(tmp_path: Path) -> None:
    cp = read_checkpoint(make_checkpoint(tmp_path / "chk", [[KAFKA_LINE]]))
    with pytest.raises(AttributeError):
        cp.query_id = "other"  # type: ignore[misc]
    assert isinstance(cp, Checkpoint)


# ----------------------------------------------------------------- properties

TOPICS = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=40)
PARTITION_OFFSETS = st.dictionaries(
    st.integers(0, 100_000), st.integers(0, 2**63 - 1), min_size=1, max_size=8
)
KAFKA_OFFSETS = st.dictionaries(TOPICS, PARTITION_OFFSETS, min_size=1, max_size=4)
OTHER_LINES = st.sampled_from(["-", DELTA_LINE, '{"logOffset":3}', "42"])


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(KAFKA_OFFSETS, min_size=1, max_size=4))
def test_kafka_offsets_round_trip(batches: list[dict[str, dict[int, int]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        chk = Path(tmp) / "chk"
        lines = [[kafka_json(offsets)] for offsets in batches]
        cp = read_checkpoint(make_checkpoint(chk, lines))
        assert [kafka_end_offsets(b) for b in cp.batches] == [{0: o} for o in batches]
        assert [b.raw_offsets for b in cp.batches] == [tuple(line) for line in lines]


@settings(max_examples=40, deadline=None)
@given(sources=st.lists(st.one_of(KAFKA_OFFSETS, OTHER_LINES), min_size=1, max_size=5))
def test_kafka_sources_found_among_others(sources: list[Any]) -> None:
    lines = [kafka_json(s) if isinstance(s, dict) else s for s in sources]
    with tempfile.TemporaryDirectory() as tmp:
        cp = read_checkpoint(make_checkpoint(Path(tmp) / "chk", [lines]))
    expected = {i: s for i, s in enumerate(sources) if isinstance(s, dict)}
    assert kafka_end_offsets(cp.batches[0]) == expected


# ----------------------------------------------------------------- real Spark checkpoints


@pytest.fixture(scope="module")
def spark_session(spark: Any) -> Iterator[Any]:
    """The test session's one SparkSession (testing.py): a second one of this module's,
    started first and stopped, left the JVM without Spark's Kafka connector for the
    modules after it."""
    yield spark


def progress_of(query: Any) -> list[dict[str, Any]]:
    """The query's progress as plain JSON (offsets nested as JSON, not strings)."""
    return [json.loads(p.json) for p in query.recentProgress]


@pytest.mark.spark
def test_file_source_checkpoint_matches_progress(spark_session: Any, tmp_path: Path) -> None:
    src, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    for i in range(3):
        write(src / f"part-{i}.json", json.dumps({"n": i}) + "\n")
    assert is_new_checkpoint(chk)

    query = (
        spark_session.readStream.schema("n long")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination(60)
    progress = progress_of(query)
    assert progress, "the query reported no progress"

    cp = read_checkpoint(chk)
    assert cp.query_id == query.id
    assert cp.problems == ()
    assert [b.batch_id for b in cp.batches] == [p["batchId"] for p in progress] == [0, 1, 2]
    for batch, p in zip(cp.batches, progress, strict=True):
        assert batch.committed
        assert batch.offsets == (p["sources"][0]["endOffset"],) == ({"logOffset": batch.batch_id},)
        assert cp.start_offsets_of(batch.batch_id) == (p["sources"][0]["startOffset"],)
        assert batch.batch_timestamp_ms and batch.conf
    assert kafka_end_offsets(cp.batches[-1]) == {}
    assert not is_new_checkpoint(chk)
    # A new checkpoint writing into `out` would have batches 0-2 skipped.
    assert file_sink_metadata(out) == 2

    # Without its commit, the last batch is unfinished: the one before is the last done.
    (chk / "commits" / "2").unlink()
    (chk / "commits" / ".2.crc").unlink(missing_ok=True)
    cp = read_checkpoint(chk)
    assert cp.last_committed is not None and cp.last_committed.batch_id == 1
    assert cp.last_planned is not None and cp.last_planned.batch_id == 2
    assert not cp.batches[-1].committed


@pytest.mark.spark
def test_rate_source_checkpoint_matches_progress(spark_session: Any, tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    query = (
        spark_session.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .load()
        .writeStream.format("memory")
        .queryName(f"oj_rate_{os.getpid()}_{time.monotonic_ns()}")
        .option("checkpointLocation", str(chk))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 30
        while len(query.recentProgress) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
    progress = progress_of(query)
    assert len(progress) >= 3

    cp = read_checkpoint(chk)
    assert cp.query_id == query.id
    committed = {b.batch_id: b for b in cp.committed_batches()}
    # Every reported batch committed first; stopping may leave one more planned.
    assert {p["batchId"] for p in progress} <= set(committed)
    for p in progress:
        assert committed[p["batchId"]].offsets == (p["sources"][0]["endOffset"],)
    planned = cp.last_planned
    assert planned is not None and planned.batch_id >= max(committed)
