"""Find the target environment and ask its own interpreter about itself.

fi-patch never imports the target's packages and never falls back to the interpreter running
fi-patch: every fact about the target comes from a stdlib-only probe run by the target's python.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import IO, Any

from fi_patcher.errors import EnvironmentProblem, UsageError
from fi_patcher.interrupts import checkpoint
from fi_patcher.model import Bytecode, Imported, Interpreter

PROBE_TIMEOUT = 30.0
_BEGIN = "<<<fi-patch-probe>>>"
_END = "<<<fi-patch-probe-end>>>"


def choose_python(
    venv: Path | None, python: Path | None, environ: Mapping[str, str]
) -> tuple[Path, str]:
    """The target interpreter and where the choice came from, for messages."""
    if venv is not None and python is not None:
        raise UsageError("give --venv or --python, not both")
    if python is not None:
        return _interpreter(_absolute(python)), "--python"
    if venv is not None:
        return interpreter_in(_absolute(venv)), "--venv"
    for variable in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        if environ.get(variable):
            return interpreter_in(_absolute(Path(environ[variable]))), f"${variable}"
    raise UsageError(
        "no target environment",
        remedy="pass --venv DIR (a venv or conda prefix) or --python PATH, or activate the "
        "environment; fi-patch never falls back to its own interpreter",
    )


def interpreter_in(prefix: Path) -> Path:
    """The python of a venv or conda prefix. The path is kept unresolved: a venv's python is
    often a symlink to the base interpreter, and only the link's location makes it the venv's."""
    if not prefix.exists():
        raise EnvironmentProblem(
            f"no such environment: {prefix}",
            remedy="check the path, or create it with `python -m venv` / `uv venv`",
        )
    if not prefix.is_dir():
        raise EnvironmentProblem(
            f"{prefix} is not a directory, so it is not an environment",
            remedy=f"--venv takes the environment's folder; to name an interpreter, pass "
            f"--python {prefix}",
        )
    for candidate in (prefix / "bin" / "python", prefix / "bin" / "python3"):
        if candidate.exists():
            return candidate
        _refuse_dangling(candidate)
    raise EnvironmentProblem(
        f"{prefix} is not a Python environment: it has no bin/python",
        remedy="point --venv at the folder that holds bin/python (a venv or conda prefix), "
        "or pass the interpreter itself with --python",
    )


def _interpreter(python: Path) -> Path:
    """What --python names: an interpreter, not a folder."""
    if python.is_dir():
        held = any((python / "bin" / name).exists() for name in ("python", "python3"))
        hint = f"--venv {python}" if held else "the interpreter itself"
        raise EnvironmentProblem(
            f"{python} is a directory, not an interpreter",
            remedy=f"--python takes an interpreter (such as {python}/bin/python); for an "
            f"environment's folder, pass {hint}",
        )
    return _refuse_dangling(python)


def _refuse_dangling(python: Path) -> Path:
    """A venv's python is a link to the interpreter it was made from, and upgrading or removing
    that interpreter leaves the link pointing nowhere: say so, not "no such file"."""
    if python.is_symlink() and not python.exists():
        raise EnvironmentProblem(
            f"{python} is a dangling link: it leads to {os.path.realpath(python)}, which does "
            "not exist; the interpreter the environment was made with is gone (usual after a "
            "Python upgrade)",
            remedy="recreate the environment with a Python that exists (python -m venv --clear "
            "DIR, then reinstall its packages), or point --python at a working interpreter",
        )
    return python


def probe(
    python: Path, timeout: float = PROBE_TIMEOUT, packages: Sequence[str] = ()
) -> Interpreter:
    """Run the probe in `python` and return what it said. With `packages`, a normal start of
    the same interpreter (not isolated: PYTHONPATH and the user's site-packages count) says at
    the same time where it would import each of them from."""
    # A thread, not concurrent.futures: that imports logging, and every command would pay.
    normal: list[tuple[dict[str, Imported], str | None] | BaseException] = []

    def start() -> None:
        try:
            normal.append(_normal_start(python, timeout, packages))
        except BaseException as exc:  # raised in the caller's thread, below
            normal.append(exc)

    thread = threading.Thread(target=start, daemon=True)
    if packages:
        thread.start()
    answer = run_script(python, "probe.py", [], timeout=timeout, what="probe")
    imports: dict[str, Imported] = {}
    failure = None
    if packages:
        thread.join()
        if isinstance(normal[0], BaseException):
            raise normal[0]
        imports, failure = normal[0]
    return Interpreter(
        python=python,
        prefix=Path(answer["prefix"]),
        base_prefix=Path(answer["base_prefix"]),
        python_version=answer["version"],
        site_packages=tuple(Path(p) for p in answer["site_packages"]),
        base_python=Path(answer["base_executable"]) if answer.get("base_executable") else None,
        imports=imports,
        normal_start=failure,
    )


def _normal_start(
    python: Path, timeout: float, packages: Sequence[str]
) -> tuple[dict[str, Imported], str | None]:
    try:
        answer = run_script(
            python,
            "imports.py",
            list(packages),
            timeout=timeout,
            what="import check",
            isolated=False,
        )
    except EnvironmentProblem as exc:
        return {}, exc.message
    found = {
        name: Imported(Path(where["path"]), str(where["via"]))
        for name, where in answer.items()
        if isinstance(where, dict) and "path" in where
    }
    return found, None


def script_text(name: str) -> str:
    """The text of a script in `fi_patcher/in_target/` (`proofs/x.py` for a proof)."""
    return _script(name).read_text(encoding="utf-8")


@contextlib.contextmanager
def script_file(name: str) -> Iterator[Path]:
    """A file holding a script of `fi_patcher/in_target/`, to run by its path, never as `-c`
    text, so that a process list or a crash report shows a short command: the installed
    file itself or, where fi-patch is imported from a zip, a copy in a private folder removed
    afterwards. The target runs as fi-patch's own user, which made the folder."""
    script = _script(name)
    if isinstance(script, Path) and script.is_file():
        yield script
        return
    with tempfile.TemporaryDirectory(prefix="fi-patch-") as folder:
        copy = Path(folder) / script.name
        copy.write_bytes(script.read_bytes())
        yield copy


def _script(name: str) -> Traversable:
    return resources.files("fi_patcher.in_target").joinpath(*name.split("/"))


_UTF8 = "-Xutf8"
"""Every in-target script reads and writes UTF-8 whatever the locale: as a flag, since -I
ignores PYTHONUTF8 (which run_target still sets, for what the scripts start)."""


def run_script(
    python: Path,
    name: str,
    arguments: list[str],
    *,
    timeout: float,
    what: str,
    stdin: bytes | None = None,
    timeout_flag: str = "--timeout",
    isolated: bool = True,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """Run one of the scripts in `fi_patcher/in_target/` in `python` (`-I`: no user site, no
    PYTHON* variables, not the script's folder on sys.path, unless not `isolated`; `-Xutf8`:
    UTF-8 whatever the locale; `-B`: no bytecode written) and return its framed JSON answer; a
    script that exits non-zero or prints no answer is an error."""
    flags = ["-I", _UTF8, "-B"] if isolated else [_UTF8, "-B"]
    with script_file(name) as path:
        completed = run_target(
            python,
            [*flags, os.fspath(path), *arguments],
            timeout=timeout,
            what=what,
            stdin=stdin,
            timeout_flag=timeout_flag,
            cancel=cancel,
        )
    answer = _unframe(completed.stdout)
    if completed.returncode != 0 or answer is None:
        raise EnvironmentProblem(
            f"the interpreter {python} could not run fi-patch's {what} "
            f"(exit status {completed.returncode})",
            remedy="check that this interpreter starts: run it with --version",
            details=_tail(completed.stderr),
        )
    return answer


def compile_check(python: Path, source: bytes, filename: str, timeout: float) -> Bytecode | None:
    """Compile `source` with the target's own interpreter, which is the one that will run it,
    and return the bytecode that interpreter caches for it (None where it caches none)."""
    with script_file("compiles.py") as path, tempfile.TemporaryDirectory() as folder:
        output = Path(folder) / "compiled.pyc"
        completed = run_target(
            python,
            ["-I", "-S", _UTF8, os.fspath(path), filename, os.fspath(output)],
            timeout=timeout,
            what="compile check",
            stdin=source,
        )
        if completed.returncode != 0:
            raise EnvironmentProblem(
                f"the patched text of {filename} does not compile in {python}",
                details=_tail(completed.stderr),
            )
        cached = completed.stdout.strip()
        return Bytecode(Path(cached), output.read_bytes()) if cached else None


def run_target(
    python: Path,
    arguments: list[str],
    *,
    timeout: float,
    what: str,
    stdin: bytes | None = None,
    timeout_flag: str = "--timeout",
    cancel: threading.Event | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the target's python, in a session of its own: a Ctrl-C in the terminal reaches
    fi-patch, which kills the process at its next look (`interrupts.checkpoint`), as it does
    once `cancel` is set (raising Cancelled)."""
    environ = {**os.environ, "PYTHONUTF8": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        process = subprocess.Popen(
            [os.fspath(python), *arguments],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
            start_new_session=True,
        )
    except OSError as exc:
        raise EnvironmentProblem(
            f"cannot run the interpreter {python}: {exc.strerror or exc}",
            remedy="check that it exists and is executable (a broken venv can be recreated "
            "with `python -m venv --clear`)",
        ) from exc
    try:
        stdout, stderr = _wait(process, stdin, timeout, cancel)
    except subprocess.TimeoutExpired as exc:
        raise EnvironmentProblem(
            f"the interpreter {python} did not finish the {what} within {timeout:g} s",
            remedy=f"check that the interpreter starts quickly, or raise {timeout_flag}",
        ) from exc
    return subprocess.CompletedProcess(
        process.args,
        process.returncode,
        stdout.decode("utf-8", "replace"),
        stderr.decode("utf-8", "replace"),
    )


def _wait(
    process: subprocess.Popen[bytes],
    stdin: bytes | None,
    timeout: float,
    cancel: threading.Event | None = None,
) -> tuple[bytes, bytes]:
    """The process's output once it ends; it is killed, with everything it started, when the
    time is up, a signal asks fi-patch to stop, or `cancel` is set."""
    deadline = time.monotonic() + timeout
    if stdin is not None and process.stdin is not None:
        # Fed by a thread of its own: communicate() called again after a timeout sends no more
        # of its input, so a payload larger than the pipe holds, given to a process that had
        # not started reading within the first look, would never be sent whole.
        pipe, process.stdin = process.stdin, None
        threading.Thread(target=_feed, args=(pipe, stdin), daemon=True).start()
    try:
        while True:
            try:
                return process.communicate(None, timeout=_LOOK)
            except subprocess.TimeoutExpired:
                checkpoint()
                if cancel is not None and cancel.is_set():
                    raise Cancelled() from None
                if time.monotonic() >= deadline:
                    raise
    except BaseException:
        _killed(process)
        raise


class Cancelled(Exception):
    """Raised for a process of the target killed because its caller cancelled it (another share
    of the proofs failed, or a signal stopped the wait): the caller reports why, not this."""


def _killed(process: subprocess.Popen[bytes]) -> None:
    """Kill the process and everything it started, and reap it. Its pipes are read to their end
    for a few seconds at most: something that left its session may hold them open, and fi-patch
    must not wait on it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.communicate(timeout=_AFTER_KILL)
    except subprocess.TimeoutExpired:
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        process.kill()
        process.wait()


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write `data` to the process's stdin and close it; a process that ended meanwhile has no
    use for the rest."""
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
    with contextlib.suppress(OSError, ValueError):
        pipe.close()


_LOOK = 0.1
"""Seconds between looks for a signal while a process of the target runs."""

_AFTER_KILL = 5.0
"""Seconds to read what a killed process had written before its pipes are given up."""


def _unframe(stdout: str) -> dict[str, Any] | None:
    start = stdout.rfind(_BEGIN)
    end = stdout.rfind(_END)
    if start < 0 or end < start:
        return None
    try:
        answer = json.loads(stdout[start + len(_BEGIN) : end])
    except json.JSONDecodeError:
        return None
    return answer if isinstance(answer, dict) else None


def _tail(text: str, lines: int = 6) -> tuple[str, ...]:
    return tuple(text.strip().splitlines()[-lines:])


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(path))
