"""The `--json` documents (schema 2, docs/json.md): plain dicts built from result values.

Pure: nothing here prints, and nothing imports typer or rich.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fi_patcher import __version__
from fi_patcher.api import Outcome, PatchOutcome, Target
from fi_patcher.errors import ExitCode, FiPatchError, exit_code_for
from fi_patcher.model import Assessment, InsertFirst, Installed, Patch, PatchState
from fi_patcher.proofs import Preflight, ProofReport
from fi_patcher.registry import span

SCHEMA_VERSION = 2


def envelope(command: str, results: list[dict[str, Any]], code: int) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "command": command,
        "fi_patch_version": __version__,
        "results": results,
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


def target_error(target: str, error: FiPatchError) -> dict[str, Any]:
    """One target of several that failed: the others' results stand beside it."""
    return {"target": target, "error": error_json(error), "exit_code": int(error.exit_code)}


def check_code(state: PatchState, report: ProofReport | None) -> ExitCode:
    """`check`'s code for one patch: 0 only where nothing needs doing."""
    if report is not None and report.mode == "after" and not report.passed:
        return ExitCode.VERIFY_FAILED
    return exit_code_for(state.state, state.interrupted is not None)


def check_result(
    target: Target, assessment: Assessment, reports: Mapping[str, ProofReport]
) -> dict[str, Any]:
    patches = []
    for state in assessment.patches:
        report = reports.get(state.patch.id)
        document = {
            **_patch_state(state, assessment.installed),
            "exit_code": int(check_code(state, report)),
        }
        if report is not None:
            document["verification"] = proof_json(report)
        patches.append(document)
    code = max((p["exit_code"] for p in patches), default=ExitCode.OK)
    instead = assessment.imported_instead
    if instead is not None:
        # The copy a server would import is one fi-patch does not manage: never all clear.
        code = max(code, ExitCode.LAYOUT)
    return {
        **_target(target, assessment),
        "exit_code": int(code),
        "patches": patches,
        "warnings": list(assessment.warnings),
    } | ({"imported_instead": {"path": str(instead.path), "via": instead.via}} if instead else {})


def outcome_result(target: Target, outcome: Outcome) -> dict[str, Any]:
    """An apply or revert on one target."""
    document = {
        **_target(target, outcome.assessment),
        "exit_code": int(outcome.failure.exit_code if outcome.failure else ExitCode.OK),
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
    }


def _patch_outcome(outcome: PatchOutcome, installed: Installed | None) -> dict[str, Any]:
    document = {**_patch_state(outcome.state, installed), "action": outcome.action}
    if outcome.message:
        document["message"] = outcome.message
    proofs = {
        mode: proof_json(report)
        for mode, report in (("before", outcome.before), ("after", outcome.after))
        if report is not None
    }
    if proofs:
        document["verification"] = proofs
    return document
