"""The command line: parse, call `api`, hand the results to `render` or `documents`, and map
errors to exit codes in one place (`_run`). The only module that imports typer.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from fi_patcher import __version__, documents, render
from fi_patcher.environment import PROBE_TIMEOUT
from fi_patcher.errors import ExitCode, FiPatchError, Internal, UsageError, worst
from fi_patcher.model import PatchSet
from fi_patcher.options import unproven_force
from fi_patcher.proofs import VERIFY_TIMEOUT
from fi_patcher.registry import choose, load_patches
from fi_patcher.results import Failed
from fi_patcher.shares import cores, proof_processes

if TYPE_CHECKING:
    from concurrent.futures import Future

    from rich.console import Console

    from fi_patcher.model import Command
    from fi_patcher.options import Options, Progress, Target
    from fi_patcher.results import Result
    from fi_patcher.toolkit import ServerToolkit


@contextlib.contextmanager
def _with_usage(ctx: typer.Context) -> Iterator[None]:
    """A usage error names its command, so that its `Usage:` line is printed: click leaves it
    out of one error, an option given without its value (`check --venv`)."""
    _parsing[0] = ctx
    try:
        yield
    except typer.TyperException as error:
        if getattr(error, "ctx", False) is None:
            error.ctx = ctx  # type: ignore[attr-defined]
        raise


# `ctx` is click's Context, which typer keeps private (typer._click): typed as Any here.
_parsing: list[Any] = [None]
"""The context of the command line being parsed, the command's once it is known: its usage
line heads fi-patch's own usage errors too (`--patch nope`, `--cuda-home` without nvcc)."""


class _Command(TyperCommand):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _with_usage(ctx):
            return super().parse_args(ctx, args)


class _Group(TyperGroup):
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _with_usage(ctx):
            return super().parse_args(ctx, args)


app = typer.Typer(
    name="fi-patch",
    cls=_Group,
    # click's own help: it wraps each paragraph to the width, at most 80 columns, and pads no
    # line (rich's panels pad every line with spaces, a log's too).
    rich_markup_mode=None,
    help=(
        "Patch FlashInfer in a chosen environment so that FP4 quantization runs inside "
        "torch.compile(fullgraph=True): get_cuda_version reads torch.version.cuda before nvcc, "
        "the fp4_quantize op forwards its arguments by keyword, and fp4_quantize calls that op "
        "while compiling. Each patch is proven in the environment itself. Every command works "
        "on the environment you name, never on the interpreter running fi-patch."
    ),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)


def _seconds(value: float) -> float:
    if value < 1:
        raise typer.BadParameter(f"{value:g} is less than 1 second")
    return value


def _not_an_option(ctx: Any, parameter: Any, value: Any) -> Any:
    """A path option's value that looks like an option and names nothing on disk
    (`check --venv --json`, `--venv --help`, `--venv -qv`) is the option given without its
    value, as click says of `check --venv`: not a path that does not exist (exit 5)."""
    for given in value if isinstance(value, list) else [value]:
        if given is not None and str(given).startswith("-") and not os.path.lexists(given):
            raise typer.BadParameter(
                f"{given} looks like an option, not a {parameter.metavar}: give "
                f"{parameter.opts[0]} its {parameter.metavar} first"
            )
    return value


Venv = Annotated[
    list[Path] | None,
    typer.Option(
        "--venv",
        metavar="DIR",
        help="A target environment: a venv or conda prefix (holding bin/python). Repeat it for "
        "several; the exit code is the highest of theirs. Default: $VIRTUAL_ENV, then "
        "$CONDA_PREFIX.",
        show_default=False,
        callback=_not_an_option,
    ),
]
Python = Annotated[
    list[Path] | None,
    typer.Option(
        "--python",
        metavar="PATH",
        help="A target interpreter, instead of or beside --venv.",
        show_default=False,
        callback=_not_an_option,
    ),
]
PatchIds = Annotated[
    list[str] | None,
    typer.Option(
        "--patch",
        metavar="ID",
        help="Work on this patch only (repeatable; `fi-patch list` names them). Default: every "
        "patch that applies to the installed FlashInfer.",
        show_default=False,
    ),
]
Timeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="How long the target interpreter may take for the probe, the pre-flight and the "
        "compile check.",
        callback=_seconds,
    ),
]
VerifyTimeout = Annotated[
    float,
    typer.Option(
        "--verify-timeout",
        metavar="SECONDS",
        help="How long each process that runs proofs may take (it imports torch and FlashInfer).",
        callback=_seconds,
    ),
]
NoVerify = Annotated[
    bool,
    typer.Option(
        "--no-verify",
        help="Skip the proofs in the target (not the pre-flight). Nothing then proves the "
        "patches work.",
    ),
]
Json = Annotated[
    bool,
    typer.Option(
        "--json",
        help=f"Print one JSON document on stdout (schema {documents.SCHEMA_VERSION}), and "
        "nothing else there.",
    ),
]
CudaHome = Annotated[
    Path | None,
    typer.Option(
        "--cuda-home",
        metavar="DIR",
        help="The CUDA toolkit the server runs (the folder holding bin/nvcc): the pre-flight "
        "judges its nvcc, not the one fi-patch's own environment finds.",
        show_default=False,
        callback=_not_an_option,
    ),
]
ServerEnv = Annotated[
    Path | None,
    typer.Option(
        "--server-env",
        metavar="FILE",
        help="The server's environment file (systemd's EnvironmentFile=, KEY=VALUE lines): the "
        "pre-flight finds nvcc by its CUDA_HOME, CUDA_PATH and PATH (systemd's default PATH "
        "where it sets none), as the server will.",
        show_default=False,
        callback=_not_an_option,
    ),
]
Quiet = Annotated[
    bool, typer.Option("-q", "--quiet", help="Print only the outcome of each patch, and errors.")
]
Verbose = Annotated[
    bool,
    typer.Option(
        "-v",
        "--verbose",
        help="Print each patch's line and each proof's text (apply, revert, check --verify), "
        "and each step on stderr as it starts, with its time, and the total at the end.",
    ),
]

DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Run the pre-flight, show the diff, change nothing.")
]
ShowDiff = Annotated[
    bool,
    typer.Option(
        "--diff",
        help="Show the unified diff of each file written, fi-patch's op runtime (placed whole "
        "from src/fi_patcher/placed/) named in one line.",
    ),
]
FullDiff = Annotated[
    bool,
    typer.Option("--full-diff", help="Show the unified diff whole, the op runtime line by line."),
]

_verbosity = render.Verbosity()
_json = [False]


def _flags(quiet: bool, verbose: bool, as_json: bool) -> bool:
    """-q, -v and --json, given before or after the command name; whether to print JSON."""
    _verbosity.quiet = _verbosity.quiet or quiet
    _verbosity.verbose = _verbosity.verbose or verbose
    if _verbosity.quiet and _verbosity.verbose:
        raise typer.BadParameter("-q and -v contradict each other")
    return _json[0] or as_json


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fi-patch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
    as_json: Json = False,
) -> None:
    """fi-patch: apply, check and revert FlashInfer patches for FP4 under torch.compile."""
    _verbosity.quiet, _verbosity.verbose, _json[0] = False, False, as_json
    _verbosity.diff = _verbosity.full_diff = False
    _verbosity.started = time.monotonic()
    _flags(quiet, verbose, False)


@app.command(
    "apply", cls=_Command, short_help="Apply the patches to the target and prove them there."
)
def apply_command(
    venv: Venv = None,
    python: Python = None,
    patch: PatchIds = None,
    dry_run: DryRun = False,
    show_diff: ShowDiff = False,
    full_diff: FullDiff = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Patch a function whose text fi-patch does not know (state unknown) where its "
            "structure (its code, without comments, layout or docstring) is a known shape's: "
            "write that shape's change, let the proofs decide, roll back what they do not "
            "prove (it cannot go with --no-verify). Recorded as forced; revert gives "
            "RECORD's bytes. Drifted files are never forced.",
        ),
    ] = False,
    no_verify: NoVerify = False,
    allow_mismatch: Annotated[
        bool,
        typer.Option(
            "--allow-mismatch",
            help="Patch get_cuda_version although torch.version.cuda and the nvcc FlashInfer "
            "would run differ in major.minor; recorded in the manifest.",
        ),
    ] = False,
    cuda_home: CudaHome = None,
    server_env: ServerEnv = None,
    timeout: Timeout = PROBE_TIMEOUT,
    verify_timeout: VerifyTimeout = VERIFY_TIMEOUT,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Apply the patches to the target, keeping byte-exact backups, and prove them there.

    Before writing: a pre-flight in the target (torch's version; for get_cuda_version, torch's
    CUDA against the nvcc FlashInfer would run), and each patch's proof run on the unpatched
    code. Each file is then written once, with every patch it holds. After writing: fresh
    processes of the target run every proof (shared among the cores); a file whose proof fails
    is put back as it was (exit 13). Idempotent.
    """
    as_json = _flags(quiet, verbose, as_json)
    _verbosity.diff, _verbosity.full_diff = show_diff, full_diff
    chosen = _choose(patch, as_json)
    from fi_patcher import api

    options = api.Options(
        dry_run=dry_run,
        force=force,
        verify=not no_verify,
        allow_mismatch=allow_mismatch,
        timeout=timeout,
        verify_timeout=verify_timeout,
        toolkit=_toolkit(cuda_home, server_env, as_json),
    )
    _stop_on(unproven_force(options), as_json)
    _run_targets("apply", as_json, venv, python, timeout, _acting("apply", chosen, options))


@app.command("revert", cls=_Command, short_help="Take patches out, from fi-patch's backups.")
def revert_command(
    venv: Venv = None,
    python: Python = None,
    patch: PatchIds = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Restore the backup even if the file changed since fi-patch wrote it."
        ),
    ] = False,
    no_verify: NoVerify = False,
    timeout: Timeout = PROBE_TIMEOUT,
    verify_timeout: VerifyTimeout = VERIFY_TIMEOUT,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Take patches out. Without --patch: restore the original bytes of every file fi-patch
    changed, from its backups, and clear its records. With --patch: rebuild each file from its
    original with the patches that remain, and prove those."""
    as_json = _flags(quiet, verbose, as_json)
    chosen = _choose(patch, as_json)
    from fi_patcher import api

    options = api.Options(
        force=force, verify=not no_verify, timeout=timeout, verify_timeout=verify_timeout
    )
    _run_targets("revert", as_json, venv, python, timeout, _acting("revert", chosen, options))


@app.command("check", cls=_Command, short_help="Say each patch's state and what apply would do.")
def check_command(
    venv: Venv = None,
    python: Python = None,
    patch: PatchIds = None,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            help="Also run the proofs in fresh processes of the target (seconds: each imports "
            "torch and FlashInfer). A patched target whose proof fails exits 13.",
        ),
    ] = False,
    cuda_home: CudaHome = None,
    server_env: ServerEnv = None,
    timeout: Timeout = PROBE_TIMEOUT,
    verify_timeout: VerifyTimeout = VERIFY_TIMEOUT,
    as_json: Json = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Say, for each patch, whether the target is pristine, patched, wiped by a reinstall, made
    by hand, unknown (a function text fi-patch has never seen), drifted, or left out, and what
    `fi-patch apply` with the same --patch would do with it.

    The exit code is apply's verdict: 0 where apply would change nothing, 3 where it would
    write, and otherwise the code apply would refuse with (4 not installed, 6 unknown, 7
    drifted, 8 layout, 11 CPU torch for a named patch, 12 toolkit mismatch, 14 no torch, 15 a
    requirement of a named patch); 13 where a proof fails under --verify. So `fi-patch check
    || fi-patch apply` does what it says, once.
    """
    as_json = _flags(quiet, verbose, as_json)
    chosen = _choose(patch, as_json)
    toolkit = _toolkit(cuda_home, server_env, as_json)

    def work(target: Target, progress: Progress, processes: int) -> Result:
        from fi_patcher import api

        options = api.Options(
            timeout=timeout,
            verify_timeout=verify_timeout,
            progress=progress,
            toolkit=toolkit,
            proof_processes=processes,
        )
        checked = api.check(target, chosen, options)
        return api.verify(target, checked, options) if verify else checked

    _run_targets("check", as_json, venv, python, timeout, work)


@app.command("list", cls=_Command, short_help="Show the patches fi-patch knows.")
def list_command(as_json: Json = False, quiet: Quiet = False, verbose: Verbose = False) -> None:
    """Show the patches: file, function, versions, requirements, and what proves each."""
    as_json = _flags(quiet, verbose, as_json)

    def run(out: Console) -> int:
        patches = load_patches()
        if as_json:
            results = [documents.patch_json(p) for p in patches]
            out.print_json(data=documents.envelope("list", results, ExitCode.OK))
        else:
            render.catalog(out, patches)
        return ExitCode.OK

    _run(as_json, run)


def main() -> None:
    """The console script. With --json anywhere on the line, every exit prints one JSON
    document: a usage error (exit 2) and a bug (exit 1) too."""
    arguments = sys.argv[1:]
    if "--json" not in arguments:
        try:
            app()
        except Exception as exc:  # typer has shown usage errors itself; this is a bug
            render.error(render.console(stderr=True), _bug(exc))
            raise SystemExit(ExitCode.INTERNAL) from None
        return
    try:
        code = app(args=arguments, standalone_mode=False)
    except typer.TyperException as exc:  # an unknown option or command, a missing value
        usage = UsageError(exc.format_message(), remedy="run fi-patch --help, or the command's")
        render.console().print_json(data=documents.error_document(usage))
        raise SystemExit(ExitCode.USAGE) from None
    except Exception as exc:
        render.console().print_json(data=documents.error_document(_bug(exc)))
        raise SystemExit(ExitCode.INTERNAL) from None
    raise SystemExit(code or 0)


def _bug(exc: BaseException) -> Internal:
    """An exception fi-patch did not expect, as an error a person can report."""
    return Internal(
        f"fi-patch failed: {type(exc).__name__}: {exc}",
        remedy="this is a bug in fi-patch: please report it to its maintainers (the repository "
        "you installed it from), with the command line and this output",
        details=tuple(
            f"at {Path(frame.filename).name}:{frame.lineno} in {frame.name}"
            for frame in traceback.extract_tb(exc.__traceback__)[-5:]
        ),
    )


# --- targets ------------------------------------------------------------------------------------

T = TypeVar("T")
Spec = tuple[Path | None, Path | None]
"""One target as given: (--venv, None), (None, --python), or (None, None) for the default."""


def _acting(
    command: Command, chosen: PatchSet, options: Options
) -> Callable[[Target, Progress, int], Result]:
    """apply or revert on one target, looked up when it runs (tests replace it)."""

    def work(target: Target, progress: Progress, processes: int) -> Result:
        from fi_patcher import api

        run = api.apply if command == "apply" else api.revert
        return run(target, chosen, replace(options, progress=progress, proof_processes=processes))

    return work


def _run_targets(
    command: str,
    as_json: bool,
    venvs: list[Path] | None,
    pythons: list[Path] | None,
    timeout: float,
    work: Callable[[Target, Progress, int], Result],
) -> NoReturn:
    """Open every target given, run `work` once on each environment among them (in parallel
    when there are several), then report: each target's result, alone or among several, in one
    shape. An environment named twice (--venv and --python, or a link to it) is worked on once,
    with a note: two threads must not write one environment."""
    specs: list[Spec] = [(v, None) for v in venvs or []] + [(None, p) for p in pythons or []]
    specs = specs or [(None, None)]

    def opening(spec: Spec, progress: Progress) -> Callable[[], Target]:
        from fi_patcher.target import open_target

        def opened() -> Target:
            progress("probing the target's interpreter")
            return open_target(*spec, os.environ, timeout)

        return opened

    def working(
        opened: Target | Failed, progress: Progress, processes: int
    ) -> Callable[[], Result]:
        return lambda: opened if isinstance(opened, Failed) else work(opened, progress, processes)

    def body(out: Console) -> int:
        from fi_patcher.interrupts import handled

        with handled(), render.progress(as_json, _verbosity) as progress:
            several = len(specs) > 1
            named = {spec: _naming(progress, spec) if several else progress for spec in specs}
            opened = _each([(spec, opening(spec, named[spec])) for spec in specs])
            kept, notes = _once(specs, opened)
            # The targets opened share the cores and the memory for their proofs' processes.
            processes = proof_processes(sum(not isinstance(t, Failed) for _, t in kept))
            results = _each(
                [(spec, working(target, named[spec], processes)) for spec, target in kept]
            )
        code = int(worst(r.exit_code for r in results))
        if as_json:
            documented = [documents.result(r) for r in results]
            out.print_json(data=documents.envelope(command, documented, code, notes))
            render.total(as_json, _verbosity, code)
            return code
        if not _verbosity.quiet:
            render.notes(render.console(stderr=True), notes)
        _report(out, [spec for spec, _ in kept], results)
        render.total(as_json, _verbosity, code)
        return code

    _run(as_json, body)


def _report(out: Console, shown: list[Spec], results: Sequence[Result]) -> None:
    """Each target's result for people; among several, each under its heading, then a table."""
    for spec, result in zip(shown, results, strict=True):
        if len(shown) > 1:
            render.heading(out, f"== {_spec_text(spec)}")
        render.result(out, result, _verbosity)
    if len(shown) > 1:
        rows = [
            (_spec_text(s), render.summary_line(r), int(r.exit_code))
            for s, r in zip(shown, results, strict=True)
        ]
        render.summary(out, rows)


def _naming(progress: Progress, spec: Spec) -> Progress:
    """Among several targets worked on together, each step names its target."""

    def named(message: str, *, long: bool = False) -> None:
        progress(f"{_spec_text(spec)}: {message}", long=long)

    return named


def _each(jobs: Sequence[tuple[Spec, Callable[[], T]]]) -> list[T | Failed]:
    """Each job's value, or its error as its target's result; in parallel when there are
    several."""
    if len(jobs) == 1:
        return [_guarded(*jobs[0])]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_workers(len(jobs))) as pool:
        futures = [pool.submit(_guarded, spec, job) for spec, job in jobs]
        return [_awaited(future) for future in futures]


def _once(
    specs: Sequence[Spec], opened: Sequence[Target | Failed]
) -> tuple[list[tuple[Spec, Target | Failed]], list[str]]:
    """The targets to work on, each environment once (the first name given for it), and a note
    for every other name of one: the same environment is what its interpreter reports (its
    prefix and site-packages, links resolved), whatever the names given."""
    from fi_patcher.target import environment_key

    first: dict[tuple[str, ...], Spec] = {}
    kept: list[tuple[Spec, Target | Failed]] = []
    notes: list[str] = []
    for spec, target in zip(specs, opened, strict=True):
        if not isinstance(target, Failed):
            key = environment_key(target.interpreter)
            if key in first:
                notes.append(
                    f"{_spec_text(spec)} is the same environment as {_spec_text(first[key])}; "
                    "working on it once"
                )
                continue
            first[key] = spec
        kept.append((spec, target))
    return kept, notes


def _guarded(spec: Spec, job: Callable[[], T]) -> T | Failed:
    """One target's value; its error, whatever it is, becomes its result, so that the other
    targets go on and their results are reported."""
    from fi_patcher.errors import stopped_by
    from fi_patcher.interrupts import Stop

    try:
        return job()
    except FiPatchError as error:
        return Failed(_spec_text(spec), error)
    except Stop as stop:
        stopped = stopped_by(stop.signum)(
            f"interrupted by {stop.name} before any change: nothing was written",
            remedy="run the command again when you are ready",
        )
        return Failed(_spec_text(spec), stopped)
    except Exception as exc:  # a bug on one target must not lose the others' results
        return Failed(_spec_text(spec), _bug(exc))


def _awaited(future: Future[T]) -> T:
    """A target's result from its thread. A second signal stops only the waiting here: each
    target stops at its own next step, puts back what it wrote, and says so. The wait is in
    slices: Python runs a signal's handler in the main thread alone, once that thread wakes, and
    the kernel may give the signal to a target's thread; a wait without end would note it only
    when this target had finished (and this target would not stop for it)."""
    from concurrent.futures import TimeoutError as Waiting

    from fi_patcher.interrupts import Stop

    while True:
        try:
            return future.result(timeout=_SLICE)
        except (Waiting, Stop):
            continue


_SLICE = 0.1
"""Seconds the main thread waits for a target before it looks at the signals again."""


def _workers(count: int) -> int:
    # Each target's work is mostly its own interpreter's subprocesses: one per core, at most.
    return max(1, min(count, cores()))


def _spec_text(spec: Spec) -> str:
    venv, python = spec
    if venv is not None:
        return f"--venv {venv}"
    return f"--python {python}" if python is not None else "$VIRTUAL_ENV or $CONDA_PREFIX"


def _choose(ids: list[str] | None, as_json: bool) -> PatchSet:
    try:
        return choose(ids)
    except FiPatchError as error:
        _fail(as_json, error)


def _toolkit(
    cuda_home: Path | None, server_env: Path | None, as_json: bool
) -> ServerToolkit | None:
    """The server's toolkit, where --cuda-home or --server-env names it."""
    from fi_patcher.toolkit import named

    try:
        return named(cuda_home, server_env)
    except FiPatchError as error:
        _fail(as_json, error)


def _stop_on(error: FiPatchError | None, as_json: bool) -> None:
    """Stop with `error`, where there is one, before any target."""
    if error is not None:
        _fail(as_json, error)


def _run(as_json: bool, body: Callable[[Console], int]) -> NoReturn:
    """Run a command body; with `_fail`, the one place where errors become exit codes."""
    try:
        code = body(render.console())
    except FiPatchError as error:
        _fail(as_json, error)
    raise typer.Exit(code)


def _fail(as_json: bool, error: FiPatchError) -> NoReturn:
    if as_json:
        render.console().print_json(data=documents.error_document(error))
    else:
        err = render.console(stderr=True)
        if isinstance(error, UsageError) and _parsing[0] is not None:
            context = _parsing[0]
            render.usage(err, context.get_usage(), context.command_path)
        render.error(err, error)
    raise typer.Exit(int(error.exit_code))
