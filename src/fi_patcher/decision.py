"""What apply would do on one target, decided once for check and apply alike.

One function, `decide`, makes apply's plan from an inspection, runs the pre-flight where the plan
would write (it reads torch's version file and runs nvcc; it imports no torch), and judges the
target as a whole: another copy imported instead, a copy fi-patch must not write, records it
cannot read. `apply` acts on the decision, and refuses with its gravest refusal; `check` reports
the same decision (`verdicts`), so that its exit code is exactly what apply would do: 3 only
where apply would write, 0 where it would do nothing, and the code apply would refuse with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from fi_patcher import __version__
from fi_patcher.assess import REVERT_FORCE
from fi_patcher.errors import Drifted, FiPatchError, LayoutProblem
from fi_patcher.model import (
    FileState,
    Imported,
    Interpreter,
    Judgement,
    PatchSet,
    PatchState,
    State,
)
from fi_patcher.options import Options
from fi_patcher.plan import ApplyPlan, Step, plan_apply, recorded_shapes
from fi_patcher.proofs import Preflight, judge_preflight, needs_nvcc, preflight
from fi_patcher.recognise import sha256_bytes
from fi_patcher.registry import load_patches
from fi_patcher.results import ApplyVerdict, Would
from fi_patcher.target import Inspection, foreign, imported_instead, original_of

_WOULD: dict[str, Would] = {
    "add": "write",
    "finish": "write",
    "refresh": "write",
    "already-applied": "nothing",
    "not-applicable": "nothing",
    "left-out": "left-out",
    "refuse": "refuse",
}


@dataclass(frozen=True)
class Decision:
    """Apply's plan for one target, with the pre-flight facts it was judged by."""

    inspection: Inspection
    plan: ApplyPlan
    facts: Preflight | None = None
    judgement: Judgement = field(default_factory=Judgement)
    instead: Imported | None = None
    """The copy a normal start imports, where it is not the one fi-patch works on."""

    @property
    def verdicts(self) -> dict[str, ApplyVerdict]:
        """What apply would do with each chosen patch, by id."""
        return {
            s.patch.id: ApplyVerdict(_WOULD[s.action], s.refusal, s.unknown)
            for s in self.plan.steps
        }

    @property
    def states(self) -> tuple[PatchState, ...]:
        """Each patch's state as check tells it: a patch apply would leave out is `left-out`,
        with the reason, whatever its file holds; one left out for want of knowledge keeps the
        state that says so (`unknown`, or `wiped` over a text fi-patch forced)."""
        left = {s.patch.id: s for s in self.plan.steps if s.action == "left-out"}
        return tuple(_told(s, left.get(s.patch.id)) for s in self.inspection.assessment.patches)


def _told(state: PatchState, left: Step | None) -> PatchState:
    if left is None:
        return state
    reason = f"left out: {left.reason}"
    if left.unknown is not None:
        return replace(state, reason=reason)
    return replace(state, state=State.LEFT_OUT, reason=reason)


def decide(
    interpreter: Interpreter,
    inspection: Inspection,
    chosen: PatchSet,
    options: Options,
    facts: Preflight | None = None,
) -> Decision:
    """What apply would do now. `facts`: a pre-flight already run, used again where it covers
    the patches apply would write."""
    plan = plan_apply(inspection.assessment, chosen, force=options.force)
    judgement = Judgement()
    if plan.adding:
        if facts is None or (needs_nvcc(plan.adding) and not facts.nvcc_checked):
            nvcc = needs_nvcc(plan.adding)
            reads = (
                "torch's version and the nvcc FlashInfer would run" if nvcc else "torch's version"
            )
            options.progress(f"pre-flight in {interpreter.python} ({reads})", long=True)
            facts = preflight(
                interpreter.python, options.timeout, nvcc=nvcc, toolkit=options.toolkit
            )
        judgement = judge_preflight(
            facts, plan.adding, explicit=chosen.explicit, allow_mismatch=options.allow_mismatch
        )
        plan = plan_apply(inspection.assessment, chosen, force=options.force, judgement=judgement)
    instead = imported_instead(inspection.assessment.installed, interpreter)
    plan = replace(plan, barred=_barred(interpreter, inspection, plan, instead))
    plan = replace(plan, steps=tuple(_evidence(inspection, s) for s in plan.steps))
    return Decision(inspection, plan, facts, judgement, instead)


def _barred(
    interpreter: Interpreter, inspection: Inspection, plan: ApplyPlan, instead: Imported | None
) -> FiPatchError | None:
    """What refuses the target whatever its patches say: a normal start imports another copy
    (fi-patch's patches would not run); and, where apply would write, a copy that belongs to
    another interpreter, records fi-patch cannot read, or a backup it would need."""
    installed = inspection.assessment.installed
    if instead is not None:
        return LayoutProblem(
            f"a normal start of {interpreter.python} imports {instead.path} (found through "
            f"{instead.via}), not the copy fi-patch works on in {interpreter.prefix}: a server "
            "started like fi-patch was would not run fi-patch's patches",
            remedy="remove that copy or that path, and run fi-patch with the server's environment",
        )
    if plan.idle:
        return None
    return (
        foreign(installed, interpreter, "apply") or inspection.unreadable or _lost(inspection, plan)
    )


def _lost(inspection: Inspection, plan: ApplyPlan) -> FiPatchError | None:
    """An original apply would need and cannot have: fi-patch's backup of a file it patched
    before, missing or failing its hash (apply builds every file from its original)."""
    for file in plan.files:
        try:
            original_of(inspection, file.state)
        except FiPatchError as error:
            return error
    return None


def _evidence(inspection: Inspection, step: Step) -> Step:
    """A file changed since fi-patch wrote it: its refusal shows the change (fi-patch's text,
    rebuilt from the backup, against what is there), and gives the one way back."""
    refused, state = step.refusal, _state_of(inspection, step)
    file = state.file if state is not None else None
    if not isinstance(refused, Drifted) or file is None or file.record is None:
        return step
    message = f"refusing to patch: {file.reason}"
    try:
        change = _since_written(inspection, file)
    except FiPatchError:  # no backup to rebuild from: a reinstall is the way back
        return replace(
            step, refusal=Drifted(message, remedy=refused.remedy, details=refused.details)
        )
    kept = [d for d in refused.details if not d.startswith(("found at lines", "    "))]
    if change:
        kept += ["the change since fi-patch wrote it:", *("    " + d for d in change)]
    remedy = f"{REVERT_FORCE} (the change is lost), then `fi-patch apply`"
    return replace(step, refusal=Drifted(message, remedy=remedy, details=tuple(kept)))


def _since_written(inspection: Inspection, file: FileState) -> list[str]:
    """The diff from the bytes fi-patch wrote to the file's, where fi-patch's text can be
    rebuilt exactly (its record's hash); none where it cannot."""
    # Imported here: composing needs libcst, the slowest import, and only drift gets here.
    from fi_patcher.changes import compose, diff_bytes

    record = file.record
    assert record is not None
    original = original_of(inspection, file)
    patches = [p for p in load_patches() if p.id in record.ids]
    forced = frozenset(p.id for p in record.patches if p.forced)
    version = record.patches[0].fi_patch_version if record.patches else __version__
    shapes = recorded_shapes(record, patches)
    written = compose(original, patches, shapes, forced, version)[0]
    if sha256_bytes(written) != record.sha256:
        return []
    current = inspection.sources.get(file.relpath) or b""
    return diff_bytes(written, current, file.relpath).splitlines()


def _state_of(inspection: Inspection, step: Step) -> PatchState | None:
    return next((s for s in inspection.assessment.patches if s.patch.id == step.patch.id), None)
