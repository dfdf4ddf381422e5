"""What a step of the planner found (pure): notes, warnings and errors, merged in order."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Findings:
    """What a step of the planner found: notes (why), warnings (a person's judgement
    needed), errors (do not use the plan as is). Steps return one; the plan merges them
    in order."""

    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def merge(self, other: Findings) -> Findings:
        """Append ``other``'s findings to these (in place); returns self."""
        self.notes += other.notes
        self.warnings += other.warnings
        self.errors += other.errors
        return self

    @classmethod
    def joined(cls, *parts: Findings) -> Findings:
        """One Findings of ``parts``' in their order: a step computes its parts, then
        joins them once."""
        out = cls()
        for part in parts:
            out.merge(part)
        return out


Flagged = dict[tuple[int, int], tuple[str, str]]
"""(batch pk, source index) -> (the batch's label, the problem flagged on it)."""
