"""FlashInfer recognised by what its files hold, not by its version number.

Real pre-releases (0.6.0rc1 carries shape B of get_cuda_version and shape 0.6.0 of
fp4_quantize; 0.7.2rc6 carries 0.7.1's fp4_quantize) are patched, proven red before and green
after, and reverted to RECORD's bytes, with a note that their version is in no range. A future
release made from a real one (0.7.4's wheel rebuilt as 0.7.5) needs no change to the catalog;
the same with a changed fp4_quantize docstring is `unknown`: `apply --patch` naming it refuses
it untouched (exit 6), `apply` leaves it out and applies the others (exit 16), and
`apply --force` writes, proves and reverts it.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, states_of
from tests.support.expected import PATCHES, files_of
from tests.support.hashes import function_hashes
from tests.support.relabel import docstring_changed, relabelled, venv_of
from tests.support.releases import (
    BATCH_RAGGED,
    BMM_FP8,
    BOUNDARIES,
    CUDA,
    CUTLASS_MOE,
    DECLARED,
    DECLARED_FAKE,
    FORWARDING,
    FP4,
    GELU,
    GELU_TANH,
    LOGGING,
    MASK,
    MM_FP8,
    OP_BOUNDARY,
    RELEASES,
    SILU,
    SILU_EXPERTS,
    SINGLE_DECODE,
    SINGLE_PREFILL,
    TARGET,
    TOP_K_RENORM,
    TOP_P_RENORM,
    TOPK_DEEPSEEK,
    TRTLLM_FP4,
    TRTLLM_FP4_ROUTED,
    TRTLLM_FP8_BLOCK,
    TRTLLM_FP8_TENSOR,
    UNDER_COMPILE,
    fetch,
    released_text,
)
from tests.support.tiers import SLOW
from tests.support.venvs import pip, record_sha256, site_packages

PRE_RELEASES = {
    "0.6.0rc1": (
        LOGGING,
        CUDA,
        DECLARED,
        DECLARED_FAKE,
        OP_BOUNDARY,
        BMM_FP8,
        GELU,
        GELU_TANH,
        MM_FP8,
        SILU,
        SILU_EXPERTS,
        MASK,
        TOP_K_RENORM,
        TOP_P_RENORM,
        TOPK_DEEPSEEK,
        SINGLE_DECODE,
        SINGLE_PREFILL,
        BATCH_RAGGED,
        # 0.6.0's texts of these (not BF16's: 0.6.0rc1 has one of its own).
        TRTLLM_FP4,
        TRTLLM_FP4_ROUTED,
        TRTLLM_FP8_BLOCK,
        TRTLLM_FP8_TENSOR,
        CUTLASS_MOE,
    ),
    "0.7.2rc6": (LOGGING, CUDA, DECLARED, DECLARED_FAKE, UNDER_COMPILE, *BOUNDARIES),
}


def _unchanged(venv: Path, *relpaths: str) -> bool:
    site = site_packages(venv)
    return all(
        hashlib.sha256((site / r).read_bytes()).hexdigest() == record_sha256(venv, r)
        for r in relpaths
    )


@SLOW
@pytest.mark.parametrize("version", list(PRE_RELEASES))
def test_a_pre_release_is_patched_by_what_its_files_hold(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    venv = venv_with(version)
    patches = PRE_RELEASES[version]
    states, code = states_of(runner, venv)
    assert code == ExitCode.NEEDS_APPLY
    assert {p for p, s in states.items() if s == "pristine"} == set(patches)
    assert set(states.values()) <= {"pristine", "not-applicable"}
    checked = fi_patch(runner, "check", "--venv", venv, "--json")
    for patch in patches:
        found = patch_result(checked.json, patch)
        assert found["shape"] == RELEASES[version].shapes[patch]
        assert found["note"].startswith(f"{version} carries the {PATCHES[patch].function}")
        assert "in no known range" in found["note"]
    people = fi_patch(runner, "check", "--venv", venv)
    assert f"note: {version} carries" in people.text

    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    for patch in patches:
        done = patch_result(run.json, patch)
        assert done["action"] == "applied"
        proofs = done["verification"]
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    after, code = states_of(runner, venv)
    assert code == ExitCode.OK
    assert after == {p: "patched" if p in patches else s for p, s in states.items()}

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    site = site_packages(venv)
    for relpath in files_of(version):
        assert (site / relpath).read_bytes() == released_text(RELEASES[version], relpath)
        assert _unchanged(venv, relpath)


@pytest.fixture(scope="module")
def future(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """0.7.4's wheel rebuilt as 0.7.5, as it is and with fp4_quantize's docstring changed."""
    folder = tmp_path_factory.mktemp("future")
    wheel = fetch(RELEASES["0.7.4"])
    same = folder / "same"
    changed = folder / "changed"
    same.mkdir()
    changed.mkdir()
    return {
        "same": relabelled(wheel, "0.7.4", "0.7.5", same),
        "changed": relabelled(wheel, "0.7.4", "0.7.5", changed, {FP4: docstring_changed}),
    }


@SLOW
def test_a_future_release_with_known_functions_needs_no_catalog_change(
    runner: CliRunner, future: dict[str, Path], tmp_path: Path
) -> None:
    venv = venv_of(future["same"], tmp_path / "venv-0.7.5")
    assert _unchanged(venv, TARGET, FP4)
    states, code = states_of(runner, venv)
    assert (states[CUDA], states[UNDER_COMPILE], code) == ("pristine", "pristine", 3)
    checked = fi_patch(runner, "check", "--venv", venv, "--json")
    assert (
        "0.7.5 carries the fp4_quantize of shape 0.7.4"
        in patch_result(checked.json, UNDER_COMPILE)["note"]
    )

    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    for patch in (CUDA, UNDER_COMPILE):
        proofs = patch_result(run.json, patch)["verification"]
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    assert states_of(runner, venv)[1] == ExitCode.OK
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert _unchanged(venv, TARGET, FP4)


def test_a_changed_docstring_is_unknown_and_force_lets_the_proof_decide(
    runner: CliRunner, future: dict[str, Path], tmp_path: Path
) -> None:
    venv = venv_of(future["changed"], tmp_path / "venv-0.7.5")
    assert _unchanged(venv, TARGET, FP4), "RECORD lists the bytes this build has"
    fp4 = site_packages(venv) / FP4
    installed = fp4.read_bytes()

    checked = fi_patch(runner, "check", "--venv", venv, "--json")
    # apply would write the others, and leave fp4_quantize out.
    assert checked.code == ExitCode.NEEDS_APPLY
    state = patch_result(checked.json, UNDER_COMPILE)
    assert (state["state"], state["apply"], state["exit_code"]) == ("unknown", "left-out", 16)
    assert state["found"]["structure_matches"] == "0.7.4"
    hashes = function_hashes(installed.decode(), PATCHES[UNDER_COMPILE].function)
    assert hashes is not None and state["found"]["text_sha256"] == hashes[0]
    assert "apply --force" in state["reason"]
    assert patch_result(checked.json, CUDA)["state"] == "pristine"

    refused = fi_patch(runner, "apply", "--venv", venv, "--patch", UNDER_COMPILE)
    assert refused.code == ExitCode.UNSUPPORTED
    assert "the text of fp4_quantize is not one fi-patch knows" in refused.stderr
    assert "structure sha256: " + state["found"]["structure_sha256"] in refused.stderr
    assert fp4.read_bytes() == installed and _unchanged(venv, TARGET, FP4)
    assert not (venv / ".fi-patch" / "manifest.json").exists()

    forced = fi_patch(runner, "apply", "--venv", venv, "--force", "--json")
    assert forced.code == ExitCode.OK, forced.stdout
    proofs = patch_result(forced.json, UNDER_COMPILE)["verification"]
    assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    after = fi_patch(runner, "check", "--venv", venv, "--json")
    assert after.code == ExitCode.OK
    patched = patch_result(after.json, UNDER_COMPILE)
    assert (patched["state"], patched["forced"]) == ("patched", True)
    assert "forced (apply --force)" in patched["reason"]
    assert patch_result(after.json, CUDA)["forced"] is False

    # A reinstall puts the build's text back: wiped, and written again only with --force.
    pip(venv, "install", "--force-reinstall", "--no-deps", "--no-index", str(future["changed"]))
    wiped = fi_patch(runner, "check", "--venv", venv, "--json")
    # check says what apply would do: leave it out (16) without --force, write the others (3).
    forced_again = patch_result(wiped.json, UNDER_COMPILE)
    assert (forced_again["state"], forced_again["exit_code"], wiped.code) == ("wiped", 16, 3)
    assert "apply --force" in forced_again["reason"]
    named = fi_patch(runner, "apply", "--venv", venv, "--patch", UNDER_COMPILE, "--no-verify")
    assert named.code == ExitCode.UNSUPPORTED
    assert fp4.read_bytes() == installed
    rest = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert rest.code == ExitCode.LEFT_OUT_UNKNOWN, rest.stdout
    assert patch_result(rest.json, UNDER_COMPILE)["action"] == "left-out"
    assert fi_patch(runner, "check", "--venv", venv).code == ExitCode.LEFT_OUT_UNKNOWN
    again = fi_patch(runner, "apply", "--venv", venv, "--force")
    assert again.code == ExitCode.OK, again.text

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert fp4.read_bytes() == installed and _unchanged(venv, TARGET, FP4)


def _comment_in_the_op(data: bytes) -> bytes:
    """A comment inside the op's function: its text changes, its structure (no comments) not."""
    text = data.decode("utf-8")
    node = next(
        n
        for n in ast.parse(text).body
        if isinstance(n, ast.FunctionDef) and n.name == PATCHES[FORWARDING].function
    )
    first = node.body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "# a build's own comment\n")
    return "".join(lines).encode("utf-8")


@SLOW
def test_a_patch_added_beside_a_forced_one_rebuilds_the_file(
    runner: CliRunner, tmp_path: Path
) -> None:
    """0.7.0 as 0.7.5 with a comment in the op: fp4-op-keyword-forwarding is forced first; the
    patches added later rebuild the file from its original, the forced one by its structure."""
    wheel = relabelled(
        fetch(RELEASES["0.7.0"]), "0.7.0", "0.7.5", tmp_path, {FP4: _comment_in_the_op}
    )
    venv = venv_of(wheel, tmp_path / "venv-0.7.5")
    installed = (site_packages(venv) / FP4).read_bytes()
    states, code = states_of(runner, venv)
    # fp4_quantize's patch requires the forwarding one, left out unless it is forced.
    assert (states[FORWARDING], states[UNDER_COMPILE], code) == ("unknown", "left-out", 3)
    first = fi_patch(runner, "apply", "--venv", venv, "--force", "--patch", FORWARDING)
    assert first.code == ExitCode.OK, first.text
    rest = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert rest.code == ExitCode.OK, rest.stdout
    assert patch_result(rest.json, UNDER_COMPILE)["action"] == "applied"
    after, code = states_of(runner, venv)
    assert (after[FORWARDING], after[UNDER_COMPILE], code) == ("patched", "patched", 0)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert (site_packages(venv) / FP4).read_bytes() == installed
    assert _unchanged(venv, TARGET, FP4)
