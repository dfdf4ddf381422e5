"""Passwords out of any text that may hold a database URL or connection string (pure).

Anything that prints a URL, an error or a record prints :func:`redact` of it, so
passwords never reach logs, error messages or the journal's own tables.
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


def redact(text: object) -> str:
    """Replace passwords in any text holding database URLs (or connection strings) by ***."""
    out = _PASSWORD_IN_URL.sub(r"\1***", str(text))
    return _PASSWORD_IN_QUERY.sub(r"\1***", out)
