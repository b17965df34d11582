"""Compiled equals eager, every way people compile: the real compiler, never a silent wrong result.

After `fi-patch apply`, each family of tests/in_target/cases.py runs in the target venv
(tests/in_target/compiled.py): each case eagerly, then compiled with `aot_eager` and with
Inductor on the CPU, on fresh copies of the same inputs, FlashInfer's kernels stood in below its
own Python by CPU code doing their math (tests/in_target/kernels.py). The outputs, every input
the call writes (views of graph inputs, q and k as views of one qkv), the graphs' ops (one op
per call, none under torch.compiler.disable, no recompile for a dynamic batch) and
requires_grad must be eager's. The families name the cases a review found wrong before (a
caller's functools.wraps wrapper, torch.compile of the entry point itself, disable, merge_state's
bfloat16 lse, merge_states on another device, a model not under no_grad, FlashInfer's API logging
on) and a decoder layer as engines write it.

Inductor's compiled code is kept in the test cache, keyed by what it was compiled from: the
release, the torch build, and fi-patch's placed code, patches and these in-target files (a fake
changed since must compile anew: Inductor's own cache does not key on a custom op's fake).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from fi_patcher.registry import load_patches
from tests.support.cli import fi_patch
from tests.support.deps import CPU_TORCH, CUDA_TORCH, OLDEST_TORCH, shared, use
from tests.support.releases import (
    CACHE,
    CUDA,
    CUTLASS_MOE,
    DECLARED,
    MOE,
    TOPK_DEEPSEEK,
    release,
)
from tests.support.tiers import SLOW
from tests.support.tool import ROOT
from tests.support.toolkits import toolkit
from tests.support.venvs import create_venv, install, python_of

IN_TARGET = ROOT / "tests" / "in_target"
FAMILIES = (
    "routing",
    "activations",
    "norms",
    "rope",
    "cascade",
    "attention",
    "wrappers",
    "paging",
    "sampling",
    "quantizers",
    "gemms",
    "experts",
    "grad",
    "logging",
    "model",
)
ENV = {"logging": {"FLASHINFER_LOGLEVEL": "1", "FLASHINFER_LOGDEST": "stderr"}}
"""What a family's process needs in its environment: FlashInfer reads its logging level once,
at import (its log lines to stderr, not among compiled.py's answer)."""
TORCHES = {"2.14.1": CUDA_TORCH, "2.13.0": CPU_TORCH, "2.8.0": OLDEST_TORCH}
"""torch's CUDA 13.0 build (imported on the CPU), its CPU build, and the oldest torch the patches
that make ops accept (a CUDA 12.8 build)."""
TARGETS = [
    ("0.7.4", "2.14.1"),
    pytest.param("0.6.8.post1", "2.14.1", marks=SLOW),
    pytest.param("0.6.8.post1", "2.13.0", marks=SLOW),
    pytest.param("0.7.4", "2.8.0", marks=SLOW),
]
"""Each release on two torches and each torch on a release: 0.7.4 on the newest and on the
oldest torch the patches accept (SGLang's deployments pair a recent FlashInfer with an older
torch), 0.6.8.post1 on the newest and on the CPU build. The other two pairs of the full
product (0.7.4 on 2.13.0, 0.6.8.post1 on 2.8.0) ran until CI neared its 90 minutes."""

Applied = Callable[[str, str], Path]


@pytest.fixture(scope="session")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Applied:
    """A venv holding `version` and torch `torch_version`, every patch applied and proven; one
    per test process and pair."""
    made: dict[tuple[str, str], Path] = {}

    def get(version: str, torch_version: str) -> Path:
        if (version, torch_version) not in made:
            folder = tmp_path_factory.mktemp(f"compiled-{version}-{torch_version}")
            made[version, torch_version] = _patched(
                folder, version, torch_version, *_oldest(torch_version, folder)
            )
        return made[version, torch_version]

    return get


def _patched(folder: Path, version: str, torch_version: str, *arguments: str | Path) -> Path:
    """A venv in `folder` holding `version` and torch `torch_version`, after `fi-patch apply`
    with `arguments` (every patch where none are given) exits 0."""
    venv = create_venv(folder / "venv")
    install(venv, release(version))
    use(venv, shared(TORCHES[torch_version]))
    runner = CliRunner(env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "NO_COLOR": "1"})
    run = fi_patch(runner, "apply", "--venv", venv, *arguments)
    assert run.code == ExitCode.OK, run.text
    return venv


def _oldest(torch_version: str, folder: Path) -> list[str | Path]:
    """On torch 2.8 (CUDA 12.8), a CUDA 12.8 toolkit of its own, and every patch but
    get_cuda_version's, whose proof Dynamo 2.8 cannot trace (packaging's Version raises inside
    it): the patches that make ops are what this torch proves."""
    if torch_version != "2.8.0":
        return []
    named = [x for p in load_patches() if p.id != CUDA for x in ("--patch", p.id)]
    return [*named, "--cuda-home", toolkit(folder / "cuda-12.8", "12.8")]


def inductor_cache(version: str, torch_version: str) -> Path:
    """Where Inductor keeps what it compiled for this release and torch, from this code."""
    sources = [
        *sorted((ROOT / "src" / "fi_patcher" / "placed").glob("*.py")),
        *sorted((ROOT / "patches").glob("*.toml")),
        *sorted(IN_TARGET.glob("*.py")),
    ]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]
    return CACHE / "inductor" / f"{version}-{torch_version}-{digest}"


def compiled(venv: Path, family: str, version: str, torch_version: str, **env: str) -> dict:
    """Every case of `family` in `venv`: by case, by backend, what compiled.py found."""
    completed = subprocess.run(
        [python_of(venv), IN_TARGET / "compiled.py", family],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache(version, torch_version)),
            **env,
        },
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])[family]
    assert found, f"no family {family} in tests/in_target/cases.py"
    assert "cases" not in found, found["cases"]
    return dict(found)


def unequal(found: dict) -> dict[str, str]:
    """The cases and backends where compiled is not eager, with what differs."""
    return {
        f"{case} ({backend})": result.get("differs") or result.get("error", "")
        for case, backends in found.items()
        for backend, result in backends.items()
        if not result["equal"]
    }


def unchecked(found: dict) -> dict[str, str]:
    """Each op of fi-patch's a case's graph holds that torch.library.opcheck found wrong, or did
    not check, by case (a case on `meta` has no values to check with, and checks none)."""
    wrong = {}
    for case, backends in found.items():
        checks = backends["aot_eager"].get("opcheck")
        if checks is None:
            continue
        said = {op.removesuffix(".default"): verdict for op, verdict in checks.items()}
        held = {o for graph in backends["aot_eager"]["graphs"] for o in graph}
        for op in sorted(o.removesuffix(".default") for o in held if o.startswith("fi_patch")):
            verdict = said.get(op, "not checked")
            if not verdict.startswith("ok"):
                wrong[f"{case}: {op}"] = verdict
    return wrong


@pytest.mark.parametrize(("version", "torch_version"), TARGETS)
@pytest.mark.parametrize("family", FAMILIES)
def test_compiled_equals_eager(
    applied: Applied, family: str, version: str, torch_version: str
) -> None:
    venv = applied(version, torch_version)
    found = compiled(venv, family, version, torch_version, **ENV.get(family, {}))
    assert all(set(backends) == {"aot_eager", "inductor"} for backends in found.values())
    assert unequal(found) == {}
    assert unchecked(found) == {}


# The fused MoE's texts before 0.6.8, each with cases of its own: 0.2.10 (FP8 without enable_pdl,
# the routed FP4's kernel of 30 arguments; its unrouted FP4 stays as it is; CUTLASS's runner a
# TorchScript class from torch.classes, its list of one), 0.2.13 (FP4 without gated_act_type: a
# kernel of 32 arguments, as 0.5.0 - 0.6.7.post3's, read otherwise; CUTLASS's runner class given by
# its build), 0.3.0 (FP4's tile_tokens_dim, 8 by default, and the kernel's list returned; FP8's
# kernels allocate the output they return, and its n_group is an int; CUTLASS stays as it is),
# 0.4.1 (CUTLASS's list of four, without activation_type; FP8's kernels write the output they are
# passed), 0.5.3 (BF16 arrives; FP8 takes tune_max_num_tokens),
# 0.6.0 (no do_finalize: BF16's and FP8's kernels allocate the output they return, and the function
# returns it; FP4's activation is gated_act_type) and 0.6.5 (do_finalize; MXINT4 and the routed BF16
# arrive).
EARLY_EXPERTS = {
    "0.2.10": {
        "trtllm_fp8_block_scale_moe by keyword",
        "trtllm_fp8_per_tensor_scale_moe by keyword",
        "trtllm_fp4_block_scale_routed_moe into an output",
        "cutlass_fused_moe as SGLang calls it, a dynamic token count",
        "cutlass_fused_moe positionally",
    },
    "0.2.13": {
        "trtllm_fp4_block_scale_moe as SGLang calls it, a dynamic token count",
        "trtllm_fp4_block_scale_moe positionally",
        "trtllm_fp4_block_scale_routed_moe into an output",
        "cutlass_fused_moe as SGLang calls it, a dynamic token count",
        "cutlass_fused_moe positionally",
    },
    "0.3.0": {
        "trtllm_fp4_block_scale_moe as SGLang calls it, a dynamic token count",
        "trtllm_fp4_block_scale_moe positionally",
        "trtllm_fp8_block_scale_moe by keyword",
        "trtllm_fp8_per_tensor_scale_moe by keyword",
        "trtllm_fp4_block_scale_routed_moe into an output",
    },
    "0.4.1": {
        "cutlass_fused_moe as SGLang calls it, a dynamic token count",
        "cutlass_fused_moe positionally",
        "trtllm_fp8_block_scale_moe by keyword",
        "trtllm_fp8_per_tensor_scale_moe by keyword",
    },
    "0.5.3": {
        "trtllm_bf16_moe positionally, a dynamic token count",
        "trtllm_fp4_block_scale_moe positionally",
        "trtllm_fp8_block_scale_moe by keyword",
        "trtllm_fp8_per_tensor_scale_moe by keyword",
    },
    "0.6.0": {
        "trtllm_bf16_moe positionally, a dynamic token count",
        "trtllm_fp4_block_scale_moe as SGLang calls it, a dynamic token count",
        "trtllm_fp8_block_scale_moe by keyword",
        "trtllm_fp8_per_tensor_scale_moe by keyword",
        "trtllm_fp4_block_scale_routed_moe into an output",
        "cutlass_fused_moe as SGLang calls it, a dynamic token count",
    },
    "0.6.5": {
        "trtllm_bf16_moe positionally, a dynamic token count",
        "trtllm_mxint4_block_scale_moe by keyword",
        "trtllm_bf16_routed_moe by keyword, topk_ids packed",
        "trtllm_fp8_block_scale_moe by keyword",
    },
}


@pytest.mark.parametrize("version", [pytest.param(v, marks=SLOW) for v in EARLY_EXPERTS])
def test_the_fused_moe_before_0_6_8_compiles_as_it_runs(tmp_path: Path, version: str) -> None:
    """The experts family on a release before routing_replay_out, with the MoE patches (and the
    routing's) applied alone: every case compiled equals eager, and the cases of the texts that
    differ from 0.6.8's ran."""
    named = [x for p in (DECLARED, TOPK_DEEPSEEK, CUTLASS_MOE, *MOE) for x in ("--patch", p)]
    venv = _patched(tmp_path, version, "2.14.1", *named)
    found = compiled(venv, "experts", version, "2.14.1")
    assert EARLY_EXPERTS[version] <= set(found), sorted(found)
    assert unequal(found) == {}
    assert unchecked(found) == {}


@pytest.mark.parametrize(("version", "torch_version"), TARGETS)
def test_every_op_fi_patch_registers_is_in_a_case(
    applied: Applied, version: str, torch_version: str
) -> None:
    """Each op fi-patch registers in the release is held by some case's graph (and so compiled
    against eager, and checked by opcheck where that case runs it)."""
    venv = applied(version, torch_version)
    completed = subprocess.run(
        [python_of(venv), IN_TARGET / "compiled.py", "--coverage"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    assert len(found["registered"]) >= 30, found
    assert set(found["registered"]) - set(found["held"]) == set()


def test_a_wrapper_s_run_keeps_its_own_plan_errors_and_key(applied: Applied) -> None:
    """BatchDecodeWithPagedKVCacheWrapper.run on 0.7.4 (tests/in_target/wrappers.py): a run()
    without plan() raises FlashInfer's own error compiled as eagerly; an eager run() dispatches
    no op of fi-patch's; each wrapper's key is new, even after one is let go (an id() would come
    back); one compiled function called with one wrapper, another and the first again gives each
    its own result, from two graphs; and a copy of a wrapper (copy.copy, carrying its original's
    key), planned again, runs its own plan compiled, never its original's; an FP8 out with a
    v_scale (run() returns a scaled copy) gives eager's result and leaves eager's buffer. The
    paged prefill wrapper's: its run() without plan() raises FlashInfer's own error both ways, an
    eager run() dispatches no op, and planned for cute-dsl (which allocates its own way) its
    run() and its forward() are traced as unpatched: FlashInfer's own error both ways, no op in
    the graphs. The ragged prefill wrapper's the same, planned for cute-dsl (chosen only by
    name)."""
    venv = applied("0.7.4", "2.14.1")
    completed = subprocess.run(
        [python_of(venv), IN_TARGET / "wrappers.py"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache("0.7.4", "2.14.1"))},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    eager, compiled_ = found["unplanned"]
    assert eager.startswith("AttributeError: ") and "_cached_" in eager
    assert compiled_ == eager
    assert found["eager ops"] == []
    keys = found["keys"]
    assert keys == sorted(set(keys)) and len(keys) == 4
    assert (found["graphs"], found["equal"]) == (2, [True, True, True])
    assert found["copy"] is True
    assert found["fp8 out"] == [True, True]
    eager, compiled_ = found["prefill unplanned"]
    assert eager.startswith("AttributeError: ") and "_cached_" in eager
    assert compiled_ == eager
    assert found["prefill eager ops"] == []
    eager, compiled_, ops = found["prefill cute-dsl"]
    assert eager.startswith("AttributeError: ") and "run_paged" in eager
    assert (compiled_, ops) == (eager, [])
    eager, compiled_ = found["prefill cute-dsl forward"]
    assert eager.startswith("AttributeError: ") and compiled_ == eager
    eager, compiled_ = found["ragged unplanned"]
    assert eager.startswith("AttributeError: ") and "_cached_" in eager
    assert compiled_ == eager
    assert found["ragged eager ops"] == []
    eager, compiled_, ops = found["ragged cute-dsl"]
    assert eager.startswith("AttributeError: ") and "_cute_dsl" in eager
    assert (compiled_, ops) == (eager, [])
