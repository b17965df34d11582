"""What check says is what apply does: one verdict for both, so that `check || apply` converges.

Each environment is real: FlashInfer releases from the index, torch's CUDA build and its CPU
build, and, where a torch of another build is needed (too old for a patch, built for CUDA 12.8),
a torch whose version file says so, as the pre-flight reads it. In each, `check`, then `apply`,
then `check` again:
- apply exit 0 (or 16) means the next check exits the same;
- check exit 3 means apply exits 0, or 16 where check showed the evidence of a patch apply would
  leave out for want of knowledge;
- any other check exit means apply refuses with the same code, and writes nothing;
- check exit 0 (or 16) means apply writes nothing, and exits the same;
and what check says apply would do with each patch is what apply did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import Run, fi_patch, patch_result
from tests.support.deps import CPU_TORCH, CUDA_TORCH, fake_torch, shared, use
from tests.support.relabel import docstring_changed, relabelled
from tests.support.releases import (
    CUDA,
    FORWARDING,
    FP4,
    OP_BOUNDARY,
    RELEASES,
    UNDER_COMPILE,
    fetch,
)
from tests.support.tiers import SLOW
from tests.support.venvs import create_venv, fp4_file, pip, written_files

PLAIN = CliRunner(env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "NO_COLOR": "1"})


@dataclass(frozen=True)
class Case:
    venv: Path
    check: ExitCode
    """What the first check must say (so that no case passes by saying nothing)."""
    runner: CliRunner = PLAIN
    verify: bool = False
    """Run apply's proofs (the others skip them: the verdict is about what apply decides)."""


@dataclass(frozen=True)
class Given:
    """What a case is built from: the session's venvs, the test's folder, the PYTHONPATH copy."""

    venv_with: MakeVenv
    tmp_path: Path
    pythonpath_copy: Path


Build = Callable[[Given], Case]


def _cuda(given: Given) -> Case:
    return Case(given.venv_with("0.7.0"), ExitCode.NEEDS_APPLY)


def _cpu(given: Given) -> Case:
    """torch 2.13.0's CPU build: get_cuda_version's patch would change nothing, and is left out;
    the others are written and proven on it."""
    venv = given.venv_with("0.7.0")
    use(venv, shared(CPU_TORCH))
    return Case(venv, ExitCode.NEEDS_APPLY, verify=True)


def _old_torch(given: Given) -> Case:
    venv = given.venv_with("0.7.0")
    use(venv, fake_torch(given.tmp_path / "old", "raise ImportError('old')\n", "2.3.1+cu130"))
    return Case(venv, ExitCode.NEEDS_APPLY)


def _old_torch_before_the_move(given: Given) -> Case:
    venv = given.venv_with("0.6.7")
    use(venv, fake_torch(given.tmp_path / "old", "raise ImportError('old')\n", "2.3.1+cu130"))
    return Case(venv, ExitCode.NEEDS_APPLY)


def _cuda_12_8(given: Given) -> Case:
    """torch built for CUDA 12.8, and this machine's nvcc 13.0."""
    venv = given.venv_with("0.7.0")
    use(venv, _torch_for_cuda_12_8(given.tmp_path))
    return Case(venv, ExitCode.TOOLKIT_MISMATCH)


def _torch_for_cuda_12_8(tmp_path: Path) -> Path:
    return fake_torch(tmp_path / "cu128", "raise ImportError('cu128')\n", "2.14.1+cu128", "12.8")


def _no_torch(given: Given) -> Case:
    venv = given.venv_with("0.7.0")
    use(venv, None)
    return Case(venv, ExitCode.NO_TORCH)


def _forced_then_wiped(given: Given) -> Case:
    """0.7.0 rebuilt as 0.7.5 with a line of its own in fp4_quantize's docstring: forced (the
    proofs decide), then a reinstall puts the build's text back. Only --force writes it again."""
    folder = given.tmp_path / "wheel"
    folder.mkdir()
    wheel = relabelled(fetch(RELEASES["0.7.0"]), "0.7.0", "0.7.5", folder, {FP4: docstring_changed})
    venv = create_venv(given.tmp_path / "venv-0.7.5")
    pip(venv, "install", "--no-deps", "--no-index", str(wheel))
    use(venv, shared(CUDA_TORCH))
    forced = fi_patch(PLAIN, "apply", "--venv", venv, "--force")
    assert forced.code == ExitCode.OK, forced.text
    pip(venv, "install", "--force-reinstall", "--no-deps", "--no-index", str(wheel))
    return Case(venv, ExitCode.NEEDS_APPLY)


def _pre_release(given: Given) -> Case:
    return Case(given.venv_with("0.7.2rc6"), ExitCode.NEEDS_APPLY)


def _pre_release_with_an_unknown_text(given: Given) -> Case:
    """0.7.1rc1, whose mm_fp4 fi-patch has never seen: left out, the others written."""
    return Case(given.venv_with("0.7.1rc1"), ExitCode.NEEDS_APPLY)


def _deleted_after_apply(given: Given) -> Case:
    venv = given.venv_with("0.7.0")
    assert fi_patch(PLAIN, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    fp4_file(venv).unlink()
    return Case(venv, ExitCode.LAYOUT)


def _backup_lost(given: Given) -> Case:
    """One patch applied to fp4_quantization.py, then fi-patch's backup of its original deleted:
    apply would need it to add the others, and cannot have it."""
    venv = given.venv_with("0.7.0")
    applied = fi_patch(PLAIN, "apply", "--venv", venv, "--no-verify", "--patch", FORWARDING)
    assert applied.code == ExitCode.OK, applied.text
    for backup in (venv / ".fi-patch" / "backups").iterdir():
        backup.unlink()
    return Case(venv, ExitCode.STORE)


def _imported_instead(given: Given) -> Case:
    """A `pip install --target` copy on PYTHONPATH: a server started like fi-patch imports it."""
    copy = str(given.pythonpath_copy)
    shadowed = CliRunner(env={"PYTHONPATH": copy, "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    return Case(given.venv_with("0.7.4"), ExitCode.LAYOUT, runner=shadowed)


CASES: dict[str, Build] = {
    "cuda-torch": _cuda,
    "cpu-torch": _cpu,
    "torch-too-old": _old_torch,
    "torch-too-old-0.6.7": _old_torch_before_the_move,
    "torch-for-cuda-12.8-nvcc-13.0": _cuda_12_8,
    "no-torch": _no_torch,
    "forced-then-wiped": _forced_then_wiped,
    "pre-release": _pre_release,
    "pre-release-with-an-unknown-text": _pre_release_with_an_unknown_text,
    "file-deleted-after-apply": _deleted_after_apply,
    "backup-lost": _backup_lost,
    "another-copy-imported": _imported_instead,
}


def _written(venv: Path) -> dict[str, str]:
    """What apply may write: the files the patches work on, and fi-patch's records."""
    paths = [*written_files(venv), *sorted((venv / ".fi-patch").rglob("*"))]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


# What check says apply would do with a patch, and the actions apply reports for it.
_DOES = {
    "write": {"applied", "finished"},
    "nothing": {"already-applied", "not-applicable"},
    "left-out": {"left-out"},
}


@pytest.mark.parametrize(
    "case",
    [
        c
        if c
        not in ("cpu-torch", "forced-then-wiped", "pre-release", "pre-release-with-an-unknown-text")
        else pytest.param(c, marks=SLOW)
        for c in CASES
    ],
)
def test_check_then_apply_then_check_converges(
    venv_with: MakeVenv, tmp_path: Path, pythonpath_copy: Path, case: str
) -> None:
    built = CASES[case](Given(venv_with, tmp_path, pythonpath_copy))
    venv, runner = built.venv, built.runner
    first = fi_patch(runner, "check", "--venv", venv, "--json")
    assert first.code == built.check, first.stdout
    before = _written(venv)
    flags = () if built.verify else ("--no-verify",)
    applied = fi_patch(runner, "apply", "--venv", venv, "--json", *flags)
    again = fi_patch(runner, "check", "--venv", venv, "--json")

    done = (ExitCode.OK, ExitCode.LEFT_OUT_UNKNOWN)
    if applied.code in done:
        assert again.code == applied.code, again.stdout
    if first.code == ExitCode.NEEDS_APPLY:
        (result,) = first.json["results"]
        unknown = any(p["evidence"] for p in result["patches"])
        assert applied.code == done[unknown], applied.stdout
        _did_what_check_said(first, applied)
    elif first.code not in done:
        assert applied.code == first.code, applied.stdout
        assert _written(venv) == before
        (result,) = first.json["results"]
        said = result.get("refusal") or result["error"]
        assert said["message"] == applied.json["results"][0]["error"]["message"]
    else:
        assert applied.code == first.code, applied.stdout
        assert _written(venv) == before


def _did_what_check_said(checked: Run, applied: Run) -> None:
    (said,) = checked.json["results"]
    (done,) = applied.json["results"]
    actions = {p["patch"]: p["action"] for p in done["patches"]}
    for patch in said["patches"]:
        assert actions[patch["patch"]] in _DOES[patch["apply"]], (patch, actions)


def test_a_cpu_torch_leaves_get_cuda_version_out_or_refuses_it_when_named(
    venv_with: MakeVenv,
) -> None:
    """One rule for every fact that makes a patch useless here: left out, with its reason, in
    check and apply alike; refused with that fact's code when the patch is named."""
    venv = venv_with("0.7.0")
    use(venv, shared(CPU_TORCH))
    checked = fi_patch(PLAIN, "check", "--venv", venv, "--json")
    cuda = patch_result(checked.json, CUDA)
    assert (cuda["state"], cuda["apply"], cuda["exit_code"]) == ("left-out", "left-out", 0)
    assert "is a CPU build (torch.version.cuda is None)" in cuda["reason"]
    assert patch_result(checked.json, FORWARDING)["apply"] == "write"

    named = fi_patch(PLAIN, "check", "--venv", venv, "--patch", CUDA, "--json")
    assert named.code == ExitCode.INERT, named.stdout
    refused = fi_patch(PLAIN, "apply", "--venv", venv, "--patch", CUDA)
    assert refused.code == ExitCode.INERT
    assert "is a CPU build (torch.version.cuda is None)" in refused.text
    assert "install a CUDA build of torch" in refused.text
    assert not (venv / ".fi-patch").exists()

    people = fi_patch(PLAIN, "check", "--venv", venv)
    assert "flashinfer/jit/cpp_ext.py cuda-version-torch-first left-out left out" in people.text


def test_a_torch_too_old_for_a_patch_is_told_the_same_by_check_and_apply(
    venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.0")
    use(venv, fake_torch(tmp_path / "old", "raise ImportError('old')\n", "2.3.1+cu130"))
    checked = fi_patch(PLAIN, "check", "--venv", venv, "--json")
    assert checked.code == ExitCode.NEEDS_APPLY
    left = patch_result(checked.json, UNDER_COMPILE)
    assert (left["state"], left["apply"]) == ("left-out", "left-out")
    assert "needs torch >=2.4" in left["reason"]
    applied = fi_patch(PLAIN, "apply", "--venv", venv, "--no-verify", "--json")
    assert patch_result(applied.json, UNDER_COMPILE)["action"] == "left-out"
    after = fi_patch(PLAIN, "check", "--venv", venv, "--json")
    assert after.code == ExitCode.OK, after.stdout
    assert patch_result(after.json, UNDER_COMPILE)["state"] == "left-out"
    assert patch_result(after.json, OP_BOUNDARY)["state"] == "not-applicable"


def test_check_verify_without_torch_exits_as_apply_would(venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.0")
    use(venv, None)
    run = fi_patch(PLAIN, "check", "--venv", venv, "--verify")
    assert run.code == ExitCode.NO_TORCH, run.text
    assert "fails at import torch: ModuleNotFoundError" in run.text
    assert f"apply would refuse (exit 14): torch is not installed for {venv}/bin/python" in run.text


def test_check_reports_the_refusal_apply_would_give(venv_with: MakeVenv, tmp_path: Path) -> None:
    venv = venv_with("0.7.0")
    use(venv, _torch_for_cuda_12_8(tmp_path))
    checked = fi_patch(PLAIN, "check", "--venv", venv, "--json")
    (result,) = checked.json["results"]
    assert result["refusal"]["kind"] == "ToolkitMismatch"
    cuda = patch_result(checked.json, CUDA)
    assert (cuda["state"], cuda["apply"], cuda["exit_code"]) == ("pristine", "refuse", 12)
    assert patch_result(checked.json, FORWARDING)["apply"] == "write"
    people = fi_patch(PLAIN, "check", "--venv", venv)
    assert (
        "apply would refuse (exit 12): toolkit mismatch: torch.version.cuda is 12.8" in people.text
    )
    assert "fix: point CUDA_HOME at a CUDA 12.8 toolkit" in people.text
    quiet = fi_patch(PLAIN, "-q", "check", "--venv", venv)
    assert f"{venv}: {CUDA} pristine; apply refuses it (12)" in quiet.stdout
