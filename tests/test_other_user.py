"""Another user, who can read an environment but not fi-patch's records in it.

Real: a second user made with `useradd`, fi-patch run as that user with `runuser`, venvs in a
world-readable folder made from Debian's /usr/bin/python3.11 (the project's own interpreters live
under /root, which other users cannot enter), fi-patch installed there from its wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.support.cli import fi_patch
from tests.support.deps import CUDA_TORCH, fake_torch, shared, use
from tests.support.expected import expected
from tests.support.releases import CUDA, RELEASES, released_text
from tests.support.tiers import SLOW
from tests.support.tool import build_wheel
from tests.support.venvs import install, target_file

OTHER = "fi-patch-other"
SYSTEM_PYTHON = Path("/usr/bin/python3.11")


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    made = subprocess.run(["id", OTHER], capture_output=True).returncode != 0
    if made:
        subprocess.run(["useradd", "--system", "--no-create-home", OTHER], check=True)
    yield OTHER
    if made:
        subprocess.run(["userdel", OTHER], check=True)


@pytest.fixture(scope="module")
def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="fi-patch-shared-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def tool(shared_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fi-patch from its wheel, in a venv any user can run."""
    wheel = build_wheel(tmp_path_factory.mktemp("wheel"))
    venv = shared_folder / "tool"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", venv], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", wheel],
        check=True,
    )
    return venv / "bin" / "fi-patch"


def target(shared_folder: Path, name: str, torch: Path) -> Path:
    venv = shared_folder / name
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", venv], check=True)
    install(venv, RELEASES["0.5.0"])
    use(venv, torch)
    return venv


def as_user(user: str, *command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *map(str, command)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1", "VIRTUAL_ENV": ""},
        cwd="/",
        check=False,
    )


def said(run: subprocess.CompletedProcess[str]) -> str:
    return " ".join((run.stdout + run.stderr).split())


def test_another_user_checks_but_cannot_revert(
    other_user: str, tool: Path, shared_folder: Path, runner: CliRunner
) -> None:
    venv = target(shared_folder, "root-env", shared(CUDA_TORCH))
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert (venv / ".fi-patch").stat().st_mode & 0o777 == 0o700

    check = as_user(other_user, tool, "check", "--venv", venv, "--json")
    assert check.returncode == ExitCode.OK, said(check)
    (result,) = json.loads(check.stdout)["results"]
    (cuda,) = [p for p in result["patches"] if p["patch"] == CUDA]
    assert cuda["state"] == "patched"
    assert "fi-patch's record could not be read" in cuda["reason"]
    assert any("records could not be read" in w for w in result["warnings"])
    people = as_user(other_user, tool, "check", "--venv", venv)
    assert "warning: fi-patch's records could not be read" in said(people)

    revert = as_user(other_user, tool, "revert", "--venv", venv)
    assert revert.returncode == ExitCode.WRITE, said(revert)
    assert "cannot open fi-patch's lock" in said(revert)
    assert "Permission denied" in said(revert)
    assert "run fi-patch as user root" in said(revert)
    assert "Traceback" not in said(revert)
    assert target_file(venv).read_bytes() == expected("0.5.0").encode()


@SLOW
def test_one_target_failing_never_loses_the_others(
    other_user: str, tool: Path, shared_folder: Path
) -> None:
    """The other user reverts their own venv and root's in one command: root's fails (exit
    10), theirs is reverted, and the JSON document says both."""
    theirs = target(shared_folder, "their-env", fake_torch(shared_folder / "torch", "\n"))
    subprocess.run(["chown", "-R", f"{other_user}:", theirs], check=True)
    applied = as_user(other_user, tool, "apply", "--venv", theirs, "--no-verify")
    assert applied.returncode == ExitCode.OK, said(applied)
    root_env = target(shared_folder, "root-env-2", shared(CUDA_TORCH))
    assert subprocess.run([tool, "apply", "--venv", root_env, "--no-verify"]).returncode == 0

    run = as_user(other_user, tool, "revert", "--json", "--venv", root_env, "--venv", theirs)
    assert run.returncode == ExitCode.WRITE, said(run)
    first, second = json.loads(run.stdout)["results"]
    assert first["target"] == f"--venv {root_env}"
    assert "cannot open fi-patch's lock" in first["error"]["message"]
    (cuda,) = [p for p in second["patches"] if p["patch"] == CUDA]
    assert cuda["action"] == "reverted"
    assert target_file(theirs).read_bytes() == released_text(RELEASES["0.5.0"])


def test_a_write_keeps_the_file_owner_and_group(
    other_user: str, shared_folder: Path, runner: CliRunner
) -> None:
    """Root patches another user's environment: the new file (a new inode) is still theirs."""
    venv = target(shared_folder, "owned-env", shared(CUDA_TORCH))
    subprocess.run(["chown", "-R", f"{other_user}:", venv], check=True)
    before = target_file(venv).stat()
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    after = target_file(venv).stat()
    assert after.st_ino != before.st_ino
    assert (after.st_uid, after.st_gid) == (before.st_uid, before.st_gid) != (0, 0)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    reverted = target_file(venv).stat()
    assert (reverted.st_uid, reverted.st_gid) == (before.st_uid, before.st_gid)
