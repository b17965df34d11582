"""The `--json` documents (schema 6, docs/json.md): plain dicts built from result values.

Pure: nothing here prints, decides or imports typer or rich; every exit code and status comes
from the result itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fi_patcher import __version__
from fi_patcher.errors import FiPatchError
from fi_patcher.model import Assessment, Boundary, InsertFirst, Installed, Patch, PatchState, State
from fi_patcher.options import Target
from fi_patcher.proofs import Preflight, ProofReport
from fi_patcher.registry import span
from fi_patcher.results import Checked, Failed, Outcome, PatchOutcome, Result

SCHEMA_VERSION = 6


def envelope(
    command: str, results: list[dict[str, Any]], code: int, notes: Sequence[str] = ()
) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "command": command,
        "fi_patch_version": __version__,
        "results": results,
        "notes": list(notes),
        "exit_code": int(code),
    }


def error_document(error: FiPatchError) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "fi_patch_version": __version__,
        "error": error_json(error),
        "exit_code": int(error.exit_code),
    }


def error_json(error: FiPatchError) -> dict[str, Any]:
    return {
        "kind": type(error).__name__,
        "message": error.message,
        "remedy": error.remedy,
        "details": list(error.details),
    }


def result(result: Result) -> dict[str, Any]:
    """One target's object in `results`."""
    if isinstance(result, Failed):
        return failed(result)
    if isinstance(result, Checked):
        return check_result(result)
    return outcome_result(result)


def failed(result: Failed) -> dict[str, Any]:
    """A target the command could not work on: alone or among several, the same object."""
    return {
        "target": result.spec,
        "status": result.status,
        "exit_code": int(result.exit_code),
        "error": error_json(result.error),
    }


def check_result(checked: Checked) -> dict[str, Any]:
    assessment = checked.assessment
    patches = []
    for state in assessment.patches:
        report = checked.reports.get(state.patch.id)
        verdict = checked.verdicts.get(state.patch.id)
        document = {
            **_patch_state(state, assessment.installed),
            "apply": verdict.would if verdict is not None else "nothing",
            "refusal": error_json(verdict.refusal) if verdict and verdict.refusal else None,
            "evidence": error_json(verdict.unknown) if verdict and verdict.unknown else None,
            "exit_code": int(checked.code_of(state)),
        }
        if report is not None:
            document["verification"] = proof_json(report)
        patches.append(document)
    instead = assessment.imported_instead
    refusal = checked.refusal
    document = {
        **_target(checked.target, assessment),
        "status": checked.status,
        "exit_code": int(checked.exit_code),
        "refusal": error_json(refusal) if refusal is not None else None,
        "patches": patches,
        "warnings": list(assessment.warnings),
    }
    if checked.preflight is not None:
        document["preflight"] = preflight_json(checked.preflight)
    if instead is not None:
        document["imported_instead"] = {"path": str(instead.path), "via": instead.via}
    return document


def outcome_result(outcome: Outcome) -> dict[str, Any]:
    """An apply or revert on one target."""
    document = {
        **_target(outcome.target, outcome.assessment),
        "status": outcome.status,
        "exit_code": int(outcome.exit_code),
        "patches": [_patch_outcome(p, outcome.assessment.installed) for p in outcome.patches],
        "files": [
            {
                "file": str(f.path),
                "relpath": f.relpath,
                "action": f.action,
                "patches": list(f.holds),
                "message": f.message,
            }
            | ({"diff": f.diff} if f.diff else {})
            | ({"backup": str(f.backup)} if f.backup else {})
            for f in outcome.files
        ],
        "warnings": list(outcome.warnings),
        "running": [
            {"pid": r.pid, "command": r.command, "started": r.started} for r in outcome.running
        ],
    }
    if outcome.preflight is not None:
        document["preflight"] = preflight_json(outcome.preflight)
    if outcome.failure is not None:
        document["error"] = error_json(outcome.failure)
    return document


def patch_json(patch: Patch) -> dict[str, Any]:
    """One patch of the catalog, as `list --json` shows it."""
    operation: dict[str, Any] = {"kind": patch.operation.kind}
    if isinstance(patch.operation, InsertFirst):
        operation["requires_names"] = list(patch.operation.requires_names)
    if isinstance(patch.operation, Boundary):
        boundary = patch.operation
        operation |= {
            "op": boundary.op,
            "fake": boundary.fake,
            "out": boundary.out,
            "returns": boundary.returns,
            "check": boundary.check,
            "uncapturable": dict(boundary.uncapturable),
            "writes": list(boundary.writes),
            "listed": boundary.listed,
        }
    return {
        "id": patch.id,
        "summary": patch.summary,
        "distribution": patch.distribution,
        "target": patch.target,
        "function": patch.function,
        "operation": operation,
        "shapes": [
            {
                "name": s.name,
                "versions": str(s.versions),
                "range": span(s.versions),
                "note": s.note,
                "target": s.target or patch.target,
                # An op boundary's own returns and check, where the shape names them.
                **({} if s.returns is None else {"returns": s.returns}),
                **({} if s.check is None else {"check": s.check}),
            }
            for s in patch.shapes
        ],
        "not_applicable": [
            {"versions": str(e.versions), "range": span(e.versions), "reason": e.reason}
            for e in patch.not_applicable
        ],
        "requires": {
            "torch": str(patch.requires.torch) if patch.requires.torch else None,
            "patches": list(patch.requires.patches),
        },
        "preflight": list(patch.preflight),
        "proof": {"script": patch.proof.script, "cpu": patch.proof.cpu, "gpu": patch.proof.gpu},
    }


def proof_json(report: ProofReport) -> dict[str, Any]:
    return {
        "mode": report.mode,
        "passed": report.passed,
        "summary": report.summary,
        "details": list(report.details),
    }


def preflight_json(facts: Preflight) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(facts).items()} | {
        "mismatch": facts.mismatch
    }


def _target(target: Target, assessment: Assessment) -> dict[str, Any]:
    installed = assessment.installed
    distribution = assessment.patches[0].patch.distribution if assessment.patches else None
    busy = assessment.busy
    return {
        "environment": str(target.interpreter.prefix),
        "python": str(target.interpreter.python),
        "distribution": distribution,
        "version": installed.version if installed else None,
    } | ({"busy": {"pid": busy.pid, "command": busy.command, "since": busy.since}} if busy else {})


def _patch_state(state: PatchState, installed: Installed | None) -> dict[str, Any]:
    file = state.file
    known = installed.files.get(state.patch.target) if installed else None
    path = file.path if file else known.path if known else None
    return {
        "patch": state.patch.id,
        "file": str(path) if path else None,
        "function": state.patch.function,
        "shape": state.shape.name if state.shape else None,
        "state": state.state.value,
        "reason": state.reason,
        "sha256": file.sha256 if file else None,
        "interrupted": state.interrupted,
        "note": state.note,
        "found": _found(state),
        "forced": state.forced,
    }


def _found(state: PatchState) -> dict[str, Any] | None:
    """A text fi-patch does not know: its hashes, and the shape of the same structure."""
    how = state.fit
    if state.state is not State.UNKNOWN or how is None or how.hashes is None:
        return None
    return {
        "text_sha256": how.hashes[0],
        "structure_sha256": how.hashes[1],
        "structure_matches": how.structural.name if how.structural else None,
    }


def _patch_outcome(outcome: PatchOutcome, installed: Installed | None) -> dict[str, Any]:
    document = {**_patch_state(outcome.state, installed), "action": outcome.action}
    if outcome.message:
        document["message"] = outcome.message
    if outcome.unknown is not None:
        document["evidence"] = error_json(outcome.unknown)
    proofs = {
        mode: proof_json(report)
        for mode, report in (("before", outcome.before), ("after", outcome.after))
        if report is not None
    }
    if proofs:
        document["verification"] = proofs
    return document
