"""Progress where a person or a log waits: -v names every step through the commit and ends with
the total; where stderr is no terminal (a CI log, `| tee`, Ansible), each long step says when it
starts, on stderr; --json keeps stdout to its one document."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.releases import CUDA, TARGET
from tests.support.venvs import python_of

STAMP = r"\[ *\d+\.\ds\] "
TOTAL = STAMP + r"done in \d+\.\d s \(exit 0\)"


def _steps(lines: list[str], prefix: str = "") -> list[str]:
    """The steps told, without their times; every line must be one."""
    assert all(re.match(prefix + STAMP, line) for line in lines), lines
    return [re.sub("^" + prefix + STAMP, "", line) for line in lines]


def _long_steps(venv: Path) -> list[str]:
    """apply's long steps for get_cuda_version's patch, in order."""
    python = python_of(venv)
    torch = "(importing torch and FlashInfer)"
    return [
        f"pre-flight in {python} (torch's version and the nvcc FlashInfer would run)",
        f"proving the unpatched code of 1 patch in {python} {torch}",
        f"writing 1 file: {TARGET}",
        f"proving the patched code of 1 patch in a fresh process of {python} {torch}",
    ]


def test_verbose_names_every_step_through_the_commit_and_ends_with_the_total(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    run = fi_patch(runner, "-v", "apply", "--venv", venv, "--patch", CUDA)
    assert run.code == ExitCode.OK, run.text
    lines = run.stderr.splitlines()
    python = python_of(venv)
    preflight, before, writing, after = _long_steps(venv)
    assert _steps(lines[:-1]) == [
        "probing the target's interpreter",
        preflight,
        f"compile-checking the new text of 1 file in {python}",
        before,
        writing,
        after,
        f"committing 1 file to fi-patch's records in {venv}/.fi-patch/manifest.json",
    ]
    assert re.fullmatch(TOTAL, lines[-1]), lines[-1]


def test_piped_apply_says_its_long_steps_on_stderr_and_nothing_more_on_stdout(
    venv_with: MakeVenv,
) -> None:
    """The real tool with stdout and stderr as pipes, as CI, `| tee` and Ansible run it."""
    venv = venv_with("0.5.0")
    terminal = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "VIRTUAL_ENV", "CONDA_PREFIX")
    environ = {k: v for k, v in os.environ.items() if k not in terminal}
    piped = subprocess.run(
        [sys.executable, "-m", "fi_patcher", "apply", "--venv", str(venv), "--patch", CUDA],
        capture_output=True,
        text=True,
        env=environ,
        check=False,
    )
    assert piped.returncode == ExitCode.OK, piped.stderr
    lines = piped.stderr.splitlines()
    assert _steps(lines[:-1], "fi-patch: ") == _long_steps(venv)
    assert re.fullmatch("fi-patch: " + TOTAL, lines[-1]), lines[-1]
    assert "\x1b" not in piped.stderr and "\r" not in piped.stderr
    assert piped.stdout.startswith(f"environment {venv} ")
    assert not re.search(STAMP, piped.stdout), piped.stdout
    assert f"applied to {TARGET}: {CUDA}" in piped.stdout


def test_json_is_one_document_on_stdout_with_or_without_verbose(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """--json alone keeps stderr quiet too; with -v, the steps and the total go to stderr."""
    arguments = ("--patch", CUDA, "--no-verify", "--json")
    plain = fi_patch(runner, "apply", "--venv", venv_with("0.5.0"), *arguments)
    assert plain.code == ExitCode.OK, plain.text
    assert plain.json["exit_code"] == ExitCode.OK
    assert plain.stderr == ""
    verbose = fi_patch(runner, "-v", "apply", "--venv", venv_with("0.5.0"), *arguments)
    assert verbose.code == ExitCode.OK, verbose.text
    assert json.loads(verbose.stdout)["exit_code"] == ExitCode.OK
    lines = verbose.stderr.splitlines()
    assert f"writing 1 file: {TARGET}" in _steps(lines)
    assert re.fullmatch(TOTAL, lines[-1]), lines[-1]


def test_each_step_of_several_targets_names_its_target(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    first, second = venv_with("0.5.0"), venv_with("0.5.0")
    arguments = ("--venv", first, "--venv", second, "--patch", CUDA, "--no-verify")
    run = fi_patch(runner, "-v", "apply", *arguments)
    assert run.code == ExitCode.OK, run.text
    lines = run.stderr.splitlines()
    assert re.fullmatch(TOTAL, lines[-1]), lines[-1]
    # The warnings of each target (--no-verify) come with its results, before the total.
    steps = _steps([line for line in lines[:-1] if not line.startswith("warning: ")])
    named: dict[str, list[str]] = {f"--venv {venv}": [] for venv in (first, second)}
    for step in steps:
        target, said = step.split(": ", 1)
        named[target].append(said)
    for venv in (first, second):
        assert f"writing 1 file: {TARGET}" in named[f"--venv {venv}"], steps
        manifest = venv / ".fi-patch" / "manifest.json"
        assert f"committing 1 file to fi-patch's records in {manifest}" in named[f"--venv {venv}"]


def test_a_terminal_gets_the_spinner_not_the_lines_of_a_log(
    venv_with: MakeVenv,
) -> None:
    venv = venv_with("0.5.0")
    terminal = CliRunner(env={"VIRTUAL_ENV": None, "FORCE_COLOR": "1", "NO_COLOR": "1"})
    run = fi_patch(terminal, "apply", "--venv", venv, "--dry-run")
    assert run.code == ExitCode.OK, run.text
    assert not re.search(r"fi-patch: " + STAMP, run.stderr), run.stderr
    assert "done in" not in run.stderr
