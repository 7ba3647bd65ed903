"""One request's attestations on their way through the intake, and the answer to each.

A :class:`Job` is made by :meth:`ledger.intake.accept.Intake.check` (level 0, no database),
merged with concurrent ones by :mod:`ledger.intake.group_writer` and stored by
:meth:`ledger.intake.accept.Intake.write`; the routes turn its :class:`Outcome` list into the
HTTP answer. Its own module, so that the writer and the intake both import it and neither the
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ledger.core.schemas import AttestationIn
from ledger.intake.verify import Checked


@dataclass(frozen=True, slots=True)
class Outcome:
    """Result of one submission: an id (accepted) or an error code and message."""

    status: int
    id: int | None = None
    code: str | None = None
    message: str | None = None


Slot = tuple[str, int, str]


@dataclass
class Job:
    """One request's items and their outcomes (an int outcome refers to an earlier item)."""

    items: list[AttestationIn]
    out: list[Outcome | int] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    checked: list[tuple[int, Checked]] = field(default_factory=list)

    def results(self) -> list[Outcome]:
        return [_resolve(self.out, o) for o in self.out]


def _resolve(out: list[Outcome | int], o: Outcome | int) -> Outcome:
    while isinstance(o, int):
        o = out[o]
    return o
