"""Building the writes: from a plan and the bytes already read, the `Change` of each file (its
new bytes, its record while the write is under way and once it is proven). Pure: no I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from fi_patcher import __version__
from fi_patcher.errors import Drifted
from fi_patcher.model import (
    FileRecord,
    FileState,
    Installed,
    Patch,
    PatchRecord,
    Pending,
    Shape,
    Verification,
)
from fi_patcher.plan import FilePlan, RevertFile, recorded_shapes
from fi_patcher.proofs import Preflight
from fi_patcher.recognise import render_diff, sha256_bytes
from fi_patcher.store import Change, backup_name


def apply_change(
    file: FilePlan,
    current: bytes,
    original: bytes,
    installed: Installed,
    prefix: Path,
    *,
    forced: frozenset[str],
    facts: Preflight | None,
    verify: bool,
) -> Change:
    """The write that gives `file` its planned patches (none, when it only needs proving).
    `prefix` is the environment that holds the store."""
    state = file.state
    after: bytes = current
    shapes: Mapping[str, Shape] = {}
    existing = {p.id: p for p in state.record.patches} if state.record else {}
    if file.writes:
        # A patch forced before is matched by its structure again, as this run's are.
        by_structure = forced | {i for i, p in existing.items() if p.forced}
        after, shapes = compose(original, file.patches, file.shapes, by_structure)
    verification: Verification = "pending" if verify else "skipped"
    now = datetime.now(UTC).isoformat(timespec="seconds")
    records = tuple(
        replace(existing[p.id], fi_patch_version=__version__, verification=verification)
        if p.id in existing and file.writes
        else existing[p.id]
        if p.id in existing
        else _patch_record(p, shapes[p.id], now, verification, p.id in forced, facts)
        for p in file.patches
    )
    base = _record(state, original, current, installed, prefix)
    staged = replace(
        base, pending=Pending("apply", records, sha256_bytes(after), sha256_bytes(current))
    )
    proven: Verification = "passed" if verify else "skipped"
    committed = replace(
        base,
        sha256=sha256_bytes(after),
        patches=tuple(
            replace(r, verification=proven if r.verification == "pending" else r.verification)
            for r in records
        ),
    )
    return Change(
        state.path, state.relpath, current, after, staged, committed, original=state.rebuilt
    )


def revert_change(file: RevertFile, current: bytes | None, original: bytes) -> Change:
    """The write that leaves `file` with the patches that remain: its original rebuilt with
    them, or the original itself."""
    record = file.settled
    assert record is not None
    forced = frozenset(p.id for p in record.patches if p.forced)
    shapes = recorded_shapes(record, file.remaining)
    after = compose(original, file.remaining, shapes, forced)[0] if file.remaining else original
    kept = tuple(p for p in record.patches if p.id not in file.removing)
    before = current or b""
    pending = Pending("revert", kept, sha256_bytes(after), sha256_bytes(before))
    committed = replace(record, sha256=sha256_bytes(after), patches=kept, pending=None)
    return Change(
        file.path,
        record.relpath,
        before,
        after,
        replace(record, pending=pending),
        committed if kept else None,
        absent=current is None,
    )


def restore_change(state: FileState, change: Change, original: bytes) -> Change:
    """An interrupted run left bytes that fail their proof: the write that puts FlashInfer's
    original back."""
    record = state.record
    assert record is not None
    pending = Pending("revert", (), sha256_bytes(original), sha256_bytes(change.before))
    return Change(
        change.path, change.relpath, change.before, original, replace(record, pending=pending), None
    )


def compose(
    original: bytes,
    patches: Sequence[Patch],
    shapes: Mapping[str, Shape],
    forced: frozenset[str],
    version: str = __version__,
) -> tuple[bytes, Mapping[str, Shape]]:
    """The original with `patches` applied in registry order, each in its shape of `shapes`
    (matched by its exact text, or by its structure where it was forced), marked as written by
    fi-patch `version`."""
    # Imported here: libcst is the slowest import of all, and only writing needs it.
    from fi_patcher.codemod import Composed
    from fi_patcher.codemod import compose as composed

    steps = [(p, (shapes[p.id],) if p.id in shapes else p.shapes) for p in patches]
    structural = any(p.id in forced for p in patches)
    result = composed(original.decode("utf-8"), steps, version, structural=structural)
    if not isinstance(result, Composed):
        raise Drifted(
            f"cannot rebuild the file from FlashInfer's original: {result.reason}",
            remedy="reinstall FlashInfer, then apply again",
        )
    return result.text.encode("utf-8"), result.shapes


def diff(change: Change) -> str:
    return diff_bytes(change.before, change.after, change.relpath)


def diff_bytes(before: bytes, after: bytes, relpath: str) -> str:
    return render_diff(before.decode("utf-8", "replace"), after.decode("utf-8", "replace"), relpath)


def _patch_record(
    patch: Patch,
    shape: Shape,
    now: str,
    verification: Verification,
    forced: bool,
    facts: Preflight | None,
) -> PatchRecord:
    toolkit = facts if facts is not None and "cuda-toolkit" in patch.preflight else None
    return PatchRecord(
        id=patch.id,
        shape=shape.name,
        fi_patch_version=__version__,
        applied_at=now,
        forced=forced,
        verification=verification,
        torch_cuda=toolkit.torch_cuda if toolkit else None,
        nvcc_version=toolkit.nvcc_version if toolkit else None,
        nvcc_path=toolkit.nvcc_path if toolkit else None,
        mismatch_allowed=bool(toolkit and toolkit.mismatch),
    )


def _record(
    state: FileState, original: bytes, current: bytes, installed: Installed, prefix: Path
) -> FileRecord:
    """The file's record as it stands before this write."""
    site = installed.files[state.relpath].site_packages
    return FileRecord(
        relpath=state.relpath,
        site_packages=PurePosixPath(Path(os.path.relpath(site, prefix))).as_posix(),
        dist=installed.name,
        version=installed.version,
        record_sha256=installed.files[state.relpath].record_sha256,
        original=sha256_bytes(original),
        backup=backup_name(sha256_bytes(original)),
        sha256=sha256_bytes(current),
        patches=state.record.patches if state.record else (),
    )
