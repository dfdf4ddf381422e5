"""Passwords out of any text that may hold a database URL or connection string, and
object-store secrets out of any text that may hold their settings (pure).

Anything that prints a URL, an error or a record prints :func:`redact` of it, so
passwords never reach logs, error messages or the journal's own tables. The secrets of
object stores are the values of settings and variables named for them, however written
(``name=value``, ``name: value``, ``"name": "value"``, ``--conf name=value``, a URL's
query): ``fs.s3a.secret.key`` and ``fs.s3a.session.token`` (per bucket too),
``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN`` (and the profile files'
``aws_secret_access_key``), ``X-Amz-Security-Token`` and ``X-Amz-Signature`` (a
presigned URL), ADLS's ``fs.azure.account.key.*`` and SAS tokens, GCS's client secret
and refresh token; and the access key id beside them (``fs.s3a.access.key``,
``AWS_ACCESS_KEY_ID``, a signed request's ``Credential=``) and a request's
``Signature``, as botocore's DEBUG lines print them.
"""

from __future__ import annotations

import re

# The password runs to the last '@' of the URL (an unencoded '@' in it must not leave
# its tail showing), and may hold spaces and any other character but a line break. In
# order of preference it ends at: the last '@' of the line that a host and a path, a
# query or a port follow (over-redacting a second URL on the line rather than leaving
# part of a password); the last '@' of its run of non-blanks; an '@' followed by a
# host at the end of the text or a blank (for a password with blanks and no '/').
# Keyword forms may come first, be quoted, or be sslpassword.
_PASSWORD_IN_URL = re.compile(
    r"(://[^:/@\s]*:)"
    r"(?:[^\n]*(?=@[^\s/?#@]*(?::\d+(?:[/?\s]|$)|[/?]))"
    r"|\S*(?=@)"
    r"|[^\n/]*(?=@[^\s/?#@:]+(?::\d+)?(?:\s|$)))"
)
_PASSWORD_IN_QUERY = re.compile(
    r"(?i)((?:^|[^\w-])(?:pg)?(?:ssl)?(?:password|passwd|pwd)\s*=\s*)"
    r"('(?:[^'\\]|\\.)*'?|\"(?:[^\"\\]|\\.)*\"?|[^&;\s)\]},]*)"
)


# An access key id is not a secret on its own, but with a leaked secret it is the other
# half, and it names the account: out too. A request's signature (botocore's DEBUG
# lines: its ``Authorization`` header and ``Signature:`` line) may be replayed for
# minutes. A value may be a bytes literal (``b'...'``: botocore's header dumps).
_SECRET_NAME = (r"(?:secret[._-]?(?:access[._-]?)?key|session[._-]?token|security[._-]?token"
                r"|x-amz-signature|client[._-]?secret|refresh[._-]?token|sas[._-]?token"
                r"|account[._-]?key(?:\.[\w.-]+)?|access[._-]?key(?:[._-]?id)?"
                r"|credential|signature)")
_SECRET_SETTING = re.compile(
    r"(?i)((?:^|(?<=[^\w.-]))[\w.-]*?" + _SECRET_NAME + r"[\"']?\s*[=:]\s*)"
    r"(b?'(?:[^'\\]|\\.)*'?|b?\"(?:[^\"\\]|\\.)*\"?|[^&;\s,)\]}\"']*)"
)


def redact(text: object) -> str:
    """Replace passwords in any text holding database URLs (or connection strings), and
    object-store secrets in any text holding their settings, by ***."""
    out = _PASSWORD_IN_URL.sub(r"\1***", str(text))
    out = _PASSWORD_IN_QUERY.sub(r"\1***", out)
    return _SECRET_SETTING.sub(r"\1***", out)
