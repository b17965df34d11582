"""The commands as functions: find the target, assess it, act, return a result value.

This module orchestrates: pre-flight, lock, inspect, prove before, write, prove after, commit or
undo. What to do is decided by pure modules (`assess`, `plan`), every write is a transaction of
the store's (one per file), and `cli` only renders. See docs/how-it-works.md for the protocol.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from fi_patcher import __version__
from fi_patcher.assess import assess, install_problem
from fi_patcher.environment import PROBE_TIMEOUT, choose_python, compile_check, probe
from fi_patcher.errors import (
    Drifted,
    FiPatchError,
    LayoutProblem,
    NotInstalled,
    RequirementUnmet,
    StoreProblem,
    StoreUnreadable,
    VerificationFailed,
)
from fi_patcher.installed import find_installed
from fi_patcher.model import (
    Assessment,
    FileRecord,
    FileState,
    Holder,
    Imported,
    Installed,
    Interpreter,
    Patch,
    PatchRecord,
    PatchSet,
    PatchState,
    Pending,
    Shape,
    State,
    Verdict,
)
from fi_patcher.plan import ApplyPlan, FilePlan, plan_apply
from fi_patcher.processes import Running, started_before
from fi_patcher.proofs import (
    VERIFY_TIMEOUT,
    Judgement,
    Preflight,
    ProofReport,
    ProofRequest,
    judge_preflight,
    needs_nvcc,
    preflight,
    prove,
)
from fi_patcher.recognise import render_diff, sha256_bytes
from fi_patcher.registry import fit, load_patches, located, required_at
from fi_patcher.store import (
    Change,
    Journal,
    Store,
    Transaction,
    backup_name,
    clear_temporaries,
)


@dataclass(frozen=True)
class Target:
    interpreter: Interpreter
    chosen_by: str


def _quiet(message: str) -> None:
    """The default progress callback: say nothing."""


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    force: bool = False
    """apply: patch an unknown version where a function matches a known shape structurally;
    revert: overwrite a file that changed since fi-patch wrote it."""
    verify: bool = True
    allow_mismatch: bool = False
    timeout: float = PROBE_TIMEOUT
    """For the probe, the pre-flight and the compile check."""
    verify_timeout: float = VERIFY_TIMEOUT
    """For the one process that runs every proof (it imports torch and FlashInfer)."""
    progress: Callable[[str], None] = _quiet


@dataclass(frozen=True)
class PatchOutcome:
    """What a command did with one patch."""

    state: PatchState
    """The patch's state when the command started."""
    action: str
    message: str = ""
    before: ProofReport | None = None
    after: ProofReport | None = None


@dataclass(frozen=True)
class FileOutcome:
    """What a command did to one file."""

    relpath: str
    path: Path
    action: str
    """written, would-write, finished, rolled-back, reverted or cleared-record."""
    holds: tuple[str, ...]
    """The patches the file holds afterwards."""
    message: str = ""
    diff: str = ""
    backup: Path | None = None


@dataclass(frozen=True)
class Outcome:
    """The result of apply or revert on one target."""

    assessment: Assessment
    patches: tuple[PatchOutcome, ...]
    files: tuple[FileOutcome, ...] = ()
    preflight: Preflight | None = None
    warnings: tuple[str, ...] = ()
    failure: FiPatchError | None = None
    """A proof failed after the write: the files it covers are put back (exit 13)."""
    running: tuple[Running, ...] = ()
    """Processes of the environment that started before the write: they keep the old code."""


@dataclass(frozen=True)
class _Inspection:
    assessment: Assessment
    sources: Mapping[str, bytes | None]
    store: Store


def open_target(
    venv: Path | None,
    python: Path | None,
    environ: Mapping[str, str],
    timeout: float = PROBE_TIMEOUT,
) -> Target:
    interpreter_path, chosen_by = choose_python(venv, python, environ)
    packages = sorted({p.target.split("/")[0] for p in load_patches()})
    return Target(probe(interpreter_path, timeout, packages), chosen_by)


def check(target: Target, chosen: PatchSet) -> Assessment:
    """Every chosen patch's state. Reads only: takes no lock and creates nothing, and records it
    may not read (another user's) do not stop it: the files' hashes still answer."""
    interpreter = target.interpreter
    assessment = _inspect(interpreter, chosen.patches, reading=True).assessment
    problem = install_problem(assessment)
    if problem is not None:
        raise problem
    foreign = _foreign(assessment.installed, interpreter)
    instead = _imported_instead(assessment.installed, interpreter)
    notes: tuple[str, ...] = (f"{foreign.message}; {foreign.remedy}",) if foreign else ()
    notes += _copies(assessment.installed, interpreter, instead)
    return replace(assessment, warnings=assessment.warnings + notes, imported_instead=instead)


def verify(target: Target, assessment: Assessment, options: Options) -> dict[str, ProofReport]:
    """Run the proofs in one fresh process of the target: after the patch where it is applied,
    before it elsewhere."""
    requests = [
        ProofRequest(s.patch, "after" if s.state is State.PATCHED else "before", s.file.path)
        for s in assessment.patches
        if s.file is not None and s.file.condition != "absent"
    ]
    if requests:
        options.progress(f"proving in {target.interpreter.python} (importing torch and FlashInfer)")
    return prove(target.interpreter.python, requests, options.verify_timeout)


# --- apply --------------------------------------------------------------------------------------


def apply(target: Target, chosen: PatchSet, options: Options | None = None) -> Outcome:
    options = options or Options()
    interpreter = target.interpreter
    inspection = _inspect(interpreter, chosen.patches)
    _require_installed(inspection.assessment, interpreter)
    problem = install_problem(inspection.assessment)
    if problem is not None:
        raise problem
    plan = plan_apply(inspection.assessment, chosen, force=options.force)
    if plan.idle:
        return _outcome(inspection.assessment, plan)
    foreign = _foreign(inspection.assessment.installed, interpreter)
    if foreign is not None:
        raise foreign
    # Read-only checks first, so that a refusal leaves the environment as it was.
    facts, judgement = _preflight(interpreter, plan, chosen, options)
    plan = plan_apply(
        inspection.assessment, chosen, force=options.force, left_out=judgement.left_out
    )
    installed = inspection.assessment.installed
    instead = _imported_instead(installed, interpreter)
    warnings = judgement.warnings + _copies(installed, interpreter, instead)
    if not options.verify:
        warnings += ("verification skipped (--no-verify): nothing proves the patches work here",)
    if options.dry_run or plan.idle:
        files = tuple(_dry_run(inspection, plan, facts, options))
        return _outcome(inspection.assessment, plan, files, facts, warnings)
    with inspection.store.lock("apply", _lock_wait(options), _waiting(options)):
        for file in plan.files:
            clear_temporaries(file.state.path)
        journal = Journal(inspection.store)
        inspection.store.drop_unreferenced(journal.records)
        # Look again under the lock: another fi-patch may have written meanwhile.
        inspection = _inspect(interpreter, chosen.patches)
        plan = plan_apply(
            inspection.assessment, chosen, force=options.force, left_out=judgement.left_out
        )
        moment = time.time()
        outcome = _apply_locked(interpreter, inspection, journal, plan, facts, warnings, options)
    return _with_running(outcome, interpreter, moment)


def _preflight(
    interpreter: Interpreter, plan: ApplyPlan, chosen: PatchSet, options: Options
) -> tuple[Preflight | None, Judgement]:
    if not plan.adding:
        return None, Judgement()
    options.progress(f"pre-flight in {interpreter.python}")
    facts = preflight(interpreter.python, options.timeout, nvcc=needs_nvcc(plan.adding))
    judgement = judge_preflight(
        facts, plan.adding, explicit=chosen.explicit, allow_mismatch=options.allow_mismatch
    )
    return facts, judgement


def _apply_locked(
    interpreter: Interpreter,
    inspection: _Inspection,
    journal: Journal,
    plan: ApplyPlan,
    facts: Preflight | None,
    warnings: tuple[str, ...],
    options: Options,
) -> Outcome:
    assessment = inspection.assessment
    changes = [_apply_change(inspection, file, plan, facts, options) for file in plan.files]
    # An adopted file may already hold fi-patch's bytes: its original must still be kept.
    writes = [c for c in changes if c.before != c.after or c.original is not None]
    for change in writes:
        compile_check(interpreter.python, change.after, str(change.path), options.timeout)
    before: dict[str, ProofReport] = {}
    if options.verify and plan.adding:
        options.progress("proving the unpatched code in the target (importing torch)")
        before = _prove_before(interpreter, plan, options)
    transactions = _write_all(journal, writes)
    after: dict[str, ProofReport] = {}
    if options.verify:
        options.progress("proving the patched code in a fresh process of the target")
        after = _prove_after(interpreter, plan.files, transactions, options)
    failed = _settle_all(journal, plan.files, changes, transactions, after, options)
    files = tuple(
        _file_outcome(inspection, file, change, failed)
        for file, change in zip(plan.files, changes, strict=True)
    )
    return _outcome(
        assessment,
        plan,
        files,
        facts,
        warnings,
        before=before,
        after=after,
        failure=_failure(interpreter, plan.files, failed, after),
    )


def _apply_change(
    inspection: _Inspection,
    file: FilePlan,
    plan: ApplyPlan,
    facts: Preflight | None,
    options: Options,
) -> Change:
    """The write that gives `file` its planned patches (none, when it only needs proving)."""
    state = file.state
    installed = inspection.assessment.installed
    assert installed is not None
    current = inspection.sources[state.relpath]
    assert current is not None
    original = _original(inspection.store, state, current, installed)
    after: bytes = current
    shapes: Mapping[str, Shape] = {}
    if file.writes:
        after, shapes = _compose(original, file.patches, installed.version, plan.forced)
    existing = {p.id: p for p in state.record.patches} if state.record else {}
    verification = "pending" if options.verify else "skipped"
    now = datetime.now(UTC).isoformat(timespec="seconds")
    records = tuple(
        replace(existing[p.id], fi_patch_version=__version__, verification=verification)
        if p.id in existing and file.writes
        else existing[p.id]
        if p.id in existing
        else _patch_record(p, shapes[p.id], now, verification, p.id in plan.forced, facts)
        for p in file.patches
    )
    base = _record(inspection, state, original, current, installed)
    staged = replace(
        base,
        pending=Pending("apply", records, sha256_bytes(after), sha256_bytes(current)),
    )
    proven = "passed" if options.verify else "skipped"
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


def _patch_record(
    patch: Patch,
    shape: Shape,
    now: str,
    verification: str,
    forced: bool,
    facts: Preflight | None,
) -> PatchRecord:
    toolkit = facts is not None and "cuda-toolkit" in patch.preflight
    return PatchRecord(
        id=patch.id,
        shape=shape.name,
        fi_patch_version=__version__,
        applied_at=now,
        forced=forced,
        verification=verification,
        torch_cuda=facts.torch_cuda if toolkit and facts else None,
        nvcc_version=facts.nvcc_version if toolkit and facts else None,
        nvcc_path=facts.nvcc_path if toolkit and facts else None,
        mismatch_allowed=bool(toolkit and facts and facts.mismatch),
    )


def _record(
    inspection: _Inspection,
    state: FileState,
    original: bytes,
    current: bytes,
    installed: Installed,
) -> FileRecord:
    """The file's record as it stands before this write."""
    prefix = inspection.store.root.parent
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


def _original(store: Store, state: FileState, current: bytes, installed: Installed) -> bytes:
    """FlashInfer's original bytes of the file: on disk, rebuilt from a hand-made fix, or in
    fi-patch's backup."""
    if state.rebuilt is not None:
        return state.rebuilt
    if state.condition == "original" or state.record is None:
        return current
    return _from_backup(store, state.record, installed)


def _from_backup(store: Store, record: FileRecord, installed: Installed) -> bytes:
    """The original bytes fi-patch kept, checked against the manifest and against RECORD."""
    original = store.read_backup(record)
    expected = installed.files[record.relpath].record_sha256
    if expected is not None and expected != sha256_bytes(original):
        raise StoreProblem(
            f"the backup {record.backup} does not match RECORD ({expected[:12]}…); "
            "refusing to restore it",
            remedy="reinstall FlashInfer to get the original back: pip install "
            f"--force-reinstall --no-deps {installed.name}=={installed.version}",
        )
    return original


def _compose(
    original: bytes, patches: Sequence[Patch], version: str, forced: frozenset[str]
) -> tuple[bytes, Mapping[str, Shape]]:
    """The original with `patches` applied in registry order, and the shape each matched."""
    # Imported here: libcst is the slowest import of all, and only writing needs it.
    from fi_patcher.codemod import Composed, compose

    steps = []
    structural = False
    for patch in patches:
        how = fit(patch, version)
        unknown = how.verdict is Verdict.UNKNOWN or patch.id in forced
        structural = structural or unknown
        steps.append((patch, patch.shapes if unknown or how.shape is None else (how.shape,)))
    result = compose(original.decode("utf-8"), steps, __version__, structural=structural)
    if not isinstance(result, Composed):
        raise Drifted(
            f"cannot rebuild the file from FlashInfer's original: {result.reason}",
            remedy="reinstall FlashInfer, then apply again",
        )
    return result.text.encode("utf-8"), result.shapes


def _prove_before(
    interpreter: Interpreter, plan: ApplyPlan, options: Options
) -> dict[str, ProofReport]:
    """The proofs before writing are a report, not a gate: what proves the patch is after."""
    requests = [ProofRequest(p, "before", _path(plan, p)) for p in plan.adding]
    try:
        return prove(interpreter.python, requests, options.verify_timeout)
    except FiPatchError as error:
        return {
            r.patch.id: ProofReport(
                r.patch.id, "before", False, f"did not finish: {error.message}", error.details
            )
            for r in requests
        }


def _path(plan: ApplyPlan, patch: Patch) -> Path:
    return next(f.state.path for f in plan.files if patch in f.patches)


def _write_all(journal: Journal, changes: Sequence[Change]) -> dict[str, Transaction]:
    """Write every file, or none: a failure undoes the files already written."""
    done: dict[str, Transaction] = {}
    try:
        for change in changes:
            transaction = Transaction(journal, change)
            done[change.relpath] = transaction
            transaction.write()
    except BaseException:
        _undo_all(list(done.values()))
        raise
    return done


def _undo_all(transactions: Sequence[Transaction]) -> None:
    for transaction in reversed(transactions):
        transaction.undo()


def _prove_after(
    interpreter: Interpreter,
    files: Sequence[FilePlan],
    transactions: Mapping[str, Transaction],
    options: Options,
) -> dict[str, ProofReport]:
    """Every patch in every file written or finished, in one process; a proof that cannot run
    at all puts every file back."""
    requests = [ProofRequest(p, "after", f.state.path) for f in files for p in f.patches]
    try:
        return prove(interpreter.python, requests, options.verify_timeout)
    except BaseException as exc:  # a timeout, an interrupt: never leave an unproven patch
        _undo_all(list(transactions.values()))
        if isinstance(exc, FiPatchError):
            paths = ", ".join(str(f.state.path) for f in files)
            raise VerificationFailed(
                f"the proofs did not finish: {exc.message}; rolled back: {paths} are as they "
                "were before",
                remedy=exc.remedy,
                details=exc.details,
            ) from exc
        raise


def _settle_all(
    journal: Journal,
    files: Sequence[FilePlan],
    changes: Sequence[Change],
    transactions: Mapping[str, Transaction],
    after: Mapping[str, ProofReport],
    options: Options,
) -> set[str]:
    """Commit each file whose proofs passed, put back each other one; return the latter."""
    failed = set()
    for file, change in zip(files, changes, strict=True):
        green = not options.verify or all(after[p.id].passed for p in file.patches)
        transaction = transactions.get(change.relpath)
        if green and transaction is not None:
            transaction.commit()
        elif green:
            journal.put(change.relpath, change.committed)
            journal.store.drop_unreferenced(journal.records)
        else:
            failed.add(change.relpath)
            if transaction is not None:
                transaction.undo()
            else:
                _restore_original(journal, file, change)
    return failed


def _restore_original(journal: Journal, file: FilePlan, change: Change) -> None:
    """An interrupted run left bytes that fail their proof: put FlashInfer's original back."""
    record = file.state.record
    assert record is not None
    original = journal.store.read_backup(record)
    pending = Pending("revert", (), sha256_bytes(original), sha256_bytes(change.before))
    rollback = Change(
        change.path,
        change.relpath,
        change.before,
        original,
        replace(record, pending=pending),
        None,
    )
    transaction = Transaction(journal, rollback)
    transaction.write()
    transaction.commit()


def _failure(
    interpreter: Interpreter,
    files: Sequence[FilePlan],
    failed: set[str],
    after: Mapping[str, ProofReport],
) -> VerificationFailed | None:
    if not failed:
        return None
    red = [after[p.id] for f in files if f.state.relpath in failed for p in f.patches]
    red = [r for r in red if not r.passed]
    rolled = "; ".join(
        f"{f.state.path} ({', '.join(p.id for p in f.patches)})"
        for f in files
        if f.state.relpath in failed
    )
    return VerificationFailed(
        f"the proof of {', '.join(r.patch for r in red)} in {interpreter.python} "
        f"{red[0].summary}; rolled back: {rolled} are as they were before this apply",
        remedy="read the target's own error below; `fi-patch apply --no-verify` writes the "
        "patches without this proof",
        details=_details(red),
    )


def _details(red: Sequence[ProofReport]) -> tuple[str, ...]:
    """What each failed proof said, its target's own error under it."""
    return tuple(line for r in red for line in (f"{r.patch}: {r.summary}", *r.details))


def _dry_run(
    inspection: _Inspection, plan: ApplyPlan, facts: Preflight | None, options: Options
) -> list[FileOutcome]:
    """The writes apply would make, as diffs: the same changes, none of them written."""
    changes = [
        (file, _apply_change(inspection, file, plan, facts, options))
        for file in plan.files
        if file.writes
    ]
    return [
        FileOutcome(
            change.relpath,
            change.path,
            "would-write",
            tuple(p.id for p in file.patches),
            diff=_diff(change),
        )
        for file, change in changes
    ]


def _diff(change: Change) -> str:
    return render_diff(change.before.decode("utf-8"), change.after.decode("utf-8"), change.relpath)


def _file_outcome(
    inspection: _Inspection, file: FilePlan, change: Change, failed: set[str]
) -> FileOutcome:
    relpath = file.state.relpath
    if relpath in failed:
        held = file.state.applied if file.writes else ()
        return FileOutcome(relpath, file.state.path, "rolled-back", held)
    holds = tuple(p.id for p in file.patches)
    if not file.writes:
        return FileOutcome(relpath, file.state.path, "finished", holds)
    assert change.committed is not None
    backup = inspection.store.backups / change.committed.backup
    return FileOutcome(
        relpath, file.state.path, "written", holds, diff=_diff(change), backup=backup
    )


def _outcome(
    assessment: Assessment,
    plan: ApplyPlan,
    files: tuple[FileOutcome, ...] = (),
    facts: Preflight | None = None,
    warnings: tuple[str, ...] = (),
    *,
    before: Mapping[str, ProofReport] | None = None,
    after: Mapping[str, ProofReport] | None = None,
    failure: FiPatchError | None = None,
) -> Outcome:
    states = {s.patch.id: s for s in assessment.patches}
    done = {f.relpath: f for f in files}
    outcomes = []
    for step in plan.steps:
        action = {"add": "applied", "finish": "finished"}.get(step.action, step.action)
        written = done.get(step.patch.target)
        if written is not None and written.action == "would-write":
            action = "would-apply" if step.action == "add" else action
        if (
            written is not None
            and written.action == "rolled-back"
            and step.action in ("add", "finish")
        ):
            action = "rolled-back"
        outcomes.append(
            PatchOutcome(
                states[step.patch.id],
                action,
                step.reason if action == "left-out" else "",
                (before or {}).get(step.patch.id),
                (after or {}).get(step.patch.id),
            )
        )
    return Outcome(assessment, tuple(outcomes), files, facts, warnings, failure)


# --- revert -------------------------------------------------------------------------------------


def revert(target: Target, chosen: PatchSet, options: Options | None = None) -> Outcome:
    """Take the chosen patches out (every patch, by default): a file left with none gets its
    original bytes back; a file left with others is rebuilt from the original and proven."""
    options = options or Options()
    interpreter = target.interpreter
    store = Store(interpreter.prefix)
    everything = PatchSet(load_patches())
    if not store.root.exists():
        assessment = _inspect(interpreter, chosen.patches).assessment
        return _nothing(assessment, chosen, "nothing to revert: fi-patch never patched here")
    moment = time.time()
    with store.lock("revert", _lock_wait(options), _waiting(options)):
        journal = Journal(store)
        store.drop_unreferenced(journal.records)
        for record in journal.records.values():
            clear_temporaries(_record_path(interpreter, record))
        inspection = _inspect(interpreter, everything.patches)
        files = [
            _revert_file(interpreter, inspection, journal, record, chosen, options)
            for record in sorted(journal.records.values(), key=lambda r: r.relpath)
        ]
    return _with_running(_revert_outcome(inspection.assessment, chosen, files), interpreter, moment)


@dataclass(frozen=True)
class _Reverted:
    file: FileOutcome
    removed: tuple[str, ...] = ()
    after: Mapping[str, ProofReport] = field(default_factory=dict)
    failure: FiPatchError | None = None


def _revert_file(
    interpreter: Interpreter,
    inspection: _Inspection,
    journal: Journal,
    record: FileRecord,
    chosen: PatchSet,
    options: Options,
) -> _Reverted:
    path = _record_path(interpreter, record)
    installed = inspection.assessment.installed
    state = inspection.assessment.files.get(record.relpath)
    if installed is None or installed.version != record.version or state is None:
        now = f"{installed.version}" if installed else "nothing (it was uninstalled)"
        journal.put(record.relpath, None)
        journal.store.drop_unreferenced(journal.records)
        message = (
            f"{record.dist} {record.version} was replaced by {now} since fi-patch patched it; "
            "nothing to restore, the record is cleared"
        )
        return _Reverted(
            FileOutcome(record.relpath, path, "cleared-record", (), message), record.ids
        )
    settled = state.record
    if settled is None or state.condition == "original":
        journal.put(record.relpath, None)
        journal.store.drop_unreferenced(journal.records)
        why = {
            "apply": "an interrupted fi-patch apply left them",
            "revert": "an interrupted fi-patch revert put them back",
        }.get(state.interrupted or "", "a reinstall put them back")
        message = f"already the original bytes ({why}); the record is cleared"
        return _Reverted(
            FileOutcome(record.relpath, path, "cleared-record", (), message), record.ids
        )
    removing = [i for i in settled.ids if not chosen.explicit or i in chosen.ids]
    if not removing:
        return _Reverted(FileOutcome(record.relpath, path, "kept", settled.ids))
    current = inspection.sources.get(record.relpath)
    _refuse_revert(state, settled, current, options)
    options.progress(f"taking {', '.join(removing)} out of {path}")
    remaining = tuple(
        located(p, installed.version)
        for p in load_patches()
        if p.id in settled.ids and p.id not in removing
    )
    _refuse_dependents(remaining, removing, installed.version)
    original = _from_backup(journal.store, settled, installed)
    after = (
        _compose(original, remaining, installed.version, _forced(settled))[0]
        if remaining
        else original
    )
    kept = tuple(p for p in settled.patches if p.id not in removing)
    change = Change(
        path,
        record.relpath,
        current or b"",
        after,
        replace(
            settled,
            pending=Pending("revert", kept, sha256_bytes(after), sha256_bytes(current or b"")),
        ),
        replace(settled, sha256=sha256_bytes(after), patches=kept, pending=None) if kept else None,
    )
    transaction = Transaction(journal, change)
    transaction.write()
    reports: dict[str, ProofReport] = {}
    if remaining and options.verify:
        options.progress("proving the patches that remain, in a fresh process of the target")
        reports = _prove_after(
            interpreter, [FilePlan(state, remaining, ())], {record.relpath: transaction}, options
        )
        if not all(r.passed for r in reports.values()):
            transaction.undo()
            red = [r for r in reports.values() if not r.passed]
            failure = VerificationFailed(
                f"after taking out {', '.join(removing)}, the proof of "
                f"{', '.join(r.patch for r in red)} {red[0].summary}; rolled back: {path} is as "
                "it was before this revert",
                remedy="read the target's own error below; `fi-patch revert` without --patch "
                "restores the original bytes",
                details=_details(red),
            )
            outcome = FileOutcome(record.relpath, path, "rolled-back", settled.ids)
            return _Reverted(outcome, (), reports, failure)
    transaction.commit()
    message = (
        f"restored the original bytes of {path}"
        if not remaining
        else f"rebuilt {path} from its original with {', '.join(p.id for p in remaining)}"
    )
    holds = tuple(p.id for p in remaining)
    return _Reverted(
        FileOutcome(record.relpath, path, "reverted", holds, message), tuple(removing), reports
    )


def _forced(record: FileRecord) -> frozenset[str]:
    return frozenset(p.id for p in record.patches if p.forced)


def _refuse_revert(
    state: FileState, settled: FileRecord, current: bytes | None, options: Options
) -> None:
    if current is None and not options.force:
        raise LayoutProblem(
            f"{state.path} is missing",
            remedy="reinstall FlashInfer, or pass --force to restore fi-patch's backup there",
        )
    if state.condition != "patched" and not options.force:
        raise Drifted(
            f"{state.path} changed since fi-patch wrote it (sha256 "
            f"{(state.sha256 or 'missing')[:12]}…, fi-patch wrote {settled.sha256[:12]}…)",
            remedy="look at the file; `fi-patch revert --force` restores the original "
            "bytes anyway, overwriting whatever is there now",
        )


def _refuse_dependents(remaining: Sequence[Patch], removing: Sequence[str], version: str) -> None:
    for patch in remaining:
        needed = [r for r in required_at(patch, version) if r in removing]
        if needed:
            raise RequirementUnmet(
                f"{patch.id} requires {', '.join(needed)}, which would be taken out",
                remedy=f"revert {patch.id} too: add --patch {patch.id}",
            )


def _revert_outcome(
    assessment: Assessment, chosen: PatchSet, reverted: Sequence[_Reverted]
) -> Outcome:
    outcomes = []
    for state in assessment.patches:
        if state.patch.id not in chosen.ids:
            continue
        done = next((r for r in reverted if state.patch.id in r.removed), None)
        failed = next(
            (r for r in reverted if r.failure is not None and state.patch.target == r.file.relpath),
            None,
        )
        if done is not None:
            outcomes.append(
                PatchOutcome(
                    state, done.file.action, done.file.message, after=done.after.get(state.patch.id)
                )
            )
        elif failed is not None and state.patch.id in failed.file.holds:
            outcomes.append(
                PatchOutcome(state, "rolled-back", after=failed.after.get(state.patch.id))
            )
        else:
            outcomes.append(
                PatchOutcome(
                    state,
                    "nothing-to-revert",
                    f"nothing to revert: {state.patch.id} is not applied here",
                )
            )
    failure = next((r.failure for r in reverted if r.failure is not None), None)
    files = tuple(r.file for r in reverted if r.file.action != "kept")
    return Outcome(assessment, tuple(outcomes), files, failure=failure)


def _nothing(assessment: Assessment, chosen: PatchSet, message: str) -> Outcome:
    states = {s.patch.id: s for s in assessment.patches}
    return Outcome(
        assessment,
        tuple(PatchOutcome(states[p.id], "nothing-to-revert", message) for p in chosen.patches),
    )


def _with_running(outcome: Outcome, interpreter: Interpreter, moment: float) -> Outcome:
    """Where a file changed, the processes of the environment that still run the old code."""
    changed = any(f.action in ("written", "reverted") for f in outcome.files)
    if not changed:
        return outcome
    return replace(outcome, running=started_before(interpreter, moment))


# --- the lock -----------------------------------------------------------------------------------


def _lock_wait(options: Options) -> float:
    """As long as another fi-patch may hold the lock: its probe, pre-flight and compile check,
    and two proof processes (before and after)."""
    return 2 * options.verify_timeout + 3 * options.timeout + 60


def _waiting(options: Options) -> Callable[[Holder | None], None]:
    def say(holder: Holder | None) -> None:
        who = holder.describe() if holder is not None else "another fi-patch"
        options.progress(f"waiting for {who}, which holds this environment's lock")

    return say


def _foreign(installed: Installed | None, interpreter: Interpreter) -> LayoutProblem | None:
    """The copy this interpreter imports lives outside its environment (a venv made with
    --system-site-packages, its base's copy): fi-patch never writes there from here."""
    if installed is None or interpreter.owns(installed.dist_info):
        return None
    base = interpreter.base_python or interpreter.base_prefix / "bin" / "python3"
    return LayoutProblem(
        f"{installed.name} {installed.version} is installed in {installed.dist_info.parent}, "
        f"which belongs to the interpreter {base}, not to {interpreter.prefix}; fi-patch "
        "writes only inside the environment it was given",
        remedy=f"patch it where it lives: fi-patch apply --python {base} (every environment "
        "that shares it gets the patch), or install FlashInfer into this environment",
    )


def _imported_instead(installed: Installed | None, interpreter: Interpreter) -> Imported | None:
    """The copy a normal start of the interpreter imports, where it is not the one fi-patch
    works on (found through PYTHONPATH or the user's site-packages, which -I leaves out)."""
    if installed is None or not installed.files:
        return None
    file = next(iter(installed.files.values()))
    package = file.relpath.split("/")[0]
    found = interpreter.imports.get(package)
    own = os.path.realpath(file.site_packages / package)
    if found is None or os.path.realpath(found.path) == own:
        return None
    return found


def _copies(
    installed: Installed | None, interpreter: Interpreter, instead: Imported | None
) -> tuple[str, ...]:
    """What fi-patch knows of copies other than the one it works on: later on the path (not
    imported), or imported instead by a normal start (`instead`)."""
    if installed is None:
        return ()
    notes = [
        f"another copy of {installed.name} ({info.name}) comes later on this interpreter's path: "
        "it is not imported, and fi-patch leaves it alone"
        for info in installed.shadowed
    ]
    if interpreter.normal_start is not None:
        notes.append(
            "a normal start of this interpreter fails in fi-patch's environment "
            f"({interpreter.normal_start}): whether a server imports the copy fi-patch works "
            "on could not be checked"
        )
    if instead is not None:
        notes.append(
            f"a normal start of {interpreter.python} imports {instead.path} (found through "
            f"{instead.via}), not the copy fi-patch works on in {interpreter.prefix}: a server "
            "started like fi-patch was does not run fi-patch's patches; remove that copy or "
            "that path, and run fi-patch with the server's environment"
        )
    return tuple(notes)


# --- reading the target -------------------------------------------------------------------------


def _require_installed(assessment: Assessment, interpreter: Interpreter) -> None:
    if assessment.installed is None:
        distribution = assessment.patches[0].patch.distribution
        raise NotInstalled(
            f"{distribution} is not installed in {interpreter.prefix}",
            remedy="check that --venv names the environment your server runs in",
        )


def _inspect(
    interpreter: Interpreter, patches: Sequence[Patch], *, reading: bool = False
) -> _Inspection:
    distribution = patches[0].distribution
    installed = find_installed(interpreter, distribution, {t for p in patches for t in p.targets})
    if installed is not None:
        patches = [located(p, installed.version) for p in patches]
    # The records live with the files: a venv's shared base copy has its own, in the base.
    owner = interpreter.prefix
    if installed is not None and not interpreter.owns(installed.dist_info):
        owner = interpreter.base_prefix
    store = Store(owner)
    unreadable = None
    try:
        records = store.load()
    except StoreUnreadable as exc:
        if not reading:
            raise
        records, unreadable = {}, exc.message
    sources: dict[str, bytes | None] = {}
    if installed is not None:
        for patch in patches:
            if fit(patch, installed.version).verdict is Verdict.NOT_APPLICABLE:
                continue
            if patch.target not in sources:
                sources[patch.target] = _read(installed.files[patch.target].path)
    assessment = assess(
        patches, installed, sources, records, busy=store.holder(), unreadable=unreadable
    )
    return _Inspection(assessment, sources, store)


def _read(path: Path) -> bytes | None:
    if path.is_symlink():
        raise LayoutProblem(
            f"{path} is a symlink to {os.readlink(path)}; fi-patch does not write through links",
            remedy="reinstall FlashInfer so that the file is a regular file",
        )
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LayoutProblem(f"cannot read {path}: {exc.strerror}") from exc


def _record_path(interpreter: Interpreter, record: FileRecord) -> Path:
    """The file a manifest record names, refusing any path that leaves the environment."""
    for part in (record.site_packages, record.relpath):
        pure = PurePosixPath(part)
        if pure.is_absolute() or ".." in pure.parts:
            raise StoreProblem(f"the manifest names an unsafe path {part!r}; refusing to use it")
    path = interpreter.prefix / record.site_packages / record.relpath
    if not any(path.parent.is_relative_to(site) for site in interpreter.site_packages):
        raise StoreProblem(f"the manifest names {path}, outside this environment's site-packages")
    return path
