"""Decide the state of one target from facts already read: pure, no I/O.

Three steps. `settle` reads the journal: a write fi-patch was killed in the middle of either
happened (the file holds the bytes it was writing) or did not (the bytes before it). `file_state`
decides each target file from hashes: `patched` (exactly the bytes fi-patch last wrote),
`original` (the file equals RECORD), `hand-patched`, or `drifted` (changed since it was installed
or written). `patch_state` then gives each patch its state from what `identify` found in its file:
pristine, patched, wiped (fi-patch patched it, and a reinstall put the original back), unknown (a
text fi-patch has never seen, in FlashInfer's own file), drifted, not applicable, not installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from fi_patcher.errors import FiPatchError, LayoutProblem, Unsupported
from fi_patcher.identify import Reading, identify, looked_into, read, shapes_in, where
from fi_patcher.model import (
    Assessment,
    Command,
    FileRecord,
    FileState,
    Fit,
    Holder,
    Installed,
    InstalledFile,
    Patch,
    PatchState,
    State,
    Verdict,
)
from fi_patcher.recognise import Match, recognise, sha256_bytes, sha256_text
from fi_patcher.registry import expected, span


def assess(
    patches: Sequence[Patch],
    installed: Installed | None,
    sources: Mapping[str, bytes | None],
    records: Mapping[str, FileRecord],
    *,
    busy: Holder | None = None,
    unreadable: str | None = None,
    registry: Sequence[Patch] = (),
) -> Assessment:
    """The state of every patch in `patches`, given the installed distribution, the bytes of
    the files the patches may work on (None: missing), fi-patch's records of them, and the
    fi-patch holding the environment's lock now, if any (a write under way is then not an
    interrupted one). `registry` (every patch; `patches` where empty) says which patches apply
    here at all, for the requirements. With `unreadable` (why fi-patch's records could not be
    read), a file that is fi-patch's text over FlashInfer's original is patched by its hashes
    alone, and the reason is kept as a warning."""
    if installed is None:
        states = tuple(
            PatchState(p, State.NOT_INSTALLED, f"{p.distribution} is not installed")
            for p in patches
        )
        return Assessment(None, states, {}, busy, _warned(unreadable))
    version = installed.version
    readings = _read_all(sources, looked_into([*patches, *registry]))
    placed = {p.id: where(p, readings, version) for p in patches}
    placed |= {p.id: where(p, readings, version) for p in registry if p.id not in placed}
    fits = {i: identify(p, readings.get(p.target), version) for i, p in placed.items()}
    chosen = [placed[p.id] for p in patches]
    members = _members(chosen, fits, installed, sources, records)
    files = {
        relpath: file_state(
            installed.files[relpath],
            sources.get(relpath),
            _current(records.get(relpath), version),
            group,
            upgraded=_stale(records.get(relpath), version),
            busy=busy,
            reading=readings.get(relpath),
        )
        for relpath, group in members.items()
    }
    states = tuple(
        _by_hashes(patch_state(p, fits[p.id], files.get(p.target), version), unreadable)
        for p in chosen
    )
    applicable = frozenset(i for i, f in fits.items() if f.verdict is not Verdict.NOT_APPLICABLE)
    return Assessment(
        installed,
        states,
        files,
        busy,
        _warned(unreadable),
        applicable=applicable | {i for f in files.values() for i in f.applied},
        none_found=all(sources.get(p.target) is None for p in (registry or patches)),
    )


def _read_all(
    sources: Mapping[str, bytes | None], keep: Mapping[str, frozenset[str]]
) -> dict[str, Reading]:
    """Each file parsed once for every patch that looks at it, with only the bodies patches read
    (`looked_into`), the largest first: its parse is the peak of check's memory, and the smaller
    ones reuse what it freed. In the order of `sources`."""
    largest = sorted(sources, key=lambda relpath: -len(sources[relpath] or b""))
    parsed = {
        relpath: read(relpath, sources[relpath], keep.get(relpath, ())) for relpath in largest
    }
    return {relpath: parsed[relpath] for relpath in sources}


def _members(
    chosen: Sequence[Patch],
    fits: Mapping[str, Fit],
    installed: Installed,
    sources: Mapping[str, bytes | None],
    records: Mapping[str, FileRecord],
) -> dict[str, list[tuple[Patch, Fit]]]:
    """The chosen patches whose file's state counts, by file: those with something to patch,
    those fi-patch wrote, and those whose file is missing although its version's range names
    it or RECORD lists it (a broken install)."""
    members: dict[str, list[tuple[Patch, Fit]]] = {}
    version = installed.version
    for patch in chosen:
        recorded = patch.id in _recorded(records.get(patch.target), version)
        named = expected(patch, version).verdict is Verdict.KNOWN
        listed = installed.files[patch.target].recorded and sources.get(patch.target) is None
        if fits[patch.id].verdict is not Verdict.NOT_APPLICABLE or recorded or named or listed:
            members.setdefault(patch.target, []).append((patch, fits[patch.id]))
    return members


def _recorded(record: FileRecord | None, version: str) -> tuple[str, ...]:
    return record.ids if record is not None and record.version == version else ()


def _warned(unreadable: str | None) -> tuple[str, ...]:
    if unreadable is None:
        return ()
    return (f"fi-patch's records could not be read ({unreadable}): states come from hashes alone",)


def _by_hashes(state: PatchState, unreadable: str | None) -> PatchState:
    """Without the records, fi-patch's own text (its marker, over RECORD's original) is still
    known for what it is."""
    file = state.file
    if unreadable is None or state.state is not State.HAND_PATCHED or file is None:
        return state
    if state.patch.id not in file.marked:
        return state
    return replace(
        state,
        state=State.PATCHED,
        reason=f"fi-patch's text over FlashInfer's original (its marker; taken out, the file is "
        f"RECORD's bytes); fi-patch's record could not be read: {unreadable}",
    )


# --- the journal --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settled:
    record: FileRecord | None
    interrupted: Command | None = None
    unproven: bool = False


def settle(record: FileRecord | None, sha256: str | None) -> Settled:
    """The record as it stands once an interrupted write is accounted for.

    If the file holds the bytes the write was making, the write happened: its patches are the
    file's, not yet proven. If it holds the bytes before, the write did not happen. A record
    left with no patches is no record: the file is FlashInfer's original.
    """
    if record is None or record.pending is None:
        return Settled(record)
    pending = record.pending
    if sha256 == pending.sha256:
        done = replace(record, sha256=pending.sha256, patches=pending.patches, pending=None)
        return Settled(done if done.patches else None, pending.action, bool(done.patches))
    if sha256 == record.sha256:
        undone = replace(record, pending=None)
        return Settled(undone if undone.patches else None, pending.action)
    return Settled(record, pending.action)


def _current(record: FileRecord | None, version: str) -> FileRecord | None:
    """A record of the installed release; one of another release says nothing of these bytes."""
    return record if record is not None and record.version == version else None


def _stale(record: FileRecord | None, version: str) -> FileRecord | None:
    """A record of a release that was replaced since (an upgrade or a downgrade)."""
    return record if record is not None and record.version != version else None


# --- files --------------------------------------------------------------------------------------


def file_state(
    file: InstalledFile,
    source: bytes | None,
    record: FileRecord | None,
    members: Sequence[tuple[Patch, Fit]],
    *,
    upgraded: FileRecord | None = None,
    busy: Holder | None = None,
    reading: Reading | None = None,
) -> FileState:
    """What one target file is. `members` are the patches that work on it, with what each
    found in it (`identify`); `record` is fi-patch's record of this release's file, `upgraded`
    its record of a release installed before this one."""
    base = FileState(file.relpath, file.path, "drifted", "", upgraded=upgraded)
    if source is None:
        # Gone, not original: the record and its backup stay, for revert to put back.
        gone = settle(record, None)
        return replace(
            base,
            condition="absent",
            reason=_absent_reason(file, gone.record),
            record=gone.record,
            interrupted=gone.interrupted,
        )
    sha = sha256_bytes(source)
    settled = settle(record, sha)
    state = replace(
        base,
        sha256=sha,
        record=settled.record,
        interrupted=settled.interrupted,
        unproven=settled.unproven,
        busy=busy if settled.interrupted else None,
    )
    if settled.record is not None and sha == settled.record.sha256:
        return replace(state, condition="patched", reason=_patched_reason(settled, busy))
    if not file.recorded:
        return replace(state, condition="unrecorded", reason=f"RECORD does not list {file.path}")
    reading = reading or read(file.relpath, source)
    found = _original_or_drifted(state, reading, file, members)
    if found.condition == "drifted" and settled.record is not None:
        written = settled.record.sha256
        return replace(
            found,
            reason=f"{file.path} changed since fi-patch wrote it (sha256 {sha[:12]}…, fi-patch "
            f"wrote {written[:12]}…)",
        )
    return found


def _absent_reason(file: InstalledFile, record: FileRecord | None) -> str:
    if record is None or not (record.patches or record.pending):
        return f"{file.path} is absent"
    return (
        f"{file.path} is missing, although fi-patch patched it (its backup of FlashInfer's "
        "original is kept)"
    )


REVERT_FORCE = "`fi-patch revert --force` puts FlashInfer's original back from fi-patch's backup"
"""The one way back from a file changed since fi-patch wrote it."""


def install_problem(assessment: Assessment) -> FiPatchError | None:
    """What makes the install itself unusable, so that `check` and `apply` stop on it: a file a
    release in a known range ships is missing or not in RECORD (a broken install), or a release
    outside every range has none of the files any patch works on (a layout fi-patch does not
    know)."""
    installed = assessment.installed
    if installed is None:
        return None
    reinstall = (
        "reinstall it: pip install --force-reinstall --no-deps "
        f"{installed.name}=={installed.version}"
    )
    for state in assessment.patches:
        file = state.file
        if file is None:
            continue
        named = expected(state.patch, installed.version).verdict is Verdict.KNOWN
        listed = installed.files[file.relpath].recorded
        if file.condition == "absent" and (named or listed or file.record is not None):
            ships = "its RECORD lists it" if listed else f"{installed.version} ships it"
            if file.record is not None:
                ships = "fi-patch patched it"
                reinstall += (
                    "; or `fi-patch revert` puts fi-patch's backup of its original back there"
                )
            return LayoutProblem(
                f"{file.path} is missing, but {ships}: {installed.name} {installed.version} is "
                "installed only in part",
                remedy=reinstall,
            )
        if file.condition == "unrecorded" and state.state is not State.NOT_APPLICABLE:
            return LayoutProblem(
                f"the RECORD of {installed.dist_info.name} does not list {file.relpath}; "
                "fi-patch writes only files the installer recorded",
                remedy=reinstall,
            )
    outside = all(
        expected(s.patch, installed.version).verdict is Verdict.UNKNOWN for s in assessment.patches
    )
    if assessment.none_found and outside and assessment.patches:
        missing = ", ".join(sorted({t for s in assessment.patches for t in s.patch.targets[:1]}))
        return Unsupported(
            f"{installed.name} {installed.version} is outside every known range, and has "
            f"none of the files these patches work on ({missing}): a layout fi-patch does "
            "not know",
            remedy="install a release inside the known ranges (`fi-patch list` shows them), "
            "or a fi-patch that knows this one",
        )
    return None


def _original_or_drifted(
    state: FileState,
    reading: Reading,
    file: InstalledFile,
    members: Sequence[tuple[Patch, Fit]],
) -> FileState:
    """FlashInfer's original where the bytes are RECORD's, whatever the functions hold (a text
    fi-patch does not know is the patch's `unknown`, never the file's drift); else the usual
    fix made by hand, or drifted."""
    shapes = {p.id: f.shape for p, f in members if f.verdict is Verdict.KNOWN and f.shape}
    state = replace(state, shapes=shapes)
    record_sha = file.record_sha256
    if record_sha is None or state.sha256 == record_sha:
        return replace(state, condition="original", reason="FlashInfer's original bytes")
    if reading.text is None or reading.tree is None:
        return replace(state, reason=reading.problem)
    hand = _hand_patched(state, reading.text, file, members)
    if hand is not None:
        return hand
    changed = f"(sha256 {(state.sha256 or '')[:12]}…, RECORD {record_sha[:12]}…)"
    unknown = [(p, f) for p, f in members if f.verdict is Verdict.UNKNOWN]
    if unknown:
        patch, how = unknown[0]
        return replace(
            state,
            reason=_unrecognised_reason(reading.text, patch, how)
            + f"; {file.path} changed since it was installed {changed}",
            found=how.found,
        )
    functions = [p.function for p, _ in members if p.id in shapes]
    verb = "is" if len(functions) == 1 else "are"
    return replace(
        state,
        reason=f"{', '.join(functions)} {verb} the original, but the file differs from RECORD "
        f"elsewhere {changed}",
    )


def _hand_patched(
    state: FileState, text: str, file: InstalledFile, members: Sequence[tuple[Patch, Fit]]
) -> FileState | None:
    """The file as someone patched it by hand: the usual fix of one or more patches (in any
    of their shapes), which, taken out, leaves exactly FlashInfer's original (RECORD's hash)."""
    if file.record_sha256 is None or state.record is not None:
        return None
    # Imported here: libcst is the slowest import of all, and only changed files get here.
    from fi_patcher.codemod import take_out

    original, hand, marked = text, list[str](), list[str]()
    for patch, _ in members:
        for shape in shapes_in(patch, file.relpath):
            taken = take_out(original, patch, shape)
            if taken is None:
                continue
            if patch.marker_prefix in original:
                marked.append(patch.id)
            original, hand = taken, [*hand, patch.id]
            break
    if not hand or sha256_text(original) != file.record_sha256:
        return None
    # Shapes that insert the same text take each other's change out: the original says which.
    # A hand-made fix over a text fi-patch does not know is no fix it can adopt: drifted.
    shapes = dict(state.shapes)
    for patch, _ in members:
        matched = recognise(original, patch, shapes_in(patch, file.relpath))
        if isinstance(matched, Match):
            shapes[patch.id] = matched.shape
        elif patch.id in hand:
            return None
    return replace(
        state,
        condition="hand-patched",
        reason=f"{', '.join(hand)} made by hand (or by a fi-patch whose record is gone): taken "
        "out, the file is FlashInfer's original (RECORD's hash); `fi-patch apply` adopts it, "
        "keeping that original as its backup",
        shapes=shapes,
        hand=tuple(hand),
        marked=tuple(marked),
        rebuilt=original.encode("utf-8"),
        found=None,
    )


def _unrecognised_reason(text: str, patch: Patch, how: Fit) -> str:
    if patch.marker_prefix in text:
        return (
            f"{patch.function} carries fi-patch's {patch.id} lines, but fi-patch has no record "
            "of writing these bytes here, so it cannot restore the original"
        )
    return how.reason


def _patched_reason(settled: Settled, busy: Holder | None) -> str:
    assert settled.record is not None
    if settled.interrupted and busy is not None:
        return _in_progress(busy)
    if settled.unproven and settled.interrupted:
        return (
            f"the bytes fi-patch wrote, but its {settled.interrupted} was interrupted before it "
            "finished; `fi-patch apply` finishes it"
        )
    if settled.interrupted:
        return (
            f"the bytes fi-patch wrote, but its {settled.interrupted} was interrupted before it "
            f"finished; `fi-patch {settled.interrupted}` finishes it"
        )
    latest = max(settled.record.patches, key=lambda p: p.applied_at)
    return f"patched by fi-patch {latest.fi_patch_version} at {latest.applied_at}"


# --- patches ------------------------------------------------------------------------------------


def patch_state(patch: Patch, how: Fit, file: FileState | None, version: str) -> PatchState:
    """One patch's state, from what it found in its file (`how`) and what the file is."""
    if file is not None and file.condition == "patched" and patch.id in file.applied:
        assert file.record is not None
        written = next(p for p in file.record.patches if p.id == patch.id)
        reason = file.reason
        if written.forced:
            reason += (
                f"; forced (apply --force) over a text fi-patch did not know, whose structure "
                f"is shape {written.shape}'s"
            )
        elif file.interrupted is None:
            reason += f" (shape {written.shape})"
        return PatchState(patch, State.PATCHED, reason, how, patch.shape_named(written.shape), file)
    if file is not None and file.condition == "absent":
        return PatchState(patch, State.MISSING, file.reason, how, file=file)
    if how.verdict is Verdict.NOT_APPLICABLE:
        reason = f"not applicable: nothing to patch ({how.reason})"
        return PatchState(patch, State.NOT_APPLICABLE, reason, how, file=file)
    assert file is not None
    known = PatchState(patch, State.DRIFTED, file.reason, how, how.shape, file)
    if file.condition == "drifted" and file.record is not None:
        return replace(known, reason=file.reason + f"; {REVERT_FORCE}")
    if file.condition == "drifted":
        return known
    if file.condition == "hand-patched" and patch.id in file.hand:
        return replace(known, state=State.HAND_PATCHED, shape=file.shapes.get(patch.id))
    if how.verdict is Verdict.UNKNOWN:
        return _unknown(known, patch, how, file, version)
    if file.condition == "patched":
        return replace(
            known,
            state=State.PRISTINE,
            reason=f"FlashInfer's original {patch.function} (shape {_shape(how)}), in a file "
            f"fi-patch patched with {', '.join(file.applied)}; needs apply",
        )
    if file.condition == "hand-patched":
        return replace(
            known,
            state=State.PRISTINE,
            reason=f"FlashInfer's original {patch.function} (shape {_shape(how)}), in a file "
            f"with {', '.join(file.hand)} made by hand; needs apply",
        )
    return _original(known, patch, how, file, version)


def _unknown(
    known: PatchState, patch: Patch, how: Fit, file: FileState, version: str
) -> PatchState:
    """A text fi-patch does not know. Where fi-patch had written the patch (a reinstall put the
    original back, or its run was interrupted), that is still what the state says: `apply
    --force` writes it again."""
    reason = unknown_reason(patch, how, file)
    if file.condition == "original":
        was = _original(known, patch, how, file, version)
        if was.state is State.WIPED or file.interrupted:
            return replace(was, reason=f"{was.reason}; {reason}")
    return replace(known, state=State.UNKNOWN, reason=reason)


def unknown_reason(patch: Patch, how: Fit, file: FileState) -> str:
    """A text fi-patch has never seen, in FlashInfer's own file: what it is, and what --force
    would do with it."""
    similar = how.structural
    if how.hashes is None:
        force = "`apply --force` cannot patch it"
    elif similar is None:
        force = (
            "its structure matches no known shape either, so `apply --force` cannot patch it; "
            "a fi-patch that knows this text can"
        )
    else:
        force = (
            f"its structure (its code without comments, layout or docstring) is shape "
            f"{similar.name}'s ({span(similar.versions)}): `apply --force` writes that shape's "
            "change and lets the proofs decide"
        )
    where = {
        "patched": f"in a file fi-patch patched with {', '.join(file.applied)}",
        "hand-patched": f"in a file with {', '.join(file.hand)} made by hand",
        "unrecorded": "in a file RECORD does not list",
    }.get(file.condition, "in FlashInfer's own file (RECORD's bytes)")
    return f"{how.reason}, {where}; {force}"


def _original(
    known: PatchState, patch: Patch, how: Fit, file: FileState, version: str
) -> PatchState:
    if file.interrupted and file.busy is not None:
        return replace(known, state=State.PRISTINE, reason=_in_progress(file.busy))
    if file.interrupted:
        return replace(
            known,
            state=State.PRISTINE,
            reason=f"FlashInfer's original bytes: an interrupted fi-patch {file.interrupted} "
            "left them in place; `fi-patch apply` patches, `fi-patch revert` clears the record",
        )
    if patch.id in file.applied:
        assert file.record is not None
        written = next(p for p in file.record.patches if p.id == patch.id)
        return replace(
            known,
            state=State.WIPED,
            reason=f"fi-patch patched it at {written.applied_at}; a reinstall put the original "
            "back",
        )
    if file.upgraded is not None and patch.id in file.upgraded.ids:
        return replace(
            known,
            state=State.WIPED,
            reason=f"fi-patch patched {file.upgraded.dist} {file.upgraded.version}; "
            f"{file.upgraded.version} → {version} was installed since, with its original "
            "file; needs apply",
        )
    return replace(
        known,
        state=State.PRISTINE,
        reason=f"FlashInfer's original {patch.function} (shape {_shape(how)}); needs apply",
    )


def _in_progress(busy: Holder) -> str:
    return (
        f"{busy.describe()} is writing or proving this file now, not interrupted; check again "
        "when it has finished"
    )


def _shape(how: Fit) -> str:
    return how.shape.name if how.shape else "?"
