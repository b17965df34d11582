"""Decide the state of one target from facts already read: pure, no I/O.

Three states come from matching, never from guessing: pristine (a known original, equal to RECORD),
patched (exactly the bytes fi-patch wrote, per its manifest) and wiped (fi-patch patched it, and
the original is back). Everything else is drifted, and the reason says what was seen.
"""

from __future__ import annotations

from dataclasses import replace

from fi_patcher.errors import LayoutProblem
from fi_patcher.model import Assessment, Installed, ManifestEntry, Patch, Shape, State, Verdict
from fi_patcher.recognise import Unrecognised, recognise
from fi_patcher.registry import select
from fi_patcher.store import sha256_bytes


def assess(
    patch: Patch,
    installed: Installed | None,
    source: bytes | None,
    entry: ManifestEntry | None,
    tool_version: str,
    *,
    rewrite: bool = True,
) -> Assessment:
    """The state of one target. With `rewrite`, a patchable target also gets its patched text
    (the libcst engine's work, which `check` does not need)."""
    if installed is None:
        return Assessment(
            State.NOT_INSTALLED, f"{patch.distribution} is not installed", patch, entry=entry
        )
    selection = select(patch, installed.version)
    facts = Assessment(
        State.DRIFTED, "", patch, installed=installed, selection=selection, entry=entry
    )
    if selection.verdict is Verdict.NOT_APPLICABLE:
        return replace(
            facts,
            state=State.NOT_APPLICABLE,
            reason=f"not applicable: nothing to patch ({selection.reason})",
        )
    if source is None:
        raise LayoutProblem(
            f"{installed.file.path} is missing, but {patch.distribution} {installed.version} "
            "ships it",
            remedy="reinstall it: pip install --force-reinstall --no-deps "
            f"{patch.distribution}=={installed.version}",
        )
    if not installed.file.recorded:
        raise LayoutProblem(
            f"the RECORD of {installed.dist_info.name} does not list {installed.file.relpath}; "
            "fi-patch writes only files the installer recorded",
            remedy="reinstall it: pip install --force-reinstall --no-deps "
            f"{patch.distribution}=={installed.version}",
        )
    sha = sha256_bytes(source)
    interrupted = _interrupted(entry)
    if entry is not None and sha == entry.sha256_after:
        reason = f"patched by fi-patch {entry.fi_patch_version} at {entry.applied_at}"
        if interrupted:
            reason = (
                f"the bytes fi-patch wrote, but its {interrupted} was interrupted before it "
                f"finished; `fi-patch {interrupted}` finishes it"
            )
        return replace(
            facts,
            state=State.PATCHED,
            reason=reason,
            shape=next((s for s in patch.shapes if s.name == entry.shape), None),
            sha256=sha,
            interrupted=interrupted,
        )
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        return replace(
            facts, reason=f"{installed.file.path} is not UTF-8 ({exc.reason})", sha256=sha
        )

    unknown = selection.verdict is Verdict.UNKNOWN
    shapes = patch.shapes if unknown else (selection.shape,) if selection.shape else ()
    matched = recognise(text, patch, shapes, structural=unknown)
    if isinstance(matched, Unrecognised):
        # Rare: tell "someone else's edit" from "our patch without our record" with the engine.
        from fi_patcher.codemod import AlreadyApplied, transform

        result = transform(text, patch, shapes, tool_version, structural=unknown)
        if isinstance(result, AlreadyApplied):
            return replace(
                facts,
                state=State.DRIFTED,
                reason=f"{patch.function} carries this patch, but fi-patch has no record of "
                "writing these bytes here, so it cannot restore the original",
                shape=result.shape,
                sha256=sha,
                found=result.found,
            )
        return replace(facts, reason=matched.reason, sha256=sha, found=matched.found)
    known = replace(facts, shape=matched.shape, sha256=sha, found=matched.found)
    record = installed.file.record_sha256
    if record is not None and sha != record:
        return replace(
            known,
            reason=f"{patch.function} is the original, but the file differs from RECORD elsewhere "
            f"(sha256 {sha[:12]}…, RECORD {record[:12]}…)",
        )
    # Patchable from here on: with `rewrite`, carry the text apply would write.
    if rewrite:
        known = replace(known, patched_text=_patched_text(text, patch, matched.shape, tool_version))
    if unknown:
        return replace(
            known,
            reason=f"{selection.reason}; its {patch.function} matches shape {matched.shape.name} "
            "structurally, so `apply --force` can patch it",
        )
    if entry is not None and interrupted:
        return replace(
            known,
            state=State.PRISTINE,
            reason=f"FlashInfer's original bytes: an interrupted fi-patch {interrupted} left "
            "them in place; `fi-patch apply` patches, `fi-patch revert` clears the record",
            interrupted=interrupted,
        )
    if entry is not None:
        return replace(
            known,
            state=State.WIPED,
            reason=f"fi-patch patched it at {entry.applied_at}; a reinstall put the original back",
        )
    return replace(
        known,
        state=State.PRISTINE,
        reason=f"FlashInfer's original {patch.function} (shape {matched.shape.name}); needs apply",
    )


def _interrupted(entry: ManifestEntry | None) -> str | None:
    if entry is None or entry.status == "applied":
        return None
    return "revert" if entry.status == "reverting" else "apply"


def _patched_text(text: str, patch: Patch, shape: Shape, tool_version: str) -> str | None:
    # Imported here: libcst is the slowest import of all, and only writing needs it.
    from fi_patcher.codemod import Transformed, transform

    result = transform(text, patch, (shape,), tool_version, structural=True)
    return result.text if isinstance(result, Transformed) else None
