"""SIGKILL at every step of apply and revert: the next command sees it and finishes the job.

fi-patch runs for real in a child process that kills itself (SIGKILL, no cleanup) at one step of
the write protocol (docs/how-it-works.md). Afterwards the file is exactly the original or exactly
the patched bytes, `check` says which and that a command is needed, and the next command ends in
the state the interrupted one was heading for.
"""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import killed, sha256, stale_temporaries
from tests.support.cli import fi_patch, state_of
from tests.support.releases import RELEASES, released_text
from tests.support.venvs import target_file
from tests.test_codemod import expected

VERSION = "0.5.0"
ORIGINAL = hashlib.sha256(released_text(RELEASES[VERSION])).hexdigest()
PATCHED = hashlib.sha256(expected(VERSION).encode()).hexdigest()

# step -> (sha256 left behind, state `check` reports, its exit code)
APPLY_STEPS = {
    "before-backup": (ORIGINAL, "pristine", ExitCode.NEEDS_APPLY),
    "after-backup": (ORIGINAL, "pristine", ExitCode.NEEDS_APPLY),
    "after-manifest-1": (ORIGINAL, "pristine", ExitCode.NEEDS_APPLY),
    "after-temp-write": (ORIGINAL, "pristine", ExitCode.NEEDS_APPLY),
    "after-replace": (PATCHED, "patched", ExitCode.NEEDS_APPLY),
    "after-manifest-2": (PATCHED, "patched", ExitCode.OK),
}
REVERT_STEPS = {
    "before-manifest-1": (PATCHED, "patched", ExitCode.OK),
    "after-manifest-1": (PATCHED, "patched", ExitCode.NEEDS_APPLY),
    "after-temp-write": (PATCHED, "patched", ExitCode.NEEDS_APPLY),
    "after-replace": (ORIGINAL, "pristine", ExitCode.NEEDS_APPLY),
    "after-manifest-2": (ORIGINAL, "pristine", ExitCode.NEEDS_APPLY),
}


def entries(venv: Path) -> list[dict[str, object]]:
    manifest = venv / ".fi-patch" / "manifest.json"
    if not manifest.exists():
        return []
    found = json.loads(manifest.read_text())["entries"]
    assert isinstance(found, list)
    return found


@pytest.mark.parametrize("step", APPLY_STEPS)
def test_apply_killed(runner: CliRunner, venv_with: MakeVenv, step: str) -> None:
    venv = venv_with(VERSION)
    child = killed(step, "apply", "--venv", venv, "--no-verify")
    assert child.returncode == -signal.SIGKILL, child.stderr
    left, state, code = APPLY_STEPS[step]
    assert sha256(target_file(venv)) == left
    assert state_of(runner, venv) == (state, code)
    if step == "after-temp-write":
        assert stale_temporaries(venv), "the kill should leave the temporary file behind"

    finished = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert finished.code == ExitCode.OK
    assert sha256(target_file(venv)) == PATCHED
    assert stale_temporaries(venv) == []
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
    (entry,) = entries(venv)
    assert entry["status"] == "applied"
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert sha256(target_file(venv)) == ORIGINAL


@pytest.mark.parametrize("step", REVERT_STEPS)
def test_revert_killed(runner: CliRunner, venv_with: MakeVenv, step: str) -> None:
    venv = venv_with(VERSION)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    child = killed(step, "revert", "--venv", venv)
    assert child.returncode == -signal.SIGKILL, child.stderr
    left, state, code = REVERT_STEPS[step]
    assert sha256(target_file(venv)) == left
    assert state_of(runner, venv) == (state, code)

    finished = fi_patch(runner, "revert", "--venv", venv)
    assert finished.code == ExitCode.OK, finished.text
    assert sha256(target_file(venv)) == ORIGINAL
    assert stale_temporaries(venv) == []
    assert entries(venv) == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_interrupted_revert_can_be_finished_by_apply(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with(VERSION)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert killed("after-manifest-1", "revert", "--venv", venv).returncode == -signal.SIGKILL
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK
    assert run.json["results"][0]["action"] == "finished"
    assert state_of(runner, venv) == ("patched", ExitCode.OK)


def test_check_names_the_interrupted_command(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with(VERSION)
    assert killed("after-replace", "apply", "--venv", venv, "--no-verify").returncode < 0
    run = fi_patch(runner, "check", "--venv", venv)
    assert run.code == ExitCode.NEEDS_APPLY
    assert "its apply was interrupted before it finished; `fi-patch apply` finishes it" in run.text
    finished = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert finished.code == ExitCode.OK
    assert "finished the interrupted apply" in finished.text
