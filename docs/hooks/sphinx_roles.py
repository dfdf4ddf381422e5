"""A griffe extension for the API reference: the docstrings' Sphinx roles
(``:class:`~offset_journal.journal.Journal```, ``:func:`plan_restart```) as inline code,
the name as Sphinx would show it, instead of the role's raw text."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|attr|data|exc|obj|const):`([^`]+)`")


def _shown(target: str) -> str:
    title = re.match(r"(.+?)\s*<[^>]+>$", target)  # :role:`Title <target>`
    if title:
        return title.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target.lstrip(".")


def plain_roles(text: str) -> str:
    return _ROLE.sub(lambda m: f"`{_shown(m.group(1))}`", text)


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)
