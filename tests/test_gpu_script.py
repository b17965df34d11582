"""scripts/gpu/, the GPU checks CI never runs: without a device each says so."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import MakeVenv
from tests.support.deps import CUDA_TORCH, shared
from tests.support.releases import fetch, release
from tests.support.tiers import SLOW
from tests.support.tool import ROOT, build_wheel
from tests.support.venvs import python_of


@pytest.mark.parametrize("script", ["fp4_compiled.py", "declared_ops.py", "boundaries.py"])
def test_without_a_gpu_it_says_so_and_exits_77(venv_with: MakeVenv, script: str) -> None:
    """CUDA_VISIBLE_DEVICES="" hides any device, so this holds on a GPU machine too."""
    venv = venv_with("0.7.4")
    completed = subprocess.run(
        [python_of(venv), ROOT / "scripts" / "gpu" / script],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        check=False,
    )
    assert completed.returncode == 77, completed.stderr
    assert completed.stdout.startswith("no CUDA device (torch 2.14.1+cu130): nothing checked")


def _replay():  # type: ignore[no-untyped-def]
    """scripts/gpu/replay.py, loaded as the scripts beside it import it."""
    spec = importlib.util.spec_from_file_location("replay", ROOT / "scripts" / "gpu" / "replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The entry points whose cases scripts/gpu/boundaries.py and declared_ops.py split into parts (the
# declared ops by the declaration they reach), and device.sh's number of parts for each.
BOUNDARIES = (
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "mm_fp4",
    "mm_fp8",
    "bmm_fp8",
    "mxfp8_quantize",
    "nvfp4_batched_quantize",
    "scaled_fp4_grouped_quantize",
    "silu_and_mul_scaled_nvfp4_experts_quantize",
    "block_scale_interleave",
    "top_p_sampling_from_probs",
    "top_k_sampling_from_probs",
    "min_p_sampling_from_probs",
    "top_k_top_p_sampling_from_probs",
    "top_p_renorm_probs",
    "top_k_renorm_probs",
    "top_k_mask_logits",
    "concat_mla_k",
    "fused_topk_deepseek",
    "trtllm_fp4_block_scale_moe",
)
DECLARED = (
    "rmsnorm",
    "gemma_rmsnorm",
    "fused_add_rmsnorm",
    "gemma_fused_add_rmsnorm",
    "rmsnorm_quant",
    "fused_add_rmsnorm_quant",
    "rope_quantize",
    "apply_rope",
    "apply_rope_pos_ids",
    "apply_llama31_rope",
    "apply_llama31_rope_pos_ids",
    "apply_rope_pos_ids_cos_sin_cache",
    "merge_state",
    "merge_state_in_place",
    "merge_states",
    "append_paged_kv_cache",
    "packbits",
)


@pytest.mark.parametrize(("entries", "parts"), [(BOUNDARIES, 5), (DECLARED, 3)])
def test_each_part_gets_whole_entry_points(entries: tuple[str, ...], parts: int) -> None:
    """--part K/N as device.sh runs it: check_made keeps, in each part, the cases of the entry
    points that part owns, every case of one entry point in the same part (its kernels built
    once), and no part idle. The cases here are ones fi-patch left as they are: check_made names
    them without running anything."""
    replay = _replay()
    # Named as a case may be, apart from its entry point (fp4_compiled's "nvfp4 …" cases all
    # call fp4_quantize; "nvfp4_block_scale_interleave" reaches block_scale_interleave).
    entry_of = {
        f"{number} {entry}{form}": entry
        for number, entry in enumerate(entries)
        for form in ("", " out=", ", reduce-overhead")
    }
    cases = [(case, entry, False, "left", (), None) for case, entry in entry_of.items()]
    part_of: dict[str, int] = {}
    for k in range(parts):
        replay.PART[:] = [k, parts]
        results, left_out = replay.check_made(None, cases)
        assert results == []
        owned = {entry_of[case] for case in left_out}
        assert owned, f"part {k} of {parts} has no entry point"
        for entry in owned:
            assert {case for case in entry_of if entry_of[case] == entry} <= set(left_out)
            assert part_of.setdefault(entry, k) == k
    assert set(part_of) == set(entries)


@pytest.mark.parametrize("part", ["2/2", "0/0", "1", "a/b"])
def test_a_part_outside_its_parts_is_refused(venv_with: MakeVenv, part: str) -> None:
    venv = venv_with("0.7.4")
    completed = subprocess.run(
        [python_of(venv), ROOT / "scripts" / "gpu" / "boundaries.py", "--part", part],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert f"--part takes K/N with 0 <= K < N, not {part!r}" in completed.stderr


# apache-tvm-ffi for FlashInfer's venv; what fi-patch's venv needs beside its own wheel where
# python3 has none of it (as here; the lent GPU machine's python3 has all but libcst and typer).
TOOL_WHEELS = (
    "apache-tvm-ffi<0.2",
    "libcst",
    "pyyaml",
    "typer>=0.27.2,<0.29",
    "click",
    "rich",
    "markdown-it-py",
    "mdurl",
    "pygments",
    "shellingham",
    "annotated-doc",
)


@SLOW
def test_the_device_script_runs_the_whole_check_from_wheels(tmp_path: Path) -> None:
    """scripts/gpu/device.sh as it ran on the lent H200 (docs/gpu.md), on this CPU machine: fi-patch
    and FlashInfer 0.6.8.post1 from wheels only, a venv over a torch of its own, then check,
    apply, check, the scripts in parts (each says it has no device), revert and check, all in
    OUT/gpu-check.log."""
    wheels, out = tmp_path / "wheels", tmp_path / "out"
    build_wheel(wheels)
    download = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*download, "-d", wheels, *TOOL_WHEELS], check=True)
    with tarfile.open(wheels / "fi-stored.tar.xz", "w:xz", preset=0) as tar:
        wheel = fetch(release("0.6.8.post1"))
        tar.add(wheel, arcname=wheel.name)
    torch = shared(CUDA_TORCH)
    completed = subprocess.run(
        ["bash", ROOT / "scripts" / "gpu" / "device.sh", wheels, out, "0.6.8.post1"],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "CUDA_VISIBLE_DEVICES": "",
            "FI_GPU_WORK": str(tmp_path / "work"),
            "FI_GPU_PTH": str(torch),
            "FI_GPU_PARTS": "fp4_compiled:1 boundaries:2",
        },
        check=False,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "0.6.8.post1: done" in completed.stdout
    log = (out / "gpu-check.log").read_text()
    steps = re.findall(r"^===== 0\.6\.8\.post1 (\S+)\.log$", log, re.M)
    assert steps == [
        "0a-check-before",
        "0b-apply",
        "0c-check-after",
        "1-boundaries-0",
        "1-boundaries-1",
        "1-fp4_compiled-0",
        "2a-revert",
        "2b-check-reverted",
    ]
    exits = [int(code) for code in re.findall(r"^exit (\d+) after \d+s$", log, re.M)]
    assert exits == [3, 0, 0, 77, 77, 77, 0, 3], log
    # Every patch that applies to 0.6.8.post1 (40 from fi-patch 0.24.0, with
    # trtllm_batch_decode_with_kv_cache), each proven.
    assert "proofs: 40 of 40 red before the patch, 40 of 40 pass after" in log
    assert "applied 40 patches in 13 files" in log
    assert log.count("no CUDA device (torch 2.14.1+cu130): nothing checked") == 3
    with tarfile.open(out / "results.tar.gz") as results:
        assert "./0.6.8.post1/0b-apply.log" in results.getnames()
