"""CPU stand-ins for the kernels FlashInfer's entry points reach, doing the kernels' math (or, for
FP4 and FP8, a deterministic function of their inputs).

`install()` makes every JIT module FlashInfer builds (`gen_..._module().build_and_load()`) a
`Kernels` object, and clears the module getters' caches, so that FlashInfer's own Python runs as
it does on a GPU host: its getters, its declarations, its checks and allocations, its runners
and autotuner; only the JIT module's functions are these. The device questions a CPU cannot
answer are answered as an SM 10.0 host does, and the two CUDA-only buffers come from the CPU.
Each kernel runs under torch.no_grad (a compiled kernel writes without autograd) and writes
where the real kernel writes. A kernel with no stand-in here raises LookupError naming it, so
that no case passes by doing nothing.

The formulas follow the kernels' sources (read in FlashInfer 0.6.8.post1 and 0.7.4): the merges'
log-sum-exp is in base 2; rope rotates the first rotary_dim dimensions, NeoX halves or GPT-J
pairs; fused_add_rmsnorm normalises the float sum and stores the rounded one in residual; the
quantising norms divide by the scale and saturate to float8_e4m3fn's range.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import types

import torch

# --- activations and norms ----------------------------------------------------------------------


def _act(kind):
    def kernel(out, input, *rest):
        d = input.shape[-1] // 2
        gate, up = input[..., :d].float(), input[..., d:].float()
        if kind == "silu":
            act = torch.nn.functional.silu(gate)
        elif kind == "gelu":
            act = torch.nn.functional.gelu(gate)
        else:
            act = torch.nn.functional.gelu(gate, approximate="tanh")
        out.copy_((act * up).to(out.dtype))

    return kernel


def _normed(x, weight, eps, bias):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (weight.float() + bias)


def _rmsnorm(bias):
    def kernel(out, input, weight, eps, *rest):
        out.copy_(_normed(input.float(), weight, eps, bias).to(out.dtype))

    return kernel


def _fused_add_rmsnorm(bias):
    def kernel(input, residual, weight, eps, *rest):
        x = input.float() + residual.float()
        residual.copy_(x.to(residual.dtype))
        input.copy_(_normed(x, weight, eps, bias).to(input.dtype))

    return kernel


def _rmsnorm_quant(out, input, weight, scale, eps, *rest):
    # scale: a float32 tensor of one value (0.6.7 on, where the compiled tests run).
    normed = _normed(input.float(), weight, eps, 0.0) / scale.float()
    out.copy_(normed.clamp(-448, 448).to(out.dtype))


def _fused_add_rmsnorm_quant(out, input, residual, weight, scale, eps, *rest):
    x = input.float() + residual.float()
    residual.copy_(x.to(residual.dtype))
    normed = _normed(x, weight, eps, 0.0) / scale.float()
    out.copy_(normed.clamp(-448, 448).to(out.dtype))


# --- rope ---------------------------------------------------------------------------------------


def _rotated(x, cos, sin, rotary_dim, interleave):
    """x (nnz, heads, dim) in float32, its first rotary_dim dimensions rotated by cos and sin
    (nnz, rotary_dim // 2): GPT-J pairs where interleaved, NeoX halves otherwise."""
    out = x.float().clone()
    rot = out[..., :rotary_dim]
    c, s = cos[:, None, :], sin[:, None, :]
    if interleave:
        even, odd = rot[..., 0::2].clone(), rot[..., 1::2].clone()
        rot[..., 0::2] = even * c - odd * s
        rot[..., 1::2] = odd * c + even * s
    else:
        half = rotary_dim // 2
        first, second = rot[..., :half].clone(), rot[..., half:].clone()
        rot[..., :half] = first * c - second * s
        rot[..., half:] = second * c + first * s
    return out


def _frequencies(rotary_dim, rope_scale, rope_theta, llama31=None):
    j = torch.arange(rotary_dim // 2, dtype=torch.float32)
    f = rope_theta ** (-(2 * j) / rotary_dim)
    if llama31 is None:
        return f / rope_scale
    low, high, old = llama31
    a = old / (2 * math.pi * (high - low))
    b = -1.0 / (high / low - 1.0)
    smooth = (f * a + b).clamp(0, 1)
    return (1 - smooth) * f / rope_scale + smooth * f


def _segment_positions(indptr, offsets, nnz):
    positions = torch.empty(nnz, dtype=torch.float32)
    for b in range(offsets.shape[0]):
        start, end = int(indptr[b]), int(indptr[b + 1])
        positions[start:end] = offsets[b].float() + torch.arange(end - start, dtype=torch.float32)
    return positions


def _rope_write(q, k, q_rope, k_rope, positions, freqs, rotary_dim, interleave):
    angle = positions[:, None] * freqs[None, :]
    cos, sin = angle.cos(), angle.sin()
    q_rope.copy_(_rotated(q, cos, sin, rotary_dim, interleave).to(q_rope.dtype))
    k_rope.copy_(_rotated(k, cos, sin, rotary_dim, interleave).to(k_rope.dtype))


def _apply_rope(q, k, q_rope, k_rope, indptr, offsets, rotary_dim, interleave, scale, theta):
    positions = _segment_positions(indptr, offsets, q.shape[0])
    freqs = _frequencies(rotary_dim, scale, theta)
    _rope_write(q, k, q_rope, k_rope, positions, freqs, rotary_dim, interleave)


def _apply_rope_pos_ids(q, k, q_rope, k_rope, pos_ids, rotary_dim, interleave, scale, theta):
    freqs = _frequencies(rotary_dim, scale, theta)
    _rope_write(q, k, q_rope, k_rope, pos_ids.float(), freqs, rotary_dim, interleave)


def _apply_llama31_rope(q, k, q_rope, k_rope, indptr, offsets, rotary_dim, interleave, *rest):
    scale, theta, low, high, old = rest
    positions = _segment_positions(indptr, offsets, q.shape[0])
    freqs = _frequencies(rotary_dim, scale, theta, (low, high, old))
    _rope_write(q, k, q_rope, k_rope, positions, freqs, rotary_dim, interleave)


def _apply_llama31_rope_pos_ids(q, k, q_rope, k_rope, pos_ids, rotary_dim, interleave, *rest):
    scale, theta, low, high, old = rest
    freqs = _frequencies(rotary_dim, scale, theta, (low, high, old))
    _rope_write(q, k, q_rope, k_rope, pos_ids.float(), freqs, rotary_dim, interleave)


def _apply_rope_cos_sin_cache(q, k, q_rope, k_rope, cos_sin_cache, pos_ids, interleave):
    # The cache's row for each position: cos, then sin, over rotary_dim // 2 each.
    rotary_dim = cos_sin_cache.shape[1]
    rows = cos_sin_cache[pos_ids.long()].float()
    cos, sin = rows[:, : rotary_dim // 2], rows[:, rotary_dim // 2 :]
    q_rope.copy_(_rotated(q, cos, sin, rotary_dim, interleave).to(q_rope.dtype))
    k_rope.copy_(_rotated(k, cos, sin, rotary_dim, interleave).to(k_rope.dtype))


def _rope_quantize(
    q_rope_in,
    k_rope_in,
    q_nope_in,
    k_nope_in,
    q_rope_out,
    k_rope_out,
    q_nope_out,
    k_nope_out,
    cos_sin_cache,
    pos_ids,
    quant_scale_q,
    quant_scale_kv,
    interleave,
    *rest,
):
    # The rope parts rotated by the cache's rows (a 2-D key is MLA's one shared head), the nope
    # parts as they are; each scaled (q's, the key's) and cast to the outputs' float8.
    rotary_dim = cos_sin_cache.shape[1]
    rows = cos_sin_cache[pos_ids.long()].float()
    cos, sin = rows[:, : rotary_dim // 2], rows[:, rotary_dim // 2 :]
    k = k_rope_in[:, None] if k_rope_in.ndim == 2 else k_rope_in
    q_rot = _rotated(q_rope_in, cos, sin, rotary_dim, interleave) * quant_scale_q
    k_rot = _rotated(k, cos, sin, rotary_dim, interleave) * quant_scale_kv
    q_rope_out.copy_(q_rot.to(q_rope_out.dtype))
    k_rope_out.copy_(k_rot.reshape(k_rope_in.shape).to(k_rope_out.dtype))
    q_nope_out.copy_((q_nope_in.float() * quant_scale_q).to(q_nope_out.dtype))
    k_nope_out.copy_((k_nope_in.float() * quant_scale_kv).to(k_nope_out.dtype))


def _concat_mla_k(k, k_nope, k_rope, *rest):
    nope = k_nope.shape[-1]
    k[..., :nope].copy_(k_nope)
    k[..., nope:].copy_(k_rope.expand(*k_nope.shape[:-1], k_rope.shape[-1]))


# --- MoE routing ---------------------------------------------------------------------------


def _no_aux_tc(
    scores, bias, n_group, topk_group, topk, scaling, values, indices, pdl=True, replay=None
):
    # DeepSeek-V3's routing: sigmoid scores plus the bias choose topk_group groups (each scored
    # by its two best experts), then topk experts among them; the weights are the chosen sigmoid
    # scores normalised and scaled.
    sigmoid = torch.sigmoid(scores.float())
    biased = sigmoid + bias.float()
    tokens, experts = scores.shape
    if n_group > 1:
        grouped = biased.view(tokens, n_group, experts // n_group)
        group_scores = grouped.topk(2, dim=-1).values.sum(-1)
        chosen = group_scores.topk(topk_group, dim=-1).indices
        keep = torch.zeros(tokens, n_group, dtype=torch.bool).scatter(1, chosen, True)
        keep = keep[:, :, None].expand(-1, -1, experts // n_group).reshape(tokens, experts)
        biased = biased.masked_fill(~keep, float("-inf"))
    picked = biased.topk(topk, dim=-1).indices
    weights = sigmoid.gather(1, picked)
    weights = weights / weights.sum(-1, keepdim=True) * scaling
    values.copy_(weights.to(values.dtype))
    indices.copy_(picked.to(indices.dtype))
    if replay is not None:
        replay[:tokens].copy_(picked.to(replay.dtype))


# --- fused MoE: a deterministic function of the inputs -----------------------------------------

# Where each trtllm MoE kernel takes the routing's input mode (0.7 on: logits, packed topk_ids, or
# topk_ids with their weights beside; None where the kernel has none: logits where given, else
# packed), routing_logits, hidden_states, the two weights, output, top_k, do_finalize (None where
# the kernel has none: finalized), routing_replay_out, topk_ids and the experts' weights, by the
# number of arguments FlashInfer passes it in 0.6.0 - 0.6.7 (the first keys, by release), 0.6.8,
# 0.7.0 and 0.7.4 (BF16, FP4, FP8 block scales, FP8 per tensor and its routed kernel, FP8 per
# channel, MXINT4; MXINT4's 31 is 0.6.13 - 0.6.18.post1's), and the older ones: BF16's 17
# (0.5.3), FP4's 30 (0.2.10 - 0.2.11.post1), 31 (0.2.11.post2 - 0.2.12), 32 (0.2.13:
# _MOE_ARGUMENTS_0_2) and 33 (0.2.14 - 0.4.1), FP8 per tensor's 19 (0.2.9 - 0.2.11.post1) and 20
# (0.2.11.post2 - 0.4.0) and FP8 block scales' 20 (0.2.9 - 0.2.11.post1) and 21 (0.2.11.post2 -
# 0.3.1.post1). The kernels' argument lists differ by release; the stand-in reads these alone, and
# the compiled cases run 0.2.10, 0.2.13, 0.3.0, 0.4.1, 0.5.3, 0.6.0, 0.6.5, 0.6.8.post1 and 0.7.4.
_MOE_ARGUMENTS = {
    "trtllm_bf16_moe": {
        17: (None, 0, 2, 3, 4, None, 6, None, None, None, None),
        18: (None, 0, 2, 3, 4, None, 6, None, None, None, None),
        22: (None, 0, 4, 5, 6, 7, 9, 19, None, 2, 3),
        25: (None, 0, 4, 5, 6, 7, 9, 19, 24, 2, 3),
        33: (0, 1, 5, 6, 7, 12, 14, 24, 29, 3, 4),
        35: (0, 1, 5, 6, 7, 12, 14, 24, 29, 3, 4),
    },
    "trtllm_fp4_block_scale_moe": {
        30: (None, 0, 4, 6, 12, 29, 19, 28, None, 1, 2),
        31: (None, 0, 4, 6, 12, 30, 19, 28, None, 1, 2),
        32: (None, 0, 4, 6, 12, 30, 19, 27, None, 1, 2),
        33: (None, 0, 4, 6, 12, 31, 19, 28, None, 1, 2),
        34: (None, 0, 4, 6, 12, 30, 19, 27, 33, 1, 2),
        43: (0, 1, 5, 7, 14, 34, 22, 31, 37, 2, 3),
        46: (0, 1, 5, 7, 14, 34, 22, 31, 37, 2, 3),
    },
    "trtllm_fp8_block_scale_moe": {
        20: (None, 0, 2, 4, 6, None, 9, None, None, None, None),
        21: (None, 0, 2, 4, 6, None, 9, None, None, None, None),
        22: (None, 0, 2, 4, 6, 8, 10, None, None, None, None),
        24: (None, 0, 4, 6, 8, 10, 12, None, None, 1, 2),
        25: (None, 0, 4, 6, 8, 10, 12, None, None, 1, 2),
        26: (None, 0, 4, 6, 8, 10, 12, 22, None, 1, 2),
        27: (None, 0, 4, 6, 8, 10, 12, 22, None, 1, 2),
        29: (None, 0, 4, 6, 8, 10, 12, 22, 28, 1, 2),
        42: (0, 1, 5, 7, 14, 17, 19, 30, 36, 2, 3),
        44: (0, 1, 5, 7, 14, 17, 19, 30, 36, 2, 3),
    },
    "trtllm_fp8_per_tensor_scale_moe": {
        19: (None, 0, 2, 3, 6, None, 9, None, None, None, None),
        20: (None, 0, 2, 3, 6, None, 9, None, None, None, None),
        21: (None, 0, 2, 3, 6, 8, 10, None, None, None, None),
        23: (None, 0, 2, 3, 6, 8, 10, 19, None, None, None),
        25: (None, 0, 2, 3, 6, 8, 10, 19, 24, None, None),
        28: (None, 0, 2, 3, 6, 8, 10, 19, 24, None, None),
        31: (None, 0, 2, 3, 6, 8, 10, 19, 24, None, None),
    },
    # The routed call's own kernel (0.6.17 on): no routing_logits.
    "trtllm_fp8_per_tensor_scale_routed_moe": {
        30: (0, None, 4, 5, 8, 10, 12, 21, 26, 1, 2),
        33: (0, None, 4, 5, 8, 10, 12, 21, 26, 1, 2),
    },
    # No routing_replay_out: 0.7.0 (29) and 0.7.4 (31).
    "trtllm_fp8_per_channel_scale_moe": {
        29: (None, 0, 4, 6, 10, 13, 15, 24, None, 1, 2),
        31: (None, 0, 4, 6, 10, 13, 15, 24, None, 1, 2),
    },
    "trtllm_mxint4_block_scale_moe": {
        23: (None, 0, 2, 3, 8, 21, 11, 19, None, None, None),
        25: (None, 0, 2, 3, 8, 21, 11, 19, 24, None, None),
        31: (None, 0, 4, 5, 11, 24, 14, 22, 27, None, None),
        33: (None, 0, 4, 5, 11, 24, 14, 22, 27, 2, 3),
        35: (None, 0, 4, 5, 11, 24, 14, 22, 27, 2, 3),
    },
}


# The kernels that return their output, (num_tokens, hidden) bfloat16 (BF16, FP8 per tensor and
# FP8 block scales before 0.6.5), by kind and number of arguments, as above. The stand-in writes
# the output FlashInfer passes, where it passes one, and returns it; where it passes none (BF16
# before 0.6.5, FP8 per tensor up to 0.4.0, FP8 block scales up to 0.3.1.post1), it allocates.
# (0.5.3 - 0.6.4's FP8 kernels allocate their own and leave the one passed, a buffer of the kernel
# module's op that no caller sees, unwritten; FP8 block scales' 0.4.0 - 0.5.2 and FP8 per
# tensor's 0.4.1 - 0.5.2 write the one passed, which the op returns.) FP4's with tile_tokens_dim
# return it in a list (0.2.10 - 0.4.0), which the kernel module's op returns (_MOE_LISTING; 0.4.1's
# kernel returns an empty one and its op a list of its own; so does 0.5.0 - 0.6.7.post3's op, whose
# kernel also takes 32 arguments, finalized).
_MOE_LISTING = {
    ("trtllm_fp4_block_scale_moe", 30),
    ("trtllm_fp4_block_scale_moe", 31),
    ("trtllm_fp4_block_scale_moe", 32),
    ("trtllm_fp4_block_scale_moe", 33),
}

# 0.2.13's FP4 kernel takes 32 arguments, as 0.5.0 - 0.6.7.post3's does, with tile_tokens_dim among
# them and do_finalize one later (as FlashInfer's op calls it; its autotuner's runner passes
# enable_pdl there, which the compiled cases never tune): a 0.2 release reads these first.
_MOE_ARGUMENTS_0_2 = {
    ("trtllm_fp4_block_scale_moe", 32): (None, 0, 4, 6, 12, 30, 19, 28, None, 1, 2),
}
_MOE_RETURNING = {
    ("trtllm_bf16_moe", 17),
    ("trtllm_bf16_moe", 18),
    ("trtllm_fp8_per_tensor_scale_moe", 19),
    ("trtllm_fp8_per_tensor_scale_moe", 20),
    ("trtllm_fp8_per_tensor_scale_moe", 21),
    ("trtllm_fp8_block_scale_moe", 20),
    ("trtllm_fp8_block_scale_moe", 21),
    ("trtllm_fp8_block_scale_moe", 22),
    ("trtllm_fp8_block_scale_moe", 24),
    ("trtllm_fp8_block_scale_moe", 25),
}


_UNPACKED = 2
"""RoutingInputMode.UnpackedPrecomputed (flashinfer/tllm_enums.py)."""


def _trtllm_moe(kind):
    """Top-k routing, then per token the sum, weighted, of what each chosen expert gives: the
    token's values (FP4's bytes read as two 4-bit codes) scaled by a number of that expert's
    weights. The routing: softmax top-k over the logits where given; else the routed call's
    topk_ids, a (tokens, top_k) int32 of experts with their weights given beside (the unpacked
    mode), or packed (expert << 16 | the bfloat16 weight's bits). Written into output where
    do_finalize (the only form the compiled cases call; the kernel's other outputs are not read
    then; BF16 before 0.6.5, passed none, into a new one), returned where the kernel returns it
    (_MOE_RETURNING), and the chosen experts into routing_replay_out where given."""

    def kernel(*args):
        where = _MOE_ARGUMENTS[kind].get(len(args))
        if sys.modules["flashinfer"].__version__.startswith("0.2."):
            where = _MOE_ARGUMENTS_0_2.get((kind, len(args)), where)
        if where is None:
            raise LookupError(f"no CPU stand-in for {kind} with {len(args)} arguments")
        picked = (None if i is None else args[i] for i in where)
        mode, logits, hidden, w1, w2, output, top_k, finalize, replay, ids, given = picked
        returning = (kind, len(args)) in _MOE_RETURNING
        if output is None:
            output = torch.empty(hidden.shape[0], hidden.shape[1], dtype=torch.bfloat16)
        if where[7] is not None and not finalize:
            raise LookupError(f"no CPU stand-in for {kind} with do_finalize=False")
        x = hidden.float()
        if hidden.dtype == torch.uint8:
            x = torch.stack([hidden & 0xF, hidden >> 4], -1).reshape(hidden.shape[0], -1).float()
            x = x / 4 - 2
        if logits is not None:
            weights, experts = torch.softmax(logits.float(), -1).topk(top_k, -1)
        elif mode == _UNPACKED:
            weights, experts = given.float(), ids.long()
        else:
            experts = (ids >> 16).long()
            weights = (ids & 0xFFFF).to(torch.int16).view(torch.bfloat16).float()
        per_expert = 1 + (w1.float().flatten(1).mean(1) - w2.float().flatten(1).mean(1)) / 64
        scale = (weights * per_expert[experts]).sum(-1, keepdim=True)
        output.copy_((x[:, : output.shape[1]] * scale).to(output.dtype))
        if replay is not None:
            replay[: experts.shape[0]].copy_(experts.to(replay.dtype))
        if (kind, len(args)) in _MOE_LISTING:
            return [output]
        return output if returning else []

    return kernel


class _CutlassMoe:
    """What the CUTLASS MoE module's init() gives (cutlass_fused_moe's MoERunner keeps it): a
    runner whose run_moe writes the output, bfloat16 unquantized (the only kind the compiled cases
    call), from its first eight arguments, the same in every release: output, input,
    token_selected_experts, token_final_scales, fc1_expert_weights and biases, fc2_expert_weights
    and biases. Per token the sum, weighted by token_final_scales, of each chosen expert's
    fc2 @ (act(gate) * up) with fc1 @ x = (gate, up), act silu (Swiglu) or gelu (Geglu): the
    activation_type after the tactics (the last list it is given, then enable_pdl; 0.4.1 passes
    none: Swiglu), and after it (0.6.16 on) workspace_buffer, whose first bytes it writes (the
    token count, counting up). It returns the output, as the kernel's runMoe does before 0.4.0,
    whose kernel module gives it back in a list of one (later modules ignore what it returns).
    Before 0.3.0 the runner is a TorchScript class the build loads, by name (0.2.11.post2 on:
    the build gives the class) or from torch.classes (0.2.9 - 0.2.11.post1); its tactics come
    last, or before enable_pdl (0.2.11.post2 on), and there is no activation: Swiglu."""

    @torch.no_grad()
    def run_moe(self, output, x, experts, scales, fc1, fc1_bias, fc2, fc2_bias, *rest):
        tactics = max(i for i, value in enumerate(rest) if isinstance(value, list))
        # workspace_buffer follows the activation from 0.6.16; 0.4.1 passes none (Swiglu).
        activation = int(rest[tactics + 2]) if len(rest) > tactics + 2 else _SWIGLU
        workspace = rest[tactics + 3] if len(rest) > tactics + 3 else None
        act = _CUTLASS_ACTIVATIONS.get(activation)
        if act is None:
            raise LookupError(f"no CPU stand-in for the CUTLASS MoE's activation {activation}")
        x = x.float()
        total = torch.zeros(output.shape, dtype=torch.float32)
        for k in range(experts.shape[1]):
            chosen = experts[:, k].long()
            h = torch.einsum("th,tnh->tn", x, fc1[chosen].float())
            gate, up = h.chunk(2, -1)
            y = torch.einsum("ti,thi->th", act(gate) * up, fc2[chosen].float())
            total += scales[:, k : k + 1].float() * y
        output.copy_(total.to(output.dtype))
        if workspace is not None:
            count = torch.arange(8, dtype=torch.uint8) + x.shape[0]
            workspace[:8].copy_(count)
        return output

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise LookupError(f"no CPU stand-in for the CUTLASS MoE runner's {name}")


_SWIGLU = 3
_CUTLASS_ACTIVATIONS = {_SWIGLU: torch.nn.functional.silu, 4: torch.nn.functional.gelu}
"""ActivationType.Swiglu and ActivationType.Geglu (flashinfer/tllm_enums.py): the gate's
activation."""


def _cutlass_moe_init(*args, **kwargs):
    return _CutlassMoe()


_CUDA_DEVICE = torch.cuda.device


def _device(device):
    """torch.cuda.device, a context that does nothing for a CPU device: cutlass_fused_moe (0.6.16
    on) enters its input's device, which on a CPU host raises."""
    if isinstance(device, (torch.device, str)) and torch.device(device).type == "cpu":
        return contextlib.nullcontext()
    return _CUDA_DEVICE(device)


def _capability(device=None):
    """torch.cuda.get_device_capability, as an SM 10.0 host answers it."""
    return (10, 0)


# --- cascade, paging, packbits ------------------------------------------------------------------


def _merged(v, s, dim):
    """Merge along `dim`: v (..., H, D) states with base-2 lse s (..., H)."""
    m = s.max(dim, keepdim=True).values
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    w = torch.exp2(s - m)
    total = w.sum(dim)
    merged = (w[..., None] * v.float()).sum(dim) / total[..., None]
    return merged, m.squeeze(dim) + torch.log2(total)


def _merge_state(v_a, s_a, v_b, s_b, v_merged, s_merged):
    v, s = _merged(torch.stack([v_a, v_b], 1), torch.stack([s_a, s_b], 1).float(), 1)
    v_merged.copy_(v.to(v_merged.dtype))
    s_merged.copy_(s)


def _merge_state_in_place(v, s, v_other, s_other, mask=None):
    merged_v, merged_s = _merged(torch.stack([v, v_other], 1), torch.stack([s, s_other], 1), 1)
    if mask is not None:
        keep = mask.bool()
        merged_v = torch.where(keep[:, None, None], merged_v, v.float())
        merged_s = torch.where(keep[:, None], merged_s, s)
    v.copy_(merged_v.to(v.dtype))
    s.copy_(merged_s)


def _merge_states(v, s, v_merged, s_merged):
    merged_v, merged_s = _merged(v, s.float(), 1)
    v_merged.copy_(merged_v.to(v_merged.dtype))
    s_merged.copy_(merged_s)


def _append_paged_kv_cache(key, value, batch_indices, positions, k_cache, v_cache, *rest):
    kv_indices, kv_indptr, _, layout = rest
    page_size = k_cache.shape[1] if layout == 0 else k_cache.shape[2]
    for i in range(key.shape[0]):
        b = int(batch_indices[i])
        p = int(kv_indptr[b]) * page_size + int(positions[i])
        page, entry = int(kv_indices[p // page_size]), p % page_size
        if layout == 0:
            k_cache[page, entry] = key[i]
            v_cache[page, entry] = value[i]
        else:
            k_cache[page, :, entry] = key[i]
            v_cache[page, :, entry] = value[i]


def _packbits(x, bitorder, y):
    bits = x.reshape(-1).to(torch.uint8)
    padded = torch.zeros((bits.numel() + 7) // 8 * 8, dtype=torch.uint8)
    padded[: bits.numel()] = bits
    groups = padded.view(-1, 8).to(torch.int32)
    shifts = torch.arange(7, -1, -1) if bitorder == "big" else torch.arange(8)
    y.copy_((groups << shifts).sum(1).to(torch.uint8))


# --- sampling -----------------------------------------------------------------------------------


def _uniform(rows, seed, offset):
    """One number in [0, 1) per row, from its seed and offset (the Philox stream stood in)."""
    index = torch.arange(rows, dtype=torch.float64)
    x = torch.sin(seed.double() * 12.9898 + offset.double() * 78.233 + index * 37.719) * 43758.5453
    return (x - x.floor()).float()


def _per_row(arr, val, rows, dtype):
    if arr is None:
        return torch.full((rows,), val, dtype=dtype)
    arr = arr.to(dtype)
    return arr.expand(rows) if arr.numel() == 1 else arr[:rows]


def _filtered(probs, top_k=None, top_p=None):
    """Each row's probabilities with what top-k then top-p leave, renormalised."""
    p = probs.float().clone()
    vocab = p.shape[-1]
    if top_k is not None:
        k = top_k.clamp(1, vocab).long()
        kth = p.sort(-1, descending=True).values.gather(1, (k - 1)[:, None])
        p = torch.where(p >= kth, p, torch.zeros_like(p))
    if top_p is not None:
        sorted_p, order = p.sort(-1, descending=True)
        before = sorted_p.cumsum(-1) - sorted_p
        keep = before < top_p[:, None] * sorted_p.sum(-1, keepdim=True)
        p = torch.zeros_like(p).scatter(1, order, torch.where(keep, sorted_p, 0.0))
    return p / p.sum(-1, keepdim=True).clamp_min(1e-30)


def _sample(probs, samples, valid, indices, top_k, top_p, seeds, min_p=None):
    rows = samples.shape[0]
    source = probs[indices.long()] if indices is not None else probs[:rows]
    p = _filtered(source, top_k, top_p) if min_p is None else _min_p_filtered(source, min_p)
    u = _uniform(rows, *seeds)
    chosen = (p.cumsum(-1) <= u[:, None]).sum(-1).clamp(max=p.shape[-1] - 1)
    samples.copy_(chosen.to(samples.dtype))
    valid.fill_(True)


def _seeds(rows, maybe_seed_arr, seed_val, maybe_offset_arr, offset_val):
    seed = _per_row(maybe_seed_arr, seed_val, rows, torch.int64)
    offset = _per_row(maybe_offset_arr, offset_val, rows, torch.int64)
    return seed, offset


def _top_p_sampling(probs, samples, valid, indices, top_p_arr, top_p_val, det, *seeds):
    rows = samples.shape[0]
    top_p = _per_row(top_p_arr, top_p_val, rows, torch.float32)
    _sample(probs, samples, valid, indices, None, top_p, _seeds(rows, *seeds))


def _top_k_sampling(probs, samples, valid, indices, top_k_arr, top_k_val, det, *seeds):
    rows = samples.shape[0]
    top_k = _per_row(top_k_arr, top_k_val, rows, torch.int64)
    _sample(probs, samples, valid, indices, top_k, None, _seeds(rows, *seeds))


def _top_k_top_p_sampling(probs, samples, valid, indices, k_arr, k_val, p_arr, p_val, det, *seeds):
    rows = samples.shape[0]
    top_k = _per_row(k_arr, k_val, rows, torch.int64)
    top_p = _per_row(p_arr, p_val, rows, torch.float32)
    _sample(probs, samples, valid, indices, top_k, top_p, _seeds(rows, *seeds))


def _top_k_renorm_probs(probs, renorm_probs, top_k_arr, top_k_val, *rest):
    top_k = _per_row(top_k_arr, top_k_val, probs.shape[0], torch.int64)
    renorm_probs.copy_(_filtered(probs, top_k).to(renorm_probs.dtype))


def _top_p_renorm_probs(probs, renorm_probs, top_p_arr, top_p_val, *rest):
    top_p = _per_row(top_p_arr, top_p_val, probs.shape[0], torch.float32)
    renorm_probs.copy_(_filtered(probs, top_p=top_p).to(renorm_probs.dtype))


def _top_k_mask_logits(logits, mask_logits, top_k_arr, top_k_val, *rest):
    """Each row's logits below its k-th largest set to -inf."""
    k = _per_row(top_k_arr, top_k_val, logits.shape[0], torch.int64).clamp(1, logits.shape[-1])
    values = logits.float()
    kth = values.sort(-1, descending=True).values.gather(1, (k - 1)[:, None])
    masked = torch.where(values >= kth, values, float("-inf"))
    mask_logits.copy_(masked.to(mask_logits.dtype))


def _min_p_filtered(probs, min_p):
    """Each row's probabilities of at least min_p times its largest, renormalised."""
    p = probs.float()
    keep = p >= min_p[:, None] * p.max(-1, keepdim=True).values
    p = torch.where(keep, p, torch.zeros_like(p))
    return p / p.sum(-1, keepdim=True).clamp_min(1e-30)


def _min_p_sampling(probs, samples, valid, indices, min_p_arr, min_p_val, det, *seeds):
    rows = samples.shape[0]
    min_p = _per_row(min_p_arr, min_p_val, rows, torch.float32)
    _sample(probs, samples, valid, indices, None, None, _seeds(rows, *seeds), min_p)


# --- FP4 and FP8: a deterministic function of the inputs -----------------------------------------


def _nibbles(x):
    """Two values a byte, the even element in the low nibble: x scaled to 4-bit codes."""
    codes = (x.float() * 2).round().clamp(-7, 7).to(torch.int16) & 0xF
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)


def _block_scales(x, block):
    """One byte per block of `block` values along the last dimension: its largest magnitude,
    below 0x7F (read as float8_e4m3fn, as the scales are, every byte is a number, none NaN)."""
    rows = x.float().reshape(-1, x.shape[-1])
    amax = rows.abs().reshape(rows.shape[0], -1, block).amax(-1)
    return (amax * 16).clamp(0, 126).to(torch.uint8)


def _fill(flat, values):
    """Write `values` flattened into `flat`, from its start; the rest zero."""
    values = values.reshape(-1).to(flat.dtype)
    flat.zero_()
    n = min(flat.numel(), values.numel())
    flat.view(-1)[:n] = values[:n]


def _swizzled(scales, rows_to):
    """(m, ks) scales in a padded tile layout: rows to `rows_to`, columns to 4."""
    m, ks = scales.shape
    mp, kp = -(-m // rows_to) * rows_to, -(-ks // 4) * 4
    padded = torch.zeros(mp, kp, dtype=scales.dtype)
    padded[:m, :ks] = scales
    if rows_to == 128:
        return padded.view(mp // 128, 4, 32, kp // 4, 4).permute(0, 3, 2, 1, 4)
    return padded.view(mp // rows_to, rows_to, kp // 4, 4).permute(0, 2, 1, 3)


def _fp4_quantize(input, global_scale, out_val, out_sf, sf_vec_size, ue8m0, swizzled, eight, *rest):
    scale = global_scale.float().reshape(-1)[0] if global_scale is not None else 1.0
    x = input.float() * scale
    out_val.copy_(_nibbles(x))
    scales = _block_scales(x, sf_vec_size)
    _fill(out_sf, _swizzled(scales, 8 if eight else 128) if swizzled else scales)


def _fp4_batched_quantize(input, global_scale, out_val, out_sf, sf_vec_size, *rest):
    x = input.float() * global_scale.float().reshape(-1)[0]
    out_val.copy_(_nibbles(x))
    for b in range(x.shape[0]):
        _fill(out_sf[b], _swizzled(_block_scales(x[b], sf_vec_size), 128))


def _experts_quantize(output, output_scales, input, global_scale, mask, use_silu, *rest):
    experts = global_scale.numel()
    x = input.float()
    if use_silu:
        k = x.shape[-1] // 2
        x = (torch.nn.functional.silu(x[..., :k]) * x[..., k:]).to(input.dtype).float()
    x = x.view(experts, -1, x.shape[-1]) * global_scale.float().view(-1, 1, 1)
    output.copy_(_nibbles(x).view(output.shape))
    scales = torch.stack(
        [_swizzled(_block_scales(x[e], 16), 128).reshape(-1) for e in range(experts)]
    )
    _fill(output_scales.view(torch.uint8), scales)


def _block_scale_interleave(unswizzled_sf, out):
    s = unswizzled_sf if unswizzled_sf.dim() == 3 else unswizzled_sf.unsqueeze(0)
    _fill(out, torch.stack([_swizzled(e, 128).reshape(-1) for e in s]))


def _mxfp8_quantize_host(input, out_val, out_sf, layout):
    x = input.float()
    out_val.copy_(((x * 8).round().clamp(-127, 127).to(torch.int16) & 0xFF).to(out_val.dtype))
    scales = _block_scales(x, 32)
    _fill(out_sf, _swizzled(scales, 128) if layout == 0 else scales)


def _mxfp8_quantize(input, out_val, out_sf, layout, alignment, *rest):
    x = input.float()
    padded = torch.zeros(*x.shape[:-1], out_val.shape[-1])
    padded[..., : x.shape[-1]] = x
    out_val.copy_((padded / 64).to(out_val.dtype))
    scales = _block_scales(padded, 32)
    _fill(out_sf, _swizzled(scales, 8 if layout == 1 else 128) if layout != 2 else scales)


# --- GEMMs ---------------------------------------------------------------------------------------


def _fp4_gemm(a, b_t, a_descale, b_descale_t, alpha, out, workspace, tactic, *rest):
    product = a.float() @ b_t.float().T / 256
    if alpha is not None:
        product = product * alpha.float().reshape(-1)[0]
    out.copy_(product.to(out.dtype))


def _fp8_gemm(a, b_t, scale_a, scale_b, out, workspace, tactic, *rest):
    product = torch.bmm(a.float(), b_t.float().transpose(-2, -1))
    out.copy_((product * scale_a.float() * scale_b.float()).to(out.dtype))


def _trtllm_low_latency_gemm(workspace, a, b, global_scale, out, tactic):
    # b is the (k // 128, n, 128) prepared weight: (n, k) again for the product.
    weight = b.float().permute(1, 0, 2).reshape(b.shape[1], -1)
    product = a.float() @ weight.T
    if global_scale is not None:
        product = product * global_scale.float().reshape(-1)[0]
    out.copy_(product.to(out.dtype))


# --- attention ---------------------------------------------------------------------------------


def _nhd(kv, layout):
    """A (k or v) cache as (kv_len, heads, dim): layout 0 is NHD, 1 HND."""
    return kv if layout == 0 else kv.transpose(0, 1)


def _attention(q, k, v, causal, sm_scale, sinks=None):
    """Attention of q (qo_len, heads, dim) over k and v (kv_len, kv_heads, dim), the query heads
    grouped over the KV heads, in float32: out (qo_len, heads, v's dim) and its log-sum-exp in
    base 2 (qo_len, heads). Causal aligns the last query with the last key. An attention sink
    (`sinks`, one per head) is a logit of its own in each head's softmax, with no value."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * sm_scale
    if causal:
        rows, columns = scores.shape[-2:]
        later = torch.ones(rows, columns, dtype=torch.bool).triu(columns - rows + 1)
        scores = scores.masked_fill(later, float("-inf"))
    keys = scores.shape[-1]
    if sinks is not None:
        sunk = sinks.float()[:, None, None].expand(-1, scores.shape[1], 1)
        scores = torch.cat([scores, sunk], dim=-1)
    lse = torch.logsumexp(scores, dim=-1) / math.log(2)
    out = torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1)[..., :keys], v)
    return out, lse.transpose(0, 1)


def _plain(window_left, logits_soft_cap, alibi_slopes):
    """The stand-ins do plain attention only: a case with more would compare nothing."""
    if window_left != -1 or logits_soft_cap > 0 or alibi_slopes is not None:
        raise NotImplementedError("the CPU attention has no window, soft cap or alibi")


def _single_decode(q, k, v, tmp, o, lse, layout, window_left, alibi, soft_cap, sm_scale, *rest):
    _plain(window_left, soft_cap, alibi)
    out, logsumexp = _attention(q.unsqueeze(0), _nhd(k, layout), _nhd(v, layout), False, sm_scale)
    o.copy_(out[0])
    if lse is not None:
        lse.copy_(logsumexp[0])


def _single_prefill(q, k, v, tmp, o, lse, mask_mode, layout, window_left, mask, alibi, *rest):
    # From 0.7.0 the KV cache's scale factors come next (None: the op carries no others), before
    # the soft cap, the scale and rope's two.
    if len(rest) == 6:
        scales, rest = rest[:2], rest[2:]
        if any(s is not None for s in scales):
            raise NotImplementedError("the CPU attention has no KV cache scale factors")
    if len(rest) != 4:
        raise NotImplementedError("the CPU attention knows no such prefill module")
    soft_cap, sm_scale = rest[0], rest[1]
    _plain(window_left, soft_cap, alibi)
    if mask is not None or mask_mode not in (0, 1):
        raise NotImplementedError("the CPU attention has no custom mask")
    out, logsumexp = _attention(q, _nhd(k, layout), _nhd(v, layout), mask_mode == 1, sm_scale)
    o.copy_(out)
    if lse is not None:
        lse.copy_(logsumexp)


def _paged(cache, pages, layout):
    """The pages of a (k or v) cache, in order, as (tokens, heads, dim): layout 0 is NHD (pages,
    page_size, heads, dim), 1 HND (pages, heads, page_size, dim)."""
    held = cache[pages]
    held = held if layout == 0 else held.transpose(1, 2)
    return held.reshape(-1, *held.shape[2:])


def _batch_plan(*args, **kwargs):
    """plan_info: the CPU kernels read the wrapper's indptrs, indices and last page lengths."""
    return [0]


def _batch_decode(fws, iws, plan_info, q, k, v, indptr, indices, last, o, lse, layout, *rest):
    """BatchDecodeWithPagedKVCacheWrapper's kernel (0.6 to 0.7.4): request b's query over its
    pages, indices[indptr[b]:indptr[b + 1]], the last of them last[b] tokens long. What comes
    after the layout: window_left, enable_pdl, the alibi slopes (passed whatever the mode: the
    cases plan pos_encoding_mode NONE), the soft cap, sm_scale and rope's two."""
    window_left, soft_cap, sm_scale = rest[0], rest[3], rest[4]
    _plain(window_left, soft_cap, None)
    page_size = k.shape[1] if layout == 0 else k.shape[2]
    for b in range(indptr.numel() - 1):
        pages = indices[indptr[b] : indptr[b + 1]].long()
        length = (pages.numel() - 1) * page_size + int(last[b])
        keys, values = _paged(k, pages, layout)[:length], _paged(v, pages, layout)[:length]
        out, logsumexp = _attention(q[b : b + 1], keys, values, False, sm_scale)
        o[b].copy_(out[0])
        if lse is not None:
            lse[b].copy_(logsumexp[0])


def _batch_prefill(fws, iws, plan_info, q, k, v, qo, indptr, indices, last, o, lse, *rest):
    """BatchPrefillWithPagedKVCacheWrapper's kernel (0.6 to 0.7.4, fa2): request b's tokens,
    q[qo[b]:qo[b + 1]], over its pages as the decode kernel reads them, causal aligning its last
    token with its last key. What comes after lse: the mask mode (0 none, 1 causal), the layout,
    window_left, enable_pdl, the custom mask, its indptr, the alibi slopes (passed whatever the
    mode: the cases plan pos_encoding_mode NONE), the three multi-item pointers, from 0.6.10 the
    KV cache's scale factors, then the soft cap, sm_scale, rope's two and the items' length."""
    mask_mode, layout, window_left, custom_mask = rest[0], rest[1], rest[2], rest[4]
    soft_cap, sm_scale = rest[-5], rest[-4]
    if any(s is not None for s in rest[10:-5]):
        raise NotImplementedError("the CPU attention has no KV cache scale factors")
    _plain(window_left, soft_cap, None)
    if custom_mask is not None or mask_mode not in (0, 1):
        raise NotImplementedError("the CPU attention has no custom mask")
    page_size = k.shape[1] if layout == 0 else k.shape[2]
    for b in range(indptr.numel() - 1):
        pages = indices[indptr[b] : indptr[b + 1]].long()
        length = (pages.numel() - 1) * page_size + int(last[b])
        keys, values = _paged(k, pages, layout)[:length], _paged(v, pages, layout)[:length]
        tokens = slice(int(qo[b]), int(qo[b + 1]))
        out, logsumexp = _attention(q[tokens], keys, values, mask_mode == 1, sm_scale)
        o[tokens].copy_(out)
        if lse is not None:
            lse[tokens].copy_(logsumexp)


def _batch_ragged(fws, iws, plan_info, q, k, v, qo, kv, o, lse, *rest):
    """BatchPrefillWithRaggedKVCacheWrapper's kernel (0.6 to 0.7.4, fa2): request b's tokens,
    q[qo[b]:qo[b + 1]], over its keys and values, k[kv[b]:kv[b + 1]] (NHD; HND holds them in its
    second dimension), causal aligning its last token with its last key. What comes after lse:
    as the paged kernel's: the mask mode (0 none, 1 causal), the layout, window_left, enable_pdl,
    the custom mask, its indptr, the alibi slopes, the three multi-item pointers, from 0.6.10 the
    KV cache's scale factors, then the soft cap, sm_scale, rope's two and the items' length."""
    mask_mode, layout, window_left, custom_mask = rest[0], rest[1], rest[2], rest[4]
    soft_cap, sm_scale = rest[-5], rest[-4]
    if any(s is not None for s in rest[10:-5]):
        raise NotImplementedError("the CPU attention has no KV cache scale factors")
    _plain(window_left, soft_cap, None)
    if custom_mask is not None or mask_mode not in (0, 1):
        raise NotImplementedError("the CPU attention has no custom mask")
    keys, values = _nhd(k, layout), _nhd(v, layout)
    for b in range(qo.numel() - 1):
        tokens, held = slice(int(qo[b]), int(qo[b + 1])), slice(int(kv[b]), int(kv[b + 1]))
        out, logsumexp = _attention(q[tokens], keys[held], values[held], mask_mode == 1, sm_scale)
        o[tokens].copy_(out)
        if lse is not None:
            lse[tokens].copy_(logsumexp)


def _trtllm_decode(out, out_sf, q, k, v, workspace, *rest):
    """trtllm_batch_decode_with_kv_cache's trtllm-gen kernel (0.6 to 0.7.4; the function gives
    it the cache HND, transposing an NHD one), plain (no FP4 output, one query token a request,
    no sliding window, no KV block scales, skip-softmax or sparse top-k, one page table for k and
    v): request b's query, one token, over its first
    seq_lens[b] keys in the pages block_tables[b] lists, the scores scaled by bmm1_scale (a
    tensor arrives multiplied by log2(e)), the output by bmm2_scale, an attention sink (one per
    head) a logit of its own in each head's softmax; its lse where asked, in base 2. What comes
    after the workspace: from 0.6.15 the counters (a byte buffer), then the block tables, seq_lens,
    max_q_len, max_seq_len, the two scales, the FP4 output's three, the batch size, window_left,
    sparse_top_k, the SM count, enable_pdl, the workspace's size, sinks, cum_seq_lens_q, from 0.6.4
    the skip-softmax threshold (from 0.6.7 after the KV block scales, and before
    uses_shared_paged_kv_idx), from 0.6.12 lse."""
    if rest[0].dtype == torch.uint8:
        rest = rest[1:]
    tables, lengths, max_q_len, _, bmm1, bmm2 = rest[:6]
    window_left, sinks, cum = rest[10], rest[15], rest[16]
    plain = out_sf is None and max_q_len == 1 and cum is None and rest[11] == 0
    if len(rest) == 18:
        plain = plain and rest[17] is None
    if len(rest) >= 21:
        plain = plain and rest[17] is None and rest[18] is None and rest[19] is None
        plain = plain and rest[20] is True
    if not plain or window_left != -1:
        raise NotImplementedError("the CPU trtllm-gen decode is plain one-token paged attention")
    lse = rest[21] if len(rest) > 21 else None
    scale = float(bmm1) if not isinstance(bmm1, torch.Tensor) else float(bmm1) / math.log2(math.e)
    page_size = k.shape[2]
    for b in range(q.shape[0]):
        length = int(lengths[b])
        pages = tables[b, : (length + page_size - 1) // page_size].long()
        keys, values = _paged(k, pages, 1)[:length], _paged(v, pages, 1)[:length]
        held, logsumexp = _attention(q[b : b + 1], keys, values, False, scale, sinks)
        out[b].copy_((held[0] * float(bmm2)).to(out.dtype))
        if lse is not None:
            lse[b].copy_(logsumexp[0])


_BATCH_PREFILL = {"plan": _batch_plan, "paged_run": _batch_prefill, "ragged_run": _batch_ragged}

OF_MODULE = {
    "gen_single_decode_module": {"run": _single_decode},
    "gen_single_prefill_module": {"run": _single_prefill},
    "gen_batch_decode_module": {"plan": _batch_plan, "run": _batch_decode},
    "gen_batch_prefill_module": _BATCH_PREFILL,
    # The fa2 module of 0.7.x, and the one it loads for a cache whose k and v strides differ.
    "_gen_batch_prefill_primary_module": _BATCH_PREFILL,
    "_gen_batch_prefill_independent_paged_module": _BATCH_PREFILL,
}
"""Kernels by the JIT module that has them, where their names are too common to tell them apart
(every attention module has a run)."""


KERNELS = {
    "silu_and_mul": _act("silu"),
    "gelu_and_mul": _act("gelu"),
    "gelu_tanh_and_mul": _act("gelu_tanh"),
    "rmsnorm": _rmsnorm(0.0),
    "gemma_rmsnorm": _rmsnorm(1.0),
    "fused_add_rmsnorm": _fused_add_rmsnorm(0.0),
    "gemma_fused_add_rmsnorm": _fused_add_rmsnorm(1.0),
    "rmsnorm_quant": _rmsnorm_quant,
    "fused_add_rmsnorm_quant": _fused_add_rmsnorm_quant,
    "apply_rope": _apply_rope,
    "apply_rope_pos_ids": _apply_rope_pos_ids,
    "apply_llama31_rope": _apply_llama31_rope,
    "apply_llama31_rope_pos_ids": _apply_llama31_rope_pos_ids,
    "apply_rope_pos_ids_cos_sin_cache": _apply_rope_cos_sin_cache,
    "rope_quantize": _rope_quantize,
    "concat_mla_k": _concat_mla_k,
    "NoAuxTc": _no_aux_tc,
    "trtllm_bf16_moe": _trtllm_moe("trtllm_bf16_moe"),
    "trtllm_fp4_block_scale_moe": _trtllm_moe("trtllm_fp4_block_scale_moe"),
    "trtllm_fp8_block_scale_moe": _trtllm_moe("trtllm_fp8_block_scale_moe"),
    "trtllm_fp8_per_tensor_scale_moe": _trtllm_moe("trtllm_fp8_per_tensor_scale_moe"),
    "trtllm_fp8_per_tensor_scale_routed_moe": _trtllm_moe("trtllm_fp8_per_tensor_scale_routed_moe"),
    "trtllm_fp8_per_channel_scale_moe": _trtllm_moe("trtllm_fp8_per_channel_scale_moe"),
    "trtllm_mxint4_block_scale_moe": _trtllm_moe("trtllm_mxint4_block_scale_moe"),
    # The CUTLASS MoE module: a runner, and where to find DeepGEMM's headers.
    "init": _cutlass_moe_init,
    "set_deepgemm_jit_include_dirs": lambda dirs: None,
    "merge_state": _merge_state,
    "merge_state_in_place": _merge_state_in_place,
    "merge_states": _merge_states,
    "append_paged_kv_cache": _append_paged_kv_cache,
    "packbits": _packbits,
    "top_p_sampling_from_probs": _top_p_sampling,
    "top_k_sampling_from_probs": _top_k_sampling,
    "top_k_top_p_sampling_from_probs": _top_k_top_p_sampling,
    "top_k_renorm_probs": _top_k_renorm_probs,
    "top_p_renorm_probs": _top_p_renorm_probs,
    "top_k_mask_logits": _top_k_mask_logits,
    "min_p_sampling_from_probs": _min_p_sampling,
    "fp4_quantize": _fp4_quantize,
    "fp4_batched_quantize": _fp4_batched_quantize,
    "silu_and_mul_scaled_nvfp4_experts_quantize": _experts_quantize,
    "block_scale_interleave_sm100": _block_scale_interleave,
    "mxfp8_quantize_host": _mxfp8_quantize_host,
    "mxfp8_quantize": _mxfp8_quantize,
    "fp4_gemm": _fp4_gemm,
    "fp8_gemm": _fp8_gemm,
    "trtllm_low_latency_gemm": _trtllm_low_latency_gemm,
    "trtllm_paged_attention_decode": _trtllm_decode,
}
"""By the name FlashInfer calls on its JIT module."""


class Kernels:
    """A JIT module: every kernel by the name FlashInfer calls (and, for the modules OF_MODULE
    names, by the module's), run without autograd."""

    def __init__(self, made_by=""):
        self.made_by = made_by

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        kernel = OF_MODULE.get(self.made_by, {}).get(name) or KERNELS.get(name)

        # Raised at the call, not at the lookup: 0.7's trtllm MoE module reads every kernel it
        # may call into a namespace when it is built.
        def run(*args, **kwargs):
            if kernel is None:
                raise LookupError(f"no CPU stand-in for FlashInfer's kernel {name}")
            with torch.no_grad():
                return kernel(*args, **kwargs)

        return run

    def get_workspace_size_in_bytes(self, *args):
        return 1024


class _Spec:
    """What a stood-in `gen_..._module(...)` returns: a spec whose build gives the kernels."""

    def __init__(self, made_by=""):
        self.made_by = made_by

    def build_and_load(self, *args, class_name=None, **kwargs):
        # Before 0.3.0 the CUTLASS MoE's build loads its runner's class (0.2.11.post2 on: gives it).
        if class_name is not None:
            return CLASSES[class_name]
        return Kernels(self.made_by)

    def get_library_path(self):
        return ""

    def get_library_paths(self):
        return []


CLASSES = {"FusedMoeRunner": _cutlass_moe_init}
"""The TorchScript classes a build loads by name (read from torch.classes.fused_moe_sm100 in
0.2.9 - 0.2.11.post1, given by the build from 0.2.11.post2), each a function that makes one."""


def _spec(made_by, *args, **kwargs):
    return _Spec(made_by)


def _buffer(name, size, device, *rest, **kwargs):
    return torch.zeros(size, dtype=torch.uint8, device=device)


def _row_states(name, device, *rest, **kwargs):
    return torch.zeros(1024 * 1024, dtype=torch.uint8, device=device)


class _Generator:
    """The device generator's (seed, offset), as FlashInfer's samplers read and advance it when
    called without seed and offset: from 0 again at each `reset()`, so that an eager call and a
    compiled one draw the same numbers; standing still while `still` (opcheck runs an op again
    and again, and compares what it gives)."""

    offset = 0
    still = False

    @classmethod
    def seed_and_offset(cls, increment, generator=None, device=None):
        offset = cls.offset
        if not cls.still:
            cls.offset += (increment + 3) // 4 * 4
        return 1234, offset


def reset():
    _Generator.offset = 0


class still:
    """The generator stands still inside the block."""

    def __enter__(self):
        _Generator.still = True

    def __exit__(self, *exc):
        _Generator.still = False


class unpinned:
    """Inside the block, torch.empty and torch.zeros ask for no pinned memory: a wrapper's
    constructor pins its host buffers, which needs a driver. Only around the constructor, outside
    any traced function."""

    def __enter__(self):
        self.saved = torch.empty, torch.zeros
        torch.empty, torch.zeros = (_unpinning(f) for f in self.saved)

    def __exit__(self, *exc):
        torch.empty, torch.zeros = self.saved


def _unpinning(allocate):
    def unpinned(*args, pin_memory=False, **kwargs):
        return allocate(*args, **kwargs)

    return unpinned


REPLACED = {
    "get_compute_capability": lambda device: (10, 0),
    "get_device_sm_count": lambda device: 148,
    "_get_stream_cache_buf": _buffer,
    "_get_row_states_buffer": _row_states,
    "setup_cubin_loader": lambda *args, **kwargs: None,
    "get_seed_and_offset": _Generator.seed_and_offset,
}
"""What a CPU cannot answer, answered as an SM 10.0 host does."""


def install():
    """Stand in the JIT modules of every FlashInfer module loaded, and the device questions."""
    torch.cuda.device = _device
    # cutlass_fused_moe asks it itself before 0.6.16 (later, get_compute_capability(device)).
    torch.cuda.get_device_capability = _capability
    # 0.2.9 - 0.2.11.post1's CUTLASS MoE makes its runner from the build's TorchScript class.
    torch.classes.fused_moe_sm100 = types.SimpleNamespace(**CLASSES)
    for name, module in list(sys.modules.items()):
        if not name.startswith("flashinfer") or module is None:
            continue
        space = vars(module)
        for key, value in list(space.items()):
            if (
                key.startswith(("gen_", "_gen_", "trtllm_gen_"))
                and "_module" in key
                and callable(value)
            ):
                space[key] = functools.partial(_spec, key)
            elif key in REPLACED:
                space[key] = REPLACED[key]
        for value in list(space.values()):
            if isinstance(value, functools._lru_cache_wrapper):
                value.cache_clear()
        # 0.7.4 asks the current CUDA device which build to load (Rubin's or not): not Rubin.
        built = space.get("_get_trtllm_low_latency_gemm_module_impl")
        if built is not None:
            space["get_trtllm_low_latency_gemm_module"] = functools.partial(built, False)
        # 0.7.0 on asks it the same of the trtllm MoE module.
        built = space.get("_get_trtllm_moe_sm100_module_impl")
        if built is not None:
            space["get_trtllm_moe_sm100_module"] = functools.partial(built, False)
