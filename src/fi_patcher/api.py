"""The commands as functions: open the target, check, verify, apply, revert.

Each returns a result value (`results`) carrying its exit code and status. `check` and `verify`
only read (`target`, `proofs`); apply and revert are the write path (`writing`), imported only
when they run. See docs/how-it-works.md.
"""

from __future__ import annotations

from dataclasses import replace

from fi_patcher.assess import install_problem
from fi_patcher.model import PatchSet
from fi_patcher.options import Options, Target
from fi_patcher.proofs import ProofRequest, prove
from fi_patcher.results import Checked, Outcome
from fi_patcher.target import copies, foreign, imported_instead, inspect, open_target

__all__ = ["Options", "Target", "apply", "check", "open_target", "revert", "verify"]


def check(target: Target, chosen: PatchSet) -> Checked:
    """Every chosen patch's state. Reads only: takes no lock and creates nothing, and records it
    may not read (another user's) do not stop it: the files' hashes still answer."""
    interpreter = target.interpreter
    assessment = inspect(interpreter, chosen.patches, reading=True).assessment
    problem = install_problem(assessment)
    if problem is not None:
        raise problem
    installed = assessment.installed
    shared = foreign(installed, interpreter, "apply")
    instead = imported_instead(installed, interpreter)
    notes: tuple[str, ...] = (f"{shared.message}; {shared.remedy}",) if shared else ()
    notes += copies(installed, interpreter, instead)
    assessment = replace(assessment, warnings=assessment.warnings + notes, imported_instead=instead)
    return Checked(target, assessment)


def verify(target: Target, checked: Checked, options: Options) -> Checked:
    """Run the proofs in one fresh process of the target: after the patch where it is applied,
    before it elsewhere."""
    requests = [
        ProofRequest(s.patch, "after" if s.state == "patched" else "before", s.file.path)
        for s in checked.assessment.patches
        if s.file is not None and s.file.condition != "absent" and s.state != "not-applicable"
    ]
    if requests:
        options.progress(f"proving in {target.interpreter.python} (importing torch and FlashInfer)")
    return replace(
        checked, reports=prove(target.interpreter.python, requests, options.verify_timeout)
    )


def apply(target: Target, chosen: PatchSet, options: Options | None = None) -> Outcome:
    """Every chosen patch that applies, written once per file, proven, and put back where its
    proof fails; idempotent."""
    from fi_patcher import writing

    return writing.apply(target, chosen, options or Options())


def revert(target: Target, chosen: PatchSet, options: Options | None = None) -> Outcome:
    """Take the chosen patches out (every patch, by default): a file left with none gets its
    original bytes back; a file left with others is rebuilt from the original and proven."""
    from fi_patcher import writing

    return writing.revert(target, chosen, options or Options())
