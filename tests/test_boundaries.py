"""fi-patch's op boundary (placed/op_boundary.py) and the op-* patches, one public entry point
each: the data against the real releases, the code placed once, and the whole life of the
patches in real venvs with real releases (torch 2.14.1's CUDA build on a CPU; the proof traces
with a backend that records the graph and never runs it, and stands in the kernels eagerly).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version
from typer.testing import CliRunner

from fi_patcher import __version__
from fi_patcher.codemod import compose, take_out
from fi_patcher.errors import ExitCode
from fi_patcher.model import Boundary
from fi_patcher.registry import RegistryError, parse_patch, placed
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result
from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.expected import PATCHES
from tests.support.releases import (
    ACTIVATION,
    BATCH_DECODE,
    BATCH_PREFILL,
    BATCH_RAGGED,
    BATCHED,
    BMM_FP8,
    BOUNDARIES,
    CONCAT,
    CONCAT_OPS,
    CUTLASS_MOE,
    DECLARED,
    DECODE,
    FP4,
    FP8_QUANT,
    GELU,
    GEMM,
    GROUPED,
    INTERLEAVE,
    MASK,
    MIN_P,
    MM_FP4,
    MM_FP8,
    MOE,
    MOE_CORE,
    MXFP8,
    OP_BOUNDARY,
    PREFILL,
    ROUTING_DSV3,
    SAMPLING,
    SILU,
    SILU_EXPERTS,
    SINGLE_DECODE,
    SINGLE_PREFILL,
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
    TRTLLM_FP8_CHANNEL,
    TRTLLM_FP8_CHANNEL_ROUTED,
    TRTLLM_FP8_TENSOR,
    TRTLLM_FP8_TENSOR_ROUTED,
    TRTLLM_MXINT4,
    TRTLLM_MXINT4_ROUTED,
    release,
    released_text,
)
from tests.support.tiers import SLOW, releases
from tests.support.tool import released_tool
from tests.support.venvs import create_venv, install, python_of, site_packages

# The releases issue 22 names, and the first of the 0.7 line.
LIFECYCLE = ["0.6.7.post2", "0.6.8.post1", "0.7.0", "0.7.4"]
ENTRY_POINTS = {
    INTERLEAVE: "block_scale_interleave",
    BMM_FP8: "bmm_fp8",
    GELU: "gelu_and_mul",
    "op-gelu-tanh-and-mul": "gelu_tanh_and_mul",
    MM_FP4: "mm_fp4",
    MM_FP8: "mm_fp8",
    SILU: "silu_and_mul",
    MXFP8: "mxfp8_quantize",
    BATCHED: "nvfp4_batched_quantize",
    GROUPED: "scaled_fp4_grouped_quantize",
    SILU_EXPERTS: "silu_and_mul_scaled_nvfp4_experts_quantize",
    TOP_K: "top_k_sampling_from_probs",
    TOP_K_TOP_P: "top_k_top_p_sampling_from_probs",
    TOP_P: "top_p_sampling_from_probs",
    MIN_P: "min_p_sampling_from_probs",
    MASK: "top_k_mask_logits",
    TOP_K_RENORM: "top_k_renorm_probs",
    TOP_P_RENORM: "top_p_renorm_probs",
    CONCAT: "concat_mla_k",
    TOPK_DEEPSEEK: "fused_topk_deepseek",
    TRTLLM_BF16: "trtllm_bf16_moe",
    TRTLLM_FP4: "trtllm_fp4_block_scale_moe",
    TRTLLM_FP8_BLOCK: "trtllm_fp8_block_scale_moe",
    TRTLLM_FP8_CHANNEL: "trtllm_fp8_per_channel_scale_moe",
    TRTLLM_FP8_TENSOR: "trtllm_fp8_per_tensor_scale_moe",
    TRTLLM_MXINT4: "trtllm_mxint4_block_scale_moe",
    TRTLLM_BF16_ROUTED: "trtllm_bf16_routed_moe",
    TRTLLM_FP4_ROUTED: "trtllm_fp4_block_scale_routed_moe",
    TRTLLM_FP8_BLOCK_ROUTED: "trtllm_fp8_block_scale_routed_moe",
    TRTLLM_FP8_CHANNEL_ROUTED: "trtllm_fp8_per_channel_scale_routed_moe",
    TRTLLM_FP8_TENSOR_ROUTED: "trtllm_fp8_per_tensor_scale_routed_moe",
    TRTLLM_MXINT4_ROUTED: "trtllm_mxint4_block_scale_routed_moe",
    CUTLASS_MOE: "cutlass_fused_moe",
    SINGLE_DECODE: "single_decode_with_kv_cache",
    SINGLE_PREFILL: "single_prefill_with_kv_cache",
    BATCH_DECODE: "batch_decode_with_paged_kv_cache_run",
    BATCH_PREFILL: "batch_prefill_with_paged_kv_cache_run",
    BATCH_RAGGED: "batch_prefill_with_ragged_kv_cache_run",
    TRTLLM_DECODE: "trtllm_batch_decode_with_kv_cache",
}
ACTIVATIONS = (GELU, "op-gelu-tanh-and-mul", SILU)
# What each proof shows, after its entry point's name: the call forms traced, and the inputs
# whose error the fake raises as the eager call does; by fake, or by entry point where one fake
# serves several.
SAMPLED = (
    "positional, by keyword, tensors, return_valid, indices, seed and offset tensors, "
    "a dynamic batch dimension",
    "a seed tensor with an offset number, an int32 seed, a seed per row of another batch",
)
RENORMED = "positional, by keyword, a tensor, bfloat16, a slice of a wider tensor, "
RENORMED += "a dynamic batch dimension"
MOE_FORMS = (
    "by keyword, positional, FlashInfer's defaults, a dynamic token count, "
    "out: output=, as SGLang calls it, out: output=, a dynamic token count, "
    "writes: routing_replay_out"
)
MOE_REFUSED = "an int32 routing_replay_out, an output of too few rows"
MOE_PLAIN = "by keyword, positional, FlashInfer's defaults, a dynamic token count"
"""The trtllm MoE without an output or routing_replay_out (BF16, FP8 before 0.6.8)."""
MOE_NO_OUTPUT = MOE_PLAIN + ", writes: routing_replay_out"
NOTHING_REFUSED = "it refuses no input before its kernel"
ROUTED_FORMS = (
    "by keyword, positional, FlashInfer's defaults, a dynamic token count, "
    "a (topk_ids, topk_weights) pair, out: output=, as SGLang calls it, out: output=, "
    "a dynamic token count"
)
ROUTED_REFUSED = "an output of too few rows, valid_hidden_size past the hidden size"
ROUTED_UNPAIRED = (
    "by keyword, positional, FlashInfer's defaults, a dynamic token count, "
    "out: output=, as SGLang calls it, out: output=, a dynamic token count"
)
# The wrappers' run(), the forms they share (the proof's _run_forms).
RUN_FORMS = (
    "the cache one tensor, positionally, a (k, v) pair, return_lse, out and lse given, out "
    "given, lse asked for, PDL (enable_pdl=True)"
)
RUN_REFUSED = "a cache in a list, an out of another dtype, an lse of another shape"
TRTLLM_DECODE_FORMS = (
    "positionally, by keyword as SGLang calls it, a (k, v) pair, NHD, tensor scales, out given, "
    "xqa, out_dtype float16, a dynamic batch, a max_seq_len read from a dynamic size"
)
TRTLLM_DECODE_REFUSED = (
    'an out of another shape, out_dtype float32, an unknown backend, out_dtype "nvfp4" on xqa'
)
# return_lse and lse from 0.6.12 (the DCP speculative decode from 0.7.0: PROVEN).
TRTLLM_DECODE_LSE_FORMS = (
    TRTLLM_DECODE_FORMS + ", return_lse, out and lse given, return_lse, out given, lse asked for, "
    "lse given with return_lse, out allocated, lse given without return_lse, out allocated"
)
TRTLLM_DECODE_LSE_REFUSED = TRTLLM_DECODE_REFUSED + ", return_lse on xqa, an lse of another shape"
CUTLASS_REFUSED = "an output of too few rows, the min-latency mode, profile_ids of one tactic"
PROVEN = {
    # cutlass_fused_moe (0.6.0 on); workspace_buffer and profile_ids from 0.6.16, ClampedRelu2's
    # checks from 0.7.2 (BEFORE).
    "cutlass_fused_moe": (
        "by keyword, positional, FlashInfer's defaults, a dynamic token count, "
        "out: output=, as SGLang calls it, out: output=, a dynamic token count, "
        "out: output=, the whole list, an ActivationType, FP8 weights and activations, "
        "NVFP4 weights, bfloat16 activations, writes: workspace_buffer",
        CUTLASS_REFUSED + ", a clamped_relu2_limit without ClampedRelu2, "
        "ClampedRelu2 without its limit",
    ),
    "min_p_sampling_from_probs": SAMPLED,
    "single_decode_with_kv_cache": (
        "positional, by keyword, return_lse, HND with tensor cores and a v_scale, float16, a "
        "sliding window and a soft cap, q a slice of a wider tensor, a dynamic KV length",
        "an unknown pos_encoding_mode, an unknown kv_layout",
    ),
    "single_prefill_with_kv_cache": (
        "positional, causal by keyword, return_lse, HND with o_dtype float16, a value head dim "
        "of its own, FP8 with o_dtype, a dynamic query length",
        "an unknown kv_layout, FP8 with a sliding window",
    ),
    "batch_decode_with_paged_kv_cache_run": (
        RUN_FORMS + ", HND, o_data_type float16, a dynamic batch, forward() with sm_scale and "
        "logits_soft_cap, as SGLang calls it, forward_return_lse()",
        RUN_REFUSED,
    ),
    # lse_layout from 0.7.1 (NEWER_FORMS for 0.7.4).
    "batch_prefill_with_paged_kv_cache_run": (
        RUN_FORMS + ", HND, causal, o_data_type float16, a dynamic token count, forward() causal "
        "with sm_scale and logits_soft_cap, as SGLang calls it, forward_return_lse()",
        RUN_REFUSED,
    ),
    # The ragged wrapper's run() takes k and v apart: no cache to unpack, so none refused.
    "batch_prefill_with_ragged_kv_cache_run": (
        "positionally, return_lse, out and lse given, out given, lse asked for, PDL "
        "(enable_pdl=True), HND, causal, o_data_type float16, a dynamic token count, forward() "
        "causal with sm_scale and logits_soft_cap, as SGLang's extend calls it, "
        "forward_return_lse()",
        "an out of another dtype, an lse of another shape",
    ),
    # "auto" answered as SM100 (trtllm-gen); lse from 0.6.12 (BEFORE).
    "trtllm_batch_decode_with_kv_cache": (
        TRTLLM_DECODE_LSE_FORMS,
        TRTLLM_DECODE_LSE_REFUSED + ", the DCP speculative decode without an lse",
    ),
    # top_p_renorm_probs gives float32 whatever the input, and reads probs' second dimension
    # first; the top-k pair keeps the input's dtype and refuses float64.
    "top_p_renorm_probs": (RENORMED + ", by its other name, is_deterministic", "1-D probs"),
    "top_k_renorm_probs": (RENORMED + ", by its other name", "float64"),
    "top_k_mask_logits": (RENORMED, "float64"),
    "top_k_sampling_from_probs": SAMPLED,
    "top_p_sampling_from_probs": SAMPLED,
    "top_k_top_p_sampling_from_probs": (
        SAMPLED[0] + ", joint",
        SAMPLED[1] + ", an unknown filter_apply_order",
    ),
    "act_and_mul": (
        "positional, by keyword, out=, positional out, float16, a dynamic batch dimension",
        "an odd last dimension, out of the wrong shape",
    ),
    "mm_fp4": (
        "positional, by keyword, out=, a dynamic batch dimension",
        "k that differs, out_dtype float32",
    ),
    "bmm_fp8": ("positional, by keyword, out=, a dynamic batch dimension", "dtype float32"),
    "mm_fp8": (
        "positional, by keyword, out=, a dynamic batch dimension",
        "out_dtype float16, out of the wrong shape",
    ),
    "mxfp8_quantize": (
        "positional, by keyword, linear scales, 8x4 scales, alignment 128, float16 on the CPU, "
        "a dynamic batch dimension",
        "a last dimension not a multiple of 32, an unknown backend, 8x4 scales on the CPU",
    ),
    "nvfp4_batched": ("positional, by keyword, a dynamic batch dimension", "a 2-D input"),
    "nvfp4_grouped": (
        "positional, by keyword, a dynamic token dimension",
        "k not a multiple of 16",
    ),
    "nvfp4_silu_experts": (
        "positional, by keyword, a dynamic token dimension",
        "k not a multiple of 16",
    ),
    # It writes k and returns nothing; the backend it refuses arrives in 0.7.0 (ONLY_FROM).
    "concat_mla_k": ("positional, by keyword, a dynamic token count", "another backend"),
    # It writes its outputs and returns nothing; routing_replay_out from 0.6.8 (BEFORE).
    "fused_topk_deepseek": (
        "positional, by keyword, routing_replay_out, a dynamic token count",
        "topk 9",
    ),
    # The fused MoE, finalized: output= from 0.6.14 for BF16 (BEFORE), from 0.6.0 for FP4;
    # routing_replay_out from 0.6.8; FP4 also with bfloat16 activations, and valid_hidden_size
    # from 0.7.0 (BEFORE).
    "trtllm_bf16_moe": (MOE_FORMS, MOE_REFUSED),
    "trtllm_fp4_block_scale_moe": (
        MOE_FORMS + ", bfloat16 activations, valid_hidden_size",
        MOE_REFUSED + ", valid_hidden_size past the hidden size",
    ),
    "trtllm_fp8_block_scale_moe": (
        MOE_FORMS + ", valid_hidden_size",
        MOE_REFUSED + ", valid_hidden_size past the hidden size",
    ),
    "trtllm_fp8_per_tensor_scale_moe": (MOE_FORMS, MOE_REFUSED),
    # No output and no routing_replay_out; bfloat16 activations refused from 0.7.1 (BEFORE).
    "trtllm_fp8_per_channel_scale_moe": (
        "by keyword, positional, FlashInfer's defaults, a dynamic token count",
        "bfloat16 activations, float32 activations",
    ),
    # A given output is checked from 0.7.0, with valid_hidden_size; before, an output of too few
    # rows is taken as it is (BEFORE).
    "trtllm_mxint4_block_scale_moe": (
        MOE_FORMS + ", valid_hidden_size",
        MOE_REFUSED + ", valid_hidden_size past the hidden size",
    ),
    # The routed MoE: topk_ids in the logits' place, a (topk_ids, topk_weights) pair where it
    # takes one (from 0.6.18, FP4 from 0.6.12; never FP8 per channel or MXINT4, BEFORE);
    # workspace_buffer (0.7.4, NEWER_FORMS) where it writes nothing else.
    "trtllm_bf16_routed_moe": (ROUTED_FORMS + ", writes: routing_replay_out", MOE_REFUSED),
    "trtllm_fp4_block_scale_routed_moe": (
        ROUTED_FORMS + ", bfloat16 activations, valid_hidden_size",
        ROUTED_REFUSED,
    ),
    "trtllm_fp8_block_scale_routed_moe": (ROUTED_FORMS + ", valid_hidden_size", ROUTED_REFUSED),
    "trtllm_fp8_per_tensor_scale_routed_moe": (
        ROUTED_FORMS + ", writes: routing_replay_out",
        MOE_REFUSED,
    ),
    "trtllm_fp8_per_channel_scale_routed_moe": (
        "by keyword, positional, FlashInfer's defaults, a dynamic token count",
        "bfloat16 activations, float32 activations",
    ),
    "trtllm_mxint4_block_scale_routed_moe": (
        ROUTED_UNPAIRED + ", valid_hidden_size",
        ROUTED_REFUSED,
    ),
    # out= from 0.7.2.post1: the proof adds its forms where the function takes it.
    "block_scale_interleave": (
        "positional, by keyword, 3-D bfloat16, by its other name, a dynamic dimension",
        "float32 scales, a 1-D input",
    ),
}
# Forms 0.7.4 adds: out= (0.7.2.post1 on), top_k_max (0.7.4), top_k_renorm_probs'
# is_deterministic (0.7.1 on), workspace_buffer (0.7.4) where it is all the MoE writes.
NEWER_FORMS = {
    "batch_prefill_with_paged_kv_cache_run": (
        ", an lse given heads first (lse_layout HN), no out, return_lse",
        "",
    ),
    "batch_prefill_with_ragged_kv_cache_run": (
        ", an lse given heads first (lse_layout HN), no out, return_lse",
        "",
    ),
    "block_scale_interleave": (", out=", ", out of the wrong size"),
    "top_k_top_p_sampling_from_probs": (", top_k_max", ""),
    "top_k_renorm_probs": (", is_deterministic", ""),
    "trtllm_fp8_per_channel_scale_moe": (", writes: workspace_buffer", ""),
    "trtllm_fp4_block_scale_routed_moe": (", writes: workspace_buffer", ""),
    "trtllm_fp8_block_scale_routed_moe": (", writes: workspace_buffer", ""),
    "trtllm_fp8_per_channel_scale_routed_moe": (", writes: workspace_buffer", ""),
    "trtllm_mxint4_block_scale_routed_moe": (", writes: workspace_buffer", ""),
}

# What a proof shows on releases before the one a form or a refusal arrives in: steps of (that
# release, the forms, the refused inputs), the earliest first; a release takes the first step it
# comes before.
BEFORE = {
    "concat_mla_k": (
        (
            "0.7.0",
            "positional, by keyword, a dynamic token count",
            "it refuses no input before its kernel",
        ),
    ),
    "fused_topk_deepseek": (("0.6.8", "positional, by keyword, a dynamic token count", "topk 9"),),
    "trtllm_bf16_moe": (
        ("0.6.8", MOE_PLAIN, NOTHING_REFUSED),
        ("0.6.14", MOE_NO_OUTPUT, "an int32 routing_replay_out"),
    ),
    "trtllm_fp4_block_scale_moe": (
        ("0.6.8", ROUTED_UNPAIRED + ", bfloat16 activations", "an output of too few rows"),
        ("0.7.0", MOE_FORMS + ", bfloat16 activations", MOE_REFUSED),
    ),
    "trtllm_fp8_block_scale_moe": (
        ("0.6.8", MOE_PLAIN, NOTHING_REFUSED),
        ("0.6.14", MOE_NO_OUTPUT, "an int32 routing_replay_out"),
        ("0.7.0", MOE_FORMS, MOE_REFUSED),
    ),
    "trtllm_fp8_per_tensor_scale_moe": (
        ("0.6.8", MOE_PLAIN, NOTHING_REFUSED),
        ("0.6.14", MOE_NO_OUTPUT, "an int32 routing_replay_out"),
    ),
    "trtllm_fp8_per_channel_scale_moe": (
        (
            "0.7.1",
            "by keyword, positional, FlashInfer's defaults, a dynamic token count, "
            "bfloat16 activations",
            "float32 activations",
        ),
    ),
    "trtllm_mxint4_block_scale_moe": (
        ("0.6.8", ROUTED_UNPAIRED + ", out: an output of too few rows, unchecked", NOTHING_REFUSED),
        (
            "0.7.0",
            MOE_FORMS + ", out: an output of too few rows, unchecked",
            "an int32 routing_replay_out",
        ),
    ),
}


# FP8 per channel's routed call takes the activations its own takes; the other routed calls take
# a pair from 0.6.18 (FP4 from 0.6.12), an output where the release has one (BF16 from 0.6.14),
# and valid_hidden_size from 0.7.0; MXINT4's takes an output of too few rows unchecked before.
BEFORE["trtllm_fp8_per_channel_scale_routed_moe"] = BEFORE["trtllm_fp8_per_channel_scale_moe"]
# cutlass_fused_moe takes workspace_buffer and profile_ids from 0.6.16 (0.6.16.post3 - 0.6.17
# ignore the tactics: a test of its own).
CUTLASS_OLDER = PROVEN["cutlass_fused_moe"][0].removesuffix(", writes: workspace_buffer")
# Before 0.5.0 there is no activation_type.
CUTLASS_ONE = CUTLASS_OLDER.replace(", an ActivationType", "")
BEFORE["cutlass_fused_moe"] = (
    ("0.6.16", CUTLASS_OLDER, CUTLASS_REFUSED.removesuffix(", profile_ids of one tactic")),
    ("0.7.2", PROVEN["cutlass_fused_moe"][0], CUTLASS_REFUSED),
)
BEFORE["trtllm_batch_decode_with_kv_cache"] = (
    ("0.6.12", TRTLLM_DECODE_FORMS, TRTLLM_DECODE_REFUSED),
    ("0.7.0", TRTLLM_DECODE_LSE_FORMS, TRTLLM_DECODE_LSE_REFUSED),
)
BEFORE["trtllm_bf16_routed_moe"] = (
    ("0.6.8", MOE_PLAIN, NOTHING_REFUSED),
    ("0.6.14", MOE_NO_OUTPUT, "an int32 routing_replay_out"),
    ("0.6.18", MOE_FORMS, MOE_REFUSED),
)
BEFORE["trtllm_fp4_block_scale_routed_moe"] = (
    ("0.6.12", ROUTED_UNPAIRED + ", bfloat16 activations", "an output of too few rows"),
    ("0.7.0", ROUTED_FORMS + ", bfloat16 activations", "an output of too few rows"),
)
BEFORE["trtllm_fp8_block_scale_routed_moe"] = (
    ("0.6.18", ROUTED_UNPAIRED, "an output of too few rows"),
    ("0.7.0", ROUTED_FORMS, "an output of too few rows"),
)
BEFORE["trtllm_fp8_per_tensor_scale_routed_moe"] = (
    ("0.6.18", ROUTED_UNPAIRED + ", writes: routing_replay_out", MOE_REFUSED),
)
BEFORE["trtllm_mxint4_block_scale_routed_moe"] = (
    (
        "0.7.0",
        ROUTED_UNPAIRED + ", out: an output of too few rows, unchecked",
        "it refuses no input before its kernel",
    ),
)


def test_each_patch_names_its_entry_point_and_an_op_of_the_same_name() -> None:
    """The proof finds the entry point by the patch's id: op-NAME, NAME with dashes; a method's
    NAME is its class's in snake case without `Wrapper`, then its own
    (batch_decode_with_paged_kv_cache_run for BatchDecodeWithPagedKVCacheWrapper.run, as
    FlashInfer named its own ops once: batch_prefill_with_paged_kv_cache_run)."""
    for patch_id in BOUNDARIES:
        patch = PATCHES[patch_id]
        assert isinstance(patch.operation, Boundary)
        name = patch.function
        if patch.operation.method:
            words = r"(?<=[a-z])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"
            held = re.sub(words, "_", patch.scope.removesuffix("Wrapper")).lower()
            name = held + "_" + patch.function
        assert name == ENTRY_POINTS[patch_id] == patch.operation.op
        assert patch_id == "op-" + name.replace("_", "-")
        assert patch.requires.patches == (DECLARED,)


def test_the_placed_files_define_each_name_once() -> None:
    """declared_ops.py and op_boundary.py share flashinfer/utils.py's namespace: a name both
    define would be the later one's in both (the first try lost _fi_patch_route that way)."""
    defined: dict[str, list[str]] = {}
    for name in ("declared_ops.py", "op_boundary.py"):
        tree = ast.parse(placed(name, []) if name == "op_boundary.py" else _raw(name))
        for node in tree.body:
            targets = []
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                targets = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                found = node.targets if isinstance(node, ast.Assign) else [node.target]
                targets = [t.id for t in found if isinstance(t, ast.Name)]
            for target in targets:
                defined.setdefault(target, []).append(name)
    twice = {k: v for k, v in defined.items() if len(v) > 1}
    assert twice == {}
    assert "_fi_patch_boundary" in defined and "_fi_patch_custom_op" in defined


def _raw(name: str) -> str:
    from importlib import resources

    return resources.files("fi_patcher.placed").joinpath(name).read_text(encoding="utf-8")


def test_declared_ops_custom_places_the_boundary_code_after_its_own() -> None:
    text = PATCHES[DECLARED].operation.definitions["route"]  # type: ignore[union-attr]
    assert text.index("def _fi_patch_custom_op(") < text.index("def _fi_patch_boundary(")
    assert "_fi_patch_checked = {\n" in text


@pytest.mark.parametrize("version", ["0.6.8.post1", "0.7.4"])
def test_the_function_stays_and_one_call_follows_it(version: str) -> None:
    """The patched activation.py holds each function's released lines unchanged, and after each
    one call naming its op, fake and rule; taking the patches out gives RECORD's bytes."""
    original = released_text(release(version), ACTIVATION).decode("utf-8")
    patches = [PATCHES[p] for p in ACTIVATIONS]
    composed = compose(original, [(p, p.shapes) for p in patches], "9.9.9")
    assert not hasattr(composed, "reason"), composed
    text = composed.text  # type: ignore[union-attr]
    rule = "even" if version == "0.7.4" else "16-bytes"
    for patch in patches:
        call = (
            f'_fi_patch_boundary(\n        {patch.function}, "{patch.function}", '
            f'fake="act_and_mul", rule="{rule}", out="out", returns=1\n    )'
        )
        assert call in text
        assert f"# fi-patch: {patch.id} (fi-patch 9.9.9)\n" in text
    removed = [line for line in original.splitlines() if line not in text.splitlines()]
    assert removed == []
    for patch in reversed(patches):
        text = take_out(text, patch, composed.shapes[patch.id])  # type: ignore[union-attr,assignment]
        assert text is not None
    assert text == original


def test_an_op_boundary_names_its_rule_and_requires_the_placed_code() -> None:
    base = (Path(__file__).parents[1] / "patches" / f"{SILU}.toml").read_text()
    with pytest.raises(RegistryError, match="requires declared-ops-custom"):
        parse_patch("x.toml", base.replace('patches = ["declared-ops-custom"]', "patches = []"))
    with pytest.raises(RegistryError, match="names no rule for its fake"):
        parse_patch("x.toml", base.replace('text = "even"', 'text = ""'))
    # The fakes and their rules are read from placed/op_boundary.py: a typo cannot silently
    # turn a check off.
    with pytest.raises(RegistryError, match="the fake act_and_mul has no rule 'odd'"):
        parse_patch("x.toml", base.replace('text = "even"', 'text = "odd"'))
    with pytest.raises(RegistryError, match="has no fake 'act_and_add'"):
        parse_patch("x.toml", base.replace('fake = "act_and_mul"', 'fake = "act_and_add"'))
    # The types a patch gives unannotated parameters are the placed code's names too.
    batched = (Path(__file__).parents[1] / "patches" / f"{BATCHED}.toml").read_text()
    with pytest.raises(RegistryError, match="parameter a: the op has no type 'tensor'"):
        parse_patch("x.toml", batched.replace('a = "Tensor"', 'a = "tensor"'))
    # A flag that sets how many outputs the entry point returns needs an op that returns them.
    sampler = (Path(__file__).parents[1] / "patches" / f"{TOP_P}.toml").read_text()
    with pytest.raises(RegistryError, match="returns_when = 'return_valid' needs returns = 2"):
        parse_patch("x.toml", sampler.replace("returns = 2", "returns = 1"))
    # The one value a parameter takes is written into FlashInfer's file: a name and a string.
    fp4 = (Path(__file__).parents[1] / "patches" / f"{OP_BOUNDARY}.toml").read_text()
    with pytest.raises(RegistryError, match="only: backend = 4 is not a parameter name"):
        parse_patch("x.toml", fp4.replace('backend = "cuda"', "backend = 4"))
    with pytest.raises(RegistryError, match="only: backend = 'cu\"da' is not"):
        parse_patch("x.toml", fp4.replace('backend = "cuda"', 'backend = "cu\\"da"'))
    # An op that returns nothing writes its parameters, names each, and has no out= form.
    concat = (Path(__file__).parents[1] / "patches" / f"{CONCAT}.toml").read_text()
    with pytest.raises(RegistryError, match="returns = 0 takes no out, returns_when"):
        parse_patch("x.toml", concat.replace("returns = 0", 'returns = 0\nout = "k"'))
    with pytest.raises(RegistryError, match="returns one tensor or more, or writes"):
        parse_patch("x.toml", concat.replace('writes = ["k"]', "writes = []"))
    with pytest.raises(RegistryError, match="writes: 'k,' is not a parameter name"):
        parse_patch("x.toml", concat.replace('writes = ["k"]', 'writes = ["k,"]'))
    # The fused MoE's op carries do_finalize true only (a bool), and returns the one output the
    # function returns in a list.
    moe = (Path(__file__).parents[1] / "patches" / f"{TRTLLM_FP4}.toml").read_text()
    with pytest.raises(RegistryError, match="only: do_finalize = 1 is not a parameter name"):
        parse_patch("x.toml", moe.replace("do_finalize = true", "do_finalize = 1"))
    with pytest.raises(RegistryError, match="listed = true needs returns of 1 or more"):
        parse_patch("x.toml", moe.replace("listed = true", "listed = true\nreturns = 0"))
    with pytest.raises(RegistryError, match="listed = true needs returns of 1 or more"):
        parse_patch("x.toml", moe.replace("listed = true", 'listed = true\nreturns_when = "x"'))
    with pytest.raises(RegistryError, match="listed = 'false' is not true or false"):
        parse_patch("x.toml", moe.replace("listed = true", 'listed = "false"'))
    # Its op for a call a CUDA graph cannot capture would declare nothing written.
    with pytest.raises(RegistryError, match=r"writes = \[...\] takes no uncapturable"):
        parse_patch(
            "x.toml",
            moe.replace("listed = true", 'listed = true\nuncapturable = { do_finalize = "true" }'),
        )
    # A shape's own returns and check (cutlass_fused_moe before 0.3.0) are checked as the
    # patch's are, and only an op boundary's shapes name them.
    cutlass = (Path(__file__).parents[1] / "patches" / f"{CUTLASS_MOE}.toml").read_text()
    one = 'returns = 1\ncheck = "_check_shape_dtype_device"'
    assert cutlass.count(one) == 3
    with pytest.raises(RegistryError, match=r"shape 0\.2\.9: listed = true needs returns of 1"):
        parse_patch("x.toml", cutlass.replace(one, one.replace("1", "0"), 1))
    with pytest.raises(RegistryError, match=r"shape 0\.2\.9: check = '_check shape_dtype_dev"):
        parse_patch("x.toml", cutlass.replace(one, one.replace("_check_shape", "_check shape"), 1))
    with pytest.raises(RegistryError, match=r"shape 0\.2\.9: check = 5 is not a function's"):
        parse_patch("x.toml", cutlass.replace(one, "returns = 1\ncheck = 5", 1))
    with pytest.raises(RegistryError, match=r"shape 0\.2\.9: returns = True is not a whole"):
        parse_patch("x.toml", cutlass.replace(one, one.replace("1", "true"), 1))
    crash = (Path(__file__).parents[1] / "patches" / "cuda-version-torch-first.toml").read_text()
    with pytest.raises(RegistryError, match="returns and check are an op boundary's"):
        parse_patch(
            "x.toml", crash.replace('text = "torch-first"', 'text = "torch-first"\nreturns = 1', 1)
        )


# In the target after apply: the op each entry point traces to, the function left as FlashInfer
# wrote it, TypeError where Python raises one, and no Dynamo imported by `import flashinfer`.
IN_TARGET = """
import json, sys, torch, flashinfer, flashinfer.utils as utils
import flashinfer.concat_ops  # flashinfer does not import it
entry = utils._fi_patch_boundaries["silu_and_mul"]
dynamo = "torch._dynamo" in sys.modules
def graph(fn, *args):
    graphs = []
    class Recorded(Exception):
        pass
    def record(gm, inputs):
        graphs.append(gm)
        def never(*a):
            raise Recorded()
        return never
    torch._dynamo.reset()
    try:
        torch.compile(fn, fullgraph=True, backend=record)(*args)
    except Recorded:
        pass
    except Exception as exc:
        return [type(exc).__name__, str(exc).splitlines()[0]]
    return [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
def binding(fn, *args, **kwargs):
    # How the traced path binds a call, against Python's own binding of the entry point.
    import inspect
    try:
        inspect.signature(fn).bind(*args, **kwargs)
        python = "binds"
    except TypeError:
        python = "TypeError"
    try:
        utils._fi_patch_boundary_bind(
            entry.name, entry.names, entry.defaults, entry.positional, args, kwargs
        )
        ours = "binds"
    except TypeError:
        ours = "TypeError"
    return [python, ours]
def refusal(fn, *args):
    # The TypeError Dynamo met while tracing, as its message carries it.
    try:
        torch.compile(fn, fullgraph=True, backend=lambda gm, inputs: gm)(*args)
    except Exception as exc:
        found = [l for l in str(exc).splitlines() if "raised exception TypeError" in l]
        return found[0].split("TypeError(", 1)[1] if found else str(exc).splitlines()[0]
    return "traced"
x = torch.randn(4, 256, dtype=torch.bfloat16)
q = torch.empty(2, 64, 128, dtype=torch.bfloat16, device="meta")
qs = torch.empty(1, device="meta")
p = torch.empty(4, 128, device="meta")
t = torch.empty(4, device="meta")
k = torch.empty(4, dtype=torch.int32, device="meta")
generator = torch.Generator()
# fused_topk_deepseek's @backend_requirement takes skip_check=True, which its signature does not
# show: eagerly as before (its kernel module stood in), and under compile a TypeError naming it.
import types, flashinfer.fused_moe.fused_routing_dsv3 as dsv3
dsv3.get_dsv3_fused_routing_module = lambda *a, **k: types.SimpleNamespace(NoAuxTc=lambda *a: None)
routed = (torch.randn(2, 256), torch.randn(256), torch.empty(2, 8), torch.empty(2, 8).int())
def skip_check(scores, bias, values, indices):
    fused = flashinfer.fused_moe.fused_topk_deepseek
    return fused(scores, bias, 8, 4, 8, 2.5, values, indices, skip_check=True)
try:
    skipped = ["returns", skip_check(*routed)]
except Exception as exc:
    skipped = [type(exc).__name__, str(exc)]
meta = lambda *s, dtype=torch.bfloat16: torch.empty(*s, dtype=dtype, device="meta")
moe = (meta(4, 8, dtype=torch.float32), meta(4, 256), meta(8, 2, 256, 128), meta(8, 1, 256, 128))
def bf16_moe(finalize):
    return lambda l, h, w1, w2: flashinfer.fused_moe.trtllm_bf16_moe(
        l, None, h, w1, w2, 8, 2, None, None, 128, 0, 8, do_finalize=finalize
    )
# The routed BF16 MoE (0.7.0 on): topk_ids packed, as a pair, and beside a LoRA delta, which
# returns more outputs and so traces the function's own body.
picked = (meta(4, 2, dtype=torch.int32), meta(4, 256), meta(8, 2, 256, 128), meta(8, 1, 256, 128))
def bf16_routed(ids, h, w1, w2, **more):
    return flashinfer.fused_moe.trtllm_bf16_routed_moe(
        ids, h, w1, w2, 8, 2, None, None, 128, 0, 8, **more
    )
routed_ready = getattr(utils._fi_patch_boundaries.get("trtllm_bf16_routed_moe"), "ready", False)
# A check the patch names that the entry point's module lacks: a text that does not call it
# checks nothing (the trtllm MoE before 0.6.8), one that calls it is left as it is.
def unchecked_text(x: torch.Tensor) -> torch.Tensor:
    return x
def missing_check(x: torch.Tensor) -> torch.Tensor:
    return _fi_patch_no_such_check(x)
checks = []
for fn in (unchecked_text, missing_check):
    utils._fi_patch_boundary(fn, "test_" + fn.__name__, fake="trtllm_moe", rule="exact",
                             check="_fi_patch_no_such_check")
    made = utils._fi_patch_boundaries.pop("test_" + fn.__name__)
    checks.append([made.ready, made.reason])
def returned_and_written(name):
    schema = getattr(torch.ops.fi_patch, name).default._schema
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    return str(schema).split(") -> ")[1] + " " + " ".join(written)
print(json.dumps({
    "ready": {name: e.ready for name, e in sorted(utils._fi_patch_boundaries.items())},
    "schema": str(torch.ops.fi_patch.silu_and_mul.default._schema),
    "out schema": str(torch.ops.fi_patch.silu_and_mul_out.default._schema),
    "own": flashinfer.silu_and_mul is entry.routed
    and flashinfer.activation.silu_and_mul is entry.routed
    and entry.routed.__name__ == "silu_and_mul"
    and (
        entry.fn.__code__.co_name == "silu_and_mul"
        or entry.fn.__wrapped__.__code__.co_name == "silu_and_mul"
    ),
    "binding": [
        binding(entry.fn, x),
        binding(entry.fn, x, None, False),
        binding(entry.fn, input=x, enable_pdl=False),
        binding(entry.fn, x, None, False, 1),
        binding(entry.fn, x, input=x),
        binding(entry.fn, out=x),
        binding(entry.fn, x, bogus=1),
    ],
    "unknown keyword": graph(lambda x: flashinfer.silu_and_mul(x, bogus=1), x),
    "missing argument": graph(lambda x: flashinfer.silu_and_mul(out=x), x),
    "two calls": graph(lambda x: flashinfer.gelu_and_mul(flashinfer.silu_and_mul(x)), x),
    "mm_fp4 schema": str(torch.ops.fi_patch.mm_fp4.default._schema),
    "mxfp8 schema": str(torch.ops.fi_patch.mxfp8_quantize.default._schema),
    "batched schema": str(torch.ops.fi_patch.nvfp4_batched_quantize.default._schema),
    "kept": list(utils._fi_patch_boundaries["nvfp4_batched_quantize"].kept),
    "4over6 passed": refusal(
        lambda q: flashinfer.nvfp4_batched_quantize(q, qs, nvfp4_4over6=None), q
    ),
    "sampler schema": str(torch.ops.fi_patch.top_k_top_p_sampling_from_probs.default._schema),
    "min_p schema": str(torch.ops.fi_patch.min_p_sampling_from_probs.default._schema),
    "renorm schema": str(torch.ops.fi_patch.top_p_renorm_probs.default._schema),
    "concat schema": str(torch.ops.fi_patch.concat_mla_k.default._schema),
    "routing schema": str(torch.ops.fi_patch.fused_topk_deepseek.default._schema),
    "finalized": graph(bf16_moe(True), *moe),
    "unfinalized": graph(bf16_moe(False), *moe),
    "moe schemas": [
        returned_and_written(name)
        for name in ("trtllm_bf16_moe", "trtllm_bf16_moe_writes", "trtllm_fp4_block_scale_moe_out")
        if hasattr(torch.ops.fi_patch, name)
    ],
    "routed": routed_ready and [
        str(torch.ops.fi_patch.trtllm_bf16_routed_moe.default._schema).split(", Tensor gemm1")[0],
        graph(bf16_routed, *picked),
        graph(lambda i, w, *a: bf16_routed((i, w), *a), picked[0], meta(4, 2), *picked[1:]),
        graph(
            lambda *a: bf16_routed(*a[:4], gemm1_lora_delta=a[4]), *picked, meta(4, 256)
        )[:1],
    ],
    "cutlass schemas": [
        returned_and_written(name)
        for name in ("cutlass_fused_moe", "cutlass_fused_moe_writes", "cutlass_fused_moe_out")
        if hasattr(torch.ops.fi_patch, name)
    ],
    "renormed": graph(lambda p: flashinfer.sampling.top_k_renorm_prob(p, k), p),
    "samples": graph(lambda p: flashinfer.top_k_sampling_from_probs(p, 5, seed=1, offset=0), p),
    "samples and valid": graph(
        lambda p: flashinfer.top_p_sampling_from_probs(p, t, return_valid=True), p
    ),
    "generator passed": refusal(
        lambda p: flashinfer.top_p_sampling_from_probs(p, 0.9, generator=generator), p
    ),
    "one function by two names": (
        flashinfer.nvfp4_block_scale_interleave is flashinfer.block_scale_interleave
        and flashinfer.block_scale_interleave
        is utils._fi_patch_boundaries["block_scale_interleave"].routed
    ),
    "dynamo imported": dynamo,
    "skip_check": [skipped, refusal(skip_check, *routed)],
    "checks": checks,
}))
"""


def in_target(venv: Path, code: str) -> dict[str, object]:
    completed = subprocess.run(
        [python_of(venv), "-c", code], capture_output=True, text=True, timeout=600, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return dict(json.loads(completed.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("version", releases(LIFECYCLE, "0.6.8.post1"))
def test_check_apply_check_revert(runner: CliRunner, tmp_path: Path, version: str) -> None:
    venv = create_venv(tmp_path / "venv")
    install(venv, release(version))
    use(venv, shared(CUDA_TORCH))
    written = (ACTIVATION, GEMM, FP4, FP8_QUANT, SAMPLING, CONCAT_OPS, ROUTING_DSV3, MOE_CORE)
    written += (DECODE, PREFILL)
    originals = {f: released_text(release(version), f) for f in written}
    named = [x for p in (DECLARED, *BOUNDARIES) for x in ("--patch", p)]
    # The fused MoE's ops (cutlass_fused_moe's too) begin at 0.6.0 (before, their older texts are
    # not applicable), MXINT4 at 0.6.5, the routed BF16 where it arrives (0.6.5), the routed FP8
    # block scales at 0.6.8, FP8 with per-channel scales at 0.7.0, the routed FP8 per tensor and
    # MXINT4 where they arrive.
    since = dict.fromkeys(MOE, "0.6.0") | {
        TRTLLM_MXINT4: "0.6.5",
        TRTLLM_BF16_ROUTED: "0.6.5",
        TRTLLM_FP8_BLOCK_ROUTED: "0.6.8",
        TRTLLM_FP8_CHANNEL: "0.7.0",
        TRTLLM_FP8_CHANNEL_ROUTED: "0.7.0",
        TRTLLM_FP8_TENSOR_ROUTED: "0.6.17",
        TRTLLM_MXINT4_ROUTED: "0.6.13",
        CUTLASS_MOE: "0.6.0",
        BATCH_DECODE: "0.6.0",
        BATCH_PREFILL: "0.6.0",
        BATCH_RAGGED: "0.6.0",
        TRTLLM_DECODE: "0.6.0",
    }
    boundaries = [p for p in BOUNDARIES if Version(version) >= Version(since.get(p, "0"))]

    before = fi_patch(runner, "check", "--venv", venv, *named, "--json")
    assert before.code == ExitCode.NEEDS_APPLY, before.stdout
    for patch_id in BOUNDARIES:
        state = "pristine" if patch_id in boundaries else "not-applicable"
        assert patch_result(before.json, patch_id)["state"] == state

    run = fi_patch(runner, "apply", "--venv", venv, *named, "--json")
    assert run.code == ExitCode.OK, run.stdout
    for patch_id in boundaries:
        proofs = patch_result(run.json, patch_id)["verification"]
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
        name = ENTRY_POINTS[patch_id]
        assert f"no op boundary for {name}" in proofs["before"]["summary"]
        fake = PATCHES[patch_id].operation.fake  # type: ignore[union-attr]
        key = name if name in PROVEN else fake
        forms, refused = PROVEN[key]
        if key in NEWER_FORMS and version == "0.7.4":
            forms, refused = forms + NEWER_FORMS[key][0], refused + NEWER_FORMS[key][1]
        for release_, *shown in BEFORE.get(key, ()):
            if Version(version) < Version(release_):
                forms, refused = shown
                break
        assert proofs["after"]["summary"] == (
            f"passes ({name} traces to one fi_patch op per call ({forms}), runs as it is "
            f"eagerly, and its op and the op's fake give the eager call's shapes, strides, "
            f"dtypes and errors ({refused}))"
        )

    after = fi_patch(runner, "check", "--venv", venv, *named)
    assert after.code == ExitCode.OK, after.stdout
    seen = in_target(venv, IN_TARGET)
    assert seen["ready"] == dict.fromkeys(sorted(ENTRY_POINTS[p] for p in boundaries), True)
    assert seen["schema"] == (
        "fi_patch::silu_and_mul(Tensor input, Tensor? out, bool? enable_pdl) -> Tensor"
    )
    assert seen["out schema"] == (
        "fi_patch::silu_and_mul_out(Tensor input, Tensor(a1!) out, bool? enable_pdl) -> ()"
    )
    assert seen["own"] is True
    # The traced path binds a call as Python binds it, and refuses what Python refuses.
    assert seen["binding"] == [["binds", "binds"]] * 3 + [["TypeError", "TypeError"]] * 4
    # Dynamo stops on the TypeError the binding raises, as Python would stop on it.
    assert (
        seen["unknown keyword"] == seen["missing argument"] == ["Unsupported", "Observed exception"]
    )
    assert seen["two calls"] == ["fi_patch.silu_and_mul", "fi_patch.gelu_and_mul"]
    # mm_fp4's op carries every parameter: the backend (a Literal of names) as a str, which the
    # op's eager call passes on, so it keeps choosing the backend.
    schema = str(seen["mm_fp4 schema"])
    assert schema.startswith("fi_patch::mm_fp4(Tensor a, Tensor b, Tensor a_descale, ")
    assert "ScalarType out_dtype, Tensor? out, SymInt block_size, " in schema
    assert "str backend, bool use_nvfp4, bool enable_pdl" in schema
    assert ("bool batch_invariant" in schema) == (version == "0.7.4")
    # An IntEnum (SfLayout) reaches the op as an int; unannotated parameters as the patch
    # types them.
    assert seen["mxfp8 schema"] == (
        "fi_patch::mxfp8_quantize(Tensor input, bool is_sf_swizzled_layout, SymInt alignment, "
        "bool? enable_pdl, str backend, SymInt? sf_swizzle_layout"
        + (", bool batch_invariant" if version == "0.7.4" else "")
        + ") -> (Tensor, Tensor)"
    )
    assert seen["batched schema"] == (
        "fi_patch::nvfp4_batched_quantize(Tensor a, Tensor a_global_sf, SymInt sf_vec_size) "
        "-> (Tensor, Tensor)"
    )
    # nvfp4_4over6 (0.7.1 on) defaults to a sentinel no schema holds: the op leaves it to it,
    # and a traced call that passes it stops with a TypeError that says so.
    if version == "0.7.4":
        assert seen["kept"] == ["nvfp4_4over6"]
        assert seen["4over6 passed"] == (
            "\"fi-patch's op for nvfp4_batched_quantize() leaves nvfp4_4over6 to its default: "
            'pass it only outside torch.compile")'
        )
    else:
        assert seen["kept"] == []
        # The routing function takes the entry point's own parameters: binding the call fails
        # as it fails in Python, where Dynamo binds it.
        assert seen["4over6 passed"] == "\"Unexpected keyword arguments: ['nvfp4_4over6']\")"
    # A sampler's op: top_k and top_p, seed and offset, two parameters each (a tensor, a number);
    # no generator (the op leaves it to its default) and no return_valid (the op returns both
    # outputs, the traced call the first alone unless the caller asks for both).
    assert seen["sampler schema"] == (
        "fi_patch::top_k_top_p_sampling_from_probs(Tensor probs, Tensor? top_k, "
        "SymInt? top_k_number, Tensor? top_p, float? top_p_number, Tensor? indices, "
        "str filter_apply_order, bool deterministic, bool check_nan, Tensor? seed, "
        "SymInt? seed_number, Tensor? offset, SymInt? offset_number"
        + (", SymInt? top_k_max" if version == "0.7.4" else "")
        + ") -> (Tensor, Tensor)"
    )
    assert seen["min_p schema"] == (
        "fi_patch::min_p_sampling_from_probs(Tensor probs, Tensor? min_p, float? min_p_number, "
        "Tensor? indices, bool deterministic, bool check_nan, Tensor? seed, SymInt? seed_number, "
        "Tensor? offset, SymInt? offset_number) -> (Tensor, Tensor)"
    )
    # The renorm samplers return one tensor; the threshold is two parameters, as the samplers'.
    assert seen["renorm schema"] == (
        "fi_patch::top_p_renorm_probs(Tensor probs, Tensor? top_p, float? top_p_number, "
        "bool is_deterministic) -> Tensor"
    )
    # concat_mla_k's op writes k and returns nothing, as the function does.
    assert seen["concat schema"] == (
        "fi_patch::concat_mla_k(Tensor(a0!) k, Tensor k_nope, Tensor k_rope"
        + (", str backend" if version in ("0.7.0", "0.7.4") else "")
        + ") -> ()"
    )
    # fused_topk_deepseek's op writes the outputs it is given, routing_replay_out where given.
    assert seen["routing schema"] == (
        "fi_patch::fused_topk_deepseek(Tensor scores, Tensor bias, SymInt n_group, "
        "SymInt topk_group, SymInt topk, float routed_scaling_factor, Tensor(a6!) topk_values, "
        "Tensor(a7!) topk_indices, bool launch_with_pdl"
        + (", Tensor(a9!)? routing_replay_out" if version != "0.6.7.post2" else "")
        + (", str backend" if version in ("0.7.0", "0.7.4") else "")
        + ") -> ()"
    )
    # The fused MoE's ops: the functional op writes nothing, its _writes twin the optional
    # buffers it is given (routing_replay_out from 0.6.8), the out= op output too; each returns
    # what the call returns. The op carries do_finalize true only: an unfinalized call traces
    # the function's own body, as unpatched, and a fullgraph trace stops in it (the kernel
    # module's getter). The routed MoE: from 0.6.18 topk_ids is two tensors of the op, a packed
    # tensor's second None; a LoRA delta (0.6.13 on), which returns more outputs, traces the
    # function's own body.
    schema, packed, paired, lora = seen["routed"]  # type: ignore[misc]
    pair = Version(version) >= Version("0.6.18")
    assert schema == (
        "fi_patch::trtllm_bf16_routed_moe(Tensor topk_ids, "
        + ("Tensor? topk_ids_pair, " if pair else "")
        + "Tensor hidden_states"
    )
    assert packed == ["fi_patch.trtllm_bf16_routed_moe"]
    if pair:
        assert paired == ["fi_patch.trtllm_bf16_routed_moe"]
        assert lora[0] in ("Unsupported", "InternalTorchDynamoError"), lora
    assert seen["finalized"] == ["fi_patch.trtllm_bf16_moe"]
    assert len(seen["unfinalized"]) == 2, seen["unfinalized"]
    assert seen["unfinalized"][0] in ("Unsupported", "InternalTorchDynamoError")
    if version == "0.6.7.post2":
        assert seen["moe schemas"] == ["Tensor ", "() output"]
    else:
        buffers = "routing_replay_out" + (" workspace_buffer" if version == "0.7.4" else "")
        assert seen["moe schemas"] == [
            "Tensor ",
            f"Tensor {buffers}",
            f"() output {buffers}",
        ]
    # cutlass_fused_moe returns its output and three unwritten buffers: the out op writes output
    # (and workspace_buffer, 0.6.16 on) and returns the three.
    four, three = "(Tensor, Tensor, Tensor, Tensor)", "(Tensor, Tensor, Tensor)"
    if Version(version) >= Version("0.6.16"):
        assert seen["cutlass schemas"] == [
            f"{four} ",
            f"{four} workspace_buffer",
            f"{three} output workspace_buffer",
        ]
    else:
        assert seen["cutlass schemas"] == [f"{four} ", f"{three} output"]
    # FlashInfer's other name for the function is the routing function too.
    assert seen["renormed"] == ["fi_patch.top_k_renorm_probs"]
    getitem = "<built-in function getitem>"
    assert seen["samples"] == ["fi_patch.top_k_sampling_from_probs", getitem]
    # Without seed and offset the body reads the device's generator on the host, which a CUDA
    # graph cannot capture: the op tagged cudagraph_unsafe.
    assert seen["samples and valid"] == [
        "fi_patch.top_p_sampling_from_probs_uncapturable",
        getitem,
        getitem,
    ]
    assert seen["generator passed"] == (
        "\"fi-patch's op for top_p_sampling_from_probs() leaves generator to its default: "
        'pass it only outside torch.compile")'
    )
    assert seen["one function by two names"] is True
    assert seen["dynamo imported"] is False
    assert seen["skip_check"] == [
        ["returns", None],
        "\"fused_topk_deepseek() got an unexpected keyword argument 'skip_check'\")",
    ]

    assert seen["checks"] == [
        [True, ""],
        [False, "its module has no function _fi_patch_no_such_check"],
    ]

    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.stdout
    for relpath, original in originals.items():
        assert (site_packages(venv) / relpath).read_bytes() == original


# The last commit of fi-patch 0.7.0 on main: declared-ops-custom without the op boundary's code.
RELEASE_0_7_0 = "b125b01"


@pytest.fixture(scope="module")
def tool_0_7_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fi-patch 0.7.0 in a venv of its own, built from the repository's history."""
    return released_tool(RELEASE_0_7_0, tmp_path_factory.mktemp("fi-patch-0.7.0"))


def _cutlass_proven(runner: CliRunner, venv: Path, forms: str, refused: str) -> None:
    """apply of cutlass_fused_moe's patch (and declared-ops-custom): red before, and green after
    with the call forms and refusals given."""
    named = ("--patch", DECLARED, "--patch", CUTLASS_MOE)
    run = fi_patch(runner, "apply", "--venv", venv, *named, "--json")
    assert run.code == ExitCode.OK, run.stdout
    proofs = patch_result(run.json, CUTLASS_MOE)["verification"]
    assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
    assert proofs["after"]["summary"] == (
        f"passes (cutlass_fused_moe traces to one fi_patch op per call ({forms}), runs as it is "
        f"eagerly, and its op and the op's fake give the eager call's shapes, strides, dtypes "
        f"and errors ({refused}))"
    )


@pytest.mark.parametrize(
    ("version", "forms", "refused"),
    [
        pytest.param(
            "0.6.16.post3",
            CUTLASS_OLDER
            + ", writes: workspace_buffer, profile_ids of one tactic, which it ignores",
            "an output of too few rows, the min-latency mode",
            id="0.6.16.post3: profile_ids taken and ignored",
        ),
        pytest.param(
            "0.6.13",
            CUTLASS_OLDER,
            "an output of too few rows, the min-latency mode",
            id="0.6.13: no profile_ids or workspace_buffer",
            marks=SLOW,
        ),
        pytest.param(
            "0.6.18.post1",
            CUTLASS_OLDER + ", writes: workspace_buffer",
            CUTLASS_REFUSED,
            id="0.6.18.post1: profile_ids read again",
            marks=SLOW,
        ),
    ],
)
def test_cutlass_fused_moe_on_the_0_6_shapes(
    runner: CliRunner, venv_with: MakeVenv, version: str, forms: str, refused: str
) -> None:
    """The shapes of the 0.6 line between those the lifecycle above runs: red before, green
    after with what each release takes and refuses (profile_ids of one tactic is a call where
    the kernel module runs the autotuner whatever they say), and revert gives RECORD's bytes."""
    venv = venv_with(version)
    _cutlass_proven(runner, venv, forms, refused)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert (site_packages(venv) / MOE_CORE).read_bytes() == released_text(
        release(version), MOE_CORE
    )


CUTLASS_LISTED_ONE = """
import json

import torch

import flashinfer.utils as utils


def returned_and_written(name):
    schema = getattr(torch.ops.fi_patch, name).default._schema
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    return str(schema).split(") -> ")[1] + " " + " ".join(written)


entry = utils._fi_patch_boundaries["cutlass_fused_moe"]
names = ("cutlass_fused_moe", "cutlass_fused_moe_writes", "cutlass_fused_moe_out")
print(json.dumps({
    "ready": entry.ready,
    "schemas": [returned_and_written(n) for n in names if hasattr(torch.ops.fi_patch, n)],
}))
"""


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        pytest.param(
            "0.2.9",
            "an output of too few rows, the min-latency mode, use_deepseek_fp8_block_scale=True, "
            "use_w4a8_group_scaling=True, use_mxfp8_act_scaling=True",
            id="0.2.9: W4A8 and MXFP8 refused",
        ),
        pytest.param(
            "0.2.13",
            "an output of too few rows, the min-latency mode, use_deepseek_fp8_block_scale=True",
            id="0.2.13: W4 and MXFP8 taken",
            marks=SLOW,
        ),
    ],
)
def test_cutlass_fused_moe_before_0_3_is_an_op_of_one_output(
    runner: CliRunner, venv_with: MakeVenv, version: str, refused: str
) -> None:
    """Before 0.3.0 the kernel module returns a list of one, and the function checks a given
    output with _check_shape_dtype_device: the shapes' own returns and check make the op return
    the output alone and its out op nothing. Red before, green after with what the Blackwell
    build refuses in the function itself; revert gives RECORD's bytes."""
    venv = venv_with(version)
    # 0.2.13 takes W4 group scaling (renamed) and MXFP8 activations.
    taken = (
        ", use_w4_group_scaling=True, which it takes, use_mxfp8_act_scaling=True, which it takes"
        if version == "0.2.13"
        else ""
    )
    _cutlass_proven(runner, venv, CUTLASS_ONE + taken, refused)
    seen = in_target(venv, CUTLASS_LISTED_ONE)
    assert seen == {"ready": True, "schemas": ["Tensor ", "() output"]}
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert (site_packages(venv) / MOE_CORE).read_bytes() == released_text(
        release(version), MOE_CORE
    )


@pytest.mark.parametrize(
    "version",
    [
        pytest.param("0.2.6", id="0.2.6: the first shape, prefill's module getter curried"),
        pytest.param("0.4.0", id="0.4.0: the 0.2.9 and 0.2.7 shapes", marks=SLOW),
        pytest.param("0.6.0", id="0.6.0: @flashinfer_api", marks=SLOW),
        pytest.param("0.6.16.post3", id="0.6.16.post3: the 0.6.15 prefill", marks=SLOW),
    ],
)
def test_single_attention_on_the_older_shapes(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    """The single-request attention's shapes between and before those the lifecycle above runs:
    red before, green after with the same call forms and refusals, and revert gives RECORD's
    bytes."""
    venv = venv_with(version)
    named = ("--patch", DECLARED, "--patch", SINGLE_DECODE, "--patch", SINGLE_PREFILL)
    run = fi_patch(runner, "apply", "--venv", venv, *named, "--json")
    assert run.code == ExitCode.OK, run.stdout
    for patch_id in (SINGLE_DECODE, SINGLE_PREFILL):
        proofs = patch_result(run.json, patch_id)["verification"]
        assert (proofs["before"]["passed"], proofs["after"]["passed"]) == (False, True), proofs
        name = ENTRY_POINTS[patch_id]
        forms, refused = PROVEN[name]
        assert proofs["after"]["summary"] == (
            f"passes ({name} traces to one fi_patch op per call ({forms}), runs as it is "
            f"eagerly, and its op and the op's fake give the eager call's shapes, strides, "
            f"dtypes and errors ({refused}))"
        )
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    for relpath in (DECODE, PREFILL):
        assert (site_packages(venv) / relpath).read_bytes() == released_text(
            release(version), relpath
        )


@SLOW
def test_an_upgrade_writes_utils_again_for_the_op_boundaries(
    runner: CliRunner, tmp_path: Path, tool_0_7_0: Path
) -> None:
    """fi-patch 0.7.0 placed declared-ops-custom without the op boundary's code. This version's
    apply writes flashinfer/utils.py again, as it writes it, for the op-* patches that need it,
    says so, proves it, and records it; `check` then exits 0."""
    venv = create_venv(tmp_path / "venv")
    install(venv, release("0.7.4"))
    use(venv, shared(CUDA_TORCH))
    old = subprocess.run(
        [tool_0_7_0, "apply", "--venv", venv, "--patch", DECLARED, "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert old.returncode == ExitCode.OK, old.stdout + old.stderr

    plan = fi_patch(runner, "check", "--venv", venv, "--patch", DECLARED, "--patch", SILU)
    assert plan.code == ExitCode.NEEDS_APPLY, plan.stdout
    run = fi_patch(runner, "apply", "--venv", venv, "--patch", DECLARED, "--patch", SILU, "--json")
    assert run.code == ExitCode.OK, run.stdout
    declared = patch_result(run.json, DECLARED)
    assert declared["action"] == "rewritten"
    assert declared["message"].startswith(
        f"flashinfer/utils.py is written again as fi-patch {__version__} writes it, for "
        "op-silu-and-mul"
    )
    assert declared["verification"]["after"]["passed"] is True
    assert patch_result(run.json, SILU)["action"] == "applied"
    manifest = json.loads((venv / ".fi-patch" / "manifest.json").read_text())
    versions = {p["id"]: p["fi_patch_version"] for f in manifest["files"] for p in f["patches"]}
    assert versions == {DECLARED: __version__, SILU: __version__}
    after = fi_patch(runner, "check", "--venv", venv, "--patch", DECLARED, "--patch", SILU)
    assert after.code == ExitCode.OK, after.stdout
