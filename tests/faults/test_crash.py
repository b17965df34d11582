"""SIGKILL at every step of apply and revert: the next command sees it and finishes the job.

fi-patch runs for real in a child process that kills itself (SIGKILL, no cleanup) at one step of
the write protocol (docs/how-it-works.md). Afterwards the file is exactly the original or exactly
the patched bytes, `check` says which and that a command is needed, and the next command ends in
the state the interrupted one was heading for.
"""

from __future__ import annotations

import hashlib
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import faulty, killed, records, sha256, stale_temporaries
from tests.support.cli import fi_patch, patch_result, state_of, states_of
from tests.support.deps import fake_torch, use
from tests.support.expected import expected
from tests.support.releases import CUDA, FP4, OP_BOUNDARY, RELEASES, TARGET, released_text
from tests.support.tiers import releases
from tests.support.venvs import fp4_file, target_file

# One patch, one file: cuda-version-torch-first in 0.7.4 (flashinfer/jit/cpp_ext.py), named with
# --patch (the other patches write other files).
VERSION = "0.7.4"
ONE = ("--patch", CUDA)
ORIGINAL = hashlib.sha256(released_text(RELEASES[VERSION], TARGET)).hexdigest()
PATCHED = hashlib.sha256(expected(VERSION, TARGET).encode()).hexdigest()


def one_file(venv: Path) -> Path:
    return target_file(venv)


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


@pytest.mark.parametrize("step", APPLY_STEPS)
def test_apply_killed(runner: CliRunner, venv_with: MakeVenv, step: str) -> None:
    venv = venv_with(VERSION)
    child = killed(step, "apply", "--venv", venv, *ONE, "--no-verify")
    assert child.returncode == -signal.SIGKILL, child.stderr
    left, state, code = APPLY_STEPS[step]
    assert sha256(one_file(venv)) == left
    assert state_of(runner, venv, CUDA, [CUDA]) == (state, code)
    if step == "after-temp-write":
        assert stale_temporaries(venv), "the kill should leave the temporary file behind"

    finished = fi_patch(runner, "apply", "--venv", venv, *ONE, "--no-verify", "--json")
    assert finished.code == ExitCode.OK
    assert sha256(one_file(venv)) == PATCHED
    assert stale_temporaries(venv) == []
    assert state_of(runner, venv, CUDA, [CUDA]) == ("patched", ExitCode.OK)
    (record,) = records(venv)
    assert record["pending"] is None
    assert [p["id"] for p in record["patches"]] == [CUDA]
    assert fi_patch(runner, "revert", "--venv", venv, *ONE).code == ExitCode.OK
    assert sha256(one_file(venv)) == ORIGINAL


@pytest.mark.parametrize("step", REVERT_STEPS)
def test_revert_killed(runner: CliRunner, venv_with: MakeVenv, step: str) -> None:
    venv = venv_with(VERSION)
    assert fi_patch(runner, "apply", "--venv", venv, *ONE, "--no-verify").code == ExitCode.OK
    child = killed(step, "revert", "--venv", venv, *ONE)
    assert child.returncode == -signal.SIGKILL, child.stderr
    left, state, code = REVERT_STEPS[step]
    assert sha256(one_file(venv)) == left
    assert state_of(runner, venv, CUDA, [CUDA]) == (state, code)

    finished = fi_patch(runner, "revert", "--venv", venv, *ONE)
    assert finished.code == ExitCode.OK, finished.text
    assert sha256(one_file(venv)) == ORIGINAL
    assert stale_temporaries(venv) == []
    assert records(venv) == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []
    assert state_of(runner, venv, CUDA, [CUDA]) == ("pristine", ExitCode.NEEDS_APPLY)


def test_interrupted_revert_can_be_finished_by_apply(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with(VERSION)
    assert fi_patch(runner, "apply", "--venv", venv, *ONE, "--no-verify").code == ExitCode.OK
    assert killed("after-manifest-1", "revert", "--venv", venv, *ONE).returncode == -signal.SIGKILL
    run = fi_patch(runner, "apply", "--venv", venv, *ONE, "--no-verify", "--json")
    assert run.code == ExitCode.OK
    assert patch_result(run.json, CUDA)["action"] == "finished"
    assert state_of(runner, venv, CUDA, [CUDA]) == ("patched", ExitCode.OK)


def test_interrupted_apply_whose_bytes_fail_their_proof_is_undone(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    """Bytes a killed apply wrote were never proven: the next apply proves them, and when the
    proof fails (here torch no longer imports) it puts FlashInfer's original back."""
    venv = venv_with(VERSION)
    assert killed("after-replace", "apply", "--venv", venv, *ONE).returncode == -signal.SIGKILL
    assert sha256(one_file(venv)) == PATCHED
    use(venv, fake_torch(tmp_path / "broken", "raise ImportError('torch is broken')\n"))
    run = fi_patch(runner, "apply", "--venv", venv, *ONE, "--json")
    assert run.code == ExitCode.VERIFY_FAILED, run.stdout
    assert patch_result(run.json, CUDA)["action"] == "rolled-back"
    (result,) = run.json["results"]
    # The original replaced fi-patch's unproven bytes: the command changed the file.
    assert [f["action"] for f in result["files"]] == ["restored"]
    assert result["status"] == "partial"
    assert "torch is broken" in " ".join(run.json["results"][0]["error"]["details"])
    assert sha256(one_file(venv)) == ORIGINAL
    assert records(venv) == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []


def test_check_names_the_interrupted_command(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with(VERSION)
    assert killed("after-replace", "apply", "--venv", venv, *ONE, "--no-verify").returncode < 0
    run = fi_patch(runner, "check", "--venv", venv, *ONE)
    assert run.code == ExitCode.NEEDS_APPLY
    assert "its apply was interrupted before it finished; `fi-patch apply` finishes it" in run.text
    finished = fi_patch(runner, "apply", "--venv", venv, *ONE, "--no-verify")
    assert finished.code == ExitCode.OK
    assert "finished the interrupted apply" in finished.text


# --- two files in one apply ---------------------------------------------------------------------

BOTH = "0.7.0"
# step -> (cpp_ext.py patched?, fp4_quantization.py patched?) right after the kill. The apply
# writes api_logging.py, cpp_ext.py, then utils.py and fp4_quantization.py (registry order), each
# through its transaction, which saves the journal before it replaces the file: the third save
# comes after cpp_ext.py is replaced.
BETWEEN = {
    "after-replace-1": (True, False),
    "after-manifest-3": (True, False),
    "after-replace-2": (True, True),
}


def _left(venv: Path) -> tuple[bool, bool]:
    """Which of the two files hold fi-patch's bytes; each must be exactly one of two texts."""
    found = []
    for path, relpath in ((target_file(venv), TARGET), (fp4_file(venv), FP4)):
        now = path.read_bytes()
        assert now in (
            released_text(RELEASES[BOTH], relpath),
            expected(BOTH, relpath).encode(),
        ), f"{relpath} is neither the original nor fi-patch's text"
        found.append(now == expected(BOTH, relpath).encode())
    return found[0], found[1]


@pytest.mark.parametrize("step", releases(BETWEEN, "after-replace-1"))
def test_apply_of_two_files_killed_between_them_is_finished(
    runner: CliRunner, venv_with: MakeVenv, step: str
) -> None:
    venv = venv_with(BOTH)
    child = killed(step, "apply", "--venv", venv, "--no-verify")
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert _left(venv) == BETWEEN[step]
    assert states_of(runner, venv)[1] == ExitCode.NEEDS_APPLY

    finished = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert finished.code == ExitCode.OK, finished.text
    assert _left(venv) == (True, True)
    states, code = states_of(runner, venv)
    assert set(states.values()) == {"patched", "not-applicable"} and code == ExitCode.OK
    assert states[OP_BOUNDARY] == "not-applicable"
    assert all(r["pending"] is None for r in records(venv))


@pytest.mark.parametrize("step", BETWEEN)
def test_apply_of_two_files_killed_between_them_is_undone_by_revert(
    runner: CliRunner, venv_with: MakeVenv, step: str
) -> None:
    venv = venv_with(BOTH)
    assert killed(step, "apply", "--venv", venv, "--no-verify").returncode == -signal.SIGKILL
    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.text
    assert _left(venv) == (False, False)
    assert records(venv) == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []


# --- a write that fails after its replace -------------------------------------------------------


def test_fsync_failure_after_the_replace_puts_the_old_bytes_back(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """The folder's sync fails once (EIO) after the new file is in place: the old bytes go
    back, the record and the backup with them, and the command says what failed."""
    venv = venv_with(VERSION)
    child = faulty("fsync-once", "apply", "--venv", venv, *ONE, "--no-verify")
    assert child.returncode == ExitCode.WRITE, child.stderr
    assert f"cannot write {one_file(venv)}: Input/output error" in " ".join(child.stderr.split())
    assert sha256(one_file(venv)) == ORIGINAL
    assert records(venv) == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []
    assert state_of(runner, venv, CUDA, [CUDA]) == ("pristine", ExitCode.NEEDS_APPLY)


def test_fsync_failure_that_cannot_be_undone_keeps_the_backup(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """The sync fails, then the disk is full when the old bytes should go back: the file keeps
    fi-patch's bytes, so its backup and journal entry must stay, and the next command uses them."""
    venv = venv_with(VERSION)
    child = faulty("fsync-then-full", "apply", "--venv", venv, *ONE, "--no-verify")
    assert child.returncode == ExitCode.WRITE, child.stderr
    said = " ".join(child.stderr.split())
    assert "holds fi-patch's new bytes, and putting the old ones back failed too" in said
    assert "No space left on device" in said and "fi-patch revert" in said
    assert sha256(one_file(venv)) == PATCHED
    (backup,) = (venv / ".fi-patch" / "backups").iterdir()
    assert backup.read_bytes() == released_text(RELEASES[VERSION], TARGET)
    (record,) = records(venv)
    assert record["pending"]["action"] == "apply"
    assert state_of(runner, venv, CUDA, [CUDA]) == ("patched", ExitCode.NEEDS_APPLY)

    reverted = fi_patch(runner, "revert", "--venv", venv, *ONE)
    assert reverted.code == ExitCode.OK, reverted.text
    assert sha256(one_file(venv)) == ORIGINAL
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []
