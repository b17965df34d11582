"""What apply and revert will do, decided from an assessment: pure, no I/O.

A file's expected bytes are its original with the patches it holds applied in registry order, so
a plan names, per file, the patches it will hold; `changes` composes the text, and `protocol`
writes and proves it. Every refusal is raised here, before the first write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from fi_patcher.errors import (
    Drifted,
    FiPatchError,
    LayoutProblem,
    RequirementUnmet,
    Unsupported,
)
from fi_patcher.model import (
    Assessment,
    FileRecord,
    FileState,
    Installed,
    Patch,
    PatchSet,
    PatchState,
    Shape,
    State,
    Verdict,
)
from fi_patcher.registry import known, load_patches, required

StepAction = Literal["add", "finish", "already-applied", "not-applicable", "left-out"]
"""finish: prove and record the bytes an interrupted run left."""
RevertAction = Literal["clear-record", "keep", "rebuild", "restore"]
"""clear-record: the file is already FlashInfer's (or another release's) original; keep: none
of the chosen patches is in it; rebuild: from its original with the patches that remain;
restore: its original bytes."""


@dataclass(frozen=True)
class Step:
    """What apply does with one chosen patch."""

    patch: Patch
    action: StepAction
    reason: str = ""
    forced: bool = False
    shape: Shape | None = None
    """For add: the shape whose change is written (under --force, the one it matches by
    structure)."""


@dataclass(frozen=True)
class FilePlan:
    """One file to write (or only to prove and record): the patches it will hold."""

    state: FileState
    patches: tuple[Patch, ...]
    """Every patch the file holds afterwards, in registry order."""
    adding: tuple[Patch, ...]
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    """The shape of each of `patches`, by patch id: the change each writes."""

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
    patch's file is drifted, or its function a text fi-patch does not know (without --force, or
    without a known shape of the same structure)."""
    assert assessment.installed is not None
    installed = assessment.installed
    steps = [
        _step(state, installed, force, (left_out or {}).get(state.patch.id))
        for state in assessment.patches
    ]
    _refuse([s for s in steps if isinstance(s, FiPatchError)])
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
    adding = state.state in (State.PRISTINE, State.WIPED, State.HAND_PATCHED)
    if adding and state.shape is not None:
        return Step(patch, "add", state.reason, shape=state.shape)
    assert file is not None and state.fit is not None
    # An unknown text (or one fi-patch wrote over by --force before, wiped since): --force only.
    similar = state.fit.structural
    if force and (adding or state.state is State.UNKNOWN) and similar is not None:
        return Step(patch, "add", state.reason, forced=True, shape=similar)
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
            needed = required(step.patch, assessment.applicable)
            missing = [r for r in needed if r not in present | adding]
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
    registry = load_patches()
    plans = []
    for relpath, file in assessment.files.items():
        adding = [s for s in steps if s.action == "add" and s.patch.target == relpath]
        finishing = any(s.action == "finish" and s.patch.target == relpath for s in steps)
        if not adding and not finishing:
            continue
        held = set(file.applied) | {s.patch.id for s in adding}
        patches = tuple(replace(p, target=relpath) for p in registry if p.id in held)
        shapes = recorded_shapes(file.record, patches) | {
            s.patch.id: s.shape for s in adding if s.shape is not None
        }
        plans.append(FilePlan(file, patches, tuple(s.patch for s in adding), shapes))
    return plans


def recorded_shapes(record: FileRecord | None, patches: Sequence[Patch]) -> dict[str, Shape]:
    """The shape each of `patches` was written in, as the record names it."""
    if record is None:
        return {}
    by_id = {p.id: p for p in patches}
    found = {r.id: by_id[r.id].shape_named(r.shape) for r in record.patches if r.id in by_id}
    return {i: shape for i, shape in found.items() if shape is not None}


def refusal(state: PatchState, installed: Installed) -> FiPatchError:
    """Why apply will not touch this patch's file, with the evidence."""
    file = state.file
    assert file is not None and state.fit is not None
    details = [
        f"installed: {installed.name} {installed.version}",
        f"file: {file.path}",
        f"function: {state.patch.function}",
        f"known: {known(state.patch)}",
    ]
    hashes = state.fit.hashes
    if hashes is not None:
        details += [f"text sha256: {hashes[0]}", f"structure sha256: {hashes[1]}"]
    found = file.found or state.fit.found
    if found is not None:
        details.append(f"found at lines {found.start}-{found.end}:")
        details.extend("    " + line for line in found.text.rstrip("\n").splitlines())
    if state.fit.verdict is Verdict.UNKNOWN and file.condition != "drifted":
        similar = state.fit.structural
        return Unsupported(
            f"refusing to patch: {state.reason}",
            remedy=(
                f"`fi-patch apply --force` writes shape {similar.name}'s change, proves it and "
                "rolls back what the proof does not pass"
                if similar is not None
                else "install a release fi-patch knows (`fi-patch list`), reinstall this one "
                f"(pip install --force-reinstall --no-deps {installed.name}=={installed.version}), "
                "or use a fi-patch that knows this text"
            ),
            details=tuple(details),
        )
    return Drifted(
        f"refusing to patch: {state.reason}",
        remedy="reinstall FlashInfer to get its original file back (pip install "
        f"--force-reinstall --no-deps {installed.name}=={installed.version}), then apply again",
        details=tuple(details),
    )


def _refuse(refusals: Sequence[FiPatchError]) -> None:
    """Raise the gravest refusal, the others named in its details."""
    if not refusals:
        return
    first = max(refusals, key=lambda e: e.exit_code)
    others = [f"also refused: {e.message}" for e in refusals if e is not first]
    if others:
        first.details = (*first.details, *others)
    raise first


# --- revert -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RevertFile:
    """What revert does with one file fi-patch has a record of."""

    record: FileRecord
    """The manifest's record, as read."""
    path: Path
    action: RevertAction
    message: str = ""
    state: FileState | None = None
    removing: tuple[str, ...] = ()
    remaining: tuple[Patch, ...] = ()

    @property
    def settled(self) -> FileRecord | None:
        """The record once an interrupted write is accounted for (keep, rebuild, restore)."""
        return self.state.record if self.state is not None else None

    @property
    def writes(self) -> bool:
        return self.action in ("rebuild", "restore")


@dataclass(frozen=True)
class RevertPlan:
    files: tuple[RevertFile, ...]

    @property
    def removed(self) -> dict[str, RevertFile]:
        """The file each patch is taken out of, or cleared from, by patch id."""
        found: dict[str, RevertFile] = {}
        for file in self.files:
            ids = file.removing if file.writes else file.record.ids
            if file.action != "keep":
                found.update(dict.fromkeys(ids, file))
        return found


def plan_revert(
    assessment: Assessment,
    records: Mapping[str, FileRecord],
    paths: Mapping[str, Path],
    sources: Mapping[str, bytes | None],
    chosen: PatchSet,
    *,
    force: bool,
) -> RevertPlan:
    """What revert does with every recorded file. Refuses (raises) before any write when a
    file to change is missing or changed since fi-patch wrote it (without --force), or when a
    patch that stays requires one taken out."""
    files = [
        _revert_file(assessment, records[relpath], paths[relpath], chosen)
        for relpath in sorted(records)
    ]
    refusals = [
        refused
        for file in files
        if file.writes
        for refused in _revert_refusals(file, sources.get(file.record.relpath), force)
    ]
    _refuse(refusals)
    return RevertPlan(tuple(files))


def _revert_file(
    assessment: Assessment, record: FileRecord, path: Path, chosen: PatchSet
) -> RevertFile:
    installed = assessment.installed
    state = assessment.files.get(record.relpath)
    if installed is None or installed.version != record.version or state is None:
        now = installed.version if installed else "nothing (it was uninstalled)"
        message = (
            f"{record.dist} {record.version} was replaced by {now} since fi-patch patched it; "
            "nothing to restore, the record is cleared"
        )
        return RevertFile(record, path, "clear-record", message)
    settled = state.record
    if settled is None or state.condition == "original":
        why = {
            "apply": "an interrupted fi-patch apply left them",
            "revert": "an interrupted fi-patch revert put them back",
        }.get(state.interrupted or "", "a reinstall put them back")
        message = f"already the original bytes ({why}); the record is cleared"
        return RevertFile(record, path, "clear-record", message)
    removing = tuple(i for i in settled.ids if not chosen.explicit or i in chosen.ids)
    if not removing:
        return RevertFile(record, path, "keep", state=state)
    remaining = tuple(
        replace(p, target=record.relpath)
        for p in load_patches()
        if p.id in settled.ids and p.id not in removing
    )
    action: RevertAction = "rebuild" if remaining else "restore"
    return RevertFile(record, path, action, "", state, removing, remaining)


def _revert_refusals(file: RevertFile, current: bytes | None, force: bool) -> list[FiPatchError]:
    state, settled = file.state, file.settled
    assert state is not None and settled is not None
    refusals: list[FiPatchError] = []
    if current is None and not force:
        refusals.append(
            LayoutProblem(
                f"{state.path} is missing",
                remedy="reinstall FlashInfer, or pass --force to restore fi-patch's backup there",
            )
        )
    elif state.condition != "patched" and not force:
        refusals.append(
            Drifted(
                f"{state.path} changed since fi-patch wrote it (sha256 "
                f"{(state.sha256 or 'missing')[:12]}…, fi-patch wrote {settled.sha256[:12]}…); "
                "nothing was reverted",
                remedy="look at the file; `fi-patch revert --force` restores the original "
                "bytes anyway, overwriting whatever is there now",
            )
        )
    for patch in file.remaining:
        needed = [r for r in required(patch, settled.ids) if r in file.removing]
        if needed:
            refusals.append(
                RequirementUnmet(
                    f"{patch.id} requires {', '.join(needed)}, which would be taken out",
                    remedy=f"revert {patch.id} too: add --patch {patch.id}",
                )
            )
    return refusals
