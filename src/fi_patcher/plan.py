"""What apply and revert will do, decided from an assessment: pure, no I/O.

A file's expected bytes are its original with the patches it holds applied in registry order, so
a plan names, per file, the patches it will hold; `api` composes the text, writes and proves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from fi_patcher.errors import Drifted, FiPatchError, RequirementUnmet, Unsupported
from fi_patcher.model import (
    Assessment,
    FileState,
    Installed,
    Patch,
    PatchSet,
    PatchState,
    State,
    Verdict,
)
from fi_patcher.registry import known, load_patches, located, required_at


@dataclass(frozen=True)
class Step:
    """What apply does with one chosen patch."""

    patch: Patch
    action: str
    """add, finish (prove and record bytes an interrupted run left), already-applied,
    not-applicable or left-out."""
    reason: str = ""
    forced: bool = False


@dataclass(frozen=True)
class FilePlan:
    """One file to write (or only to prove and record): the patches it will hold."""

    state: FileState
    patches: tuple[Patch, ...]
    """Every patch the file holds afterwards, in registry order."""
    adding: tuple[Patch, ...]

    @property
    def writes(self) -> bool:
        return bool(self.adding)


@dataclass(frozen=True)
class ApplyPlan:
    steps: tuple[Step, ...]
    files: tuple[FilePlan, ...]
    forced: frozenset[str] = field(default_factory=frozenset)

    @property
    def adding(self) -> tuple[Patch, ...]:
        return tuple(s.patch for s in self.steps if s.action == "add")

    @property
    def idle(self) -> bool:
        return not self.files


def plan_apply(
    assessment: Assessment,
    chosen: PatchSet,
    *,
    force: bool,
    left_out: Mapping[str, str] | None = None,
) -> ApplyPlan:
    """The steps for every chosen patch, and the files to write. Refuses (raises) when a chosen
    patch's file is drifted, or its version unknown (without --force, or without a known shape)."""
    assert assessment.installed is not None
    installed = assessment.installed
    steps = [
        _step(state, installed, force, (left_out or {}).get(state.patch.id))
        for state in assessment.patches
    ]
    refusals = [s for s in steps if isinstance(s, FiPatchError)]
    if refusals:
        raise max(refusals, key=lambda e: e.exit_code)
    planned = _requirements([s for s in steps if isinstance(s, Step)], assessment, chosen)
    return ApplyPlan(
        tuple(planned),
        tuple(_files(planned, assessment)),
        frozenset(s.patch.id for s in planned if s.forced),
    )


def _step(
    state: PatchState, installed: Installed, force: bool, left_out: str | None
) -> Step | FiPatchError:
    patch, file = state.patch, state.file
    if state.state is State.NOT_APPLICABLE:
        return Step(patch, "not-applicable", state.reason)
    if left_out is not None:
        return Step(patch, "left-out", left_out)
    if state.state is State.PATCHED:
        assert file is not None
        unfinished = file.interrupted is not None or file.unproven
        return Step(patch, "finish" if unfinished else "already-applied", state.reason)
    if state.state in (State.PRISTINE, State.WIPED, State.HAND_PATCHED):
        return Step(patch, "add", state.reason)
    assert file is not None and state.fit is not None
    if state.fit.verdict is not Verdict.UNKNOWN:
        return refusal(state, installed)
    if force and file.condition == "original" and state.shape is not None:
        return Step(patch, "add", state.reason, forced=True)
    return refusal(state, installed)


def _requirements(steps: list[Step], assessment: Assessment, chosen: PatchSet) -> list[Step]:
    """A patch whose required patch applies to this version but will not be in place is left
    out, or refused when the user named it."""
    assert assessment.installed is not None
    version = assessment.installed.version
    present = {pid for f in assessment.files.values() for pid in f.applied}
    checked: list[Step] = []
    for step in steps:
        if step.action == "add":
            adding = {s.patch.id for s in checked if s.action == "add"}
            missing = [r for r in required_at(step.patch, version) if r not in present | adding]
            if missing and chosen.explicit:
                raise RequirementUnmet(
                    f"{step.patch.id} requires {', '.join(missing)} in {version}, which is not "
                    "in place",
                    remedy=f"add --patch {' --patch '.join(missing)}, or apply without --patch",
                )
            if missing:
                step = Step(
                    step.patch, "left-out", f"it requires {', '.join(missing)}, left out too"
                )
        checked.append(step)
    return checked


def _files(steps: Sequence[Step], assessment: Assessment) -> list[FilePlan]:
    assert assessment.installed is not None
    version = assessment.installed.version
    registry = [located(p, version) for p in load_patches()]
    plans = []
    for relpath, file in assessment.files.items():
        adding = [s.patch for s in steps if s.action == "add" and s.patch.target == relpath]
        finishing = any(s.action == "finish" and s.patch.target == relpath for s in steps)
        if not adding and not finishing:
            continue
        held = set(file.applied) | {p.id for p in adding}
        patches = tuple(p for p in registry if p.id in held)
        plans.append(FilePlan(file, patches, tuple(adding)))
    return plans


def refusal(state: PatchState, installed: Installed) -> FiPatchError:
    """Why apply will not touch this patch's file, with the evidence."""
    file = state.file
    assert file is not None and state.fit is not None
    details = [
        f"installed: {installed.name} {installed.version}",
        f"file: {file.path}",
        f"known: {known(state.patch)}",
    ]
    if file.found is not None:
        found = file.found
        details.append(f"found at lines {found.start}-{found.end}:")
        details.extend("    " + line for line in found.text.rstrip("\n").splitlines())
    if state.fit.verdict is Verdict.UNKNOWN:
        return Unsupported(
            f"refusing to patch: {state.reason}",
            remedy="`apply --force` patches an unknown version only where its function matches "
            "a known shape exactly; otherwise install a release inside the known ranges",
            details=tuple(details),
        )
    return Drifted(
        f"refusing to patch: {state.reason}",
        remedy="reinstall FlashInfer to get its original file back (pip install "
        f"--force-reinstall --no-deps {installed.name}=={installed.version}), then apply again",
        details=tuple(details),
    )
