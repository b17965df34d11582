"""The whole life of the patch set on real venvs holding real FlashInfer releases.

For each release: check, dry run, apply (exact bytes of every file), apply again (no-op), check,
revert (exact original bytes, equal to RECORD's hash), check. Then what a set of patches adds:
revert of one patch keeps the others, one patch then the rest gives the bytes of all at once,
and requirements between patches hold both ways. 0.2.14.post1, 0.3.1.post1 and 0.4.0 are
sdist-only releases: their venvs are assembled from the sdist's files and real PKG-INFO (see
tests/support/venvs.py); the others are real wheel installs by pip.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, states_of
from tests.support.expected import expected, files_of, named_in_summary, target_of
from tests.support.releases import (
    ACTIVATION,
    API_LOGGING,
    BATCH_DECODE,
    BATCH_PREFILL,
    BATCH_RAGGED,
    BATCHED,
    BOUNDARIES,
    CONCAT,
    CONCAT_OPS,
    CUDA,
    CUTLASS_MOE,
    DECLARED,
    DECLARED_FAKE,
    DECODE,
    FORWARDING,
    FP4,
    FP8_QUANT,
    GEMM,
    GROUPED,
    INTERLEAVE,
    LOGGING,
    MASK,
    MIN_P,
    MOE_CORE,
    MXFP8,
    OP_BOUNDARY,
    PREFILL,
    RELEASES,
    ROUTING_DSV3,
    SAMPLING,
    SINGLE_DECODE,
    SINGLE_PREFILL,
    TARGET,
    TOP_K,
    TOP_K_RENORM,
    TOP_K_TOP_P,
    TOP_P,
    TOP_P_RENORM,
    TOPK_DEEPSEEK,
    TRTLLM_BF16,
    TRTLLM_BF16_ROUTED,
    TRTLLM_DECODE,
    TRTLLM_FP4,
    TRTLLM_FP4_ROUTED,
    TRTLLM_FP8_BLOCK,
    TRTLLM_FP8_BLOCK_ROUTED,
    TRTLLM_FP8_TENSOR,
    TRTLLM_FP8_TENSOR_ROUTED,
    TRTLLM_MXINT4,
    TRTLLM_MXINT4_ROUTED,
    UNDER_COMPILE,
    UNKNOWN_IN,
    UTILS,
    released_text,
)
from tests.support.tiers import releases
from tests.support.venvs import record_sha256, site_packages

PATCHABLE = [v for v, r in RELEASES.items() if r.shapes and v not in UNKNOWN_IN]
"""Releases every function of which fi-patch knows; test_left_out_unknown.py takes those it does
not (its round trip leaves the unknown function's patch out, and apply exits 16)."""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", releases(PATCHABLE, "0.2.8", "0.6.0rc1", "0.7.4"))
def test_apply_check_revert_round_trip(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    venv = venv_with(version)
    site = site_packages(venv)
    applicable = set(RELEASES[version].shapes)
    for relpath in files_of(version):
        assert (site / relpath).read_bytes() == released_text(RELEASES[version], relpath)
        assert record_sha256(venv, relpath) == sha256(site / relpath)
    states, code = states_of(runner, venv)
    assert code == ExitCode.NEEDS_APPLY
    assert {p for p, s in states.items() if s == "pristine"} == applicable
    assert {p for p, s in states.items() if s == "not-applicable"} == set(states) - applicable

    dry = fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--json")
    assert dry.code == ExitCode.OK
    (planned,) = dry.json["results"]
    assert {p["patch"] for p in planned["patches"] if p["action"] == "would-apply"} == applicable
    for patch in applicable:
        assert patch_result(dry.json, patch)["shape"] == RELEASES[version].shapes[patch]
    assert sorted(f["relpath"] for f in planned["files"]) == files_of(version)
    assert not (venv / ".fi-patch").exists()

    applied = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--full-diff")
    assert applied.code == ExitCode.OK, applied.stderr
    # The summary's line for each file names the patches written in it, wrapped between words.
    said = " ".join(applied.stdout.split())
    for relpath in files_of(version):
        held = [p for p in sorted(applicable) if target_of(p, version) == relpath]
        assert named_in_summary(said, relpath, held) == held
    for relpath in files_of(version):
        assert (site / relpath).read_bytes() == expected(version, relpath).encode("utf-8")
    for file in planned["files"]:
        assert file["diff"] in applied.stdout.replace("\r", "")
    states, code = states_of(runner, venv)
    assert code == ExitCode.OK
    assert {p for p, s in states.items() if s == "patched"} == applicable

    again = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert again.code == ExitCode.OK
    assert {p["action"] for p in again.json["results"][0]["patches"]} <= {
        "already-applied",
        "not-applicable",
    }
    assert again.json["results"][0]["files"] == []

    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.stderr
    assert "restored the original bytes" in reverted.text
    for relpath in files_of(version):
        assert (site / relpath).read_bytes() == released_text(RELEASES[version], relpath)
        assert sha256(site / relpath) == record_sha256(venv, relpath)
    assert states_of(runner, venv)[1] == ExitCode.NEEDS_APPLY
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []

    nothing = fi_patch(runner, "revert", "--venv", venv)
    assert nothing.code == ExitCode.OK
    assert "nothing to revert" in nothing.text


@pytest.mark.parametrize("version", ["0.2.5"])
def test_not_applicable_release(runner: CliRunner, venv_with: MakeVenv, version: str) -> None:
    """0.2.5 has neither cpp_ext.py nor fp4_quantize: nothing for those patches, told by its
    files; only flashinfer/utils.py, which declares the ops, is written."""
    venv = venv_with(version)
    site = site_packages(venv)
    before = {p: p.read_bytes() for p in site.joinpath("flashinfer").rglob("*.py")}
    assert before
    states, code = states_of(runner, venv)
    declared = {DECLARED: "pristine", DECLARED_FAKE: "pristine"}
    assert {p: s for p, s in states.items() if s != "not-applicable"} == declared
    assert code == ExitCode.NEEDS_APPLY
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.OK
    # apply names the patches with nothing to do on one line; check says why, once each.
    said = " ".join(run.stdout.split())
    (idle,) = re.findall(r"not applicable here [^:]*: [a-z0-9, -]*", said)
    assert idle.startswith("not applicable here (`fi-patch check`")
    assert "cuda-version-torch-first" in idle and "fp4-quantize-op-boundary" in idle
    assert "nothing to patch" not in run.text
    checked = fi_patch(runner, "check", "--venv", venv)
    assert checked.text.count("nothing to patch (no public get_cuda_version before") == 1
    assert checked.text.count("(no fp4_quantize before 0.2.6)") == 1
    changed = [p for p in before if p.read_bytes() != before[p]]
    assert changed == [site / UTILS]


def test_backup_and_manifest(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.6.18.post1")
    site = site_packages(venv)
    written = (
        *(TARGET, FP4, UTILS, ACTIVATION, GEMM, FP8_QUANT, SAMPLING, API_LOGGING),
        *(CONCAT_OPS, ROUTING_DSV3, MOE_CORE, DECODE, PREFILL),
    )
    originals = {f: (site / f).read_bytes() for f in written}
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    store = venv / ".fi-patch"
    assert store.stat().st_mode & 0o777 == 0o700
    backups = {p.name: p.read_bytes() for p in (store / "backups").iterdir()}
    assert backups == {hashlib.sha256(b).hexdigest() + ".py": b for b in originals.values()}
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["schema"] == 2
    records = {r["relpath"]: r for r in manifest["files"]}
    assert set(records) == set(written)
    for relpath, record in records.items():
        assert record["version"] == "0.6.18.post1"
        assert record["original"] == hashlib.sha256(originals[relpath]).hexdigest()
        assert record["record_sha256"] == record["original"]
        assert record["sha256"] == sha256(site / relpath)
        assert record["pending"] is None
    assert [(p["id"], p["shape"]) for p in records[TARGET]["patches"]] == [(CUDA, "B")]
    assert [(p["id"], p["shape"]) for p in records[FP4]["patches"]] == [
        (FORWARDING, "positional"),
        (UNDER_COMPILE, "0.6.13"),
        (INTERLEAVE, "0.6.7"),
        (BATCHED, "0.6.7"),
        (GROUPED, "0.6.7"),
    ]
    assert [(p["id"], p["shape"]) for p in records[FP8_QUANT]["patches"]] == [(MXFP8, "0.6.12")]
    assert [(p["id"], p["shape"]) for p in records[SAMPLING]["patches"]] == [
        (MIN_P, "0.6.13"),
        (MASK, "0.6.10"),
        (TOP_K_RENORM, "0.6.10"),
        (TOP_K, "0.6.13"),
        (TOP_K_TOP_P, "0.6.14"),
        (TOP_P_RENORM, "0.6.10"),
        (TOP_P, "0.6.13"),
    ]
    assert [(p["id"], p["shape"]) for p in records[CONCAT_OPS]["patches"]] == [(CONCAT, "0.6.10")]
    routing = [(p["id"], p["shape"]) for p in records[ROUTING_DSV3]["patches"]]
    assert routing == [(TOPK_DEEPSEEK, "0.6.10")]
    moe = [(p["id"], p["shape"]) for p in records[MOE_CORE]["patches"]]
    assert moe == [
        (CUTLASS_MOE, "0.6.18"),
        (TRTLLM_BF16, "0.6.18"),
        (TRTLLM_BF16_ROUTED, "0.6.18"),
        (TRTLLM_FP4, "0.6.18"),
        (TRTLLM_FP4_ROUTED, "0.6.18"),
        (TRTLLM_FP8_BLOCK, "0.6.18"),
        (TRTLLM_FP8_BLOCK_ROUTED, "0.6.18"),
        (TRTLLM_FP8_TENSOR, "0.6.14"),
        (TRTLLM_FP8_TENSOR_ROUTED, "0.6.18"),
        (TRTLLM_MXINT4, "0.6.13"),
        (TRTLLM_MXINT4_ROUTED, "0.6.13"),
    ]
    assert [(p["id"], p["shape"]) for p in records[DECODE]["patches"]] == [
        (BATCH_DECODE, "0.6.18"),
        (SINGLE_DECODE, "0.6.10"),
        (TRTLLM_DECODE, "0.6.18"),
    ]
    assert [(p["id"], p["shape"]) for p in records[PREFILL]["patches"]] == [
        (BATCH_PREFILL, "0.6.18"),
        (BATCH_RAGGED, "0.6.18"),
        (SINGLE_PREFILL, "0.6.18"),
    ]
    assert [(p["id"], p["shape"]) for p in records[UTILS]["patches"]] == [
        (DECLARED, "no-op"),
        (DECLARED_FAKE, "no-op"),
    ]


def test_revert_of_one_patch_keeps_the_others(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.0")
    site = site_packages(venv)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    run = fi_patch(
        runner, "revert", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify", "--json"
    )
    assert run.code == ExitCode.OK, run.stdout
    assert patch_result(run.json, UNDER_COMPILE)["action"] == "reverted"
    (file,) = run.json["results"][0]["files"]
    assert (file["relpath"], file["patches"]) == (FP4, [FORWARDING, INTERLEAVE, BATCHED, GROUPED])
    assert (site / FP4).read_bytes() == expected(
        "0.7.0", FP4, [FORWARDING, INTERLEAVE, BATCHED, GROUPED]
    ).encode()
    assert (site / TARGET).read_bytes() == expected("0.7.0").encode()
    states, code = states_of(runner, venv)
    assert states == {
        LOGGING: "patched",
        CUDA: "patched",
        DECLARED: "patched",
        DECLARED_FAKE: "patched",
        FORWARDING: "patched",
        OP_BOUNDARY: "not-applicable",
        UNDER_COMPILE: "pristine",
        **dict.fromkeys(BOUNDARIES, "patched"),
    }
    assert code == ExitCode.NEEDS_APPLY

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    for relpath in (TARGET, FP4, UTILS):
        assert (site / relpath).read_bytes() == released_text(RELEASES["0.7.0"], relpath)


def test_one_patch_then_the_rest_gives_the_bytes_of_all_at_once(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    stepwise, at_once = venv_with("0.7.0"), venv_with("0.7.0")
    first = fi_patch(runner, "apply", "--venv", stepwise, "--patch", FORWARDING, "--no-verify")
    assert first.code == ExitCode.OK
    assert (site_packages(stepwise) / TARGET).read_bytes() == released_text(RELEASES["0.7.0"])
    assert fi_patch(runner, "apply", "--venv", stepwise, "--no-verify").code == ExitCode.OK
    assert fi_patch(runner, "apply", "--venv", at_once, "--no-verify").code == ExitCode.OK
    for relpath in (TARGET, FP4):
        assert (site_packages(stepwise) / relpath).read_bytes() == (
            site_packages(at_once) / relpath
        ).read_bytes()


def test_requirements_between_patches(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.0")
    alone = fi_patch(runner, "apply", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify")
    assert alone.code == ExitCode.REQUIREMENT
    assert "fp4-quantize-under-compile requires fp4-op-keyword-forwarding in 0.7.0" in alone.text
    assert "add --patch fp4-op-keyword-forwarding" in alone.text
    assert not (venv / ".fi-patch").exists()

    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    before = (site_packages(venv) / FP4).read_bytes()
    taken = fi_patch(runner, "revert", "--venv", venv, "--patch", FORWARDING)
    assert taken.code == ExitCode.REQUIREMENT
    assert "revert fp4-quantize-under-compile too" in taken.text
    assert (site_packages(venv) / FP4).read_bytes() == before


def test_where_upstream_fixed_the_op_the_branch_needs_nothing_else(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    run = fi_patch(runner, "apply", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify")
    assert run.code == ExitCode.OK, run.text
    assert (site_packages(venv) / FP4).read_bytes() == expected(
        "0.7.4", FP4, [UNDER_COMPILE]
    ).encode()
    assert (site_packages(venv) / TARGET).read_bytes() == released_text(RELEASES["0.7.4"])
    states, _ = states_of(runner, venv)
    assert states == {
        LOGGING: "pristine",
        CUDA: "pristine",
        DECLARED: "pristine",
        DECLARED_FAKE: "pristine",
        FORWARDING: "not-applicable",
        OP_BOUNDARY: "not-applicable",
        UNDER_COMPILE: "patched",
        **dict.fromkeys(BOUNDARIES, "pristine"),
    }
