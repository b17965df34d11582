"""One environment named twice (by --venv and --python, twice by --venv, through a link to it)
is worked on once, with a note: what makes two names one environment is what its interpreter
reports, links resolved, not the names given. Two threads writing one environment at once would
wait on each other's lock and report one apply twice."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from fi_patcher.model import Interpreter
from fi_patcher.target import environment_key
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.releases import CUDA
from tests.support.venvs import python_of


def note(again: str, first: str) -> str:
    return f"{again} is the same environment as {first}; working on it once"


def test_venv_and_its_python_are_checked_once(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.0")
    python = python_of(venv)
    run = fi_patch(runner, "check", "--venv", venv, "--python", python, "--json")
    assert run.code == ExitCode.NEEDS_APPLY, run.stdout
    (result,) = run.json["results"]
    assert result["environment"] == str(venv)
    assert run.json["notes"] == [note(f"--python {python}", f"--venv {venv}")]

    people = fi_patch(runner, "check", "--venv", venv, "--python", python)
    assert people.code == ExitCode.NEEDS_APPLY
    assert f"note: {note(f'--python {python}', f'--venv {venv}')}" in people.stderr
    # One target: its report alone, with no heading per target and no summary of several.
    assert people.stdout.count(f"environment {venv} ") == 1
    assert "summary" not in people.stdout and "== --venv" not in people.stdout


def test_every_other_name_of_it_is_one_too(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    """The same --venv twice, a link to it, its bin/python3: each a note, one result; another
    venv of the same release stays a target of its own."""
    venv, other = venv_with("0.7.0"), venv_with("0.7.0")
    link = tmp_path / "link"
    link.symlink_to(venv)
    python3 = venv / "bin" / "python3"
    run = fi_patch(
        runner,
        "check",
        *("--venv", venv, "--venv", link, "--venv", venv, "--venv", other),
        *("--python", python3, "--json"),
    )
    assert run.code == ExitCode.NEEDS_APPLY, run.stdout
    assert [r["environment"] for r in run.json["results"]] == [str(venv), str(other)]
    first = f"--venv {venv}"
    assert run.json["notes"] == [
        note(f"--venv {link}", first),
        note(f"--venv {venv}", first),
        note(f"--python {python3}", first),
    ]


def test_apply_writes_it_once(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.0")
    run = fi_patch(
        runner,
        "apply",
        *("--venv", venv, "--python", python_of(venv)),
        *("--patch", CUDA, "--no-verify", "--json"),
    )
    assert run.code == ExitCode.OK, run.stdout
    (result,) = run.json["results"]
    assert [(p["patch"], p["action"]) for p in result["patches"]] == [(CUDA, "applied")]
    assert len(run.json["notes"]) == 1


def test_a_target_that_cannot_be_opened_is_no_one_s_double(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.0")
    missing = tmp_path / "nope"
    run = fi_patch(runner, "check", "--venv", missing, "--venv", venv, "--venv", missing, "--json")
    assert run.code == ExitCode.ENVIRONMENT
    targets = [r.get("target") for r in run.json["results"]]
    assert targets == [f"--venv {missing}", None, f"--venv {missing}"]
    assert run.json["notes"] == []


def test_two_pythons_of_one_prefix_are_two_environments() -> None:
    """/usr's python3.11 and python3.12 share sys.prefix, not their site-packages."""
    usr = Path("/usr")

    def system(version: str) -> Interpreter:
        site = usr / "lib" / f"python{version}" / "site-packages"
        return Interpreter(usr / "bin" / f"python{version}", usr, usr, f"{version}.0", (site,))

    assert environment_key(system("3.11")) != environment_key(system("3.12"))
    assert environment_key(system("3.11")) == environment_key(system("3.11"))
