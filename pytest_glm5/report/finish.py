"""A run's finish, once, for the session's end and `glm5 merge` alike: the family decision over every verdict, the
regressions that fail gate items, the baseline updates, the outcome, and every output written from one document
(an output that could not be written fails the run, so the outcome is decided again). What differs between the two
comes in as values and callbacks: what to record, the facts the outcome reads, the document to write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..judge.merge import Merged, decided
from ..judge.verdicts import Change, Verdict
from . import gateitems
from .outcome import Facts, Outcome, decide
from .outputs import Outputs, Written, write_all

Record = Callable[[Sequence[Verdict]], tuple[list[Change], list[str]]]  # baseline updates: (changes, errors)
FactsOf = Callable[[Merged, list[Verdict], list[str]], Facts]  # (view, regressed, errors so far) -> the facts
DocumentOf = Callable[[Merged, Sequence[Change], Outcome], dict[str, Any]]


@dataclass
class Finished:
    """What a finish decided and wrote."""

    view: Merged
    regressed: list[Verdict]
    outcome: Outcome
    changes: list[Change] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # baselines not recorded, outputs not written
    written: Written | None = None


def finish(view: Merged, alpha: float, facts: FactsOf, document: DocumentOf, outputs: Outputs | None,
           record: Record | None = None, decided_hook: Callable[[Merged], None] | None = None) -> Finished:
    """The run decided as one at `alpha` (judge/merge.decided), baselines recorded where `record` is given, the
    outcome, and every asked-for output written once (`outputs` None or asking for nothing: none).
    `decided_hook`: told the decided view before anything is recorded (the night prices its launches)."""
    view = decided(view, alpha)
    if decided_hook is not None:
        decided_hook(view)
    regressed = gateitems.regressions(view.verdicts, view.confirmed)
    changes, errors = record(view.verdicts) if record is not None and view.verdicts else ([], [])
    out = Finished(view, regressed, decide(facts(view, regressed, list(errors))), list(changes), list(errors))
    if outputs is not None and outputs.any:
        out.written = write_all(document(view, out.changes, out.outcome), outputs)
        if out.written.errors:  # asked for an output, did not get it: the terminal and the exit say so
            out.errors += out.written.errors
            out.outcome = decide(facts(view, regressed, list(out.errors)))
    return out
