"""Passwords of any shape are redacted, and a query's exception text is redacted before
it is spooled or journaled."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offset_journal import ConfigError, Journal, OffsetJournalListener, redact
from offset_journal.capture.writer import Writer, WriterConfig
from offset_journal.cli import main as cli_main
from offset_journal.journal.db import ENV_URL, resolve_url
from offset_journal.records import TERMINATED, run_from_event

# Anything a password may hold on one line: blanks, '@', '/', ':', quotes, unicode.
PASSWORDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\n\r")
    | st.sampled_from(" \t@/:?#'\"\\%=&;"),
    min_size=1, max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(PASSWORDS)
def test_redact_hides_any_password_in_a_url(password: str) -> None:
    for shown in (password, quote(password, safe="")):
        text = f"cannot write to postgresql+psycopg://writer:{shown}@db.example:5432/journal "\
               "(connection refused) mail ops@example.com"
        assert redact(text) == ("cannot write to postgresql+psycopg://writer:***@db.example:5432"
                                "/journal (connection refused) mail ops@example.com")
        assert redact(f"postgresql://writer:{shown}@db/journal") == \
            "postgresql://writer:***@db/journal"


@settings(max_examples=200, deadline=None)
@given(PASSWORDS)
def test_redact_hides_any_quoted_keyword_password(password: str) -> None:
    quoted = "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
    assert redact(f"host=h password={quoted} dbname=d") == "host=h password=*** dbname=d"


@settings(max_examples=200, deadline=None)
@given(PASSWORDS)
def test_a_malformed_url_error_never_shows_the_password(password: str) -> None:
    try:  # some passwords ('@?') make a URL that parses: nothing to show then
        resolve_url(f"postgresql://writer:{password}@db:notaport/journal")
    except ConfigError as exc:
        assert "writer:***@" in str(exc)
        assert f":{password}@" not in str(exc)


@settings(max_examples=300, deadline=None)
@given(PASSWORDS)
def test_an_s3a_url_with_credentials_is_refused_whatever_the_secret_holds(
        password: str) -> None:
    """Refused before s3fs is imported or anything called ('/' in the secret once made
    the text before it a bucket name, and botocore was called with it)."""
    from offset_journal.checkpoint._remote import open_s3
    from offset_journal.errors import CheckpointError

    for shown in (password, quote(password, safe="")):
        with pytest.raises(CheckpointError, match="credentials in a URL are not taken") as info:
            open_s3(f"s3a://AKIAKEYINURL:{shown}@bucket-1/chk/v1")
        assert "(s3a://***@bucket-1/chk/v1)" in str(info.value)
        assert "AKIAKEYINURL" not in str(info.value) and f":{shown}@" not in str(info.value)


# What botocore and s3fs print at DEBUG, as they print it (header dumps hold bytes).
SIGNED = ("AWS4-HMAC-SHA256 Credential=AKIAEXAMPLEKEYID0000/20261128/us-east-1/s3/aws4_request, "
          "SignedHeaders=host;x-amz-date, Signature=" + "ab12" * 16)


@pytest.mark.parametrize(("text", "shown"), [
    (f"Sending http request: <AWSPreparedRequest headers={{'Authorization': b'{SIGNED}', "
     "'X-Amz-Security-Token': b'IQoJb3Jp//Z2lu+X2Vj', 'X-Amz-Date': b'20261128T233913Z'}>",
     "Sending http request: <AWSPreparedRequest headers={'Authorization': b'AWS4-HMAC-SHA256 "
     "Credential=***, SignedHeaders=host;x-amz-date, Signature=***', 'X-Amz-Security-Token': "
     "***, 'X-Amz-Date': b'20261128T233913Z'}>"),
    ("botocore.auth: Signature:\n" + "ab12" * 16, "botocore.auth: Signature:\n***"),
    ("CanonicalRequest:\nGET\nx-amz-security-token:IQoJb3Jp//Z2lu\nx-amz-date:2026",
     "CanonicalRequest:\nGET\nx-amz-security-token:***\nx-amz-date:2026"),
    ("AWS_ACCESS_KEY_ID=AKIAEXAMPLEKEYID0000 aws_access_key_id = AKIAEXAMPLEKEYID0000",
     "AWS_ACCESS_KEY_ID=*** aws_access_key_id = ***"),
    ("fs.s3a.access.key=AKIAEXAMPLEKEYID0000", "fs.s3a.access.key=***"),
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIAEXAMPLEKEYID0000%2F2026&x=1",
     "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&x=1"),
    ("An error occurred (SignatureDoesNotMatch): The request signature we calculated does "
     "not match", "An error occurred (SignatureDoesNotMatch): The request signature we "
     "calculated does not match"),
])
def test_redact_hides_a_signed_requests_key_id_signature_and_token(text: str,
                                                                    shown: str) -> None:
    assert redact(text) == shown


def test_a_malformed_url_error_with_blanks_in_the_password() -> None:
    with pytest.raises(ConfigError, match="malformed") as info:
        resolve_url("postgresql://writer:pa ss w0rd@db:notaport/journal")
    assert "pa ss" not in str(info.value) and "writer:***@" in str(info.value)


def test_the_command_and_the_listener_hide_a_password_with_blanks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    secret = "s3cret with blanks"
    code = cli_main(["--database-url", f"postgresql://u:{secret}@h:notaport/db", "runs"])
    err = capsys.readouterr().err
    assert code == 2 and "malformed database URL" in err and "blanks" not in err, err
    caplog.set_level(logging.WARNING)
    listener = OffsetJournalListener(f"postgresql://u:{secret}@127.0.0.1:1/db",
                                     spool_dir=str(tmp_path / "spool"), connect_timeout=1,
                                     terminate_flush_timeout=0.5)
    listener.onQueryStarted(SimpleNamespace(runId="r", id="q", name="n",
                                            timestamp="2024-01-01T00:00:00Z"))
    assert listener.flush(timeout=3) is False
    listener.close(timeout=1)
    assert "cannot write to" in caplog.text and "blanks" not in caplog.text, caplog.text


LEAKY = ("org.postgresql.util.PSQLException: FATAL: could not connect to "
         "jdbc:postgresql://etl:Hunter2 pw@db:5432/sales?user=etl&password=Hunter2pw "
         "(password=Hunter2pw2 host=db)")


def test_a_terminated_querys_exception_is_redacted_in_the_spool_and_the_journal(
        journal_url: str, tmp_path: Path) -> None:
    run = "7d0e0f5e-0000-4000-8000-000000000001"
    spool = tmp_path / "spool"
    # The database is away: the event goes to the spool, redacted.
    away = OffsetJournalListener("postgresql://u@127.0.0.1:1/db", spool_dir=str(spool),
                                 connect_timeout=1, terminate_flush_timeout=0.5)
    away.onQueryStarted(SimpleNamespace(runId=run, id="q", name="leaky",
                                        timestamp="2024-01-01T00:00:00Z"))
    away.onQueryTerminated(SimpleNamespace(runId=run, id="q", exception=LEAKY,
                                           errorClassOnException=None))
    away.close(timeout=1)
    spooled = "".join(f.read_text() for f in spool.rglob("*") if f.is_file())
    assert "terminated" in spooled or TERMINATED in spooled
    assert "Hunter2" not in spooled, spooled
    # Replayed into the journal: still redacted, still useful.
    replay = Writer(WriterConfig(journal_url, str(spool)))
    replay.start()
    assert replay.flush(timeout=30)
    replay.close()
    with Journal(journal_url) as j:
        (r,) = j.runs("leaky")
    assert r.exception is not None and "Hunter2" not in r.exception
    assert "PSQLException" in r.exception and "password=***" in r.exception


def test_an_exception_spooled_by_an_older_release_is_redacted_when_journaled() -> None:
    event = {"type": TERMINATED, "query_id": "q", "run_id": "r", "name": "n",
             "timestamp": "2024-01-01T00:00:00Z", "exception": LEAKY}
    rec = run_from_event(json.loads(json.dumps(event)))
    assert rec.exception is not None and "Hunter2" not in rec.exception
