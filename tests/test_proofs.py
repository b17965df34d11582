"""Proof inside the venv: the pre-flight, every patch's real proof before and after, rollback.

The proofs run for real, all in one process of the target: torch 2.14.1 (the CUDA 13.0 build,
on the CPU), real FlashInfer releases, this machine's nvcc 13.0. The failures are made the way
they happen on GPU boxes: a CPU torch, a toolkit of another version through CUDA_HOME, no nvcc,
a torch that cannot be imported, a torch too old, and TORCH_COMPILE_DISABLE set by a user.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from fi_patcher.proofs import diagnose_packaging, judge_proof
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, state_of, states_of
from tests.support.deps import fake_torch, use
from tests.support.expected import expected
from tests.support.releases import (
    BOUNDARIES,
    CUDA,
    DECLARED,
    DECLARED_FAKE,
    FORWARDING,
    FP4,
    LOGGING,
    OP_BOUNDARY,
    RELEASES,
    TARGET,
    UNDER_COMPILE,
    released_text,
)
from tests.support.tiers import SLOW
from tests.support.toolkits import toolkit
from tests.support.venvs import fp4_file, site_packages, target_file


def manifest(venv: Path) -> dict[str, dict[str, object]]:
    """The manifest's patch records, by patch id."""
    files = json.loads((venv / ".fi-patch" / "manifest.json").read_text())["files"]
    return {p["id"]: p for f in files for p in f["patches"]}


def test_apply_proves_every_patch_with_real_proofs(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.0")
    before = fi_patch(runner, "check", "--venv", venv, "--verify", "--json")
    assert before.code == ExitCode.NEEDS_APPLY
    cuda = patch_result(before.json, CUDA)["verification"]
    assert cuda["mode"] == "before" and cuda["passed"] is False
    assert "Unsupported: Attempted to call function marked as skipped" in cuda["summary"]
    assert "get_cuda_path" in cuda["summary"] and "subprocess.py" in cuda["summary"]
    forwarding = patch_result(before.json, FORWARDING)["verification"]
    assert forwarding["passed"] is False
    assert (
        "is_global_scale_inversed=True: the global scale would be inverted"
        in (forwarding["summary"])
    )
    compiled = patch_result(before.json, UNDER_COMPILE)["verification"]
    assert compiled["passed"] is False
    assert (
        "fails at torch.compile(fullgraph=True) trace of flashinfer.fp4_quantize"
        in (compiled["summary"])
    )
    assert "get_compute_capability" in compiled["summary"]

    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    (result,) = run.json["results"]
    assert result["preflight"]["torch_cuda"] == "13.0"
    assert result["preflight"]["nvcc_version"] == "13.0"
    assert result["preflight"]["mismatch"] is False
    for patch in (CUDA, FORWARDING, UNDER_COMPILE):
        done = patch_result(run.json, patch)
        assert done["action"] == "applied"
        assert done["verification"]["before"]["passed"] is False
        assert done["verification"]["after"]["passed"] is True
    summaries = {
        p: patch_result(run.json, p)["verification"]["after"]["summary"]
        for p in (CUDA, FORWARDING, UNDER_COMPILE)
    }
    assert "get_cuda_version() = 13.0" in summaries[CUDA]
    assert "started no process" in summaries[CUDA]
    assert "passes enable_pdl=True as enable_pdl" in summaries[FORWARDING]
    # Every number in it says what it counts: the graph's own calls are not FlashInfer's.
    assert summaries[UNDER_COMPILE] == (
        "passes (fullgraph trace holds one flashinfer.fp4_quantize call and no other FlashInfer "
        "call)"
    )
    assert target_file(venv).read_bytes() == expected("0.7.0").encode()
    assert fp4_file(venv).read_bytes() == expected("0.7.0", FP4).encode()
    records = manifest(venv)
    assert {p: r["verification"] for p, r in records.items()} == dict.fromkeys(records, "passed")
    assert records[CUDA]["torch_cuda"] == "13.0" and records[CUDA]["nvcc_version"] == "13.0"
    assert records[UNDER_COMPILE]["nvcc_version"] is None

    verified = fi_patch(runner, "check", "--venv", venv, "--verify")
    assert verified.code == ExitCode.OK, verified.text
    count = len(records)
    assert f"proofs: {count} of {count} pass on the patched code (-v shows each)" in (
        " ".join(verified.stdout.split())
    )
    verbose = fi_patch(runner, "check", "--venv", venv, "--verify", "-v")
    for patch in (CUDA, FORWARDING, UNDER_COMPILE):
        assert f"{patch} proof (after the patch): passes" in verbose.text

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.0"])
    assert fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], FP4)


@pytest.mark.parametrize(
    ("version", "patches"),
    [
        ("0.6.12", (FORWARDING, UNDER_COMPILE)),
        pytest.param("0.7.1", (UNDER_COMPILE,), marks=SLOW),
        pytest.param("0.7.4", (UNDER_COMPILE,), marks=SLOW),
    ],
)
def test_fp4_proofs_on_every_shape(
    runner: CliRunner, venv_with: MakeVenv, version: str, patches: tuple[str, ...]
) -> None:
    """Red before and green after on the first release of each fp4 shape."""
    venv = venv_with(version)
    chosen = [x for p in patches for x in ("--patch", p)]
    run = fi_patch(runner, "apply", "--venv", venv, *chosen, "--json")
    assert run.code == ExitCode.OK, run.stdout
    for patch in patches:
        proofs = patch_result(run.json, patch)["verification"]
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    assert fp4_file(venv).read_bytes() == expected(version, FP4, patches).encode()
    assert target_file(venv).read_bytes() == released_text(RELEASES[version])


@SLOW
def test_apply_for_people_says_before_fails_after_passes(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """By default the proofs are one line; -v gives each its own."""
    venv = venv_with("0.7.4")
    run = fi_patch(runner, "apply", "--venv", venv, "-v")
    assert run.code == ExitCode.OK
    assert "pre-flight: torch 2.14.1+cu130: torch.version.cuda = '13.0'" in run.text
    assert "nvcc: " in run.text and "(13.0), from " in run.text
    assert (
        "cuda-version-torch-first before: fails at torch.compile(fullgraph=True) trace: "
        "Unsupported" in run.text
    )
    assert "cuda-version-torch-first after: passes" in run.text
    assert "fp4-quantize-under-compile after: passes" in run.text


@SLOW
def test_toolkit_mismatch_is_refused_unless_allowed(venv_with: MakeVenv, tmp_path: Path) -> None:
    venv = venv_with("0.7.4")
    cuda_home = toolkit(tmp_path / "cuda-12.4", "12.4")
    runner = CliRunner(env={"CUDA_HOME": str(cuda_home), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    refused = fi_patch(runner, "apply", "--venv", venv)
    assert refused.code == ExitCode.TOOLKIT_MISMATCH
    assert "torch.version.cuda is 13.0 but FlashInfer would run nvcc 12.4" in refused.text
    assert f"({cuda_home}/bin/nvcc, from CUDA_HOME in fi-patch's environment)" in refused.text
    assert "point CUDA_HOME at a CUDA 13.0 toolkit" in refused.text
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])
    assert fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.4"], FP4)

    allowed = fi_patch(runner, "apply", "--venv", venv, "--allow-mismatch", "-v")
    assert allowed.code == ExitCode.OK, allowed.text
    assert "warning: toolkit mismatch" in allowed.text
    assert "proceeding because of --allow-mismatch" in allowed.text
    assert "cuda-version-torch-first after: passes" in allowed.text
    entry = manifest(venv)[CUDA]
    assert entry["mismatch_allowed"] is True and entry["nvcc_version"] == "12.4"


def test_the_toolkit_pre_flight_belongs_to_get_cuda_version_only(
    venv_with: MakeVenv, tmp_path: Path
) -> None:
    """A mismatched toolkit says nothing about the fp4 patches: they apply, nvcc unasked."""
    venv = venv_with("0.7.4")
    cuda_home = toolkit(tmp_path / "cuda-12.4", "12.4")
    runner = CliRunner(env={"CUDA_HOME": str(cuda_home), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    run = fi_patch(
        runner, "apply", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify", "--json"
    )
    assert run.code == ExitCode.OK, run.stdout
    preflight = run.json["results"][0]["preflight"]
    assert preflight["nvcc_checked"] is False and preflight["nvcc_version"] is None
    assert fp4_file(venv).read_bytes() == expected("0.7.4", FP4, [UNDER_COMPILE]).encode()


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
    assert manifest(venv)[CUDA]["verification"] == "skipped"


def cached_of(source: Path) -> tuple[int, dict[str, bytes]]:
    """A file's mtime and the bytecode cached for it."""
    pycs = sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"))
    assert pycs, f"pip compiled {source}"
    return source.stat().st_mtime_ns, {p.name: p.read_bytes() for p in pycs}


def test_failed_proofs_roll_back_every_file(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.0")
    originals = {f: (site_packages(venv) / f).read_bytes() for f in (TARGET, FP4)}
    # A timestamp .pyc is valid for its source's mtime and size: undoing keeps both true.
    found = {f: cached_of(site_packages(venv) / f) for f in (TARGET, FP4)}
    use(
        venv,
        fake_torch(
            tmp_path / "broken",
            "raise ImportError("
            "'libcudart.so.13: cannot open shared object file: No such file or directory')\n",
        ),
    )
    run = fi_patch(runner, "apply", "--venv", venv)
    assert run.code == ExitCode.VERIFY_FAILED
    assert "rolled back" in run.text
    # Not a terminal: the long steps are told on stderr, putting the files back among them.
    assert re.search(
        r"fi-patch: \[ *\d+\.\ds\] putting back \d+ files whose proofs failed", run.stderr
    )
    assert "libcudart.so.13: cannot open shared object file" in run.text
    for relpath, original in originals.items():
        now = (site_packages(venv) / relpath).read_bytes()
        assert hashlib.sha256(now).digest() == hashlib.sha256(original).digest()
        assert cached_of(site_packages(venv) / relpath) == found[relpath]
    assert json.loads((venv / ".fi-patch" / "manifest.json").read_text())["files"] == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_a_failed_proof_rolls_back_only_the_files_it_covers(
    venv_with: MakeVenv,
) -> None:
    """With TORCH_COMPILE_DISABLE=1 (a user's setting), get_cuda_version's fullgraph trace
    cannot run, while the op's forwarding needs no compiler: cpp_ext.py is put back, and
    fp4_quantization.py keeps its proven patch."""
    venv = venv_with("0.7.0")
    runner = CliRunner(env={"TORCH_COMPILE_DISABLE": "1", "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    run = fi_patch(
        runner, "apply", "--venv", venv, "--patch", CUDA, "--patch", FORWARDING, "--json"
    )
    assert run.code == ExitCode.VERIFY_FAILED
    (result,) = run.json["results"]
    assert "the proof of cuda-version-torch-first" in result["error"]["message"]
    assert f"{target_file(venv)} (cuda-version-torch-first)" in result["error"]["message"]
    assert str(fp4_file(venv)) not in result["error"]["message"]
    assert patch_result(run.json, CUDA)["action"] == "rolled-back"
    assert patch_result(run.json, FORWARDING)["action"] == "applied"
    assert {f["relpath"]: f["action"] for f in result["files"]} == {
        TARGET: "rolled-back",
        FP4: "written",
    }
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.0"])
    assert fp4_file(venv).read_bytes() == expected("0.7.0", FP4, [FORWARDING]).encode()
    states, _ = states_of(CliRunner(env={"VIRTUAL_ENV": None}), venv)
    assert states == {
        LOGGING: "pristine",
        CUDA: "pristine",
        DECLARED: "pristine",
        DECLARED_FAKE: "pristine",
        FORWARDING: "patched",
        OP_BOUNDARY: "not-applicable",
        UNDER_COMPILE: "pristine",
        **dict.fromkeys(BOUNDARIES, "pristine"),
    }


def test_a_revert_whose_remaining_patch_fails_its_proof_is_rolled_back(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    """Taking one patch out rebuilds the file with the others, which must prove themselves
    again: with a torch that no longer imports, the file stays as it was."""
    venv = venv_with("0.7.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    before = fp4_file(venv).read_bytes()
    use(venv, fake_torch(tmp_path / "broken", "raise ImportError('torch is broken')\n"))
    run = fi_patch(runner, "revert", "--venv", venv, "--patch", UNDER_COMPILE, "--json")
    assert run.code == ExitCode.VERIFY_FAILED, run.stdout
    (result,) = run.json["results"]
    assert (
        "after taking out fp4-quantize-under-compile, the proof of fp4-op-keyword-forwarding"
        in (result["error"]["message"])
    )
    assert patch_result(run.json, UNDER_COMPILE)["action"] == "rolled-back"
    assert fp4_file(venv).read_bytes() == before
    states, _ = states_of(runner, venv)
    assert states == {
        **dict.fromkeys((LOGGING, CUDA, DECLARED, DECLARED_FAKE, FORWARDING), "patched"),
        UNDER_COMPILE: "patched",
        **dict.fromkeys(BOUNDARIES, "patched"),
        OP_BOUNDARY: "not-applicable",
    }


def test_verification_timeout_rolls_back(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    use(venv, fake_torch(tmp_path / "slow", "import time\ntime.sleep(60)\n"))
    run = fi_patch(runner, "apply", "--venv", venv, "--verify-timeout", "2")
    assert run.code == ExitCode.VERIFY_FAILED
    assert re.search(r"fi-patch: \[ *\d+\.\ds\] putting back what this apply wrote: ", run.stderr)
    assert "did not finish" in run.text and "within 2 s" in run.text
    assert "raise --verify-timeout" in run.text
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"])
    assert fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.4"], FP4)


def test_check_verify_flags_a_patch_that_no_longer_works(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    use(venv, fake_torch(tmp_path / "broken", "raise ImportError('torch is broken')\n"))
    run = fi_patch(runner, "check", "--venv", venv, "--verify")
    assert run.code == ExitCode.VERIFY_FAILED
    assert "cuda-version-torch-first proof (after the patch): fails at import torch" in run.text
    assert "torch is broken" in run.text


def test_a_torch_too_old_leaves_the_branch_out_or_refuses_it(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.0")
    use(venv, fake_torch(tmp_path / "old", "raise ImportError('old')\n", "2.3.1+cu130"))
    named = fi_patch(
        runner,
        "apply",
        "--venv",
        venv,
        "--patch",
        FORWARDING,
        "--patch",
        UNDER_COMPILE,
        "--no-verify",
    )
    assert named.code == ExitCode.REQUIREMENT
    assert "fp4-quantize-under-compile needs torch >=2.4" in named.text
    assert "torch 2.3.1+cu130" in named.text
    assert not (venv / ".fi-patch").exists()

    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK, run.stdout
    left = patch_result(run.json, UNDER_COMPILE)
    assert left["action"] == "left-out" and "needs torch >=2.4" in left["message"]
    assert patch_result(run.json, FORWARDING)["action"] == "applied"
    assert any(
        "fp4-quantize-under-compile left out" in w for w in run.json["results"][0]["warnings"]
    )
    assert fp4_file(venv).read_bytes() == expected("0.7.0", FP4, [FORWARDING]).encode()


PACKAGING_FAILURE = {
    "patch": CUDA,
    "mode": "after",
    "stage": "torch.compile(fullgraph=True) trace",
    "problems": [],
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
    process = {"torch_version": torch_version, "packaging_version": packaging_version}
    diagnosis = diagnose_packaging({**process, **PACKAGING_FAILURE})
    assert (diagnosis is not None) is named
    report = judge_proof(PACKAGING_FAILURE, process)
    assert not report.passed
    assert ("install packaging<26.1" in report.summary) is named


def test_check_verify_leaves_the_target_as_it_was(runner: CliRunner, venv_with: MakeVenv) -> None:
    """Read-only means read-only: the proofs run with -B, and write no file in the target, no
    bytecode either, whether they pass or fail."""
    venv = venv_with("0.7.0")

    def snapshot() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(venv)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in venv.rglob("*")
            if not p.is_symlink()
        }

    before = snapshot()
    assert fi_patch(runner, "check", "--venv", venv, "--verify").code == ExitCode.NEEDS_APPLY
    assert snapshot() == before
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    patched = snapshot()
    assert fi_patch(runner, "check", "--venv", venv, "--verify").code == ExitCode.OK
    assert snapshot() == patched


def test_a_proof_that_fails_before_the_patch_is_its_summary_unless_verbose(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    plain = fi_patch(runner, "check", "--venv", venv, "--verify")
    assert plain.code == ExitCode.NEEDS_APPLY
    # The proofs in one line: each is red before the patch for its own reason, as it should be.
    count = len(RELEASES["0.7.4"].shapes)
    assert f"proofs: {count} of {count} red before the patch (-v shows each)" in (
        " ".join(plain.stdout.split())
    )
    assert "fails at torch.compile(fullgraph=True)" not in plain.text
    assert "Explanation:" not in plain.text
    verbose = fi_patch(runner, "-v", "check", "--venv", venv, "--verify")
    assert (
        "cuda-version-torch-first proof (before the patch): fails at torch.compile(fullgraph=True)"
        in verbose.text
    )
    assert "Explanation: Dynamo does not know how to trace the builtin" in verbose.text
    # -q says it as what it is: the red a pristine target is expected to show, not an alarm.
    quiet = fi_patch(runner, "-q", "check", "--venv", venv, "--verify", "--patch", CUDA)
    assert quiet.code == ExitCode.NEEDS_APPLY
    assert quiet.stdout.splitlines() == [
        f"{venv}: {CUDA} pristine; red before the patch, as expected"
    ]


def test_proofs_dealt_among_processes_are_judged_as_in_one(
    runner: CliRunner, venv_with: MakeVenv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve patches of 0.7.0 proven in one process, then dealt among three (four each): three
    processes run, every patch's report is the same, and the progress names the three."""
    import os

    from fi_patcher import api, proofs
    from fi_patcher.environment import PROBE_TIMEOUT
    from fi_patcher.registry import choose
    from fi_patcher.target import open_target

    venv = venv_with("0.7.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    ids = [p.id for p in choose(None).patches if p.id.startswith("op-")][:12]
    target = open_target(venv, None, os.environ, PROBE_TIMEOUT)
    told: list[str] = []
    shares: list[list[str]] = []
    proven = proofs.answered

    def progress(message: str, *, long: bool = False) -> None:
        told.append(message)

    def counted(python: Path, requests: list[proofs.ProofRequest], *more: object) -> object:
        shares.append([r.patch.id for r in requests])
        return proven(python, requests, *more)  # type: ignore[arg-type]

    monkeypatch.setattr(proofs, "answered", counted)
    checked = api.check(target, choose(ids), api.Options())
    alone = api.verify(target, checked, api.Options(progress=progress)).reports
    dealt = api.verify(target, checked, api.Options(progress=progress, proof_processes=3)).reports
    # One process alone, then three, each with every third patch (their threads start in any
    # order).
    assert shares[0] == ids
    assert sorted(shares[1:]) == sorted([ids[0::3], ids[1::3], ids[2::3]])
    assert sorted(alone) == sorted(ids)
    assert all(r.passed and r.mode == "after" for r in alone.values()), alone
    assert dealt == alone
    python = target.interpreter.python
    assert told == [
        f"proving 12 patches in {python} (importing torch and FlashInfer)",
        f"proving 12 patches in 3 processes of {python} (each importing torch and FlashInfer)",
    ]
