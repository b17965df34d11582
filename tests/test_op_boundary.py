"""fp4-quantize-op-boundary on real releases 0.2.6 - 0.6.11.post3, on a CPU.

fi-patch's fake must give what each release's own fp4_quantize gives: the release runs for real
on CPU tensors with only its compiled kernel replaced (tests/support/fp4_layouts.py), over a grid
of shapes, orders and layouts, and the fake must agree on every output's shape, stride and dtype,
or fail where the release fails. Eager calls must not change: a recorder in the kernel's place
sees the same arguments before and after the patch. Against FlashInfer's own fake in 0.6.12 the
fakes agree wherever the release computes a result, except where that fake itself departs from
its release. The re-export module of 0.6.7 on stays untouched and exports the patched function;
an upgrade across that move is followed; a torch without custom_op leaves the patch out whole;
and the real proof is red before and green after, beside cuda-version-torch-first.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, states_of
from tests.support.deps import fake_torch, use
from tests.support.expected import PATCHES, expected, target_of
from tests.support.releases import (
    CUDA,
    DECLARED,
    FP4,
    FP4_OLD,
    OP_BOUNDARY,
    RELEASES,
    fetch,
    released_text,
)
from tests.support.tiers import SLOW, releases
from tests.support.tool import released_tool
from tests.support.venvs import pip, python_of, site_packages, target_file

LAYOUTS = Path(__file__).parent / "support" / "fp4_layouts.py"
# The patch by name, with declared-ops-custom, which places the op boundary's code.
NAMED = ("--patch", DECLARED, "--patch", OP_BOUNDARY)
# A release of each shape the patch keys (the first, but for 0.2.6, which pip cannot install).
FIRSTS = [
    "0.2.8",
    "0.2.9",
    "0.2.11.post2",
    "0.2.13",
    "0.2.14.post1",
    "0.3.1.post1",
    "0.6.0",
    "0.6.7",
]
FIRSTS += ["0.6.8", "0.6.10", "0.6.11.post3"]


def layouts(venv: Path, *modes: str) -> dict[str, list[dict[str, Any]]]:
    run = subprocess.run(
        [python_of(venv), "-I", LAYOUTS, *modes],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(json.loads(run.stdout))


def result(case: dict[str, Any]) -> Any:
    """What a case gave: the outputs' (shape, stride, dtype), or the error's type."""
    return case.get("out", case.get("error"))


def shapes(case: dict[str, Any]) -> Any:
    """Shapes and dtypes only, as FlashInfer's own fake is compared."""
    if "error" in case:
        return case["error"]
    return [(shape, dtype) for shape, _, dtype in case["out"]]


def test_every_shape_is_covered_by_a_release_here() -> None:
    keyed = {RELEASES[v].shapes.get(OP_BOUNDARY) for v in FIRSTS}
    assert keyed == {s.name for s in PATCHES[OP_BOUNDARY].shapes}


@pytest.mark.parametrize("version", releases(FIRSTS, "0.2.8"))
def test_the_fake_is_the_release_and_eager_is_untouched(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    venv = venv_with(version)
    before = layouts(venv, "eager")["eager"]
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK, run.stdout
    assert patch_result(run.json, OP_BOUNDARY)["action"] == "applied"
    relpath = target_of(OP_BOUNDARY, version)
    assert (site_packages(venv) / relpath).read_bytes() == expected(version, relpath).encode()
    after = layouts(venv, "ours", "eager")

    # Eager: the kernel gets the same arguments, and the outputs are the same.
    assert [(c["case"], c["kernel"], result(c)) for c in after["eager"]] == [
        (c["case"], c["kernel"], result(c)) for c in before
    ]
    # The fake: each case's shapes, strides and dtypes, or the same failure.
    assert [(c["case"], result(c)) for c in after["ours"]] == [
        (c["case"], result(c)) for c in after["eager"]
    ]
    # The grid reaches every layout with a result and with a failure.
    assert {c["case"][2] for c in before if "out" in c} == {
        "swizzled-128x4",
        "swizzled-8x4",
        "linear",
    }
    assert any("error" in c for c in before)


def test_fakes_against_flashinfers_own_in_0_6_12(venv_with: MakeVenv, runner: CliRunner) -> None:
    """Where the release computes a result, fi-patch's fake and FlashInfer's 0.6.12 fake give the
    same shapes and dtypes, except in two places, and there fi-patch's fake is the release's:
    FlashInfer's fake leaves the leading dimensions out of a column-major input's scale-factor
    rows (0.6.12 itself, run eagerly, counts them), and before 0.6.8 swizzled scale factors are
    reshaped by k // sf_vec_size, not by the padded column count."""
    upstream_venv = venv_with("0.6.12")
    upstream = layouts(upstream_venv, "upstream", "eager")
    # FlashInfer's fake against its own release: the column-major batched cases differ.
    departs = {
        tuple(json.dumps(x) for x in c["case"][:2])
        for c, e in zip(upstream["upstream"], upstream["eager"], strict=True)
        if "out" in e and shapes(c) != shapes(e)
    }
    assert departs == {(json.dumps([3, 64, 128]), '"column-major"')}

    for version, old_reshape in (("0.2.9", True), ("0.6.11.post3", False)):
        venv = venv_with(version)
        assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
        ours = layouts(venv, "ours", "eager")
        compared = 0
        for mine, theirs, release in zip(
            ours["ours"], upstream["upstream"], ours["eager"], strict=True
        ):
            assert mine["case"] == theirs["case"] == release["case"]
            if "error" in release:
                continue
            compared += 1
            shape, order, layout, sf_vec_size = mine["case"]
            batched = order == "column-major" and len(shape) > 2
            columns = (shape[-2] if order == "column-major" else shape[-1]) // sf_vec_size
            reshaped = old_reshape and layout.startswith("swizzled") and columns % 4 != 0
            if batched or reshaped:
                assert shapes(mine) != shapes(theirs), mine["case"]
                assert result(mine) == result(release), mine["case"]
            else:
                assert shapes(mine) == shapes(theirs), mine["case"]
        assert compared >= 40


@pytest.mark.parametrize("version", releases(["0.6.7", "0.6.11.post3"], "0.6.11.post3"))
def test_the_re_export_module_needs_no_change(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    venv = venv_with(version)
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK, run.stdout
    (planned,) = run.json["results"]
    assert FP4_OLD not in [f["relpath"] for f in planned["files"]]
    site = site_packages(venv)
    assert (site / FP4_OLD).read_bytes() == released_text(RELEASES[version], FP4_OLD)
    assert (site / FP4).read_bytes() == expected(version, FP4).encode()
    same = subprocess.run(
        [
            python_of(venv),
            "-I",
            "-c",
            "import flashinfer.fp4_quantization as old, flashinfer.quantization.fp4_quantization"
            " as new, flashinfer, flashinfer.utils as u; print(old.fp4_quantize is"
            " new.fp4_quantize is flashinfer.fp4_quantize, new.fp4_quantize is"
            " u._fi_patch_boundaries['flashinfer_fp4_quantize'].routed)",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert same.stdout.split() == ["True", "True"], same.stderr[-2000:]


# The five-parameter function (0.2.8), the JIT-build failure (0.2.9), the first release with
# get_cuda_version (0.3.1.post1), the decorated function (0.6.0), and the last parameter set
# (0.6.11.post3).
@pytest.mark.parametrize(
    "version", releases(["0.2.8", "0.2.9", "0.3.1.post1", "0.6.0", "0.6.11.post3"], "0.2.8")
)
def test_proof_is_red_before_and_green_after(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    """The real proof, with cuda-version-torch-first in the same target where it applies."""
    venv = venv_with(version)
    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    proofs = patch_result(run.json, OP_BOUNDARY)["verification"]
    assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    assert "holds one fi_patch.flashinfer_fp4_quantize call" in proofs["after"]["summary"]
    relpath = target_of(OP_BOUNDARY, version)
    assert (site_packages(venv) / relpath).read_bytes() == expected(version, relpath).encode()
    if CUDA in RELEASES[version].shapes:
        assert patch_result(run.json, CUDA)["action"] == "applied"
        assert target_file(venv).read_bytes() == expected(version).encode()
    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.stdout
    assert (site_packages(venv) / relpath).read_bytes() == released_text(RELEASES[version], relpath)


def test_a_torch_without_custom_op_leaves_the_patch_out(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    """torch 2.7's torch.library.custom_op takes no tags (the stride contract): the patch is
    left out whole, never half."""
    venv = venv_with("0.5.0")
    use(venv, fake_torch(tmp_path / "old", "raise ImportError('old')\n", "2.7.1+cu126"))
    named = fi_patch(runner, "apply", "--venv", venv, *NAMED, "--no-verify")
    assert named.code == ExitCode.REQUIREMENT
    assert f"{OP_BOUNDARY} needs torch >=2.8" in named.text, named.text
    assert not (venv / ".fi-patch").exists()

    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK, run.stdout
    left = patch_result(run.json, OP_BOUNDARY)
    assert left["action"] == "left-out" and "needs torch >=2.8" in left["message"]
    assert patch_result(run.json, CUDA)["action"] == "applied"
    assert (site_packages(venv) / FP4_OLD).read_bytes() == released_text(RELEASES["0.5.0"], FP4_OLD)
    assert target_file(venv).read_bytes() == expected("0.5.0").encode()


def test_an_upgrade_that_moves_the_function_is_followed(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """Patched on 0.6.0, then pip installs 0.6.7, where fp4_quantize lives in another file: the
    new file is FlashInfer's original (pristine), the old record is cleared, and apply patches
    the new file while the old one, now a re-export, stays as pip wrote it."""
    venv = venv_with("0.6.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    pip(venv, "install", "--no-deps", "--no-index", str(fetch(RELEASES["0.6.7"])))
    states, code = states_of(runner, venv)
    assert (states[OP_BOUNDARY], states[CUDA], code) == ("pristine", "wiped", ExitCode.NEEDS_APPLY)
    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.text
    assert "0.6.0 was replaced by 0.6.7 since fi-patch patched it" in reverted.text
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    site = site_packages(venv)
    assert (site / FP4).read_bytes() == expected("0.6.7", FP4).encode()
    assert (site / FP4_OLD).read_bytes() == released_text(RELEASES["0.6.7"], FP4_OLD)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert (site / FP4).read_bytes() == released_text(RELEASES["0.6.7"], FP4)


# The last commit of fi-patch 0.10.0 on main: fp4-quantize-op-boundary written as a branch in
# fp4_quantize and an op of its own after it, from text held in the patch's TOML file.
RELEASE_0_10_0 = "a42f40e"


@SLOW
def test_a_venv_patched_by_0_10_0_keeps_its_text_until_revert_and_apply(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    """fi-patch 0.10.0 patched 0.6.8. This version finds every patch in place (the older
    text still traces, and check --verify proves it), apply has nothing to write, and revert
    gives RECORD's bytes back; apply then writes fp4_quantize's boundary as this version does."""
    version = "0.6.8"
    tool = released_tool(RELEASE_0_10_0, tmp_path / "fi-patch-0.10.0")
    venv = venv_with(version)
    old = subprocess.run(
        [tool, "apply", "--venv", venv, "--no-verify", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert old.returncode == ExitCode.OK, old.stdout + old.stderr
    fp4 = site_packages(venv) / FP4
    written = fp4.read_bytes()
    assert written != expected(version, FP4).encode()
    assert b"torch.ops.fi_patch.flashinfer_fp4_quantize(" in written

    checked = fi_patch(runner, "check", "--venv", venv, *NAMED, "--verify", "--json")
    assert checked.code == ExitCode.OK, checked.stdout
    assert patch_result(checked.json, OP_BOUNDARY)["state"] == "patched"
    assert patch_result(checked.json, OP_BOUNDARY)["verification"]["passed"] is True
    again = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert again.code == ExitCode.OK, again.stdout
    assert patch_result(again.json, OP_BOUNDARY)["action"] == "already-applied"
    assert fp4.read_bytes() == written

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert fp4.read_bytes() == released_text(RELEASES[version], FP4)
    run = fi_patch(runner, "apply", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    assert patch_result(run.json, OP_BOUNDARY)["verification"]["after"]["passed"] is True
    assert fp4.read_bytes() == expected(version, FP4).encode()


BACKENDS = """
import json, torch, flashinfer
graphs = []
def backend(gm, inputs):
    graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
    raise RuntimeError("recorded")
seen = {}
x, scale = torch.randn(128, 256, dtype=torch.bfloat16), torch.ones(1)
POSITIONAL = (16, False, True, False, False, None)  # 0.6.11's parameters before backend
for name, call in (
    ("positional", lambda: flashinfer.fp4_quantize(x, scale, *POSITIONAL, "cuda")),
    ("cute-dsl", lambda: flashinfer.fp4_quantize(x, scale, backend="cute-dsl")),
):
    graphs.clear()
    torch._dynamo.reset()
    try:
        torch.compile(call, backend=backend, fullgraph=True)()
    except Exception as exc:
        # Dynamo's message ends with the user code it stopped in.
        seen[name] = [type(exc).__name__, graphs[:], "in _fp4_quantize_cute_dsl" in str(exc)]
print(json.dumps(seen))
"""


def test_only_the_cuda_backend_takes_the_op(runner: CliRunner, venv_with: MakeVenv) -> None:
    """0.6.11.post3: backend="cuda", passed positionally, traces as one fi-patch op; a traced
    call with backend="cute-dsl" traces fp4_quantize's own body, as unpatched (and stops in its
    CuTe-DSL branch, whose kernels a CPU host does not have)."""
    venv = venv_with("0.6.11.post3")
    run = fi_patch(runner, "apply", "--venv", venv, *NAMED, "--no-verify")
    assert run.code == ExitCode.OK, run.text
    traced = subprocess.run(
        [python_of(venv), "-I", "-c", BACKENDS], capture_output=True, text=True, check=False
    )
    assert traced.returncode == 0, traced.stderr[-3000:]
    seen = json.loads(traced.stdout.splitlines()[-1])
    name, graphs, in_body = seen["positional"]
    assert name == "BackendCompilerFailed" and not in_body
    assert [[c for c in g if "fi_patch" in c] for g in graphs] == [
        ["fi_patch.flashinfer_fp4_quantize"]
    ]
    name, graphs, in_body = seen["cute-dsl"]
    assert name != "BackendCompilerFailed" and graphs == [] and in_body
