"""Real FlashInfer releases, downloaded from the package registry at test time and cached.

Nothing of FlashInfer is committed: the files come from PyPI's simple index (PEP 691 JSON), are
checked against the sha256 the index publishes, and are kept in $FI_PATCH_TEST_CACHE (default
~/.cache/fi-patch-tests) so that later runs need no network.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

from packaging.version import Version

INDEX = "https://pypi.org/simple/flashinfer-python/"
CACHE = Path(os.environ.get("FI_PATCH_TEST_CACHE", Path.home() / ".cache" / "fi-patch-tests"))
TARGET = "flashinfer/jit/cpp_ext.py"
FP4 = "flashinfer/quantization/fp4_quantization.py"
FP4_OLD = "flashinfer/fp4_quantization.py"
"""Where fp4_quantize lived up to 0.6.6; from 0.6.7 it re-exports it from FP4."""

CUDA = "cuda-version-torch-first"
FORWARDING = "fp4-op-keyword-forwarding"
UNDER_COMPILE = "fp4-quantize-under-compile"
OP_BOUNDARY = "fp4-quantize-op-boundary"
DECLARED = "declared-ops-custom"
DECLARED_FAKE = "declared-ops-fake"
UTILS = "flashinfer/utils.py"
"""Where register_custom_op and register_fake_op live: those two functions have the same text in
every release, the file around them does not (UTILS_SHA256)."""
DECLARED_SHAPES = {DECLARED: "no-op", DECLARED_FAKE: "no-op"}
BMM_FP8 = "op-bmm-fp8"
GELU = "op-gelu-and-mul"
GELU_TANH = "op-gelu-tanh-and-mul"
MM_FP4 = "op-mm-fp4"
MM_FP8 = "op-mm-fp8"
SILU = "op-silu-and-mul"
INTERLEAVE = "op-block-scale-interleave"
MXFP8 = "op-mxfp8-quantize"
BATCHED = "op-nvfp4-batched-quantize"
GROUPED = "op-scaled-fp4-grouped-quantize"
SILU_EXPERTS = "op-silu-and-mul-scaled-nvfp4-experts-quantize"
TOP_K = "op-top-k-sampling-from-probs"
TOP_K_TOP_P = "op-top-k-top-p-sampling-from-probs"
TOP_P = "op-top-p-sampling-from-probs"
MIN_P = "op-min-p-sampling-from-probs"
MASK = "op-top-k-mask-logits"
TOP_K_RENORM = "op-top-k-renorm-probs"
TOP_P_RENORM = "op-top-p-renorm-probs"
CONCAT = "op-concat-mla-k"
TOPK_DEEPSEEK = "op-fused-topk-deepseek"
TRTLLM_BF16 = "op-trtllm-bf16-moe"
TRTLLM_FP4 = "op-trtllm-fp4-block-scale-moe"
TRTLLM_FP8_BLOCK = "op-trtllm-fp8-block-scale-moe"
TRTLLM_FP8_CHANNEL = "op-trtllm-fp8-per-channel-scale-moe"
TRTLLM_FP8_TENSOR = "op-trtllm-fp8-per-tensor-scale-moe"
TRTLLM_MXINT4 = "op-trtllm-mxint4-block-scale-moe"
TRTLLM_BF16_ROUTED = "op-trtllm-bf16-routed-moe"
TRTLLM_FP4_ROUTED = "op-trtllm-fp4-block-scale-routed-moe"
TRTLLM_FP8_BLOCK_ROUTED = "op-trtllm-fp8-block-scale-routed-moe"
TRTLLM_FP8_CHANNEL_ROUTED = "op-trtllm-fp8-per-channel-scale-routed-moe"
TRTLLM_FP8_TENSOR_ROUTED = "op-trtllm-fp8-per-tensor-scale-routed-moe"
TRTLLM_MXINT4_ROUTED = "op-trtllm-mxint4-block-scale-routed-moe"
CUTLASS_MOE = "op-cutlass-fused-moe"
SINGLE_DECODE = "op-single-decode-with-kv-cache"
SINGLE_PREFILL = "op-single-prefill-with-kv-cache"
BATCH_DECODE = "op-batch-decode-with-paged-kv-cache-run"
BATCH_PREFILL = "op-batch-prefill-with-paged-kv-cache-run"
BATCH_RAGGED = "op-batch-prefill-with-ragged-kv-cache-run"
TRTLLM_DECODE = "op-trtllm-batch-decode-with-kv-cache"
ROUTED = (
    TRTLLM_BF16_ROUTED,
    TRTLLM_FP4_ROUTED,
    TRTLLM_FP8_BLOCK_ROUTED,
    TRTLLM_FP8_CHANNEL_ROUTED,
    TRTLLM_FP8_TENSOR_ROUTED,
    TRTLLM_MXINT4_ROUTED,
)
"""The op-boundary patches of the trtllm fused MoE's _routed_ variants: TRTLLM_FP4_ROUTED from
0.2.10, where it arrives, TRTLLM_BF16_ROUTED from 0.6.5, TRTLLM_FP8_BLOCK_ROUTED from 0.6.8,
TRTLLM_MXINT4_ROUTED from 0.6.13, TRTLLM_FP8_TENSOR_ROUTED from 0.6.17, TRTLLM_FP8_CHANNEL_ROUTED
from 0.7.0."""
MOE = (
    TRTLLM_BF16,
    TRTLLM_BF16_ROUTED,
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
)
"""The op-boundary patches of the trtllm fused MoE, in MOE_CORE, in registry order: FP8 block
scales and FP8 per tensor from 0.2.9, where they arrive (not FP8 per tensor's 0.6.3 - 0.6.4), FP4
from 0.2.11.post3, BF16 from 0.5.3, where it arrives, MXINT4 from 0.6.5, TRTLLM_FP8_CHANNEL from
0.7.0, ROUTED as it says."""
QUANTIZERS = (INTERLEAVE, MXFP8, BATCHED, GROUPED, SILU_EXPERTS)
"""The op-boundary patches of the quantizers: silu_and_mul_scaled_nvfp4_experts_quantize in
flashinfer/activation.py from 0.6.0; from 0.6.7 mxfp8_quantize in FP8_QUANT and the others in
FP4."""
BOUNDARIES = (
    BATCH_DECODE,
    BATCH_PREFILL,
    BATCH_RAGGED,
    INTERLEAVE,
    BMM_FP8,
    CONCAT,
    CUTLASS_MOE,
    TOPK_DEEPSEEK,
    GELU,
    GELU_TANH,
    MIN_P,
    MM_FP4,
    MM_FP8,
    MXFP8,
    BATCHED,
    GROUPED,
    SILU,
    SILU_EXPERTS,
    SINGLE_DECODE,
    SINGLE_PREFILL,
    MASK,
    TOP_K_RENORM,
    TOP_K,
    TOP_K_TOP_P,
    TOP_P_RENORM,
    TOP_P,
    TRTLLM_DECODE,
    *MOE,
)
"""The op-boundary patches, one public entry point each, in registry order: the activations
(flashinfer/activation.py, from 0.6.0), bmm_fp8 and mm_fp8 (from 0.6.0) and mm_fp4 (from 0.6.7)
in flashinfer/gemm/gemm_base.py, QUANTIZERS, in flashinfer/sampling.py the samplers (MIN_P,
TOP_K, TOP_K_TOP_P, TOP_P, from 0.6.7) and the renorm samplers (MASK, TOP_K_RENORM,
TOP_P_RENORM, from 0.6.0), concat_mla_k (CONCAT) in CONCAT_OPS and fused_topk_deepseek
(TOPK_DEEPSEEK) in ROUTING_DSV3, from 0.6.0, MOE in MOE_CORE, from 0.2.9 (as MOE says),
cutlass_fused_moe (CUTLASS_MOE) in MOE_CORE, from 0.2.9 (not in 0.3.0 - 0.4.0), the
single-request attention (SINGLE_DECODE in DECODE, SINGLE_PREFILL in PREFILL), from 0.2.6, the
wrappers' run() (BATCH_DECODE in DECODE, BATCH_PREFILL and BATCH_RAGGED in PREFILL), from 0.6.0,
and trtllm_batch_decode_with_kv_cache (TRTLLM_DECODE in DECODE), from 0.6.0."""
ACTIVATION = "flashinfer/activation.py"
GEMM = "flashinfer/gemm/gemm_base.py"
FP8_QUANT = "flashinfer/quantization/fp8_quantization.py"
SAMPLING = "flashinfer/sampling.py"
CONCAT_OPS = "flashinfer/concat_ops.py"
ROUTING_DSV3 = "flashinfer/fused_moe/fused_routing_dsv3.py"
MOE_CORE = "flashinfer/fused_moe/core.py"
DECODE = "flashinfer/decode.py"
PREFILL = "flashinfer/prefill.py"
LOGGING = "api-logging-under-compile"
API_LOGGING = "flashinfer/api_logging.py"


@dataclass(frozen=True)
class Release:
    version: str
    kind: str
    """wheel | sdist: shape-A and 0.4.x releases were published as sdists only."""
    # The mappings are left out of the hash (a dict has none), not out of equality: the version
    # and kind already name one archive, and `released_files` caches by Release.
    shapes: Mapping[str, str] = field(default_factory=dict, hash=False)
    """The shape of each patch the registry applies to this release, by patch id."""
    sha256_prefixes: Mapping[str, str] = field(default_factory=dict, hash=False)
    """sha256[:12] of released files, by relpath: cpp_ext.py, and the file that defines
    fp4_quantize where there is one, taken from the archives the index verified
    (tests/test_registry.py checks each against the downloaded release)."""

    @property
    def filename(self) -> str:
        stem = f"flashinfer_python-{self.version}"
        return f"{stem}-py3-none-any.whl" if self.kind == "wheel" else f"{stem}.tar.gz"


# sha256[:12] of each release's flashinfer/utils.py, taken from the archives the index verified.
UTILS_SHA256 = {
    "0.2.5": "3bad383ba7d6",
    "0.2.8": "8645a6fef87d",
    "0.2.9": "21c863055bd3",
    "0.2.11.post2": "9aa13f54d22a",
    "0.2.13": "66986a7c33eb",
    "0.2.14": "66986a7c33eb",
    "0.2.14.post1": "66986a7c33eb",
    "0.3.1.post1": "61f760d100a8",
    "0.4.0": "db7403f4d528",
    "0.5.0": "e6819088d770",
    "0.6.0": "2daecf16999e",
    "0.6.7": "195cbffa0b7d",
    "0.6.8": "662d8f81991a",
    "0.6.10": "247ea63db390",
    "0.6.11.post3": "905e889e1940",
    "0.6.12": "4327428b53c0",
    "0.6.18.post1": "6cb8ebcc25eb",
    "0.7.0": "23c676230039",
    "0.7.1": "7f7da22cf3b3",
    "0.7.4": "84a5963f7a2f",
    "0.6.0rc1": "2a566482b8cf",
    "0.7.2rc6": "abc97f7494ce",
    "0.7.1rc1": "7f7da22cf3b3",
}


# The shape of each op-* patch in the releases below, where one applies (taken from each
# release's files; tests/test_registry.py checks each against the release's hashes).
# 0.6.0 and its pre-release 0.6.0rc1 hold the same texts of these functions.
_FIRST_0_6 = dict.fromkeys((BMM_FP8, GELU, GELU_TANH, MM_FP8, SILU, SILU_EXPERTS), "0.6.0")
BOUNDARY_SHAPES: dict[str, dict[str, str]] = {
    "0.6.0": _FIRST_0_6,
    "0.6.0rc1": _FIRST_0_6,
    "0.6.7": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.0",
        GELU: "0.6.0",
        GELU_TANH: "0.6.0",
        MM_FP4: "0.6.7",
        MM_FP8: "0.6.0",
        MXFP8: "0.6.7",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.0",
        SILU_EXPERTS: "0.6.0",
        TOP_K: "0.6.7",
        TOP_K_TOP_P: "0.6.7",
        TOP_P: "0.6.7",
    },
    "0.6.8": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.0",
        GELU: "0.6.0",
        GELU_TANH: "0.6.0",
        MM_FP4: "0.6.7",
        MM_FP8: "0.6.0",
        MXFP8: "0.6.7",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.0",
        SILU_EXPERTS: "0.6.0",
        TOP_K: "0.6.7",
        TOP_K_TOP_P: "0.6.7",
        TOP_P: "0.6.7",
    },
    "0.6.10": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.10",
        GELU: "0.6.10",
        GELU_TANH: "0.6.10",
        MM_FP4: "0.6.10",
        MM_FP8: "0.6.10",
        MXFP8: "0.6.10",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.10",
        SILU_EXPERTS: "0.6.10",
        TOP_K: "0.6.10",
        TOP_K_TOP_P: "0.6.10",
        TOP_P: "0.6.10",
    },
    "0.6.11.post3": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.11.post2",
        GELU: "0.6.10",
        GELU_TANH: "0.6.10",
        MM_FP4: "0.6.11.post2",
        MM_FP8: "0.6.10",
        MXFP8: "0.6.10",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.10",
        SILU_EXPERTS: "0.6.10",
        TOP_K: "0.6.10",
        TOP_K_TOP_P: "0.6.10",
        TOP_P: "0.6.10",
    },
    "0.6.12": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.12",
        GELU: "0.6.10",
        GELU_TANH: "0.6.10",
        MM_FP4: "0.6.12",
        MM_FP8: "0.6.10",
        MXFP8: "0.6.12",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.10",
        SILU_EXPERTS: "0.6.10",
        TOP_K: "0.6.10",
        TOP_K_TOP_P: "0.6.10",
        TOP_P: "0.6.10",
    },
    "0.6.18.post1": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.18",
        GELU: "0.6.10",
        GELU_TANH: "0.6.10",
        MM_FP4: "0.6.12",
        MM_FP8: "0.6.10",
        MXFP8: "0.6.12",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.10",
        SILU_EXPERTS: "0.6.10",
        TOP_K: "0.6.13",
        TOP_K_TOP_P: "0.6.14",
        TOP_P: "0.6.13",
    },
    "0.7.0": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.18",
        GELU: "0.6.10",
        GELU_TANH: "0.6.10",
        MM_FP4: "0.7.0",
        MM_FP8: "0.7.0",
        MXFP8: "0.6.12",
        BATCHED: "0.6.7",
        GROUPED: "0.6.7",
        SILU: "0.6.10",
        SILU_EXPERTS: "0.6.10",
        TOP_K: "0.6.13",
        TOP_K_TOP_P: "0.6.14",
        TOP_P: "0.6.13",
    },
    "0.7.1": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.18",
        GELU: "0.7.1",
        GELU_TANH: "0.7.1",
        MM_FP4: "0.7.1",
        MM_FP8: "0.7.0",
        MXFP8: "0.6.12",
        BATCHED: "0.7.1",
        GROUPED: "0.7.1",
        SILU: "0.7.1",
        SILU_EXPERTS: "0.7.1",
        TOP_K: "0.6.13",
        TOP_K_TOP_P: "0.6.14",
        TOP_P: "0.6.13",
    },
    # 0.7.1's texts but for mm_fp4, whose text fi-patch has never seen (UNKNOWN_IN).
    "0.7.1rc1": {
        INTERLEAVE: "0.6.7",
        BMM_FP8: "0.6.18",
        GELU: "0.7.1",
        GELU_TANH: "0.7.1",
        MM_FP8: "0.7.0",
        MXFP8: "0.6.12",
        BATCHED: "0.7.1",
        GROUPED: "0.7.1",
        SILU: "0.7.1",
        SILU_EXPERTS: "0.7.1",
        TOP_K: "0.6.13",
        TOP_K_TOP_P: "0.6.14",
        TOP_P: "0.6.13",
    },
    "0.7.2rc6": {
        INTERLEAVE: "0.7.2.post1",
        BMM_FP8: "0.6.18",
        GELU: "0.7.1",
        GELU_TANH: "0.7.1",
        MM_FP4: "0.7.2",
        MM_FP8: "0.7.2.post1",
        MXFP8: "0.6.12",
        BATCHED: "0.7.1",
        GROUPED: "0.7.1",
        SILU: "0.7.1",
        SILU_EXPERTS: "0.7.1",
        TOP_K: "0.6.13",
        TOP_K_TOP_P: "0.6.14",
        TOP_P: "0.6.13",
    },
    "0.7.4": {
        INTERLEAVE: "0.7.2.post1",
        BMM_FP8: "0.7.4",
        GELU: "0.7.1",
        GELU_TANH: "0.7.1",
        MM_FP4: "0.7.4",
        MM_FP8: "0.7.4",
        MXFP8: "0.7.4",
        BATCHED: "0.7.1",
        GROUPED: "0.7.1",
        SILU: "0.7.1",
        SILU_EXPERTS: "0.7.1",
        TOP_K: "0.6.13",
        TOP_K_TOP_P: "0.7.4",
        TOP_P: "0.6.13",
    },
}


# The shapes of the renorm samplers' patches (from 0.6.0) and min_p's (from 0.6.7), by release:
# (top_p_renorm_probs, top_k_renorm_probs, top_k_mask_logits, min_p_sampling_from_probs).
_SAMPLING = (TOP_P_RENORM, TOP_K_RENORM, MASK, MIN_P)
RENORM_SHAPES = {
    version: {p: s for p, s in zip(_SAMPLING, shapes, strict=True) if s}
    for version, shapes in {
        "0.6.0": ("0.6.0", "0.6.0", "0.6.0", None),
        "0.6.0rc1": ("0.6.0", "0.6.0", "0.6.0", None),
        "0.6.7": ("0.6.7", "0.6.0", "0.6.0", "0.6.7"),
        "0.6.8": ("0.6.7", "0.6.0", "0.6.0", "0.6.7"),
        "0.6.10": ("0.6.10", "0.6.10", "0.6.10", "0.6.10"),
        "0.6.11.post3": ("0.6.10", "0.6.10", "0.6.10", "0.6.10"),
        "0.6.12": ("0.6.10", "0.6.10", "0.6.10", "0.6.10"),
        "0.6.18.post1": ("0.6.10", "0.6.10", "0.6.10", "0.6.13"),
        "0.7.0": ("0.6.10", "0.6.10", "0.6.10", "0.6.13"),
        "0.7.1": ("0.6.10", "0.7.1", "0.6.10", "0.6.13"),
        "0.7.1rc1": ("0.6.10", "0.7.1", "0.6.10", "0.6.13"),
        "0.7.2rc6": ("0.6.10", "0.7.1", "0.6.10", "0.6.13"),
        "0.7.4": ("0.6.10", "0.7.4", "0.7.4", "0.6.13"),
    }.items()
}
for _version, _shapes in RENORM_SHAPES.items():
    BOUNDARY_SHAPES[_version] = {**BOUNDARY_SHAPES[_version], **_shapes}


# sha256[:12] of flashinfer/activation.py, flashinfer/gemm/gemm_base.py, FP8_QUANT (None
# where the release has none) and SAMPLING in those releases, taken from the archives the index
# verified.
BOUNDARY_SHA256 = {
    "0.6.0": ("1765f231560c", "90cb9e8feee2", None, "203739791a7a"),
    "0.6.0rc1": ("1765f231560c", "c3051afefaa1", None, "40fa9747fe8b"),
    "0.6.7": ("9824de31ad99", "151300d7bbf4", "4e706a40f881", "be613d99da8a"),
    "0.6.8": ("9824de31ad99", "99fc985248ab", "4e706a40f881", "be613d99da8a"),
    "0.6.10": ("bed9a9dff1a3", "8e59704a90d8", "7966dce6ca9c", "17ce5be79a90"),
    "0.6.11.post3": ("bed9a9dff1a3", "410a66f72e77", "7966dce6ca9c", "17ce5be79a90"),
    "0.6.12": ("bed9a9dff1a3", "9b7508e3e838", "3aab58b80101", "17ce5be79a90"),
    "0.6.18.post1": ("df3bc86b3ee8", "de6b7ec299f4", "4bc6d4607649", "ee6e25210280"),
    "0.7.0": ("df3bc86b3ee8", "6ab2f4f8496b", "dea7eb0495f8", "ee6e25210280"),
    "0.7.1": ("39004c0b1229", "d8ea9f8f256b", "21f94d342a2d", "fca8a2ba3ef2"),
    "0.7.2rc6": ("39004c0b1229", "d926b7d9fdd9", "a77faf3930b7", "ce794984221a"),
    "0.7.1rc1": ("39004c0b1229", "e0b06537052c", "21f94d342a2d", "fca8a2ba3ef2"),
    "0.7.4": ("e7d41e379f33", "2a4b3bc59bef", "f649208212cd", "b5e2e2cbbb85"),
}


# sha256[:12] of MOE_CORE by release, which the MOE patches share.
MOE_CORE_SHA256 = {
    "0.2.9": "60d201705bb1",
    "0.2.11.post2": "8c5bd230e72f",
    "0.2.13": "70c2791bf1d3",
    "0.2.14": "8d097a3177b4",
    "0.2.14.post1": "7ece5b8c5bb5",
    "0.3.1.post1": "c826031a3a94",
    "0.4.0": "1a237590e54b",
    "0.5.0": "f0d53c0c9988",
    "0.6.0": "93cd77cd5d9a",
    "0.6.0rc1": "c7da01d2dca0",
    "0.6.7": "828d08063faf",
    "0.6.8": "9679373706f0",
    "0.6.10": "1389409fe9e4",
    "0.6.11.post3": "7bd98302637d",
    "0.6.12": "939b83594136",
    "0.6.18.post1": "a4cf1af5169d",
    "0.7.0": "c929dbfc28ea",
    "0.7.1": "d6a8333a2749",
    "0.7.1rc1": "01bfd2208869",
    "0.7.2rc6": "c73d97dca488",
    "0.7.4": "c1170d4734cd",
}


def _in_moe_core(shapes: dict[str, str]) -> dict[str, tuple[str, str]]:
    """A MOE patch's shape by release, with MOE_CORE's sha256[:12] beside each."""
    return {version: (shape, MOE_CORE_SHA256[version]) for version, shape in shapes.items()}


# The shape of each op-* patch that holds a file of its own (op-concat-mla-k from 0.6.0, not in
# 0.6.0rc1; op-fused-topk-deepseek from 0.6.0rc1; the MOE patches, which share one, from 0.2.9
# (as MOE says);
# the single-request attention's two from 0.2.6; the wrappers' run() and
# trtllm_batch_decode_with_kv_cache from 0.6.0, not in 0.6.0rc1)
# and sha256[:12] of that file, by release, taken from the archives the index verified.
OWN_FILES = {
    CONCAT: CONCAT_OPS,
    TOPK_DEEPSEEK: ROUTING_DSV3,
    TRTLLM_BF16: MOE_CORE,
    TRTLLM_FP4: MOE_CORE,
    TRTLLM_FP8_BLOCK: MOE_CORE,
    TRTLLM_FP8_CHANNEL: MOE_CORE,
    TRTLLM_FP8_TENSOR: MOE_CORE,
    TRTLLM_MXINT4: MOE_CORE,
    **dict.fromkeys(ROUTED, MOE_CORE),
    CUTLASS_MOE: MOE_CORE,
    SINGLE_DECODE: DECODE,
    SINGLE_PREFILL: PREFILL,
    BATCH_DECODE: DECODE,
    BATCH_PREFILL: PREFILL,
    BATCH_RAGGED: PREFILL,
    TRTLLM_DECODE: DECODE,
}
OWN_SHAPES: dict[str, dict[str, tuple[str, str]]] = {
    CONCAT: {
        "0.6.0": ("0.6.0", "8c4db483c4d9"),
        "0.6.7": ("0.6.0", "8c4db483c4d9"),
        "0.6.8": ("0.6.0", "8c4db483c4d9"),
        "0.6.10": ("0.6.10", "866ab971c984"),
        "0.6.11.post3": ("0.6.10", "f3009979faf9"),
        "0.6.12": ("0.6.10", "f3009979faf9"),
        "0.6.18.post1": ("0.6.10", "f3009979faf9"),
        "0.7.0": ("0.7.0", "57181130b540"),
        "0.7.1": ("0.7.0", "57181130b540"),
        "0.7.1rc1": ("0.7.0", "57181130b540"),
        "0.7.2rc6": ("0.7.0", "57181130b540"),
        "0.7.4": ("0.7.0", "bcff8f92b08d"),
    },
    TOPK_DEEPSEEK: {
        "0.6.0": ("0.6.0", "4df000bfc9cd"),
        "0.6.0rc1": ("0.6.0", "4df000bfc9cd"),
        "0.6.7": ("0.6.1", "d90b3497de62"),
        "0.6.8": ("0.6.8", "ca50fb7491d9"),
        "0.6.10": ("0.6.10", "264fa73b7677"),
        "0.6.11.post3": ("0.6.10", "264fa73b7677"),
        "0.6.12": ("0.6.10", "264fa73b7677"),
        "0.6.18.post1": ("0.6.10", "820cdd8887d8"),
        "0.7.0": ("0.7.0", "17dca114bb33"),
        "0.7.1": ("0.7.0", "17dca114bb33"),
        "0.7.1rc1": ("0.7.0", "17dca114bb33"),
        "0.7.2rc6": ("0.7.0", "029f8e836a9c"),
        "0.7.4": ("0.7.0", "e21d3d9b5bce"),
    },
    TRTLLM_BF16: _in_moe_core(
        {
            "0.6.0": "0.6.0",
            "0.6.7": "0.6.5",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP4: _in_moe_core(
        {
            "0.2.13": "0.2.13",
            "0.2.14": "0.2.14",
            "0.2.14.post1": "0.2.14",
            "0.3.1.post1": "0.3.0",
            "0.4.0": "0.3.0",
            "0.5.0": "0.5.0",
            "0.6.0": "0.6.0",
            "0.6.0rc1": "0.6.0",
            "0.6.7": "0.6.3",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.11",
            "0.6.12": "0.6.12",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.1",
            "0.7.1rc1": "0.7.1",
            "0.7.2rc6": "0.7.1",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP8_BLOCK: _in_moe_core(
        {
            "0.2.9": "0.2.9",
            "0.2.11.post2": "0.2.11.post2",
            "0.2.13": "0.2.11.post2",
            "0.2.14": "0.2.11.post2",
            "0.2.14.post1": "0.2.11.post2",
            "0.3.1.post1": "0.2.11.post2",
            "0.4.0": "0.4.0",
            "0.5.0": "0.5.0",
            "0.6.0": "0.6.0",
            "0.6.0rc1": "0.6.0",
            "0.6.7": "0.6.7",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.1",
            "0.7.1rc1": "0.7.1",
            "0.7.2rc6": "0.7.1",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP8_TENSOR: _in_moe_core(
        {
            "0.2.9": "0.2.9",
            "0.2.11.post2": "0.2.11.post2",
            "0.2.13": "0.2.11.post2",
            "0.2.14": "0.2.11.post2",
            "0.2.14.post1": "0.2.11.post2",
            "0.3.1.post1": "0.2.11.post2",
            "0.4.0": "0.2.11.post2",
            "0.5.0": "0.5.0",
            "0.6.0": "0.6.0",
            "0.6.0rc1": "0.6.0",
            "0.6.7": "0.6.5",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.14",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP8_CHANNEL: _in_moe_core(
        {
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.1",
            "0.7.1rc1": "0.7.1",
            "0.7.2rc6": "0.7.1",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_MXINT4: _in_moe_core(
        {
            "0.6.7": "0.6.5",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.13",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_BF16_ROUTED: _in_moe_core(
        {
            "0.6.7": "0.6.5",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP4_ROUTED: _in_moe_core(
        {
            "0.2.11.post2": "0.2.11.post2",
            "0.2.13": "0.2.13",
            "0.2.14": "0.2.14",
            "0.2.14.post1": "0.2.14",
            "0.3.1.post1": "0.3.0",
            "0.4.0": "0.3.0",
            "0.5.0": "0.5.0",
            "0.6.0": "0.6.0",
            "0.6.0rc1": "0.6.0",
            "0.6.7": "0.6.3",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.11",
            "0.6.12": "0.6.12",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.1",
            "0.7.1rc1": "0.7.1",
            "0.7.2rc6": "0.7.1",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP8_BLOCK_ROUTED: _in_moe_core(
        {
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP8_CHANNEL_ROUTED: _in_moe_core(
        {
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.1",
            "0.7.1rc1": "0.7.1",
            "0.7.2rc6": "0.7.1",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_FP8_TENSOR_ROUTED: _in_moe_core(
        {
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    TRTLLM_MXINT4_ROUTED: _in_moe_core(
        {
            "0.6.18.post1": "0.6.13",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.0",
            "0.7.1rc1": "0.7.0",
            "0.7.2rc6": "0.7.0",
            "0.7.4": "0.7.4",
        }
    ),
    SINGLE_DECODE: {
        "0.2.8": ("0.2.7", "cf4f2d342290"),
        "0.2.9": ("0.2.9", "a92d4209cf1e"),
        "0.2.11.post2": ("0.2.9", "765f435c191f"),
        "0.2.13": ("0.2.9", "3c9093af4265"),
        "0.2.14": ("0.2.9", "3c9093af4265"),
        "0.2.14.post1": ("0.2.9", "3c9093af4265"),
        "0.3.1.post1": ("0.2.9", "0164b8cc2fdf"),
        "0.4.0": ("0.2.9", "666459c5e80b"),
        "0.5.0": ("0.2.9", "d3c1cbc01a1d"),
        "0.6.0": ("0.6.0", "0b4b128ee73c"),
        "0.6.0rc1": ("0.6.0", "a92c1c504376"),
        "0.6.7": ("0.6.0", "a78c9232952b"),
        "0.6.8": ("0.6.8", "432d7a11dba3"),
        "0.6.10": ("0.6.10", "6a60aeba3ff8"),
        "0.6.11.post3": ("0.6.10", "6a60aeba3ff8"),
        "0.6.12": ("0.6.10", "d9e195893bc6"),
        "0.6.18.post1": ("0.6.10", "d82d107a6445"),
        "0.7.0": ("0.6.10", "df105a900746"),
        "0.7.1": ("0.6.10", "8917d7f1a807"),
        "0.7.1rc1": ("0.6.10", "8917d7f1a807"),
        "0.7.2rc6": ("0.6.10", "e230c0d41ddf"),
        "0.7.4": ("0.6.10", "38fecaeff6ee"),
    },
    SINGLE_PREFILL: {
        "0.2.8": ("0.2.7", "cdb48bfb3ed4"),
        "0.2.9": ("0.2.7", "a110b6712e9b"),
        "0.2.11.post2": ("0.2.7", "b92fd3296c71"),
        "0.2.13": ("0.2.7", "6dc200eeb2b6"),
        "0.2.14": ("0.2.7", "07cdd5f1be71"),
        "0.2.14.post1": ("0.2.7", "07cdd5f1be71"),
        "0.3.1.post1": ("0.2.7", "617c0084366f"),
        "0.4.0": ("0.2.7", "e34079ab0b11"),
        "0.5.0": ("0.2.7", "7e6d6666b9d0"),
        "0.6.0": ("0.6.0", "cacba49e7b5a"),
        "0.6.0rc1": ("0.6.0", "f880e4a09743"),
        "0.6.7": ("0.6.0", "5060a48d59ab"),
        "0.6.8": ("0.6.8", "35c3eaf707ab"),
        "0.6.10": ("0.6.10", "5b6eca119718"),
        "0.6.11.post3": ("0.6.10", "984c4c864d85"),
        "0.6.12": ("0.6.10", "af28f2190783"),
        "0.6.18.post1": ("0.6.18", "2ad12a8387b3"),
        "0.7.0": ("0.6.18", "bd4aaa0a2446"),
        "0.7.1": ("0.6.18", "0f1f9e03a7aa"),
        "0.7.1rc1": ("0.6.18", "059a9dc01d65"),
        "0.7.2rc6": ("0.6.18", "b4a51047d4dd"),
        "0.7.4": ("0.7.4", "7dd28922ca85"),
    },
    BATCH_PREFILL: {
        "0.6.0": ("0.6.0", "cacba49e7b5a"),
        "0.6.7": ("0.6.7", "5060a48d59ab"),
        "0.6.8": ("0.6.8", "35c3eaf707ab"),
        "0.6.10": ("0.6.10", "5b6eca119718"),
        "0.6.11.post3": ("0.6.10", "984c4c864d85"),
        "0.6.12": ("0.6.10", "af28f2190783"),
        "0.6.18.post1": ("0.6.18", "2ad12a8387b3"),
        "0.7.0": ("0.7.0", "bd4aaa0a2446"),
        "0.7.1": ("0.7.1", "0f1f9e03a7aa"),
        "0.7.1rc1": ("0.7.1", "059a9dc01d65"),
        "0.7.2rc6": ("0.7.2.post1", "b4a51047d4dd"),
        "0.7.4": ("0.7.4", "7dd28922ca85"),
    },
    BATCH_RAGGED: {
        "0.6.0": ("0.6.0", "cacba49e7b5a"),
        "0.6.0rc1": ("0.6.0", "f880e4a09743"),
        "0.6.7": ("0.6.7", "5060a48d59ab"),
        "0.6.8": ("0.6.8", "35c3eaf707ab"),
        "0.6.10": ("0.6.10", "5b6eca119718"),
        "0.6.11.post3": ("0.6.10", "984c4c864d85"),
        "0.6.12": ("0.6.10", "af28f2190783"),
        "0.6.18.post1": ("0.6.18", "2ad12a8387b3"),
        "0.7.0": ("0.7.0", "bd4aaa0a2446"),
        "0.7.1": ("0.7.1", "0f1f9e03a7aa"),
        "0.7.1rc1": ("0.7.1", "059a9dc01d65"),
        "0.7.2rc6": ("0.7.1", "b4a51047d4dd"),
        "0.7.4": ("0.7.4", "7dd28922ca85"),
    },
    BATCH_DECODE: {
        "0.6.0": ("0.6.0", "0b4b128ee73c"),
        "0.6.7": ("0.6.7", "a78c9232952b"),
        "0.6.8": ("0.6.8", "432d7a11dba3"),
        "0.6.10": ("0.6.10", "6a60aeba3ff8"),
        "0.6.11.post3": ("0.6.10", "6a60aeba3ff8"),
        "0.6.12": ("0.6.10", "d9e195893bc6"),
        "0.6.18.post1": ("0.6.18", "d82d107a6445"),
        "0.7.0": ("0.7.0", "df105a900746"),
        "0.7.1": ("0.7.1", "8917d7f1a807"),
        "0.7.1rc1": ("0.7.1", "8917d7f1a807"),
        "0.7.2rc6": ("0.7.2.post1", "e230c0d41ddf"),
        "0.7.4": ("0.7.4", "38fecaeff6ee"),
    },
    TRTLLM_DECODE: {
        "0.6.0": ("0.6.0", "0b4b128ee73c"),
        "0.6.7": ("0.6.7", "a78c9232952b"),
        "0.6.8": ("0.6.8", "432d7a11dba3"),
        "0.6.10": ("0.6.10", "6a60aeba3ff8"),
        "0.6.11.post3": ("0.6.10", "6a60aeba3ff8"),
        "0.6.12": ("0.6.12", "d9e195893bc6"),
        "0.6.18.post1": ("0.6.18", "d82d107a6445"),
        "0.7.0": ("0.7.0", "df105a900746"),
        "0.7.1": ("0.7.1", "8917d7f1a807"),
        "0.7.1rc1": ("0.7.1", "8917d7f1a807"),
        "0.7.2rc6": ("0.7.2", "e230c0d41ddf"),
        "0.7.4": ("0.7.4", "38fecaeff6ee"),
    },
    CUTLASS_MOE: _in_moe_core(
        {
            "0.2.9": "0.2.9",
            "0.2.11.post2": "0.2.11.post2",
            "0.2.13": "0.2.13",
            "0.2.14": "0.2.13",
            "0.2.14.post1": "0.2.13",
            "0.5.0": "0.5.0",
            "0.6.0": "0.6.0",
            "0.6.0rc1": "0.6.0",
            "0.6.7": "0.6.0",
            "0.6.8": "0.6.8",
            "0.6.10": "0.6.10",
            "0.6.11.post3": "0.6.10",
            "0.6.12": "0.6.10",
            "0.6.18.post1": "0.6.18",
            "0.7.0": "0.7.0",
            "0.7.1": "0.7.1",
            "0.7.1rc1": "0.7.1",
            "0.7.2rc6": "0.7.2",
            "0.7.4": "0.7.4",
        }
    ),
}


# The shape of api-logging-under-compile's wrapper and sha256[:12] of flashinfer/api_logging.py
# in the releases below that have one (from 0.6.0), taken from the archives the index verified.
LOGGING_SHAPES = {
    "0.6.0": ("0.6.0", "caf95243cd63"),
    "0.6.0rc1": ("0.6.0", "caf95243cd63"),
    "0.6.7": ("0.6.1", "4b9feb86e13b"),
    "0.6.8": ("0.6.1", "4b9feb86e13b"),
    "0.6.10": ("0.6.1", "9f8ee45083e9"),
    "0.6.11.post3": ("0.6.1", "9f8ee45083e9"),
    "0.6.12": ("0.6.12", "0302b4ff890c"),
    "0.6.18.post1": ("0.6.12", "0302b4ff890c"),
    "0.7.0": ("0.7.0", "e4d5f939c1a7"),
    "0.7.1": ("0.7.0", "8bda6aba04be"),
    "0.7.1rc1": ("0.7.0", "8bda6aba04be"),
    "0.7.2rc6": ("0.7.0", "8bda6aba04be"),
    "0.7.4": ("0.7.4", "55ef57cc4be6"),
}


def _declaring(r: Release) -> Release:
    """Every release on the index declares its ops with the same no-op register_custom_op and
    register_fake_op: both declared-ops patches apply to each. The op-* patches apply where
    BOUNDARY_SHAPES (and OWN_SHAPES) says, api-logging-under-compile where LOGGING_SHAPES
    does."""
    prefixes = {**r.sha256_prefixes, UTILS: UTILS_SHA256[r.version]}
    if r.version in BOUNDARY_SHA256:
        relpaths = (ACTIVATION, GEMM, FP8_QUANT, SAMPLING)
        found = zip(relpaths, BOUNDARY_SHA256[r.version], strict=True)
        prefixes |= {relpath: prefix for relpath, prefix in found if prefix is not None}
    shapes = {**r.shapes, **DECLARED_SHAPES, **BOUNDARY_SHAPES.get(r.version, {})}
    if r.version in LOGGING_SHAPES:
        shapes[LOGGING], prefixes[API_LOGGING] = LOGGING_SHAPES[r.version]
    for patch, relpath in OWN_FILES.items():
        if r.version in OWN_SHAPES[patch]:
            shapes[patch], prefixes[relpath] = OWN_SHAPES[patch][r.version]
    return replace(r, shapes=shapes, sha256_prefixes=prefixes)


RELEASES = {
    r.version: _declaring(r)
    for r in (
        # The last release with nothing to patch: no cpp_ext.py, no fp4_quantize.
        Release("0.2.5", "sdist"),
        # The last five-parameter fp4_quantize (0.2.6 - 0.2.8): no get_cuda_version yet.
        Release(
            "0.2.8",
            "sdist",
            {OP_BOUNDARY: "0.2.6"},
            {TARGET: "4ed16c8d490e", FP4_OLD: "7e7e27cd9dd5"},
        ),
        # The first release with fp4_quantize: no get_cuda_version yet, six parameters.
        Release(
            "0.2.9",
            "sdist",
            {OP_BOUNDARY: "0.2.9"},
            {TARGET: "4ed16c8d490e", FP4_OLD: "d225c4eb0d28"},
        ),
        Release(
            "0.2.11.post2",
            "sdist",
            {OP_BOUNDARY: "0.2.11.post2"},
            {TARGET: "1bddf1772c7f", FP4_OLD: "a4759ae51f2a"},
        ),
        Release(
            "0.2.13",
            "sdist",
            {OP_BOUNDARY: "0.2.13"},
            {TARGET: "c6285f2c446b", FP4_OLD: "1208ac730283"},
        ),
        Release(
            "0.2.14",
            "sdist",
            {OP_BOUNDARY: "0.2.13"},
            {TARGET: "34153e8a87df", FP4_OLD: "1208ac730283"},
        ),
        Release(
            "0.2.14.post1",
            "sdist",
            {CUDA: "A", OP_BOUNDARY: "0.2.14.post1"},
            {TARGET: "161ddb1906db", FP4_OLD: "2f6fe19f0bef"},
        ),
        Release(
            "0.3.1.post1",
            "sdist",
            {CUDA: "A", OP_BOUNDARY: "0.3.1"},
            {TARGET: "7d2448f60f32", FP4_OLD: "0d3be1c9eee3"},
        ),
        Release(
            "0.4.0",
            "sdist",
            {CUDA: "B", OP_BOUNDARY: "0.3.1"},
            {TARGET: "81a4bc7476d9", FP4_OLD: "a9406ca8c2e5"},
        ),
        Release(
            "0.5.0",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.3.1"},
            {TARGET: "78e065fa92fb", FP4_OLD: "608dd225ea49"},
        ),
        Release(
            "0.6.0",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.6.0"},
            {TARGET: "23df0b85062e", FP4_OLD: "02d33fd66802"},
        ),
        # fp4_quantize moves to flashinfer/quantization/; the old module re-exports it.
        Release(
            "0.6.7",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.6.7"},
            {TARGET: "8f0d51dd2f88", FP4: "bd2989cdd58c"},
        ),
        Release(
            "0.6.8",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.6.8"},
            {TARGET: "8f0d51dd2f88", FP4: "e260094421a4"},
        ),
        Release(
            "0.6.10",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.6.10"},
            {TARGET: "f53c0575d877", FP4: "5cfc5b5ecfc1"},
        ),
        # The last release without FlashInfer's own op.
        Release(
            "0.6.11.post3",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.6.11"},
            {TARGET: "9d20f28baed9", FP4: "dbd14a9718b0"},
        ),
        # The first release with the op: both fp4 patches, each in its first shape.
        Release(
            "0.6.12",
            "wheel",
            {CUDA: "B", FORWARDING: "positional", UNDER_COMPILE: "0.6.12"},
            {TARGET: "9d20f28baed9", FP4: "1a7e1c556fa8"},
        ),
        Release(
            "0.6.18.post1",
            "wheel",
            {CUDA: "B", FORWARDING: "positional", UNDER_COMPILE: "0.6.13"},
            {TARGET: "c2ebe90fa1dd", FP4: "a003e182bf96"},
        ),
        # The last release whose op forwards positionally.
        Release(
            "0.7.0",
            "wheel",
            {CUDA: "B", FORWARDING: "positional", UNDER_COMPILE: "0.6.13"},
            {TARGET: "dd806d68794d", FP4: "02770b24a2c5"},
        ),
        # Upstream forwards by keyword from here: the forwarding patch does not apply.
        Release(
            "0.7.1",
            "wheel",
            {CUDA: "B", UNDER_COMPILE: "0.7.1"},
            {TARGET: "6cc6c732ac5b", FP4: "c3fa702c5637"},
        ),
        Release(
            "0.7.4",
            "wheel",
            {CUDA: "B", UNDER_COMPILE: "0.7.4"},
            {TARGET: "6cc6c732ac5b", FP4: "d39602926b0b"},
        ),
        # Real pre-releases: outside every range, yet their functions are known shapes.
        Release(
            "0.6.0rc1",
            "wheel",
            {CUDA: "B", OP_BOUNDARY: "0.6.0"},
            {TARGET: "78e065fa92fb", FP4_OLD: "02d33fd66802"},
        ),
        Release(
            "0.7.2rc6",
            "wheel",
            {CUDA: "B", UNDER_COMPILE: "0.7.1"},
            {TARGET: "6cc6c732ac5b", FP4: "381d31faa7e6"},
        ),
        # A real pre-release with one function fi-patch has never seen (UNKNOWN_IN).
        Release(
            "0.7.1rc1",
            "wheel",
            {CUDA: "B", UNDER_COMPILE: "0.7.1"},
            {TARGET: "6cc6c732ac5b", FP4: "c3fa702c5637"},
        ),
    )
}

UNKNOWN_IN = {"0.7.1rc1": (MM_FP4,)}
"""The patches whose function a release holds in a text fi-patch has never seen: 0.7.1rc1's
mm_fp4 has the structure of shape 0.7.1 and another text."""


def release(version: str) -> Release:
    """Any release on the index: the one `RELEASES` describes, or else its universal wheel, or
    else its sdist."""
    if version in RELEASES:
        return RELEASES[version]
    wheel = Release(version, "wheel")
    return wheel if wheel.filename in _index() else Release(version, "sdist")


@cache
def _listing() -> dict[str, Any]:
    """The index's page for flashinfer-python (PEP 691 JSON); the last one read is kept in the
    cache, for a run without network."""
    saved = CACHE / "index.json"
    request = urllib.request.Request(
        INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
    except OSError:
        return dict(json.loads(saved.read_bytes()))
    saved.parent.mkdir(parents=True, exist_ok=True)
    part = saved.with_suffix(f".{os.getpid()}.part")
    part.write_bytes(data)
    part.replace(saved)
    return dict(json.loads(data))


def _index() -> dict[str, dict[str, object]]:
    return {f["filename"]: f for f in _listing()["files"]}


def final_versions() -> list[str]:
    """Every final (not pre-) release of flashinfer-python on the index, lowest first."""
    versions = {Version(v) for v in _listing()["versions"]}
    return [str(v) for v in sorted(versions) if not v.is_prerelease]


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Hold the cache's lock `name` (a real flock): test processes sharing the cache (pytest's
    workers, two runs) fill each entry once, one at a time."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch(release: Release) -> Path:
    """The release's file, from the cache or the registry, verified by its sha256."""
    with cache_lock(f"dist-{release.filename}"):
        return _fetched(release)


def _fetched(release: Release) -> Path:
    folder = CACHE / "dists"
    path = folder / release.filename
    digest_path = path.with_name(path.name + ".sha256")
    if (
        path.exists()
        and digest_path.exists()
        and _sha256(path.read_bytes()) == digest_path.read_text().strip()
    ):
        return path
    entry = _index()[release.filename]
    expected = entry["hashes"]["sha256"]  # type: ignore[index]
    with urllib.request.urlopen(str(entry["url"]), timeout=300) as response:
        data = response.read()
    if _sha256(data) != expected:
        raise RuntimeError(f"{release.filename}: sha256 differs from the index's")
    folder.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".part")
    temporary.write_bytes(data)
    temporary.replace(path)
    digest_path.write_text(expected + "\n")
    return path


def released_text(release: Release, relpath: str = TARGET) -> bytes:
    """The exact bytes of one file (cpp_ext.py by default) in the released archive."""
    return released_files(release)[relpath]


@cache
def released_files(release: Release) -> dict[str, bytes]:
    """Every regular file of the `flashinfer/` package in the release, by its path."""
    archive = fetch(release)
    files: dict[str, bytes] = {}
    if release.kind == "wheel":
        with zipfile.ZipFile(archive) as wheel:
            for name in wheel.namelist():
                if name.startswith("flashinfer/") and not name.endswith("/"):
                    files[name] = wheel.read(name)
        return files
    with tarfile.open(archive) as sdist:
        root = f"flashinfer_python-{release.version}/"
        for member in sdist.getmembers():
            if member.isfile() and member.name.startswith(root + "flashinfer/"):
                handle = sdist.extractfile(member)
                assert handle is not None
                files[member.name.removeprefix(root)] = handle.read()
            elif member.isfile() and member.name == root + "PKG-INFO":
                handle = sdist.extractfile(member)
                assert handle is not None
                files["PKG-INFO"] = handle.read()
    return files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@cache
def released_csrc(release: Release) -> dict[str, str]:
    """The release's kernel sources by file name: `flashinfer/data/csrc/` in a wheel, the
    top-level `csrc/` in an sdist."""
    archive = fetch(release)
    sources: dict[str, str] = {}
    if release.kind == "wheel":
        with zipfile.ZipFile(archive) as wheel:
            for name in wheel.namelist():
                if name.startswith("flashinfer/data/csrc/") and name.count("/") == 3:
                    sources[name.rsplit("/", 1)[1]] = wheel.read(name).decode()
        return sources
    with tarfile.open(archive) as sdist:
        folder = f"flashinfer_python-{release.version}/csrc/"
        for member in sdist.getmembers():
            rest = member.name.removeprefix(folder)
            if member.isfile() and member.name.startswith(folder) and "/" not in rest:
                handle = sdist.extractfile(member)
                assert handle is not None
                sources[rest] = handle.read().decode()
    return sources
