"""The commands as functions: find the target, assess it, act, return a result value.

All file system and subprocess work is here or in the modules it calls; `cli` only renders.
Writes happen under the environment's lock, in an order that leaves a recognisable state if the
process dies between steps: backup, then manifest, then the target file (see docs/how-it-works.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from fi_patcher import __version__
from fi_patcher.assess import assess
from fi_patcher.environment import PROBE_TIMEOUT, choose_python, compile_check, probe
from fi_patcher.errors import (
    Drifted,
    FiPatchError,
    LayoutProblem,
    NotInstalled,
    StoreProblem,
    Unsupported,
    VerificationFailed,
    WriteFailed,
)
from fi_patcher.installed import find_installed
from fi_patcher.model import Assessment, Interpreter, ManifestEntry, Patch, State, Verdict
from fi_patcher.recognise import render_diff
from fi_patcher.registry import known_ranges
from fi_patcher.store import (
    Store,
    atomic_write,
    clear_bytecode,
    clear_temporaries,
    sha256_bytes,
)
from fi_patcher.verify import (
    VERIFY_TIMEOUT,
    Preflight,
    TraceReport,
    judge_preflight,
    preflight,
    trace,
)


@dataclass(frozen=True)
class Target:
    interpreter: Interpreter
    chosen_by: str


def _quiet(message: str) -> None:
    """The default progress callback: say nothing."""


@dataclass(frozen=True)
class ApplyOptions:
    dry_run: bool = False
    force: bool = False
    verify: bool = True
    allow_mismatch: bool = False
    timeout: float = PROBE_TIMEOUT
    """For the probe, the pre-flight and the compile check."""
    verify_timeout: float = VERIFY_TIMEOUT
    """For each trace: a fresh process importing torch and FlashInfer."""
    progress: Callable[[str], None] = _quiet


@dataclass(frozen=True)
class ApplyResult:
    action: str
    """applied | already-applied | not-applicable | would-apply | finished"""
    assessment: Assessment
    diff: str = ""
    backup: Path | None = None
    preflight: Preflight | None = None
    warnings: tuple[str, ...] = ()
    before: TraceReport | None = None
    after: TraceReport | None = None


@dataclass(frozen=True)
class RevertResult:
    action: str
    """reverted | nothing-to-revert | cleared-record"""
    message: str
    file: Path | None = None


@dataclass(frozen=True)
class _Inspection:
    assessment: Assessment
    source: bytes | None
    entries: dict[str, ManifestEntry]
    store: Store


def open_target(
    venv: Path | None,
    python: Path | None,
    environ: Mapping[str, str],
    timeout: float = PROBE_TIMEOUT,
) -> Target:
    interpreter_path, chosen_by = choose_python(venv, python, environ)
    return Target(probe(interpreter_path, timeout), chosen_by)


def check(target: Target, patch: Patch) -> Assessment:
    """The target's state. Reads only: takes no lock and creates nothing."""
    return _inspect(target.interpreter, patch, rewrite=False).assessment


def apply(target: Target, patch: Patch, options: ApplyOptions | None = None) -> ApplyResult:
    options = options or ApplyOptions()
    interpreter = target.interpreter
    inspection = _inspect(interpreter, patch)
    if not _writes(inspection.assessment, options.force):
        return _apply(inspection, interpreter, options, None)
    # Read-only checks first, so that a refusal leaves the environment as it was.
    options.progress(f"pre-flight in {interpreter.python}")
    facts = preflight(interpreter.python, options.timeout)
    checked = facts, judge_preflight(facts, options.allow_mismatch)
    if options.dry_run:
        return _apply(inspection, interpreter, options, checked)
    assert inspection.assessment.installed is not None
    with inspection.store.lock():
        clear_temporaries(inspection.assessment.installed.file.path)
        inspection.store.drop_orphans(inspection.store.load())
        # Look again under the lock: another fi-patch may have written meanwhile.
        return _apply(_inspect(interpreter, patch), interpreter, options, checked)


def verify(target: Target, assessment: Assessment, options: ApplyOptions) -> TraceReport:
    """Run the trace in the target: `after` on a patched file, `before` on any other."""
    installed = assessment.installed
    if installed is None or assessment.state is State.NOT_APPLICABLE:
        return TraceReport("none", True, f"nothing to verify: {assessment.reason}")
    mode = "after" if assessment.state is State.PATCHED else "before"
    options.progress(f"verifying in {target.interpreter.python} (importing torch and FlashInfer)")
    return trace(
        target.interpreter.python,
        mode,
        installed.file.path,
        assessment.patch.marker_prefix,
        options.verify_timeout,
    )


def revert(target: Target, patch: Patch, *, force: bool = False) -> RevertResult:
    interpreter = target.interpreter
    store = Store(interpreter.prefix)
    if not store.root.exists():
        return RevertResult("nothing-to-revert", "nothing to revert: fi-patch never patched here")
    with store.lock():
        entries = store.load()
        store.drop_orphans(entries)
        entry = entries.get(patch.id)
        if entry is None:
            return RevertResult(
                "nothing-to-revert", f"nothing to revert: {patch.id} is not applied here"
            )
        path = _entry_path(interpreter, entry)
        installed = find_installed(interpreter, patch.distribution, patch.target)
        if installed is None or installed.version != entry.version:
            now = f"{installed.version}" if installed else "nothing (it was uninstalled)"
            _forget(store, entries, entry)
            return RevertResult(
                "cleared-record",
                f"{entry.dist} {entry.version} was replaced by {now} since fi-patch patched "
                "it; nothing to restore, the record is cleared",
                path,
            )
        clear_temporaries(path)
        current = _read(path)
        if current is None and not force:
            raise LayoutProblem(
                f"{path} is missing",
                remedy="reinstall FlashInfer, or pass --force to restore fi-patch's backup there",
            )
        sha = sha256_bytes(current) if current is not None else None
        if sha == entry.sha256_before:
            _forget(store, entries, entry)
            why = {
                "applying": "an interrupted fi-patch apply left them",
                "reverting": "an interrupted fi-patch revert put them back",
            }.get(entry.status, "a reinstall put them back")
            return RevertResult(
                "cleared-record", f"already the original bytes ({why}); the record is cleared", path
            )
        if sha != entry.sha256_after and not force:
            raise Drifted(
                f"{path} changed since fi-patch wrote it (sha256 "
                f"{(sha or 'missing')[:12]}…, fi-patch wrote {entry.sha256_after[:12]}…)",
                remedy="look at the file; `fi-patch revert --force` restores the original "
                "bytes anyway, overwriting whatever is there now",
            )
        original = store.read_backup(entry)
        record = installed.file.record_sha256
        if record is not None and record != sha256_bytes(original):
            raise StoreProblem(
                f"the backup {entry.backup} does not match RECORD "
                f"({record[:12]}…); refusing to restore it",
                remedy="reinstall FlashInfer to get the original back: pip install "
                f"--force-reinstall --no-deps {entry.dist}=={entry.version}",
            )
        mode = stat.S_IMODE(os.stat(path).st_mode) if current is not None else 0o644
        store.save({**entries, entry.patch_id: replace(entry, status="reverting")})
        atomic_write(path, original, mode=mode)
        clear_bytecode(path)
        _forget(store, entries, entry)
        return RevertResult("reverted", f"restored the original bytes of {path}", path)


def _apply(
    inspection: _Inspection,
    interpreter: Interpreter,
    options: ApplyOptions,
    checked: tuple[Preflight, tuple[str, ...]] | None,
) -> ApplyResult:
    assessment = inspection.assessment
    state = assessment.state
    if state is State.NOT_INSTALLED:
        raise NotInstalled(
            f"{assessment.patch.distribution} is not installed in {interpreter.prefix}",
            remedy="check that --venv names the environment your server runs in",
        )
    if state is State.NOT_APPLICABLE:
        return ApplyResult("not-applicable", assessment)
    if state is State.PATCHED and not assessment.interrupted:
        return ApplyResult("already-applied", assessment)
    if not _writes(assessment, options.force):
        raise _refusal(assessment)
    assert checked is not None, "apply runs the pre-flight before any write"
    facts, warnings = checked
    if not options.verify:
        warnings += ("verification skipped (--no-verify): nothing proves the patch works here",)
    if state is State.PATCHED:  # fi-patch's bytes, left by an interrupted run
        if options.dry_run:
            return ApplyResult("would-apply", assessment, preflight=facts, warnings=warnings)
        return _finish(inspection, interpreter, options, facts, warnings)
    assert assessment.installed is not None and assessment.patched_text is not None
    assert inspection.source is not None
    path = assessment.installed.file.path
    diff = render_diff(
        inspection.source.decode("utf-8"), assessment.patched_text, assessment.patch.target
    )
    if options.dry_run:
        return ApplyResult("would-apply", assessment, diff, preflight=facts, warnings=warnings)
    before = None
    if options.verify:
        options.progress("tracing the unpatched function in the target (importing torch)")
        before = _trace_before(interpreter, path, assessment.patch, options)
    written = _write(inspection, interpreter, facts, options)
    after = _verify_or_roll_back(inspection, interpreter, written.entry, options)
    return ApplyResult(
        "applied",
        assessment,
        diff,
        written.backup,
        preflight=facts,
        warnings=warnings,
        before=before,
        after=after,
    )


def _trace_before(
    interpreter: Interpreter, path: Path, patch: Patch, options: ApplyOptions
) -> TraceReport:
    """The trace before writing is a report, not a gate: what proves the patch is the one after."""
    try:
        return trace(
            interpreter.python, "before", path, patch.marker_prefix, options.verify_timeout
        )
    except FiPatchError as error:
        return TraceReport("before", False, f"did not finish: {error.message}", error.details)


@dataclass(frozen=True)
class _Written:
    entry: ManifestEntry
    backup: Path


def _write(
    inspection: _Inspection, interpreter: Interpreter, facts: Preflight, options: ApplyOptions
) -> _Written:
    """Backup, manifest, then the file: the order docs/how-it-works.md promises."""
    assessment = inspection.assessment
    assert assessment.installed is not None and assessment.patched_text is not None
    assert inspection.source is not None
    path = assessment.installed.file.path
    patched = assessment.patched_text.encode("utf-8")
    compile_check(interpreter.python, patched, str(path), options.timeout)
    store = inspection.store
    backup = store.put_backup(inspection.source)
    entry = _entry(
        assessment,
        interpreter,
        inspection.source,
        patched,
        backup=backup,
        forced=assessment.state is State.DRIFTED,
    )
    entry = replace(
        entry,
        torch_cuda=facts.torch_cuda,
        nvcc_version=facts.nvcc_version,
        nvcc_path=facts.nvcc_path,
        mismatch_allowed=facts.mismatch,
        verification="pending" if options.verify else "skipped",
        status="applying",
    )
    store.save({**inspection.entries, entry.patch_id: entry})
    try:
        atomic_write(path, patched, mode=stat.S_IMODE(os.stat(path).st_mode))
    except WriteFailed:
        # The target is untouched (atomic_write removed its temporary): undo the record too.
        _undo_record(inspection)
        raise
    clear_bytecode(path)
    return _Written(entry, store.backups / backup)


def _verify_or_roll_back(
    inspection: _Inspection,
    interpreter: Interpreter,
    entry: ManifestEntry,
    options: ApplyOptions,
) -> TraceReport | None:
    """Prove the written patch (unless --no-verify), then mark the manifest entry applied."""
    assessment = inspection.assessment
    assert assessment.installed is not None and inspection.source is not None
    path = assessment.installed.file.path
    report = None
    if options.verify:
        options.progress("verifying the patched function in a fresh process of the target")
        report = _verify_after(inspection, interpreter, path, options)
    final = replace(entry, status="applied", verification="passed" if report else "skipped")
    inspection.store.save({**inspection.entries, entry.patch_id: final})
    return report


def _verify_after(
    inspection: _Inspection, interpreter: Interpreter, path: Path, options: ApplyOptions
) -> TraceReport:
    marker = inspection.assessment.patch.marker_prefix
    try:
        report = trace(interpreter.python, "after", path, marker, options.verify_timeout)
    except BaseException as exc:  # a timeout, an interrupt: never leave an unproven patch
        _roll_back(inspection, path)
        if isinstance(exc, FiPatchError):
            raise VerificationFailed(
                f"verification did not finish: {exc.message}; the original bytes of {path} "
                "are restored",
                remedy=exc.remedy,
                details=exc.details,
            ) from exc
        raise
    if not report.passed:
        _roll_back(inspection, path)
        raise VerificationFailed(
            f"verification in {interpreter.python} {report.summary}; rolled back: the original "
            f"bytes of {path} are restored",
            remedy="read the target's own error above; `fi-patch apply --no-verify` writes the "
            "patch without this proof",
            details=report.details,
        )
    return report


def _finish(
    inspection: _Inspection,
    interpreter: Interpreter,
    options: ApplyOptions,
    facts: Preflight,
    warnings: tuple[str, ...],
) -> ApplyResult:
    """The file already holds fi-patch's bytes from an interrupted run: verify and record."""
    assessment = inspection.assessment
    entry = inspection.entries[assessment.patch.id]
    original = inspection.store.read_backup(entry)
    inspection = replace(inspection, source=original, entries=_without(inspection.entries, entry))
    after = _verify_or_roll_back(inspection, interpreter, entry, options)
    return ApplyResult("finished", assessment, preflight=facts, warnings=warnings, after=after)


def _without(entries: dict[str, ManifestEntry], entry: ManifestEntry) -> dict[str, ManifestEntry]:
    return {k: v for k, v in entries.items() if k != entry.patch_id}


def _roll_back(inspection: _Inspection, path: Path) -> None:
    """Put back the original bytes, then the manifest as it was before this apply."""
    assert inspection.source is not None
    atomic_write(path, inspection.source, mode=stat.S_IMODE(os.stat(path).st_mode))
    clear_bytecode(path)
    _undo_record(inspection)


def _undo_record(inspection: _Inspection) -> None:
    """The manifest as it was before this apply, and no backup that only this apply needed."""
    assert inspection.source is not None
    inspection.store.save(dict(inspection.entries))
    inspection.store.drop_backup(f"{sha256_bytes(inspection.source)}.py", inspection.entries)


def _writes(assessment: Assessment, force: bool) -> bool:
    """Whether apply would write: pristine or wiped, or forced onto an unknown version."""
    if assessment.state in (State.PRISTINE, State.WIPED):
        return True
    if assessment.state is State.PATCHED:
        return assessment.interrupted is not None
    return assessment.state is State.DRIFTED and force and assessment.patched_text is not None


def _inspect(interpreter: Interpreter, patch: Patch, *, rewrite: bool = True) -> _Inspection:
    store = Store(interpreter.prefix)
    entries = store.load()
    installed = find_installed(interpreter, patch.distribution, patch.target)
    source = None
    if installed is not None:
        path = installed.file.path
        if path.is_symlink():
            raise LayoutProblem(
                f"{path} is a symlink to {os.readlink(path)}; fi-patch does not write through "
                "links",
                remedy="reinstall FlashInfer so that the file is a regular file",
            )
        source = _read(path)
    assessment = assess(
        patch, installed, source, entries.get(patch.id), __version__, rewrite=rewrite
    )
    return _Inspection(assessment, source, entries, store)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LayoutProblem(f"cannot read {path}: {exc.strerror}") from exc


def _refusal(assessment: Assessment) -> Drifted | Unsupported:
    installed = assessment.installed
    assert installed is not None
    details = [
        f"installed: {installed.name} {installed.version}",
        f"file: {installed.file.path}",
        f"known: {known_ranges(assessment.patch)}",
    ]
    if assessment.found is not None:
        found = assessment.found
        details.append(f"found at lines {found.start}-{found.end}:")
        details.extend("    " + line for line in found.text.rstrip("\n").splitlines())
    selection = assessment.selection
    if selection is not None and selection.verdict is Verdict.UNKNOWN:
        remedy = (
            "`apply --force` patches an unknown version only where its function matches a "
            "known shape exactly; otherwise install a release inside the known ranges"
        )
        return Unsupported(
            f"refusing to patch: {assessment.reason}", remedy=remedy, details=tuple(details)
        )
    return Drifted(
        f"refusing to patch: {assessment.reason}",
        remedy="reinstall FlashInfer to get its original file back (pip install "
        f"--force-reinstall --no-deps {installed.name}=={installed.version}), then apply again",
        details=tuple(details),
    )


def _entry(
    assessment: Assessment,
    interpreter: Interpreter,
    before: bytes,
    after: bytes,
    *,
    backup: str,
    forced: bool,
) -> ManifestEntry:
    installed = assessment.installed
    assert installed is not None and assessment.shape is not None
    site = os.path.relpath(installed.file.site_packages, interpreter.prefix)
    return ManifestEntry(
        patch_id=assessment.patch.id,
        dist=installed.name,
        version=installed.version,
        shape=assessment.shape.name,
        relpath=installed.file.relpath,
        site_packages=PurePosixPath(Path(site)).as_posix(),
        sha256_before=sha256_bytes(before),
        sha256_after=sha256_bytes(after),
        record_sha256=installed.file.record_sha256,
        backup=backup,
        fi_patch_version=__version__,
        applied_at=datetime.now(UTC).isoformat(timespec="seconds"),
        forced=forced,
    )


def _entry_path(interpreter: Interpreter, entry: ManifestEntry) -> Path:
    """The file a manifest entry names, refusing any path that leaves the environment."""
    for part in (entry.site_packages, entry.relpath):
        pure = PurePosixPath(part)
        if pure.is_absolute() or ".." in pure.parts:
            raise StoreProblem(f"the manifest names an unsafe path {part!r}; refusing to use it")
    path = interpreter.prefix / entry.site_packages / entry.relpath
    if not any(path.parent.is_relative_to(site) for site in interpreter.site_packages):
        raise StoreProblem(f"the manifest names {path}, outside this environment's site-packages")
    return path


def _forget(store: Store, entries: dict[str, ManifestEntry], entry: ManifestEntry) -> None:
    del entries[entry.patch_id]
    store.save(entries)
    store.drop_backup(entry.backup, entries)
