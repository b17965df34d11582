"""The command line: parse, call `api`, render, and map errors to exit codes. Nothing else.

The only module that imports typer or rich.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import Progress as RichProgress
from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from fi_patcher import __version__, api
from fi_patcher.environment import PROBE_TIMEOUT
from fi_patcher.errors import ExitCode, FiPatchError, exit_code_for
from fi_patcher.model import Assessment, Patch
from fi_patcher.registry import load_patches
from fi_patcher.verify import VERIFY_TIMEOUT, TraceReport

JSON_SCHEMA_VERSION = 1

app = typer.Typer(
    name="fi-patch",
    help=(
        "Patch FlashInfer's get_cuda_version in a chosen environment so that "
        "torch.compile(fullgraph=True) can trace it: torch.version.cuda first, nvcc only as "
        "the fallback. Every command works on the environment you name, never on the "
        "interpreter running fi-patch."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

Venv = Annotated[
    list[Path] | None,
    typer.Option(
        "--venv",
        help="A target environment: a venv or conda prefix (holding bin/python). Repeat it for "
        "several; the exit code is the highest of theirs. Default: $VIRTUAL_ENV, then "
        "$CONDA_PREFIX.",
        show_default=False,
    ),
]
Python = Annotated[
    list[Path] | None,
    typer.Option(
        "--python", help="A target interpreter, instead of or beside --venv.", show_default=False
    ),
]
Timeout = Annotated[
    float,
    typer.Option("--timeout", help="Seconds to wait for the target interpreter.", min=1.0),
]
VerifyTimeout = Annotated[
    float,
    typer.Option(
        "--verify-timeout",
        help="Seconds for each verification process (it imports torch and FlashInfer).",
        min=1.0,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document (docs/json.md).")]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fi-patch {__version__}")
        raise typer.Exit()


@dataclass
class _Verbosity:
    quiet: bool = False
    verbose: bool = False


_verbosity = _Verbosity()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("-q", "--quiet", help="Print only the outcome of each target, and errors."),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "-v", "--verbose", help="Print each step on stderr as it starts, with its time."
        ),
    ] = False,
) -> None:
    """fi-patch: apply, check and revert FlashInfer's torch-first get_cuda_version."""
    if quiet and verbose:
        raise typer.BadParameter("-q and -v contradict each other")
    _verbosity.quiet, _verbosity.verbose = quiet, verbose


@app.command("apply")
def apply_command(
    venv: Venv = None,
    python: Python = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Run the pre-flight, show the diff, change nothing."),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Patch a FlashInfer version outside every known range, but only where its "
            "function matches a known shape exactly. Drifted files are never forced.",
        ),
    ] = False,
    no_verify: Annotated[
        bool,
        typer.Option(
            "--no-verify",
            help="Skip the Dynamo trace in the target before and after writing (not the "
            "pre-flight). Nothing then proves the patch works.",
        ),
    ] = False,
    allow_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-mismatch",
            help="Patch although torch.version.cuda and the nvcc FlashInfer would run differ "
            "in major.minor; recorded in the manifest.",
        ),
    ] = False,
    timeout: Timeout = PROBE_TIMEOUT,
    verify_timeout: VerifyTimeout = VERIFY_TIMEOUT,
    as_json: Json = False,
) -> None:
    """Patch get_cuda_version in the target, keeping a byte-exact backup, and prove it there.

    Before writing: a pre-flight in the target compares torch.version.cuda with the nvcc that
    FlashInfer would run, and traces the unpatched function. After writing: a fresh process of
    the target imports the patched module and traces it with torch.compile(fullgraph=True); if
    that fails, the original bytes are restored (exit 13). Idempotent.
    """

    def work(target: api.Target, progress: Progress) -> _Outcome:
        options = api.ApplyOptions(
            dry_run=dry_run,
            force=force,
            verify=not no_verify,
            allow_mismatch=allow_mismatch,
            timeout=timeout,
            verify_timeout=verify_timeout,
            progress=progress,
        )
        results = [api.apply(target, patch, options) for patch in load_patches()]

        def render(out: Console) -> None:
            for result in results:
                _render_apply(out, target, result)

        return _Outcome(
            [_apply_json(target, r) for r in results],
            render,
            ExitCode.OK,
            ", ".join(r.action for r in results),
        )

    _run_targets("apply", as_json, venv, python, timeout, work)


@app.command("revert")
def revert_command(
    venv: Venv = None,
    python: Python = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Restore the backup even if the file changed since fi-patch wrote it."
        ),
    ] = False,
    timeout: Timeout = PROBE_TIMEOUT,
    as_json: Json = False,
) -> None:
    """Restore the original bytes from fi-patch's backup and clear its record."""

    def work(target: api.Target, progress: Progress) -> _Outcome:
        results = [(patch, api.revert(target, patch, force=force)) for patch in load_patches()]
        documents = [
            {
                "environment": str(target.interpreter.prefix),
                "patch": patch.id,
                "action": result.action,
                "message": result.message,
                "file": str(result.file) if result.file else None,
            }
            for patch, result in results
        ]

        def render(out: Console) -> None:
            for _, result in results:
                style = "green" if result.action == "reverted" else "cyan"
                out.print(Text(result.message, style=style))

        return _Outcome(documents, render, ExitCode.OK, ", ".join(r.action for _, r in results))

    _run_targets("revert", as_json, venv, python, timeout, work)


@app.command("check")
def check_command(
    venv: Venv = None,
    python: Python = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Also run the Dynamo trace in a fresh process of the target (seconds: it "
            "imports torch and FlashInfer). A patched target that fails it exits 13.",
        ),
    ] = False,
    timeout: Timeout = PROBE_TIMEOUT,
    verify_timeout: VerifyTimeout = VERIFY_TIMEOUT,
    as_json: Json = False,
) -> None:
    """Say whether the target is pristine, patched, wiped by a reinstall, or drifted.

    Exit 0 only when every target is patched or not-applicable; 3 when apply is needed; see
    docs/exit-codes.md for the rest.
    """

    def work(target: api.Target, progress: Progress) -> _Outcome:
        assessments = [api.check(target, patch) for patch in load_patches()]
        reports: list[TraceReport | None] = [None] * len(assessments)
        if verify:
            options = api.ApplyOptions(
                timeout=timeout, verify_timeout=verify_timeout, progress=progress
            )
            reports = [api.verify(target, a, options) for a in assessments]
        codes = [_check_code(a, r) for a, r in zip(assessments, reports, strict=True)]
        documents = [
            {**_target_json(target, a), "exit_code": int(code)}
            | ({"verification": _trace_json(r)} if r else {})
            for a, r, code in zip(assessments, reports, codes, strict=True)
        ]
        return _Outcome(
            documents,
            lambda out: _render_check(out, target, assessments, reports),
            max(codes, default=ExitCode.OK),
            ", ".join(a.state.value for a in assessments),
        )

    _run_targets("check", as_json, venv, python, timeout, work)


def _check_code(assessment: Assessment, report: TraceReport | None) -> ExitCode:
    if report is not None and report.mode == "after" and not report.passed:
        return ExitCode.VERIFY_FAILED
    return exit_code_for(assessment.state, assessment.interrupted is not None)


@app.command("list")
def list_command(as_json: Json = False) -> None:
    """Show the patches fi-patch knows, with their version ranges."""

    def run(out: Console) -> int:
        patches = load_patches()
        if as_json:
            out.print_json(data=_envelope("list", [_patch_json(p) for p in patches], ExitCode.OK))
            return ExitCode.OK
        for patch in patches:
            table = Table(title=f"{patch.id}: {patch.summary}", title_justify="left")
            table.add_column("shape")
            table.add_column("versions")
            table.add_column("what the released function does")
            for shape in patch.shapes:
                table.add_row(shape.name, str(shape.versions), shape.note)
            table.add_row("-", str(patch.not_applicable), patch.not_applicable_reason)
            out.print(table)
            out.print(f"target: {patch.target} :: {patch.function}()")
        return ExitCode.OK

    _run(as_json, run)


def main() -> None:
    app()


# --- targets ------------------------------------------------------------------------------------

Progress = Callable[[str], None]
Spec = tuple[Path | None, Path | None]
"""One target as given: (--venv, None), (None, --python), or (None, None) for the default."""


@dataclass(frozen=True)
class _Outcome:
    """What one target's command produced: its JSON results, how to show it, its exit code."""

    documents: list[dict[str, Any]]
    render: Callable[[Console], object]
    code: int
    summary: str


def _run_targets(
    command: str,
    as_json: bool,
    venvs: list[Path] | None,
    pythons: list[Path] | None,
    timeout: float,
    work: Callable[[api.Target, Progress], _Outcome],
) -> NoReturn:
    """Run `work` on every target given (in parallel when there are several), then report."""
    specs: list[Spec] = [(v, None) for v in venvs or []] + [(None, p) for p in pythons or []]
    specs = specs or [(None, None)]

    def one(spec: Spec, progress: Progress) -> _Outcome:
        return work(api.open_target(*spec, os.environ, timeout), progress)

    if len(specs) == 1:

        def single(out: Console) -> int:
            with _progress(as_json) as progress:
                outcome = one(specs[0], progress)
            if as_json:
                out.print_json(data=_envelope(command, outcome.documents, outcome.code))
            else:
                outcome.render(out)
            return outcome.code

        _run(as_json, single)

    def several(out: Console) -> int:
        with _progress(as_json) as progress, ThreadPoolExecutor(_workers(len(specs))) as pool:
            futures = [pool.submit(_guarded, one, spec, progress) for spec in specs]
            outcomes = [future.result() for future in futures]
        code = max(outcome.code for outcome in outcomes)
        if as_json:
            documents = [d for outcome in outcomes for d in outcome.documents]
            out.print_json(data=_envelope(command, documents, code))
            return code
        for spec, outcome in zip(specs, outcomes, strict=True):
            out.print(Text(f"== {_spec_text(spec)}", style="bold"))
            outcome.render(out)
        _render_summary(out, specs, outcomes)
        return code

    _run(as_json, several)


def _guarded(
    one: Callable[[Spec, Progress], _Outcome],
    spec: Spec,
    progress: Progress,
) -> _Outcome:
    """One target's outcome; its error becomes its outcome, so the other targets go on."""
    try:
        return one(spec, progress)
    except FiPatchError as error:
        failure = error
    error_document = _error_json(failure)
    return _Outcome(
        [
            {
                "target": _spec_text(spec),
                "error": error_document["error"],
                "exit_code": error_document["exit_code"],
            }
        ],
        lambda out: _render_error(out, failure),
        int(failure.exit_code),
        f"error: {failure.message}",
    )


def _workers(count: int) -> int:
    # Each target's work is mostly its own interpreter's subprocesses: one per core, at most.
    return max(1, min(count, os.cpu_count() or 1))


def _spec_text(spec: Spec) -> str:
    venv, python = spec
    return f"--venv {venv}" if venv is not None else f"--python {python}"


def _render_summary(out: Console, specs: list[Spec], outcomes: list[_Outcome]) -> None:
    table = Table(title="summary", title_justify="left", box=None, pad_edge=False)
    for column in ("target", "result", "exit"):
        table.add_column(column, overflow="fold")
    for spec, outcome in zip(specs, outcomes, strict=True):
        style = "green" if outcome.code == 0 else "bold red"
        table.add_row(_spec_text(spec), outcome.summary, Text(str(outcome.code), style=style))
    out.print(table)


# --- rendering ----------------------------------------------------------------------------------


def _run(as_json: bool, body: Callable[[Console], int]) -> NoReturn:
    """Run a command body; the one place where fi-patch's errors become exit codes."""
    out = Console(highlight=False, soft_wrap=True)
    try:
        code = body(out)
    except FiPatchError as error:
        if as_json:
            out.print_json(data=_error_json(error))
        else:
            _render_error(Console(stderr=True, highlight=False, soft_wrap=True), error)
        raise typer.Exit(int(error.exit_code)) from None
    raise typer.Exit(code)


def _envelope(command: str, documents: list[dict[str, Any]], code: int) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA_VERSION,
        "command": command,
        "fi_patch_version": __version__,
        "results": documents,
        "exit_code": int(code),
    }


def _error_json(error: FiPatchError) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA_VERSION,
        "fi_patch_version": __version__,
        "error": {
            "kind": type(error).__name__,
            "message": error.message,
            "remedy": error.remedy,
            "details": list(error.details),
        },
        "exit_code": int(error.exit_code),
    }


def _render_error(err: Console, error: FiPatchError) -> None:
    err.print(Text("error: ", style="bold red") + Text(error.message))
    for line in error.details:
        err.print(Text("  " + line, style="dim"))
    if error.remedy:
        err.print(Text("fix: ", style="bold yellow") + Text(error.remedy))


def _target_json(target: api.Target, a: Assessment) -> dict[str, Any]:
    installed = a.installed
    return {
        "environment": str(target.interpreter.prefix),
        "python": str(target.interpreter.python),
        "patch": a.patch.id,
        "distribution": a.patch.distribution,
        "version": installed.version if installed else None,
        "shape": a.shape.name if a.shape else None,
        "file": str(installed.file.path) if installed else None,
        "state": a.state.value,
        "reason": a.reason,
        "sha256": a.sha256,
    }


def _patch_json(patch: Patch) -> dict[str, Any]:
    return {
        "id": patch.id,
        "summary": patch.summary,
        "distribution": patch.distribution,
        "target": patch.target,
        "function": patch.function,
        "shapes": [
            {"name": s.name, "versions": str(s.versions), "note": s.note} for s in patch.shapes
        ],
        "not_applicable": {
            "versions": str(patch.not_applicable),
            "reason": patch.not_applicable_reason,
        },
    }


def _describe_target(out: Console, target: api.Target, a: Assessment) -> None:
    interpreter = target.interpreter
    out.print(
        f"environment {interpreter.prefix} (python {interpreter.python_version}, "
        f"chosen by {target.chosen_by})"
    )
    if a.installed is not None:
        shape = f", shape {a.shape.name}" if a.shape else ""
        out.print(f"{a.installed.name} {a.installed.version}{shape}: {a.installed.file.path}")


def _render_apply(out: Console, target: api.Target, result: api.ApplyResult) -> None:
    a = result.assessment
    if not _verbosity.quiet:
        _describe_target(out, target, a)
        if result.preflight is not None:
            out.print(f"pre-flight: {result.preflight.describe()}")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    for warning in result.warnings:
        err.print(Text("warning: " + warning, style="bold yellow"))
    if not _verbosity.quiet:
        if result.diff:
            _render_diff(out, result.diff)
        if result.before is not None:
            out.print(f"before: {result.before.summary}")
        if result.after is not None:
            out.print(Text(f"after: {result.after.summary}", style="green"))
    messages = {
        "applied": ("green", f"applied {a.patch.id}; original bytes kept in {result.backup}"),
        "would-apply": ("yellow", "dry run: this diff would be applied; nothing was changed"),
        "already-applied": ("green", f"already applied: {a.reason}"),
        "not-applicable": ("cyan", a.reason),
        "finished": (
            "green",
            f"finished the interrupted {a.interrupted}: fi-patch's bytes are in place and "
            "recorded as applied",
        ),
    }
    style, message = messages[result.action]
    out.print(Text(message, style=style))


@contextlib.contextmanager
def _progress(as_json: bool) -> Iterator[Callable[[str], None]]:
    """Where a person is watching, a spinner with the elapsed seconds while the target works
    (importing torch takes seconds); with -v, each step as a line on stderr instead."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    started = time.monotonic()
    if _verbosity.verbose:
        yield lambda message: err.print(f"[{time.monotonic() - started:5.1f}s] {message}")
        return
    if as_json or _verbosity.quiet or not err.is_terminal:
        yield lambda message: None
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with RichProgress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("starting")
        yield lambda message: bar.update(task, description=message)


def _apply_json(target: api.Target, result: api.ApplyResult) -> dict[str, Any]:
    document: dict[str, Any] = {**_target_json(target, result.assessment)}
    document["action"] = result.action
    if result.diff:
        document["diff"] = result.diff
    if result.backup:
        document["backup"] = str(result.backup)
    if result.preflight is not None:
        document["preflight"] = {
            k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(result.preflight).items()
        } | {"mismatch": result.preflight.mismatch}
    document["warnings"] = list(result.warnings)
    verification = {
        mode: _trace_json(report)
        for mode, report in (("before", result.before), ("after", result.after))
        if report is not None
    }
    if verification:
        document["verification"] = verification
    return document


def _trace_json(report: TraceReport) -> dict[str, Any]:
    return {
        "mode": report.mode,
        "passed": report.passed,
        "summary": report.summary,
        "details": list(report.details),
    }


def _render_diff(out: Console, diff: str) -> None:
    for line in diff.splitlines():
        style = (
            "bold"
            if line.startswith(("+++", "---"))
            else "green"
            if line.startswith("+")
            else "red"
            if line.startswith("-")
            else "cyan"
            if line.startswith("@@")
            else ""
        )
        out.print(Text(line, style=style))


_STATE_STYLE = {
    "patched": "green",
    "not-applicable": "cyan",
    "pristine": "yellow",
    "wiped": "yellow",
    "not-installed": "red",
    "drifted": "bold red",
}


def _render_check(
    out: Console,
    target: api.Target,
    assessments: list[Assessment],
    reports: list[TraceReport | None],
) -> None:
    interpreter = target.interpreter
    if _verbosity.quiet:
        for a, report in zip(assessments, reports, strict=True):
            verdict = f"; verification {'passes' if report.passed else 'fails'}" if report else ""
            out.print(f"{interpreter.prefix}: {a.state.value}{verdict}")
        return
    out.print(
        f"environment {interpreter.prefix} (python {interpreter.python_version}, "
        f"chosen by {target.chosen_by})"
    )
    table = Table(box=None, pad_edge=False)
    for column in ("patch", "flashinfer", "shape", "state"):
        table.add_column(column)
    for a in assessments:
        table.add_row(
            a.patch.id,
            a.installed.version if a.installed else "-",
            a.shape.name if a.shape else "-",
            Text(a.state.value, style=_STATE_STYLE[a.state.value]),
        )
    out.print(table)
    for a, report in zip(assessments, reports, strict=True):
        out.print(Text(f"{a.patch.id}: {a.reason}", style="dim"))
        if report is not None:
            style = "green" if report.passed else "bold red"
            out.print(
                Text(f"verification ({report.mode} the patch): {report.summary}", style=style)
            )
            for line in report.details:
                out.print(Text("  " + line, style="dim"))
