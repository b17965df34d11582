"""Records written by fi-patch 0.1.0 keep working: the real 0.1.0, built from this repository's
history, patches a venv; this version then checks, applies and reverts it.

0.1.0 knew one patch (cuda-version-torch-first) and wrote manifest schema 1, one entry per patch
with a `status`. This version reads it as schema 2 (one record per file) and writes schema 2 on
its next write.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, states_of
from tests.support.expected import expected, original
from tests.support.releases import (
    BATCHED,
    BOUNDARIES,
    CUDA,
    DECLARED,
    DECLARED_FAKE,
    FORWARDING,
    FP4,
    GROUPED,
    INTERLEAVE,
    LOGGING,
    OP_BOUNDARY,
    RELEASES,
    TARGET,
    UNDER_COMPILE,
    UTILS,
    released_text,
)
from tests.support.tiers import SLOW
from tests.support.tool import released_tool
from tests.support.venvs import fp4_file, target_file

# The last commit of fi-patch 0.1.0 on main.
RELEASE_0_1_0 = "fb0145aefc8603fe023bdd1a11bb54e99aad1b61"


@pytest.fixture(scope="module")
def old_tool(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fi-patch 0.1.0 in a venv of its own, built from the repository's history."""
    return released_tool(RELEASE_0_1_0, tmp_path_factory.mktemp("fi-patch-0.1.0"))


def old(tool: Path, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, *map(str, arguments)], capture_output=True, text=True, check=False)


def manifest(venv: Path) -> dict[str, object]:
    data = json.loads((venv / ".fi-patch" / "manifest.json").read_text())
    assert isinstance(data, dict)
    return data


@SLOW
def test_a_venv_patched_by_0_1_0_is_checked_extended_and_reverted(
    old_tool: Path, runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.0")
    assert old(old_tool, "--version").stdout.strip() == "fi-patch 0.1.0"
    applied = old(old_tool, "apply", "--venv", venv, "--no-verify")
    assert applied.returncode == 0, applied.stderr
    written = target_file(venv).read_bytes()
    assert b"# fi-patch: cuda-version-torch-first (fi-patch 0.1.0)" in written
    assert manifest(venv)["schema"] == 1

    states, code = states_of(runner, venv)
    assert states == {
        LOGGING: "pristine",
        CUDA: "patched",
        DECLARED: "pristine",
        DECLARED_FAKE: "pristine",
        FORWARDING: "pristine",
        OP_BOUNDARY: "not-applicable",
        UNDER_COMPILE: "pristine",
        **dict.fromkeys(BOUNDARIES, "pristine"),
    }
    assert code == ExitCode.NEEDS_APPLY
    assert manifest(venv)["schema"] == 1, "check writes nothing"

    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK, run.stdout
    assert patch_result(run.json, CUDA)["action"] == "already-applied"
    assert target_file(venv).read_bytes() == written
    assert fp4_file(venv).read_bytes() == expected("0.7.0", FP4).encode()
    data = manifest(venv)
    assert data["schema"] == 2
    records = {r["relpath"]: r for r in data["files"]}  # type: ignore[attr-defined]
    assert [p["fi_patch_version"] for p in records[TARGET]["patches"]] == ["0.1.0"]
    assert [p["id"] for p in records[FP4]["patches"]] == [
        FORWARDING,
        UNDER_COMPILE,
        INTERLEAVE,
        BATCHED,
        GROUPED,
    ]
    assert [p["id"] for p in records[UTILS]["patches"]] == [DECLARED, DECLARED_FAKE]

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.0"])
    assert fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], FP4)
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []


def test_a_0_1_0_record_is_reverted_directly(
    old_tool: Path, runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    assert old(old_tool, "apply", "--venv", venv, "--no-verify").returncode == 0
    run = fi_patch(runner, "revert", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    assert patch_result(run.json)["action"] == "reverted"
    assert target_file(venv).read_bytes() == original("0.5.0").encode()
    assert manifest(venv) == {"schema": 2, "files": []}


@pytest.mark.parametrize(
    ("status", "state", "finished_by"),
    [
        pytest.param("applying", "patched", "apply", id="killed-apply-after-its-write"),
        pytest.param("reverting", "patched", "revert", id="killed-revert-before-its-write"),
    ],
)
def test_an_interrupted_0_1_0_run_is_finished(
    old_tool: Path,
    runner: CliRunner,
    venv_with: MakeVenv,
    status: str,
    state: str,
    finished_by: str,
) -> None:
    """The status 0.1.0 leaves when killed mid-write (its manifest says so, the file is its
    patched text): this version reports it and finishes it."""
    venv = venv_with("0.5.0")
    assert old(old_tool, "apply", "--venv", venv, "--no-verify").returncode == 0
    data = manifest(venv)
    data["entries"][0]["status"] = status  # type: ignore[index]
    (venv / ".fi-patch" / "manifest.json").write_text(json.dumps(data))

    check = fi_patch(runner, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.NEEDS_APPLY
    assert patch_result(check.json)["state"] == state
    assert patch_result(check.json)["interrupted"] == status.removesuffix("ing")
    done = fi_patch(runner, finished_by, "--venv", venv, "--no-verify")
    assert done.code == ExitCode.OK, done.text
    states, code = states_of(runner, venv)
    expected_state = "patched" if finished_by == "apply" else "pristine"
    assert states[CUDA] == expected_state
    assert code == (ExitCode.OK if finished_by == "apply" else ExitCode.NEEDS_APPLY)
