"""From a plan and what the write protocol did, the result of apply or revert: what happened to
each patch and each file. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fi_patcher.changes import diff
from fi_patcher.model import PatchSet, PatchState
from fi_patcher.options import Target
from fi_patcher.plan import ApplyPlan, FilePlan, RevertFile, RevertPlan, Step, StepAction
from fi_patcher.proofs import Preflight
from fi_patcher.protocol import Done, Settlement, Write
from fi_patcher.results import (
    FileAction,
    FileOutcome,
    Outcome,
    PatchAction,
    PatchOutcome,
    restored,
)
from fi_patcher.target import Inspection

_ACTION: Mapping[StepAction, PatchAction] = {
    "add": "applied",
    "finish": "finished",
    "refresh": "rewritten",
    "already-applied": "already-applied",
    "not-applicable": "not-applicable",
    "left-out": "left-out",
}


def dry_run(plan: ApplyPlan, writes: Sequence[Write]) -> tuple[FileOutcome, ...]:
    """The writes apply would make, as diffs (`writes`: those of the files that write): the same
    changes, none of them written."""
    writing = [f for f in plan.files if f.writes]
    return tuple(
        FileOutcome(
            w.change.relpath,
            w.change.path,
            "would-write",
            tuple(p.id for p in f.patches),
            diff=diff(w.change),
        )
        for f, w in zip(writing, writes, strict=True)
    )


def applied(
    target: Target,
    inspection: Inspection,
    plan: ApplyPlan,
    files: tuple[FileOutcome, ...] = (),
    facts: Preflight | None = None,
    warnings: tuple[str, ...] = (),
    *,
    done: Done | None = None,
    writes: Sequence[Write] = (),
) -> Outcome:
    if done is not None:
        files = tuple(
            _applied_file(inspection, file, write, done.settled[file.state.relpath])
            for file, write in zip(plan.files, writes, strict=True)
            if file.state.relpath in done.settled
        )
    failed = done is not None and done.failure is not None
    by_file = {f.relpath: f for f in files}
    states = {s.patch.id: s for s in inspection.assessment.patches}
    patches = tuple(
        _applied_patch(states[step.patch.id], step, by_file.get(step.patch.target), failed, done)
        for step in plan.steps
    )
    failure = done.failure if done is not None else None
    return Outcome(target, inspection.assessment, patches, files, facts, warnings, failure)


def _applied_file(
    inspection: Inspection, file: FilePlan, write: Write, settlement: Settlement
) -> FileOutcome:
    state = file.state
    holds = tuple(p.id for p in file.patches)
    backup = inspection.store.backups / write.change.staged.backup
    if settlement == "rolled-back":
        held = state.applied if file.writes else ()
        return FileOutcome(state.relpath, state.path, "rolled-back", held)
    if settlement == "restored":
        return FileOutcome(state.relpath, state.path, "restored", (), _RESTORED)
    if settlement == "stranded":
        return FileOutcome(state.relpath, state.path, "stranded", holds, _STRANDED, backup=backup)
    if not file.writes:
        return FileOutcome(state.relpath, state.path, "finished", holds)
    return FileOutcome(
        state.relpath, state.path, "written", holds, diff=diff(write.change), backup=backup
    )


_STRANDED = "fi-patch's new bytes stay, unproven: the write could not be undone (see the error)"
_RESTORED = "the bytes an interrupted run left failed their proof: FlashInfer's original is back"
_UNREACHED = "not done: the command stopped before this file (see the error)"


def _applied_patch(
    state: PatchState, step: Step, file: FileOutcome | None, failed: bool, done: Done | None
) -> PatchOutcome:
    action: PatchAction = _ACTION[step.action]
    message = step.reason if action in ("left-out", "rewritten") else ""
    if file is not None and file.action == "would-write" and step.action == "add":
        action = "would-apply"
    if file is not None and file.action == "would-write" and step.action == "refresh":
        action = "would-rewrite"
    if step.action in ("add", "finish", "refresh"):
        if file is not None and file.action in ("rolled-back", "restored"):
            action = "rolled-back"
        elif file is not None and file.action == "stranded":
            action, message = "stranded", file.message
        elif file is None and failed:
            # Never written (an add: the file is as it was) or never proven (a finish).
            action = "left-out" if step.action == "finish" else "rolled-back"
            message = _UNREACHED if step.action == "finish" else ""
    before = done.before.get(step.patch.id) if done else None
    after = done.after.get(step.patch.id) if done else None
    return PatchOutcome(state, action, message, before, after, step.unknown)


def reverted(
    target: Target,
    inspection: Inspection,
    chosen: PatchSet,
    nothing: str = "",
    *,
    plan: RevertPlan | None = None,
    done: Done | None = None,
) -> Outcome:
    files = tuple(
        outcome
        for file in (plan.files if plan else ())
        if (outcome := _reverted_file(inspection, file, done)) is not None
    )
    failed = done is not None and done.failure is not None
    by_file = {f.relpath: f for f in files}
    removed = plan.removed if plan else {}
    patches = []
    for state in inspection.assessment.patches:
        if state.patch.id in chosen.ids:
            mine = removed.get(state.patch.id)
            out = by_file.get(mine.record.relpath) if mine else None
            held = by_file.get(state.patch.target)
            patches.append(
                _reverted_patch(state, nothing, out, held, failed and mine is not None, done)
            )
    failure = done.failure if done is not None else None
    return Outcome(target, inspection.assessment, tuple(patches), files, failure=failure)


def _reverted_patch(
    state: PatchState,
    nothing: str,
    out: FileOutcome | None,
    held: FileOutcome | None,
    unreached: bool,
    done: Done | None,
) -> PatchOutcome:
    """One chosen patch: `out` is the outcome of the file it is taken out of, `held` that of
    its file; `unreached` where the command stopped before that file."""
    ident = state.patch.id
    after = done.after.get(ident) if done else None
    if out is not None and out.action in ("reverted", "cleared-record", "stranded"):
        return PatchOutcome(state, out.action, out.message, after=after)
    if held is not None and held.action == "rolled-back" and ident in held.holds:
        return PatchOutcome(state, "rolled-back", after=after)
    if unreached:
        return PatchOutcome(state, "rolled-back", _UNREACHED)
    message = nothing or f"nothing to revert: {ident} is not applied here"
    return PatchOutcome(state, "nothing-to-revert", message)


def _reverted_file(
    inspection: Inspection, file: RevertFile, done: Done | None
) -> FileOutcome | None:
    relpath, path = file.record.relpath, file.path
    if file.clears:
        action: FileAction = "cleared-record" if file.action == "clear-record" else "tidied"
        return FileOutcome(relpath, path, action, (), file.message)
    settlement = done.settled.get(relpath) if done and file.writes else None
    remaining = tuple(p.id for p in file.remaining)
    if settlement == "committed":
        message = (
            f"rebuilt {relpath} from its original with {', '.join(remaining)}"
            if remaining
            else file.message or restored(relpath)
        )
        return FileOutcome(relpath, path, "reverted", remaining, message)
    if settlement == "rolled-back":
        assert file.settled is not None
        return FileOutcome(relpath, path, "rolled-back", file.settled.ids)
    if settlement == "stranded":
        backup = inspection.store.backups / file.record.backup
        return FileOutcome(relpath, path, "stranded", remaining, _STRANDED, backup=backup)
    return None
