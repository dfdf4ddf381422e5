"""What a failed Maven run says, in one line that names what is missing.

Maven's error for a dependency it cannot have is one long line: the chain of
artifacts that led to it (``Failed to collect dependencies at A -> B``), then why, nested
(``Failed to read artifact descriptor for B: Could not transfer artifact B from/to
central (URL): ...``). The artifact the registry lacks is the last of the chain, often
far past the first hundred characters; it is named here in full, with the artifact that
needed it and Maven's innermost reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
# groupId:artifactId:type[:classifier]:version, as Maven prints a dependency
_COORD = r"[\w.\-]+:[\w.\-]+:[\w.\-]+(?::[\w.\-]+)?:[\w.\-]+"
_MISSING = (
    re.compile(rf"Could not find artifact ({_COORD})"),
    re.compile(rf"The following artifacts could not be resolved: ({_COORD})"),
    re.compile(rf"Could not transfer artifact ({_COORD})"),
    re.compile(rf"({_COORD}) was not found in"),
    re.compile(rf"Failed to read artifact descriptor for ({_COORD})"),
)
_CHAIN = re.compile(rf"Failed to collect dependencies at ({_COORD}(?: -> {_COORD})*)")


@dataclass(frozen=True)
class Missing:
    """An artifact Maven could not have: ``group:artifact:version``, what needed it (the
    first of the chain, when not itself) and Maven's innermost reason."""

    artifact: str
    needed_by: str | None
    reason: str

    def line(self) -> str:
        by = f" (needed by {self.needed_by})" if self.needed_by else ""
        return f"{self.artifact}{by} cannot be had: {self.reason}"


def plain_errors(output: str) -> list[str]:
    """Maven's ``[ERROR]`` lines, without the prefix and colour codes."""
    plain = _COLOURS.sub("", output)
    return [ln.removeprefix("[ERROR]").strip() for ln in plain.splitlines()
            if ln.startswith("[ERROR]") and ln.removeprefix("[ERROR]").strip()]


def coordinate(printed: str) -> str:
    """``org.apache.spark:spark-sql_2.13:jar:4.2.0`` -> ``org.apache.spark:spark-sql_2.13:4.2.0``
    (the form ``--packages`` and a POM's readers know)."""
    parts = printed.split(":")
    return f"{parts[0]}:{parts[1]}:{parts[-1]}"


def missing(output: str) -> Missing | None:
    """The artifact a failed resolution lacked, from Maven's output; None when Maven
    failed for another reason (a compile error, a bad POM)."""
    for ln in plain_errors(output):
        chain = _CHAIN.search(ln)
        links = chain.group(1).split(" -> ") if chain else []
        found = None
        for pattern in _MISSING:
            match = pattern.search(ln)
            if match:
                found = match.group(1)
                break
        if found is None and links:
            found = links[-1]
        if found is None:
            continue
        artifact = coordinate(found)
        head = coordinate(links[0]) if links else None
        return Missing(artifact, head if head != artifact else None, _innermost(ln))
    return None


def _innermost(line: str) -> str:
    """Maven's deepest reason in a nested error line: after the last ``(URL): `` or
    ``in REPO (URL)``, without the ``-> [Help 1]`` tail."""
    text = re.sub(r"\s*-> \[Help \d+\]\s*$", "", line)
    transfer = re.search(r"from/to (\S+) \(([^)]*)\): (.*)$", text)
    if transfer:
        cause = re.sub(r"^transfer failed for \S+: ", "", transfer.group(3))
        return f"{cause} (from {transfer.group(1)}, {transfer.group(2)})"
    absent = re.search(rf"Could not find artifact {_COORD} in (\S+ \([^)]*\))", text)
    if absent:
        return f"not found in {absent.group(1)}"
    cached = re.search(r"was not found in (\S+)", text)
    if cached:
        return f"not found in {cached.group(1)}"
    return text.rsplit(": ", 1)[-1]


def reason(output: str) -> str:
    """The most telling line of a failed Maven run: the missing artifact in full when a
    dependency was missing, else Maven's first error line, whole."""
    found = missing(output)
    if found is not None:
        return found.line()
    lines = plain_errors(output)
    for ln in lines:
        if "Could not" in ln or "Missing" in ln or "resolve" in ln or "Failed" in ln:
            return ln
    return lines[0] if lines else "no error message"
