"""The commands that write: apply and revert. Each reads the target, decides its whole plan with
every refusal before the first write (`plan`), builds the writes (`changes`), and hands them,
under the environment's lock, to the one write protocol (`protocol`). Imported only by those
commands: `check` never pays for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from fi_patcher.changes import apply_change, restore_change, revert_change
from fi_patcher.decision import Decision, decide
from fi_patcher.interrupts import shielded
from fi_patcher.model import Holder, Interpreter, PatchSet
from fi_patcher.options import Options, Target, unproven_force
from fi_patcher.outcomes import applied, dry_run, reverted
from fi_patcher.plan import ApplyPlan, FilePlan, RevertFile, plan_revert
from fi_patcher.processes import started_before
from fi_patcher.proofs import Preflight, ProofRequest
from fi_patcher.protocol import Protocol, Write
from fi_patcher.registry import load_patches
from fi_patcher.results import Outcome
from fi_patcher.store import Journal, clear_temporaries
from fi_patcher.target import (
    Inspection,
    copies,
    foreign,
    from_backup,
    inspect,
    not_installed,
    original_of,
    record_path,
    usable,
)


def apply(target: Target, chosen: PatchSet, options: Options) -> Outcome:
    refused = unproven_force(options)
    if refused is not None:
        raise refused
    interpreter = target.interpreter
    # Records fi-patch may not read (another user's) stop only a write: the decision says so.
    inspection = inspect(interpreter, chosen.patches, reading=True)
    usable(inspection, interpreter)
    decision = _decided(interpreter, inspection, chosen, options)
    plan = decision.plan
    if options.dry_run or plan.idle:
        writing = [f for f in plan.files if f.writes]
        writes = [_apply_write(inspection, f, plan, decision.facts, options) for f in writing]
        files = dry_run(plan, writes) if options.dry_run else ()
        warnings = _warnings(decision, interpreter, options)
        return applied(target, inspection, plan, files, decision.facts, warnings)
    with inspection.store.lock("apply", options.lock_wait, _waiting(options)):
        journal = Journal(inspection.store)
        _tidy(journal, [f.state.path for f in plan.files])
        # Look again under the lock: another fi-patch may have written meanwhile, and the
        # pre-flight must judge what is written, not what was planned before.
        inspection = inspect(interpreter, chosen.patches)
        usable(inspection, interpreter)
        decision = _decided(interpreter, inspection, chosen, options, decision.facts)
        plan = decision.plan
        moment = time.time()
        writes = [
            _apply_write(inspection, file, plan, decision.facts, options) for file in plan.files
        ]
        before = [ProofRequest(p, "before", _path_of(plan, p.id)) for p in plan.adding]
        done = Protocol(interpreter, journal, options, "apply").run(writes, before)
    with shielded():  # what was done is told, whatever signal comes now
        warnings = _warnings(decision, interpreter, options)
        outcome = applied(
            target,
            inspection,
            plan,
            facts=decision.facts,
            warnings=warnings,
            done=done,
            writes=writes,
        )
        return _with_running(outcome, interpreter, moment)


def _decided(
    interpreter: Interpreter,
    inspection: Inspection,
    chosen: PatchSet,
    options: Options,
    facts: Preflight | None = None,
) -> Decision:
    """What apply does: the decision check reports too; its gravest refusal stops apply before
    any write."""
    decision = decide(interpreter, inspection, chosen, options, facts)
    refused = decision.plan.refusal
    if refused is not None:
        raise refused
    return decision


def _warnings(decision: Decision, interpreter: Interpreter, options: Options) -> tuple[str, ...]:
    installed = decision.inspection.assessment.installed
    left = tuple(f"{i} left out: {why}" for i, why in decision.judgement.left_out.items())
    left += tuple(s.unknown.message for s in decision.plan.steps if s.unknown is not None)
    warnings = left + decision.judgement.warnings + copies(installed, interpreter, None)
    if not options.verify:
        warnings += ("verification skipped (--no-verify): nothing proves the patches work here",)
    return warnings


def _apply_write(
    inspection: Inspection,
    file: FilePlan,
    plan: ApplyPlan,
    facts: Preflight | None,
    options: Options,
) -> Write:
    state = file.state
    current = inspection.sources[state.relpath]
    assert current is not None
    original = original_of(inspection, state)
    change = apply_change(
        file,
        current,
        original,
        inspection.installed,
        inspection.store.root.parent,
        forced=plan.forced,
        facts=facts,
        verify=options.verify,
    )
    restore = None
    if not file.writes and state.record is not None:
        restore = restore_change(state, change, original)
    return Write(change, file.patches, restore)


def revert(target: Target, chosen: PatchSet, options: Options) -> Outcome:
    """`api.revert`: one plan for every recorded file, then the protocol."""
    interpreter = target.interpreter
    everything = load_patches()
    # Before the lock, only where the records are: under it, whether they can be read.
    inspection = inspect(interpreter, everything, reading=True)
    store = inspection.store
    refused = foreign(inspection.assessment.installed, interpreter, "revert")
    if refused is not None and store.root.exists():
        raise refused
    if not store.root.exists():
        return reverted(target, inspection, chosen, _nothing(inspection, interpreter))
    with store.lock("revert", options.lock_wait, _waiting(options)):
        journal = Journal(store)
        paths = {r.relpath: record_path(interpreter, r) for r in journal.records.values()}
        _tidy(journal, paths.values())
        inspection = inspect(interpreter, everything)
        plan = plan_revert(
            inspection.assessment,
            journal.records,
            paths,
            chosen,
            force=options.force,
            backups=store.backups,
        )
        writes = [_revert_write(inspection, file, options) for file in plan.files if file.writes]
        moment = time.time()
        clear = [f.record.relpath for f in plan.files if f.clears]
        taking = sorted({i for f in plan.files if f.writes for i in f.removing})
        failed = f"after taking out {', '.join(taking)}, " if chosen.explicit else ""
        protocol = Protocol(interpreter, journal, options, "revert")
        done = protocol.run(writes, (), failed, clear=clear)
    with shielded():  # what was done is told, whatever signal comes now
        outcome = reverted(target, inspection, chosen, plan=plan, done=done)
        return _with_running(outcome, interpreter, moment)


def _nothing(inspection: Inspection, interpreter: Interpreter) -> str:
    """Why there is nothing to revert: fi-patch never wrote here (and, where it is so, there is
    no FlashInfer to write to either)."""
    if inspection.assessment.installed is None:
        missing = not_installed(inspection.assessment, interpreter)
        return f"nothing to revert: fi-patch never patched here, and {missing.message}"
    return "nothing to revert: fi-patch never patched here"


def _revert_write(inspection: Inspection, file: RevertFile, options: Options) -> Write:
    assert file.settled is not None
    if file.action == "restore-missing":
        options.progress(f"putting the original of {file.path} back from fi-patch's backup")
    else:
        options.progress(f"taking {', '.join(file.removing)} out of {file.path}")
    original = from_backup(inspection.store, file.settled, inspection.installed)
    current = inspection.sources.get(file.record.relpath)
    change = revert_change(file, current, original)
    return Write(change, file.remaining)


def _tidy(journal: Journal, paths: Iterable[Path]) -> None:
    """Under the lock, clear away what a killed fi-patch left: temporary files beside the
    targets, and backups no record names."""
    for path in paths:
        clear_temporaries(path)
    journal.store.drop_unreferenced(journal.records)


def _path_of(plan: ApplyPlan, patch: str) -> Path:
    return next(f.state.path for f in plan.files if patch in {p.id for p in f.patches})


def _with_running(outcome: Outcome, interpreter: Interpreter, moment: float) -> Outcome:
    """Where a file changed, the processes of the environment that still run the old code."""
    if not outcome.changed:
        return outcome
    return replace(outcome, running=started_before(interpreter, moment))


def _waiting(options: Options) -> Callable[[Holder | None], None]:
    def say(holder: Holder | None) -> None:
        who = holder.describe() if holder is not None else "another fi-patch"
        options.progress(f"waiting for {who}, which holds this environment's lock", long=True)

    return say
