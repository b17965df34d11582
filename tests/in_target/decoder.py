"""A decoder layer as serving engines write it around FlashInfer: the residual norm in place, rope
in place on q and k views of one projection, the gated MLP with an FP4 down projection, and
sampling with seed and offset tensors (the attention itself stands in as plain torch)."""

from __future__ import annotations

import torch

TOKENS, HIDDEN, HEADS, HEAD_DIM, INTER, VOCAB = 8, 64, 2, 32, 64, 128


def case(f, Case, random, data):
    fp4_op = (
        "flashinfer.fp4_quantize"
        if hasattr(torch.ops.flashinfer, "fp4_quantize")
        else "fi_patch.flashinfer_fp4_quantize"
    )
    pdl = {"enable_pdl": False}
    scale = torch.tensor([4.0])

    def layer(hidden, residual, weights, positions, seed, offset):
        norm_w, qkv_w, cache, gate_up_w, down, down_sf, alpha, lm_head = weights
        f.fused_add_rmsnorm(hidden, residual, norm_w, **pdl)
        qkv = hidden @ qkv_w
        q, k, v = qkv.split(HEADS * HEAD_DIM, -1)
        f.apply_rope_with_cos_sin_cache_inplace(positions, q, k, HEAD_DIM, cache)
        # One elementwise op before the quantizer, as eager rounds it: a chain of them Inductor
        # fuses and rounds once, and a code at a rounding boundary would flip.
        attended = q * v
        act = f.silu_and_mul(attended @ gate_up_w)
        act_fp4, act_sf = f.fp4_quantize(act, scale)
        out = f.mm_fp4(act_fp4, down.T, act_sf, down_sf.T, alpha, backend="cutlass")
        probs = torch.softmax((out.float() + residual.float()) @ lm_head, -1)
        tokens = f.top_k_top_p_sampling_from_probs(probs, 20, 0.9, seed=seed, offset=offset)
        return tokens, out, k

    def inputs():
        weights = [
            random(HIDDEN, seed=1),
            random(HIDDEN, 3 * HEADS * HEAD_DIM, seed=2) * 0.1,
            random(64, HEAD_DIM, seed=3, dtype=torch.float32),
            random(HEADS * HEAD_DIM, 2 * INTER, seed=4) * 0.1,
            data(HIDDEN, INTER // 2, seed=5),
            data(HIDDEN, INTER // 16, seed=6).view(torch.float8_e4m3fn),
            torch.tensor([0.25]),
            random(HIDDEN, VOCAB, seed=7, dtype=torch.float32),
        ]
        return [
            random(TOKENS, HIDDEN),
            random(TOKENS, HIDDEN, seed=8),
            weights,
            torch.arange(TOKENS),
            torch.tensor([11], dtype=torch.int64),
            torch.tensor([0], dtype=torch.int64),
        ]

    return Case(
        layer,
        inputs,
        (
            "fi_patch_declared.fused_add_rmsnorm",
            "fi_patch_declared.apply_rope_pos_ids_cos_sin_cache",
            "fi_patch.silu_and_mul",
            fp4_op,
            "fi_patch.mm_fp4",
            "fi_patch.top_k_top_p_sampling_from_probs",
        ),
        written=(0, 1),
    )
