"""A ``commits/N`` file read once, in checkpoint/, for the savepoint's export and the
restore alike (pure, and on files)."""

from __future__ import annotations

from offset_journal.checkpoint.commits import Commit, commit_version, parse_commit, read_commit


def test_a_commit_file_gives_its_version_and_metadata():
    assert parse_commit(b'v2\n{"nextBatchWatermarkMs":5,"stateUniqueIds":{}}\n') == Commit(
        2, {"nextBatchWatermarkMs": 5, "stateUniqueIds": {}})
    assert parse_commit(b"v1\n") == Commit(1, {})
    assert parse_commit(b"v1\nnot json") == Commit(1, {})
    assert commit_version(b"garbage\n{}") == 1


def test_a_missing_commit_is_none_and_a_written_one_is_read(tmp_path):
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "3").write_bytes(b'v2\n{"nextBatchWatermarkMs":7}')
    assert read_commit(str(tmp_path), 3) == Commit(2, {"nextBatchWatermarkMs": 7})
    assert read_commit(str(tmp_path), 4) is None
