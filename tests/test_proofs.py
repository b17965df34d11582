"""Proof inside the venv: the pre-flight, the real Dynamo trace before and after, and rollback.

The trace runs for real: torch 2.14.1 (the CUDA 13.0 build, on the CPU), FlashInfer 0.7.4, this
machine's nvcc 13.0. The failures are made the way they happen on GPU boxes: a CPU torch, a
toolkit of another version through CUDA_HOME, no nvcc, and a torch that cannot be imported.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from fi_patcher.verify import diagnose_packaging, judge_trace
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, state_of
from tests.support.deps import use
from tests.support.releases import RELEASES, released_text
from tests.support.venvs import target_file
from tests.test_codemod import expected


def manifest(venv: Path) -> dict[str, object]:
    (entry,) = json.loads((venv / ".fi-patch" / "manifest.json").read_text())["entries"]
    assert isinstance(entry, dict)
    return entry


def toolkit(folder: Path, release: str) -> Path:
    """A stand-in CUDA toolkit whose nvcc reports `release`, as `nvcc --version` prints it."""
    nvcc = folder / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(
        "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
        f"echo 'Cuda compilation tools, release {release}, V{release}.131'\n"
    )
    nvcc.chmod(0o755)
    return folder


def test_apply_proves_the_patch_with_a_real_trace(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    before = fi_patch(runner, "check", "--venv", venv, "--verify", "--json")
    assert before.code == ExitCode.NEEDS_APPLY
    report = before.json["results"][0]["verification"]
    assert report["mode"] == "before" and report["passed"] is False
    assert "Unsupported: Attempted to call function marked as skipped" in report["summary"]
    assert "get_cuda_path" in report["summary"] and "subprocess.py" in report["summary"]

    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    (result,) = run.json["results"]
    assert result["action"] == "applied"
    assert result["preflight"]["torch_cuda"] == "13.0"
    assert result["preflight"]["nvcc_version"] == "13.0"
    assert result["preflight"]["mismatch"] is False
    assert result["verification"]["before"]["passed"] is False
    assert "get_cuda_version" in result["verification"]["before"]["summary"]
    after = result["verification"]["after"]
    assert after["passed"] is True
    assert "get_cuda_version() = 13.0" in after["summary"]
    assert "started no process" in after["summary"]
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    entry = manifest(venv)
    assert entry["verification"] == "passed"
    assert entry["torch_cuda"] == "13.0" and entry["nvcc_version"] == "13.0"

    verified = fi_patch(runner, "check", "--venv", venv, "--verify")
    assert verified.code == ExitCode.OK
    assert "verification (after the patch): passes" in verified.text

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])


def test_apply_for_people_says_before_fails_after_passes(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    run = fi_patch(runner, "apply", "--venv", venv)
    assert run.code == ExitCode.OK
    assert "pre-flight: torch 2.14.1+cu130: torch.version.cuda = '13.0'; nvcc 13.0" in run.text
    assert "before: fails at torch.compile(fullgraph=True) trace: Unsupported" in run.text
    assert "after: passes" in run.text


def test_toolkit_mismatch_is_refused_unless_allowed(venv_with: MakeVenv, tmp_path: Path) -> None:
    venv = venv_with("0.7.4")
    cuda_home = toolkit(tmp_path / "cuda-12.4", "12.4")
    runner = CliRunner(env={"CUDA_HOME": str(cuda_home), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    refused = fi_patch(runner, "apply", "--venv", venv)
    assert refused.code == ExitCode.TOOLKIT_MISMATCH
    assert "torch.version.cuda is 13.0 but FlashInfer would run nvcc 12.4" in refused.text
    assert f"{cuda_home}/bin/nvcc" in refused.text and "from $CUDA_HOME" in refused.text
    assert "point CUDA_HOME at a CUDA 13.0 toolkit" in refused.text
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])

    allowed = fi_patch(runner, "apply", "--venv", venv, "--allow-mismatch")
    assert allowed.code == ExitCode.OK, allowed.text
    assert "warning: toolkit mismatch" in allowed.text
    assert "proceeding because of --allow-mismatch" in allowed.text
    assert "after: passes" in allowed.text
    entry = manifest(venv)
    assert entry["mismatch_allowed"] is True and entry["nvcc_version"] == "12.4"


def test_no_nvcc_proceeds_on_torch_alone(venv_with: MakeVenv, tmp_path: Path) -> None:
    venv = venv_with("0.7.4")
    empty_home = tmp_path / "no-toolkit"
    empty_home.mkdir()
    runner = CliRunner(env={"CUDA_HOME": str(empty_home), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK
    (result,) = run.json["results"]
    assert result["preflight"]["nvcc_version"] is None
    assert any("no nvcc found" in w and "only source" in w for w in result["warnings"])
    assert any("verification skipped" in w for w in result["warnings"])
    assert manifest(venv)["verification"] == "skipped"


def broken_torch(folder: Path, init: str) -> Path:
    """A torch whose version file reads fine and whose import fails, as after a broken upgrade."""
    package = folder / "torch"
    package.mkdir(parents=True)
    (package / "version.py").write_text("__version__ = '2.14.1+cu130'\ncuda = '13.0'\n")
    (package / "__init__.py").write_text(init)
    return folder


def test_failed_verification_rolls_back(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    original = target_file(venv).read_bytes()
    use(
        venv,
        broken_torch(
            tmp_path / "broken",
            "raise ImportError("
            "'libcudart.so.13: cannot open shared object file: No such file or directory')\n",
        ),
    )
    run = fi_patch(runner, "apply", "--venv", venv)
    assert run.code == ExitCode.VERIFY_FAILED
    assert "rolled back" in run.text
    assert "libcudart.so.13: cannot open shared object file" in run.text
    assert (
        hashlib.sha256(target_file(venv).read_bytes()).digest() == hashlib.sha256(original).digest()
    )
    assert json.loads((venv / ".fi-patch" / "manifest.json").read_text())["entries"] == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_verification_timeout_rolls_back(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    use(venv, broken_torch(tmp_path / "slow", "import time\ntime.sleep(60)\n"))
    run = fi_patch(runner, "apply", "--venv", venv, "--verify-timeout", "2")
    assert run.code == ExitCode.VERIFY_FAILED
    assert "did not finish" in run.text and "within 2 s" in run.text
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])


def test_check_verify_flags_a_patch_that_no_longer_works(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    use(venv, broken_torch(tmp_path / "broken", "raise ImportError('torch is broken')\n"))
    run = fi_patch(runner, "check", "--venv", venv, "--verify")
    assert run.code == ExitCode.VERIFY_FAILED
    assert "verification (after the patch): fails at import torch" in run.text
    assert "torch is broken" in run.text


PACKAGING_FAILURE = {
    "mode": "after",
    "stage": "torch.compile(fullgraph=True) trace",
    "torch_version": "2.6.0",
    "packaging_version": "26.1",
    "error": {
        "type": "torch._dynamo.exc.Unsupported",
        "message": "call_method UserDefinedObjectVariable(frozenset) issuperset",
        "frames": [["/venv/lib/python3.11/site-packages/packaging/version.py", 200, "__init__"]],
    },
}


@pytest.mark.parametrize(
    ("torch_version", "packaging_version", "named"),
    [
        pytest.param("2.6.0", "26.1", True, id="torch-2.6-packaging-26.1"),
        pytest.param("2.5.1", "26.4", True, id="torch-2.5-packaging-26.4"),
        pytest.param("2.6.0", "26.0", False, id="packaging-without-fast-path"),
        pytest.param("2.9.1", "26.1", False, id="torch-that-traces-it"),
    ],
)
def test_old_torch_with_new_packaging_is_named_exactly(
    torch_version: str, packaging_version: str, named: bool
) -> None:
    facts = {
        **PACKAGING_FAILURE,
        "torch_version": torch_version,
        "packaging_version": packaging_version,
    }
    diagnosis = diagnose_packaging(facts)
    assert (diagnosis is not None) is named
    report = judge_trace(facts)
    assert not report.passed
    assert ("install packaging<26.1" in report.summary) is named
