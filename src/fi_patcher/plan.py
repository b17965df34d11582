"""What apply and revert will do, decided from an assessment: pure, no I/O.

A file's expected bytes are its original with the patches it holds applied in registry order, so
a plan names, per file, the patches it will hold; `changes` composes the text, and `protocol`
writes and proves it. Every refusal is decided here, before the first write: apply's plan
carries its refusals as values, so that check reports the very verdict apply would act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from fi_patcher import __version__
from fi_patcher.errors import (
    Drifted,
    FiPatchError,
    LayoutProblem,
    RequirementUnmet,
    UnknownLeftOut,
    Unsupported,
    gravest,
)
from fi_patcher.model import (
    Assessment,
    FileRecord,
    FileState,
    Installed,
    Judgement,
    Patch,
    PatchSet,
    PatchState,
    Shape,
    State,
    Verdict,
)
from fi_patcher.registry import known, load_patches, required

StepAction = Literal[
    "add", "finish", "refresh", "already-applied", "not-applicable", "left-out", "refuse"
]
"""finish: prove and record the bytes an interrupted run left; refuse: apply stops on this patch
(`Step.refusal` says why) and writes nothing at all."""
RevertAction = Literal[
    "clear-record", "tidy", "keep", "rebuild", "restore", "restore-missing", "refuse"
]
"""clear-record: a file holding chosen patches is FlashInfer's original again (a reinstall, an
interrupted run), or its release was replaced or uninstalled: only the record goes; tidy: the
same for a file none of the chosen patches is in, reported as such; keep: none of the chosen
patches is in the file; rebuild: from its original with the patches that remain; restore: its
original bytes; restore-missing: the file is gone, and fi-patch's backup of its original (RECORD's
hash) goes back there; refuse: revert stops on this file, before any write (`RevertFile.message`
says why)."""


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
    refusal: FiPatchError | None = None
    unknown: UnknownLeftOut | None = None
    """For left-out: its function's text is none fi-patch knows (a gap in fi-patch, exit 16),
    with the evidence the refusal of `--patch` naming it would give."""

    @property
    def writes(self) -> bool:
        """Whether apply changes something for this patch: its bytes, or only its record."""
        return self.action in ("add", "finish", "refresh")


@dataclass(frozen=True)
class FilePlan:
    """One file to write (or only to prove and record): the patches it will hold."""

    state: FileState
    patches: tuple[Patch, ...]
    """Every patch the file holds afterwards, in registry order."""
    adding: tuple[Patch, ...]
    shapes: Mapping[str, Shape] = field(default_factory=dict)
    """The shape of each of `patches`, by patch id: the change each writes."""
    refresh: tuple[str, ...] = ()
    """Patches the file holds as an older fi-patch wrote them, which a patch being added requires:
    the file is written again from its original, in this fi-patch's words (the op-* patches need
    the op boundary's code that declared-ops-custom places from 0.8.0)."""

    @property
    def writes(self) -> bool:
        return bool(self.adding or self.refresh)


@dataclass(frozen=True)
class ApplyPlan:
    """What apply would do: a step for every chosen patch, the files to write, and what refuses
    the target as a whole (`barred`)."""

    steps: tuple[Step, ...]
    files: tuple[FilePlan, ...]
    forced: frozenset[str] = field(default_factory=frozenset)
    barred: FiPatchError | None = None
    """A refusal of the target whatever its patches say: another copy imported instead, or,
    where apply would write, a copy it must not write or records it cannot read."""

    @property
    def adding(self) -> tuple[Patch, ...]:
        return tuple(s.patch for s in self.steps if s.action == "add")

    @property
    def idle(self) -> bool:
        return not self.files

    @property
    def refusal(self) -> FiPatchError | None:
        """What apply stops on, before any write: the gravest refusal, the others in its
        details."""
        refusals = [s.refusal for s in self.steps if s.refusal is not None]
        return gravest([*refusals, *([self.barred] if self.barred else [])])


def plan_apply(
    assessment: Assessment,
    chosen: PatchSet,
    *,
    force: bool,
    judgement: Judgement | None = None,
) -> ApplyPlan:
    """The step for every chosen patch, and the files to write. A patch is refused where its
    file is drifted, or the pre-flight's `judgement` refuses it; left out where the judgement
    says so, or where a patch it requires is left out. A function whose text fi-patch does not
    know (without --force, or without a known shape of the same structure) is left out, with its
    evidence, unless `--patch` names it: then it is refused."""
    assert assessment.installed is not None
    installed = assessment.installed
    judged = judgement or Judgement()
    steps = [_step(state, installed, force, judged, chosen) for state in assessment.patches]
    planned = _requirements(steps, assessment, chosen)
    files = _files(planned, assessment)
    return ApplyPlan(
        tuple(_refreshed(planned, files)),
        tuple(files),
        frozenset(s.patch.id for s in planned if s.forced),
    )


def _refreshed(steps: list[Step], files: Sequence[FilePlan]) -> list[Step]:
    """The patches a file written again holds (an older fi-patch wrote them, and a patch being
    added requires one of them) are written again too: their steps say so."""
    again = {p.id: f for f in files if f.refresh for p in f.patches}
    adding = [s.patch for s in steps if s.action == "add"]
    planned = []
    for step in steps:
        file = again.get(step.patch.id)
        if step.action == "already-applied" and file is not None:
            by = [p.id for p in adding if set(file.refresh) & set(p.requires.patches)]
            step = Step(
                step.patch,
                "refresh",
                f"{file.state.relpath} is written again as fi-patch {__version__} writes it, "
                f"for {', '.join(by)} ({step.reason})",
            )
        planned.append(step)
    return planned


def _step(
    state: PatchState, installed: Installed, force: bool, judged: Judgement, chosen: PatchSet
) -> Step:
    patch, file = state.patch, state.file
    if state.state is State.NOT_APPLICABLE:
        return Step(patch, "not-applicable", state.reason)
    if state.state is State.PATCHED:
        assert file is not None
        unfinished = file.interrupted is not None or file.unproven
        return Step(patch, "finish" if unfinished else "already-applied", state.reason)
    step = _adding(state, force)
    if step is None:
        refused = refusal(state, installed)
        if isinstance(refused, Unsupported) and not chosen.explicit:
            # One text fi-patch has never seen must not hold back the patches it knows.
            unknown = UnknownLeftOut(
                f"{patch.id} left out: {state.reason}",
                remedy=refused.remedy,
                details=refused.details,
            )
            return Step(patch, "left-out", state.reason, unknown=unknown)
        return Step(patch, "refuse", refused.message, refusal=refused)
    if patch.id in judged.refused:
        refused = judged.refused[patch.id]
        return Step(patch, "refuse", refused.message, refusal=refused)
    if patch.id in judged.left_out:
        return Step(patch, "left-out", judged.left_out[patch.id])
    return step


def _adding(state: PatchState, force: bool) -> Step | None:
    """The add step for a patch apply can write, or None where it must refuse."""
    patch = state.patch
    adding = state.state in (State.PRISTINE, State.WIPED, State.HAND_PATCHED)
    if adding and state.shape is not None:
        return Step(patch, "add", state.reason, shape=state.shape)
    # An unknown text (or one fi-patch wrote over by --force before, wiped since): --force only.
    similar = state.fit.structural if state.fit is not None else None
    if force and (adding or state.state is State.UNKNOWN) and similar is not None:
        return Step(patch, "add", state.reason, forced=True, shape=similar)
    return None


def _requirements(steps: list[Step], assessment: Assessment, chosen: PatchSet) -> list[Step]:
    """A patch whose required patch applies to this version but will not be in place is left
    out, or refused when the user named it."""
    assert assessment.installed is not None
    version = assessment.installed.version
    present = {pid for f in assessment.files.values() for pid in f.applied}
    checked: list[Step] = []
    # A patch whose requirement is refused is not left out: the refusal stops apply anyway.
    stopped = {s.patch.id for s in steps if s.action == "refuse"}
    for step in steps:
        if step.action == "add":
            adding = {s.patch.id for s in checked if s.action == "add"}
            needed = required(step.patch, assessment.applicable)
            missing = [r for r in needed if r not in present | adding | stopped]
            if missing and chosen.explicit:
                refused = RequirementUnmet(
                    f"{step.patch.id} requires {', '.join(missing)} in {version}, which is not "
                    "in place",
                    remedy=f"add --patch {' --patch '.join(missing)}, or apply without --patch",
                )
                step = Step(step.patch, "refuse", refused.message, refusal=refused)
            elif missing:
                step = Step(
                    step.patch, "left-out", f"it requires {', '.join(missing)}, left out too"
                )
        checked.append(step)
    return checked


def _files(steps: Sequence[Step], assessment: Assessment) -> list[FilePlan]:
    registry = load_patches()
    required = {r for s in steps if s.action == "add" for r in s.patch.requires.patches}
    # A patch the record names but apply leaves out (wiped by a reinstall, and now unknown or
    # unfit) is not written back with the others.
    left = {s.patch.id for s in steps if s.action == "left-out"}
    plans = []
    for relpath, file in assessment.files.items():
        adding = [s for s in steps if s.action == "add" and s.patch.target == relpath]
        finishing = any(s.action == "finish" and s.patch.target == relpath for s in steps)
        written = file.record.patches if file.record is not None else ()
        refresh = tuple(
            p.id for p in written if p.id in required and p.fi_patch_version != __version__
        )
        if not adding and not finishing and not refresh:
            continue
        held = (set(file.applied) - left) | {s.patch.id for s in adding}
        patches = tuple(replace(p, target=relpath) for p in registry if p.id in held)
        shapes = recorded_shapes(file.record, patches) | {
            s.patch.id: s.shape for s in adding if s.shape is not None
        }
        adds = tuple(s.patch for s in adding)
        plans.append(FilePlan(file, patches, adds, shapes, refresh if not finishing else ()))
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
    reinstall = f"pip install --force-reinstall --no-deps {installed.name}=={installed.version}"
    if state.state is State.MISSING:
        return LayoutProblem(f"refusing to patch: {state.reason}", remedy=f"reinstall: {reinstall}")
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
        return self.action in ("rebuild", "restore", "restore-missing")

    @property
    def clears(self) -> bool:
        """Whether only the record goes (the file is left as it is)."""
        return self.action in ("clear-record", "tidy")


@dataclass(frozen=True)
class RevertPlan:
    files: tuple[RevertFile, ...]

    @property
    def removed(self) -> dict[str, RevertFile]:
        """The file each chosen patch is taken out of, or cleared from, by patch id."""
        found: dict[str, RevertFile] = {}
        for file in self.files:
            if file.writes:
                found.update(dict.fromkeys(file.removing, file))
            elif file.action == "clear-record":
                found.update(dict.fromkeys(file.record.ids, file))
        return found


def plan_revert(
    assessment: Assessment,
    records: Mapping[str, FileRecord],
    paths: Mapping[str, Path],
    chosen: PatchSet,
    *,
    force: bool,
    backups: Path,
) -> RevertPlan:
    """What revert does with every recorded file. Refuses (raises) before any write when a
    file to change changed since fi-patch wrote it (without --force), is missing where fi-patch's
    backup cannot be shown to be its original, or when a patch that stays requires one taken
    out. `backups` is the store's folder of backups, for the messages."""
    files = [
        _revert_file(assessment, records[relpath], paths[relpath], chosen, backups)
        for relpath in sorted(records)
    ]
    refusals = [
        refused for file in files if file.writes for refused in _revert_refusals(file, force)
    ]
    refused = gravest([*refusals, *_missing_refusals(files)])
    if refused is not None:
        raise refused
    return RevertPlan(tuple(files))


def _revert_file(
    assessment: Assessment, record: FileRecord, path: Path, chosen: PatchSet, backups: Path
) -> RevertFile:
    installed = assessment.installed
    state = assessment.files.get(record.relpath)
    mine = not chosen.explicit or bool(set(_held(record, state)) & set(chosen.ids))
    gone: RevertAction = "clear-record" if mine else "tidy"
    if installed is None or installed.version != record.version:
        now = installed.version if installed else "nothing (it was uninstalled)"
        message = (
            f"{record.dist} {record.version} was replaced by {now} since fi-patch patched it; "
            "nothing to restore, the record is cleared"
        )
        return RevertFile(record, path, gone, message)
    if state is None and chosen.explicit:  # not a file of the named patches: left alone
        return RevertFile(record, path, "keep")
    if state is None:
        message = "no patch fi-patch knows works on this file any more; the record is cleared"
        return RevertFile(record, path, gone, message)
    if state.condition == "absent":
        recorded = installed.files[record.relpath].record_sha256
        return _missing(record, path, state, chosen, backups, mine, recorded)
    settled = state.record
    if settled is None or state.condition == "original":
        return RevertFile(record, path, gone, _already_original(state))
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


def _held(record: FileRecord, state: FileState | None) -> tuple[str, ...]:
    """The patches a record says its file holds, or was being given when a run stopped."""
    settled = state.record if state is not None else None
    pending = record.pending.patches if record.pending is not None else ()
    return (*record.ids, *(settled.ids if settled else ()), *(p.id for p in pending))


def _already_original(state: FileState) -> str:
    if state.condition != "original":
        return "fi-patch's record holds no patch for this file; the record is cleared"
    why = {
        "apply": "an interrupted fi-patch apply left them",
        "revert": "an interrupted fi-patch revert put them back",
    }.get(state.interrupted or "", "a reinstall put them back")
    return f"already the original bytes ({why}); the record is cleared"


def _missing(
    record: FileRecord,
    path: Path,
    state: FileState,
    chosen: PatchSet,
    backups: Path,
    mine: bool,
    recorded: str | None,
) -> RevertFile:
    """A file fi-patch patched, gone since: its record and backup stay unless revert puts the
    backup back, which it does only where the backup is the original RECORD lists now
    (`recorded`) and every patch the file held goes."""
    held = _held(record, state)
    if not mine:
        return RevertFile(record, path, "keep", state=state)
    backup = backups / record.backup
    if recorded is None or record.original != recorded:
        message = (
            f"{path} is missing, and fi-patch's backup {backup} cannot be shown to be "
            "FlashInfer's original (RECORD lists no hash for it, or another one)"
        )
        return RevertFile(record, path, "refuse", message, state)
    removing = tuple(dict.fromkeys(held))
    if chosen.explicit and not set(removing) <= set(chosen.ids):
        message = (
            f"{path} is missing; it held {', '.join(removing)}, and `fi-patch revert` without "
            f"--patch puts its original back from fi-patch's backup {backup}"
        )
        return RevertFile(record, path, "refuse", message, state)
    message = f"{path} was missing: its original bytes are back, from fi-patch's backup {backup}"
    return RevertFile(record, path, "restore-missing", message, state, removing)


def _missing_refusals(files: Sequence[RevertFile]) -> list[FiPatchError]:
    return [
        LayoutProblem(
            f.message,
            remedy="reinstall FlashInfer (pip install --force-reinstall --no-deps "
            f"{f.record.dist}=={f.record.version}); fi-patch keeps its record and backup",
        )
        for f in files
        if f.action == "refuse"
    ]


def _revert_refusals(file: RevertFile, force: bool) -> list[FiPatchError]:
    state = file.state
    assert state is not None
    if file.action == "restore-missing":
        return []
    settled = file.settled
    assert settled is not None
    refusals: list[FiPatchError] = []
    if state.condition != "patched" and not force:
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
