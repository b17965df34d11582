"""The commands as functions: open the target, check, verify, apply, revert.

Each returns a result value (`results`) carrying its exit code and status. `check` and `verify`
only read (`target`, `proofs`); apply and revert are the write path (`writing`), imported only
when they run. See docs/how-it-works.md.
"""

from __future__ import annotations

from dataclasses import replace

from fi_patcher.assess import install_problem
from fi_patcher.decision import decide
from fi_patcher.model import PatchSet, State
from fi_patcher.options import Options, Target, counted
from fi_patcher.proofs import ProofRequest, prove
from fi_patcher.results import ApplyVerdict, Checked, Outcome
from fi_patcher.shares import proven_in
from fi_patcher.target import copies, foreign, inspect, not_installed, open_target

__all__ = ["Options", "Target", "apply", "check", "open_target", "revert", "verify"]


def check(target: Target, chosen: PatchSet, options: Options | None = None) -> Checked:
    """Every chosen patch's state, and what apply would do with it: the very decision apply
    acts on (`decision.decide`), so that check's exit code is apply's verdict. Reads only:
    takes no lock and creates nothing (the pre-flight runs in the target where apply would
    write), and records it may not read (another user's) do not stop it: the files' hashes
    still answer."""
    interpreter = target.interpreter
    inspection = inspect(interpreter, chosen.patches, reading=True)
    assessment = inspection.assessment
    problem = install_problem(assessment)
    if problem is not None:
        raise problem
    installed = assessment.installed
    if installed is None:
        refused = not_installed(assessment, interpreter)
        verdicts = {s.patch.id: ApplyVerdict("refuse", refused) for s in assessment.patches}
        return Checked(target, assessment, verdicts, refused)
    decision = decide(interpreter, inspection, chosen, options or Options())
    shared = foreign(installed, interpreter, "apply")
    notes: tuple[str, ...] = (f"{shared.message}; {shared.remedy}",) if shared else ()
    notes += decision.judgement.warnings + copies(installed, interpreter, None)
    assessment = replace(
        assessment,
        patches=decision.states,
        warnings=assessment.warnings + notes,
        imported_instead=decision.instead,
    )
    return Checked(
        target, assessment, decision.verdicts, decision.plan.refusal, preflight=decision.facts
    )


def verify(target: Target, checked: Checked, options: Options) -> Checked:
    """Run the proofs in fresh processes of the target (`proofs.prove`): after the patch where
    it is applied, before it elsewhere."""
    requests = [
        ProofRequest(s.patch, "after" if s.state is State.PATCHED else "before", s.file.path)
        for s in checked.assessment.patches
        if s.file is not None
        and s.file.condition != "absent"
        and s.state not in (State.NOT_APPLICABLE, State.LEFT_OUT)
    ]
    if requests:
        where = proven_in(target.interpreter.python, len(requests), options.proof_processes)
        options.progress(f"proving {counted(len(requests), 'patch')} {where}", long=True)
    return replace(
        checked,
        reports=prove(
            target.interpreter.python, requests, options.verify_timeout, options.proof_processes
        ),
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
