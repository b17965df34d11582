"""The cases tests/in_target/compiled.py runs, by family: how people call FlashInfer's entry points
around torch.compile, each a function of tensors with its inputs, the ops its graph must hold,
and the inputs it writes.

Each family is a function of the flashinfer module, so that a case can follow the release it
meets (a parameter one release has, the op another routes to).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kernels
import torch


@dataclass
class Case:
    fn: Callable[..., Any]
    inputs: Callable[[], list[Any]]
    ops: tuple[str, ...]
    """fi-patch's ops (or FlashInfer's own) the graphs hold, in order, and nothing else of
    fi-patch's or FlashInfer's (the kernel's stand-in traced in its place would show as torch's
    own calls)."""
    written: tuple[int, ...] = ()
    """The inputs the call writes in place, or writes through views of: compared after it."""
    fullgraph: bool = True
    mark_dynamic: tuple[tuple[int, int], ...] = ()
    again: tuple[Callable[[], list[Any]], ...] = ()
    """Inputs of other sizes, run through the same compiled function."""
    grad: bool = False
    """Run with grad mode on (a model not under torch.no_grad); otherwise under no_grad."""
    values: bool = True
    """Compare values; False where the inputs live on `meta` (shapes, dtypes, devices only)."""

    def context(self):
        return contextlib.nullcontext() if self.grad else torch.no_grad()


def _random(*shape, seed=0, dtype=torch.bfloat16):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).to(dtype)


def _bytes(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def _has(fn, parameter):
    return parameter in inspect.signature(fn).parameters


def _tile(fn):
    """tile_tokens_dim where fn takes it (FP4's and the routed FP4's where fi-patch gives them an
    op, 0.2.11.post3 and 0.2.10 - 0.5.3): its default (8 up to 0.4.0, None in 0.4.1), or None
    where it has none (0.5, deprecated), as SGLang passed it then."""
    tile = inspect.signature(fn).parameters.get("tile_tokens_dim")
    if tile is None:
        return {}
    return {"tile_tokens_dim": None if tile.default is inspect.Parameter.empty else tile.default}


def _grouping(fn):
    """n_group, topk_group and routed_scaling_factor as fn takes them: None where optional, 0, 0
    and 1.0 where it types them an int and a float (FP8's up to 0.4.1, whose kernels take no
    None)."""
    parameters = inspect.signature(fn).parameters
    given = {"n_group": 0, "topk_group": 0, "routed_scaling_factor": 1.0}
    return {
        key: value if parameters[key].annotation in (int, float, "int", "float") else None
        for key, value in given.items()
    }


def families(f):
    """Every family, by name: a function that gives its cases, by name."""
    return {
        name: functools.partial(build, f)
        for name, build in (
            ("routing", _routing),
            ("activations", _activations),
            ("norms", _norms),
            ("rope", _rope),
            ("cascade", _cascade),
            ("attention", _attention),
            ("wrappers", _wrappers),
            ("paging", _paging),
            ("sampling", _sampling),
            ("quantizers", _quantizers),
            ("gemms", _gemms),
            ("experts", _experts),
            ("grad", _grad),
            ("logging", _logging),
            ("model", _model),
        )
    }


def _routing(f):
    """The ways people reach an entry point: in a traced frame, compiled itself, inside their
    own functools.wraps wrapper, kept out with torch.compiler.disable."""

    @functools.wraps(f.silu_and_mul)
    def act(x):
        return f.silu_and_mul(x * 0.5) + 1

    disabled = torch.compiler.disable(f.silu_and_mul)

    def x():
        return [_random(4, 256)]

    op = ("fi_patch.silu_and_mul",)
    return {
        "silu_and_mul in a traced frame": Case(lambda x: f.silu_and_mul(x) * 2, x, op),
        "silu_and_mul compiled itself": Case(f.silu_and_mul, x, op),
        "a caller's functools.wraps wrapper of silu_and_mul": Case(lambda x: act(x) - 1, x, op),
        "silu_and_mul under torch.compiler.disable": Case(
            lambda x: disabled(x) + 1, x, (), fullgraph=False
        ),
        "rmsnorm compiled itself": Case(
            f.rmsnorm, lambda: [_random(4, 64), _random(64, seed=1)], ("fi_patch_declared.rmsnorm",)
        ),
        "a caller's functools.wraps wrapper of merge_state": Case(
            _wrapped_merge(f),
            lambda: [_random(5, 4, 64), _random(5, 4, dtype=torch.float32)],
            ("fi_patch_declared.merge_state",),
        ),
    }


def _wrapped_merge(f):
    @functools.wraps(f.merge_state)
    def merge(v, s):
        merged, lse = f.merge_state(v, s, v * 2, s - 1)
        return merged + 1, lse * 2

    return lambda v, s: merge(v, s)


def _activations(f):
    cases = {}
    for name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        fn = getattr(f, name)
        op, out = ("fi_patch." + name,), (f"fi_patch.{name}_out",)
        cases.update(
            {
                name: Case(lambda x, fn=fn: fn(x) * 3, lambda: [_random(4, 256)], op),
                name + " out=": Case(
                    lambda x, o, fn=fn: fn(x, out=o),
                    lambda: [_random(4, 256), _random(4, 128, seed=1)],
                    out,
                    written=(1,),
                ),
                name + " into a view of a graph input": Case(
                    lambda x, o, fn=fn: fn(x, out=o[:, 1]),
                    lambda: [_random(4, 256), _random(4, 2, 128, seed=1)],
                    out,
                    written=(1,),
                ),
                name + ", float16, a dynamic batch": Case(
                    lambda x, fn=fn: fn(x) + 1,
                    lambda: [_random(8, 3, 64, dtype=torch.float16)],
                    op,
                    mark_dynamic=((0, 0),),
                    again=(lambda: [_random(5, 3, 64, seed=2, dtype=torch.float16)],),
                ),
            }
        )
    return cases


def _norms(f):
    def pdl(fn):
        return {"enable_pdl": False} if _has(fn, "enable_pdl") else {}

    cases = {}
    for name in ("rmsnorm", "gemma_rmsnorm"):
        fn, op = getattr(f, name), ("fi_patch_declared." + name,)
        kw = pdl(fn)
        cases[name] = Case(
            lambda x, w, fn=fn, kw=kw: fn(x, w, **kw) * 2,
            lambda: [_random(4, 64), _random(64, seed=1)],
            op,
        )
        cases[name + " out="] = Case(
            lambda x, w, o, fn=fn, kw=kw: fn(x, w, out=o, **kw),
            lambda: [_random(4, 64), _random(64, seed=1), _random(4, 64, seed=2)],
            op,
            written=(2,),
        )
    for name in ("fused_add_rmsnorm", "gemma_fused_add_rmsnorm"):
        fn, op = getattr(f, name), ("fi_patch_declared." + name,)
        kw = pdl(fn)
        cases[name + " in place"] = Case(
            lambda x, r, w, fn=fn, kw=kw: fn(x, r, w, **kw),
            lambda: [_random(4, 64), _random(4, 64, seed=1), _random(64, seed=2)],
            op,
            written=(0, 1),
        )
        cases[name + " on rows of graph inputs, a dynamic batch"] = Case(
            lambda x, r, w, fn=fn, kw=kw: fn(x[1:], r[1:], w, **kw),
            lambda: [_random(6, 64), _random(6, 64, seed=1), _random(64, seed=2)],
            op,
            written=(0, 1),
            mark_dynamic=((0, 0), (1, 0)),
            again=(lambda: [_random(9, 64, seed=3), _random(9, 64, seed=4), _random(64, seed=5)],),
        )
    cases.update(_quantising_norms(f))
    return cases


def _quantising_norms(f):
    """rmsnorm_quant and fused_add_rmsnorm_quant, writing float8 into out (and the sum into
    residual): with a float scale, and, where the release takes one (0.6.7 on, the op's scale
    split in two), a tensor scale, as SGLang and vLLM pass it, over a dynamic batch."""
    fp8 = torch.float8_e4m3fn
    cases = {}
    for name, residual in (("rmsnorm_quant", False), ("fused_add_rmsnorm_quant", True)):
        fn, op = getattr(f, name, None), ("fi_patch_declared." + name,)
        if fn is None:
            continue
        kw = {"enable_pdl": False} if _has(fn, "enable_pdl") else {}
        written = (0, 2) if residual else (0,)
        # out, input and residual follow the batch.
        dynamic = ((0, 0), (1, 0), (2, 0)) if residual else ((0, 0), (1, 0))

        def inputs(rows=4, seed=0, residual=residual):
            found = [torch.empty(rows, 64, dtype=fp8), _random(rows, 64, seed=seed)]
            if residual:
                found.append(_random(rows, 64, seed=seed + 1))
            return [*found, _random(64, seed=seed + 2)]

        cases[name + ", a float scale"] = Case(
            lambda *a, fn=fn, kw=kw: fn(*a, 0.5, **kw), inputs, op, written=written
        )
        if "Tensor" in str(inspect.signature(fn).parameters["scale"].annotation):
            scale = torch.tensor([0.5])
            cases[name + ", a tensor scale, a dynamic batch"] = Case(
                lambda *a, fn=fn, kw=kw: fn(*a[:-1], scale=a[-1], **kw),
                lambda inputs=inputs, scale=scale: [*inputs(), scale.clone()],
                op,
                written=written,
                mark_dynamic=dynamic,
                again=(lambda inputs=inputs, s=scale: [*inputs(7, seed=3), s.clone()],),
            )
    return cases


def _rope(f):
    indptr, offsets, pos = _i32(0, 2, 6), _i32(3, 0), torch.arange(6, dtype=torch.int32)
    cache = _random(32, 64, dtype=torch.float32)

    def qk():
        return [_random(6, 4, 64), _random(6, 2, 64, seed=1)]

    def qkv():
        # q and k as views of one fused projection, as engines hold them.
        return [_random(6, 3, 4, 64)]

    return {
        "apply_rope_inplace": Case(
            lambda q, k: f.apply_rope_inplace(q, k, indptr, offsets),
            qk,
            ("fi_patch_declared.apply_rope",),
            written=(0, 1),
        ),
        "apply_rope_pos_ids_inplace, interleaved, rotary_dim 32": Case(
            lambda q, k: f.apply_rope_pos_ids_inplace(q, k, pos, rotary_dim=32, interleave=True),
            qk,
            ("fi_patch_declared.apply_rope_pos_ids",),
            written=(0, 1),
        ),
        "apply_rope_pos_ids_inplace on q and k views of one qkv": Case(
            lambda t: f.apply_rope_pos_ids_inplace(t[:, 0], t[:, 1], pos),
            qkv,
            ("fi_patch_declared.apply_rope_pos_ids",),
            written=(0,),
        ),
        "apply_llama31_rope_inplace": Case(
            lambda q, k: f.apply_llama31_rope_inplace(q, k, indptr, offsets),
            qk,
            ("fi_patch_declared.apply_llama31_rope",),
            written=(0, 1),
        ),
        "apply_llama31_rope_pos_ids_inplace": Case(
            lambda q, k: f.apply_llama31_rope_pos_ids_inplace(q, k, pos),
            qk,
            ("fi_patch_declared.apply_llama31_rope_pos_ids",),
            written=(0, 1),
        ),
        "apply_rope_with_cos_sin_cache_inplace on 2-D query and key": Case(
            lambda q, k: f.apply_rope_with_cos_sin_cache_inplace(pos.long(), q, k, 64, cache),
            lambda: [_random(6, 256), _random(6, 128, seed=1)],
            ("fi_patch_declared.apply_rope_pos_ids_cos_sin_cache",),
            written=(0, 1),
        ),
        **_quantised_rope(f, cache),
        **_concat_mla_k(),
    }


def _concat_mla_k():
    """concat_mla_k (flashinfer.concat_ops', 0.6.0 on) writing k: a fresh k, as vLLM's op
    allocates it, and rows of a wider graph input over a dynamic token count."""
    try:
        import flashinfer.concat_ops as concat_ops
    except ImportError:
        return {}

    def fresh(k_nope, k_rope):
        k = torch.empty(*k_nope.shape[:-1], 192, dtype=k_nope.dtype)
        concat_ops.concat_mla_k(k, k_nope, k_rope)
        return k

    def parts(tokens=6, seed=0):
        return [_random(tokens, 16, 128, seed=seed), _random(tokens, 1, 64, seed=seed + 1)]

    op = ("fi_patch.concat_mla_k",)
    return {
        "concat_mla_k into a fresh k": Case(fresh, parts, op),
        "concat_mla_k into rows of a wider k, a dynamic token count": Case(
            lambda k, n, r: concat_ops.concat_mla_k(k[1:], n, r),
            lambda: [torch.zeros(7, 16, 192, dtype=torch.bfloat16), *parts()],
            op,
            written=(0,),
            mark_dynamic=((0, 0), (1, 0), (2, 0)),
            again=(lambda: [torch.zeros(10, 16, 192, dtype=torch.bfloat16), *parts(9, 3)],),
        ),
    }


def _quantised_rope(f, cache):
    """flashinfer.rope's mla_rope_quantize_fp8 and rope_quantize_fp8: the outputs given (SGLang's
    MLA backends: a 2-D key, GPT-J rope), or allocated by the function, over a dynamic token
    count, and without the nope parts."""
    import flashinfer.rope as rope

    fp8, op = torch.float8_e4m3fn, ("fi_patch_declared.rope_quantize",)
    shapes = ((6, 4, 64), (6, 64), (6, 4, 128), (6, 128))

    def mla(q_rope, k_rope, q_nope, k_nope, pos, *outputs):
        return rope.mla_rope_quantize_fp8(
            q_rope,
            k_rope,
            q_nope,
            k_nope,
            cache,
            pos,
            is_neox=False,
            quant_scale_q=0.5,
            quant_scale_kv=2.0,
            q_rope_out=outputs[0],
            k_rope_out=outputs[1],
            q_nope_out=outputs[2],
            k_nope_out=outputs[3],
        )

    def given():
        inputs = [_random(*shape, seed=i) for i, shape in enumerate(shapes)]
        return [*inputs, torch.arange(6), *(torch.empty(*s, dtype=fp8) for s in shapes)]

    def gqa(tokens=6, seed=0):
        shapes = ((tokens, 4, 64), (tokens, 2, 64), (tokens, 4, 32), (tokens, 2, 32))
        inputs = [_random(*shape, seed=seed + i) for i, shape in enumerate(shapes)]
        return [*inputs, torch.arange(tokens)]

    if not hasattr(rope, "rope_quantize_fp8"):
        return {}
    # The nope parts may be None where the release types them Optional (0.6.0 on).
    optional = "Optional" in str(inspect.signature(rope.rope_quantize_fp8).parameters["q_nope"])
    cases = {
        "mla_rope_quantize_fp8, the outputs given": Case(mla, given, op, written=(5, 6, 7, 8)),
        "rope_quantize_fp8, the outputs allocated, a dynamic token count": Case(
            lambda q_rope, k_rope, q_nope, k_nope, pos: rope.rope_quantize_fp8(
                q_rope, k_rope, q_nope, k_nope, cache, pos
            ),
            gqa,
            op,
            mark_dynamic=tuple((i, 0) for i in range(5)),
            again=(lambda: gqa(9, seed=5),),
        ),
    }
    if optional:
        cases["rope_quantize_fp8 without the nope parts"] = Case(
            lambda q_rope, k_rope, pos: rope.rope_quantize_fp8(
                q_rope, k_rope, None, None, cache, pos, is_neox=False
            ),
            lambda: [_random(6, 4, 64), _random(6, 2, 64, seed=1), torch.arange(6)],
            op,
        )
    return cases


def _experts(f):
    """The MoE path's routing: fused_topk_deepseek (flashinfer.fused_moe's, 0.6.0 on) writing the
    weights and experts of DeepSeek-V3's grouped top-k, as SGLang's op calls it, with
    routing_replay_out where the release takes it (0.6.8 on), over a dynamic token count; then
    the fused MoE (_fused_moe), which releases before 0.6.0 have without it."""
    fused = getattr(getattr(f, "fused_moe", None), "fused_topk_deepseek", None)
    if fused is None:
        return _fused_moe(f)
    op = ("fi_patch.fused_topk_deepseek",)

    def problem(tokens=6, seed=0):
        return [
            _random(tokens, 256, seed=seed, dtype=torch.float32),
            _random(256, seed=seed + 1, dtype=torch.float32) * 0.1,
            torch.zeros(tokens, 8, dtype=torch.float32),
            torch.zeros(tokens, 8, dtype=torch.int32),
        ]

    def route(scores, bias, values, indices, *replay):
        kwargs = {"routing_replay_out": replay[0]} if replay else {}
        fused(scores, bias, 8, 4, 8, 2.5, values, indices, False, **kwargs)

    cases = {
        "fused_topk_deepseek as SGLang calls it": Case(route, problem, op, written=(2, 3)),
        "fused_topk_deepseek, a dynamic token count": Case(
            route,
            problem,
            op,
            written=(2, 3),
            mark_dynamic=((0, 0), (2, 0), (3, 0)),
            again=(lambda: problem(11, seed=4),),
        ),
    }
    if _has(fused, "routing_replay_out"):
        cases["fused_topk_deepseek with routing_replay_out"] = Case(
            route,
            lambda: [*problem(), torch.zeros(16, 8, dtype=torch.int16)],
            op,
            written=(2, 3, 4),
        )
    return {**cases, **_fused_moe(f)}


def _fused_moe(f):
    """The trtllm fused MoE, finalized, over 8 experts, top 2, a hidden size of 256: FP4 as SGLang
    calls it (by keyword, into an output of its own, tune_max_num_tokens the next power of two of
    the token count where it takes one, the first of the list it returns) over a dynamic token
    count, FP4 and BF16 positionally with FlashInfer's defaults (BF16 where the release has it:
    0.5.3 on), each with routing_replay_out written (its rows past the token count left as they
    were), BF16 into an output (0.6.14 on). FP4's where fi-patch gives it an op (0.2.11.post3 on:
    FP8's from 0.2.9)."""
    moe = getattr(f, "fused_moe", None)
    fp4 = getattr(moe, "trtllm_fp4_block_scale_moe", None)
    bf16 = getattr(moe, "trtllm_bf16_moe", None)
    if fp4 is None or not hasattr(f.utils, "_fi_patch_boundaries"):
        return {}
    # FP4's texts of 0.2.9 - 0.2.11.post2 stay as they are; from 0.2.11.post3 a release without its
    # op fails these cases.
    fp4_op = f.__version__ not in ("0.2.9", "0.2.10", "0.2.11", "0.2.11.post1", "0.2.11.post2")
    experts, top_k, hidden, inter = 8, 2, 256, 128
    fp8 = torch.float8_e4m3fn

    def fp4_problem(tokens=6, seed=0):
        return [
            _random(tokens, experts, seed=seed, dtype=torch.float32),
            _bytes(tokens, hidden // 2, seed=seed + 1),
            _bytes(tokens, hidden // 16, seed=seed + 2).view(fp8),
            _bytes(experts, 2 * inter, hidden // 2, seed=3),
            _bytes(experts, 2 * inter, hidden // 16, seed=4).view(fp8),
            _bytes(experts, hidden, inter // 2, seed=5),
            _bytes(experts, hidden, inter // 16, seed=6).view(fp8),
            torch.zeros(tokens, hidden, dtype=torch.bfloat16),
        ]

    def as_sglang(logits, states, scale, w1, w1_scale, w2, w2_scale, output):
        tokens = states.shape[0]
        return fp4(
            routing_logits=logits,
            routing_bias=None,
            hidden_states=states,
            hidden_states_scale=scale,
            gemm1_weights=w1,
            gemm1_weights_scale=w1_scale,
            gemm1_bias=None,
            gemm1_alpha=None,
            gemm1_beta=None,
            gemm1_clamp_limit=None,
            gemm2_weights=w2,
            gemm2_weights_scale=w2_scale,
            gemm2_bias=None,
            output1_scale_scalar=None,
            output1_scale_gate_scalar=None,
            output2_scale_scalar=None,
            num_experts=experts,
            top_k=top_k,
            n_group=None,
            topk_group=None,
            intermediate_size=inter,
            local_expert_offset=0,
            local_num_experts=experts,
            routed_scaling_factor=None,
            routing_method_type=1,
            do_finalize=True,
            output=output,
            **_tile(fp4),
            **tuned(tokens),
        )[0]

    def tuned(tokens):
        # tune_max_num_tokens where FP4 takes it (0.2.13 on).
        if not _has(fp4, "tune_max_num_tokens"):
            return {}
        return {"tune_max_num_tokens": f.utils.next_positive_power_of_2(tokens)}

    def bf16_problem(tokens=6, seed=0):
        return [
            _random(tokens, experts, seed=seed, dtype=torch.float32),
            _random(tokens, hidden, seed=seed + 1),
            # BlockMajorK, as trtllm_bf16_moe takes its weights: (experts, K // 128, M, 128).
            _random(experts, hidden // 128, 2 * inter, 128, seed=2),
            _random(experts, inter // 128, hidden, 128, seed=3),
        ]

    def positional(logits, states, w1, w2, *more):
        # Not zip(): Dynamo 2.8 refuses zip(..., strict=False) of unequal lengths.
        keys = ("routing_replay_out", "output")
        named = {keys[i]: more[i] for i in range(len(more))}
        return bf16(
            logits, None, states, w1, w2, experts, top_k, None, None, inter, 0, experts, **named
        )

    def fp4_positional(logits, states, scale, w1, w1_scale, w2, w2_scale, *replay):
        named = {"routing_replay_out": replay[0]} if replay else {}
        tensors = (w1, w1_scale, None, None, None, None, w2, w2_scale, None, None, None, None)
        return fp4(
            logits,
            None,
            states,
            scale,
            *tensors,
            experts,
            top_k,
            None,
            None,
            inter,
            0,
            experts,
            None,
            *_tile(fp4).values(),
            1,
            **named,
        )

    def replay(tokens=16):
        return torch.full((tokens, top_k), -1, dtype=torch.int16)

    cases = (
        {}
        if not fp4_op
        else {
            "trtllm_fp4_block_scale_moe as SGLang calls it, a dynamic token count": Case(
                as_sglang,
                fp4_problem,
                ("fi_patch.trtllm_fp4_block_scale_moe_out",),
                written=(7,),
                mark_dynamic=((0, 0), (1, 0), (2, 0), (7, 0)),
                again=(lambda: fp4_problem(11, seed=7), lambda: fp4_problem(3, seed=9)),
            ),
            "trtllm_fp4_block_scale_moe positionally": Case(
                fp4_positional,
                lambda: fp4_problem()[:7],
                ("fi_patch.trtllm_fp4_block_scale_moe",),
            ),
        }
    )
    if bf16 is not None:
        cases["trtllm_bf16_moe positionally, a dynamic token count"] = Case(
            lambda *a: positional(*a) * 2,
            bf16_problem,
            ("fi_patch.trtllm_bf16_moe",),
            mark_dynamic=((0, 0), (1, 0)),
            again=(lambda: bf16_problem(13, seed=5),),
        )
    if fp4_op and _has(fp4, "routing_replay_out"):
        cases["trtllm_fp4_block_scale_moe writing routing_replay_out"] = Case(
            fp4_positional,
            lambda: [*fp4_problem()[:7], replay()],
            ("fi_patch.trtllm_fp4_block_scale_moe_writes",),
            written=(7,),
        )
    if bf16 is not None and _has(bf16, "routing_replay_out"):
        cases["trtllm_bf16_moe writing routing_replay_out"] = Case(
            positional,
            lambda: [*bf16_problem(), replay()],
            ("fi_patch.trtllm_bf16_moe_writes",),
            written=(4,),
        )
    if bf16 is not None and _has(bf16, "output"):
        cases["trtllm_bf16_moe into an output, writing routing_replay_out"] = Case(
            positional,
            lambda: [*bf16_problem(), replay(), torch.zeros(6, hidden, dtype=torch.bfloat16)],
            ("fi_patch.trtllm_bf16_moe_out",),
            written=(4, 5),
        )
    return {
        **cases,
        **_fp8_moe(f, experts, top_k, hidden, inter, replay),
        **_routed_moe(f, experts, top_k, hidden, inter, replay),
        **_cutlass_moe(f, experts, top_k, hidden, inter),
    }


def _cutlass_moe(f, experts, top_k, hidden, inter):
    """cutlass_fused_moe where fi-patch gives it an op (0.2.9 - 0.2.14.post1, 0.4.1 on; the list
    it returns holds the output alone before 0.3.0), bfloat16 unquantized, the
    routing given as experts and their scales: as SGLang calls it (by keyword, into an output of
    its own, tune_max_num_tokens the next power of two of the token count, the first of the four
    it returns: the other three are unwritten buffers) over a dynamic token count; positionally
    with FlashInfer's defaults; with ActivationType.Geglu where the release takes an activation
    (0.5.0 on; the kernel stand-in follows it); with
    workspace_buffer where the release takes one (0.6.16 on; the kernel stand-in writes it)."""
    fused = f.fused_moe.cutlass_fused_moe
    if "cutlass_fused_moe" not in f.utils._fi_patch_boundaries:
        return {}

    def problem(tokens=6, seed=0):
        generator = torch.Generator().manual_seed(seed)
        return [
            _random(tokens, hidden, seed=seed),
            torch.randint(0, experts, (tokens, top_k), generator=generator, dtype=torch.int32),
            torch.rand(tokens, top_k, generator=generator),
            _random(experts, 2 * inter, hidden, seed=2) * 0.1,
            _random(experts, hidden, inter, seed=3) * 0.1,
            torch.zeros(tokens, hidden, dtype=torch.bfloat16),
        ]

    def as_sglang(x, ids, scales, fc1, fc2, output):
        return fused(
            output=output,
            input=x,
            token_selected_experts=ids,
            token_final_scales=scales,
            fc1_expert_weights=fc1,
            fc2_expert_weights=fc2,
            output_dtype=torch.bfloat16,
            quant_scales=[],
            tp_size=1,
            tp_rank=0,
            ep_size=1,
            ep_rank=0,
            tune_max_num_tokens=f.utils.next_positive_power_of_2(x.shape[0]),
        )[0]

    def positional(x, ids, scales, fc1, fc2, *workspace):
        named = {"workspace_buffer": workspace[0]} if workspace else {}
        return fused(x, ids, scales, fc1, fc2, torch.bfloat16, [], **named)[0] * 2

    def geglu(x, ids, scales, fc1, fc2):
        activation = f.fused_moe.core.ActivationType.Geglu
        return fused(x, ids, scales, fc1, fc2, torch.bfloat16, [], activation_type=activation)[0]

    cases = {
        "cutlass_fused_moe as SGLang calls it, a dynamic token count": Case(
            as_sglang,
            problem,
            ("fi_patch.cutlass_fused_moe_out",),
            written=(5,),
            mark_dynamic=((0, 0), (1, 0), (2, 0), (5, 0)),
            again=(lambda: problem(11, seed=7), lambda: problem(3, seed=9)),
        ),
        "cutlass_fused_moe positionally": Case(
            positional, lambda: problem()[:5], ("fi_patch.cutlass_fused_moe",)
        ),
    }
    if "activation_type" in inspect.signature(fused).parameters:
        cases["cutlass_fused_moe with ActivationType.Geglu"] = Case(
            geglu, lambda: problem()[:5], ("fi_patch.cutlass_fused_moe",)
        )
    if "workspace_buffer" in inspect.signature(fused).parameters:
        cases["cutlass_fused_moe with workspace_buffer"] = Case(
            positional,
            lambda: [*problem()[:5], torch.zeros(4096, dtype=torch.uint8)],
            ("fi_patch.cutlass_fused_moe_writes",),
            written=(5,),
        )
    return cases


_FP8_MOE = (
    "trtllm_fp8_block_scale_moe",
    "trtllm_fp8_per_tensor_scale_moe",
    "trtllm_fp8_per_channel_scale_moe",
    "trtllm_mxint4_block_scale_moe",
)


def _moe_kinds(experts, hidden, inter):
    """Each trtllm MoE's tensors after the routing (logits, or a routed call's topk_ids), by
    keyword, for 6 tokens, and the parameters it is given one value of."""
    fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16
    per_scales = {"use_routing_scales_on_input": False}
    unused = ("gemm1_bias", "gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit", "gemm2_bias")
    unused += ("output1_scale_scalar", "output1_scale_gate_scalar", "output2_scale_scalar")
    return {
        "trtllm_bf16_moe": (
            lambda: {
                "hidden_states": _random(6, hidden, seed=1),
                # BlockMajorK: (experts, K // 128, M, 128).
                "gemm1_weights": _random(experts, hidden // 128, 2 * inter, 128, seed=2),
                "gemm2_weights": _random(experts, inter // 128, hidden, 128, seed=3),
            },
            {},
        ),
        "trtllm_fp4_block_scale_moe": (
            lambda: {
                "hidden_states": _bytes(6, hidden // 2, seed=1),
                "hidden_states_scale": _bytes(6, hidden // 16, seed=2).view(fp8),
                "gemm1_weights": _bytes(experts, 2 * inter, hidden // 2, seed=3),
                "gemm1_weights_scale": _bytes(experts, 2 * inter, hidden // 16, seed=4).view(fp8),
                "gemm2_weights": _bytes(experts, hidden, inter // 2, seed=5),
                "gemm2_weights_scale": _bytes(experts, hidden, inter // 16, seed=6).view(fp8),
            },
            dict.fromkeys(unused),
        ),
        "trtllm_fp8_block_scale_moe": (
            lambda: {
                "hidden_states": _random(6, hidden, seed=1).to(fp8),
                "hidden_states_scale": _random(hidden // 128, 6, seed=2, dtype=torch.float32).abs(),
                "gemm1_weights": _random(experts, 2 * inter, hidden, seed=3).to(fp8),
                "gemm1_weights_scale": torch.ones(experts, 2 * inter // 128, hidden // 128),
                "gemm2_weights": _random(experts, hidden, inter, seed=4).to(fp8),
                "gemm2_weights_scale": torch.ones(experts, hidden // 128, inter // 128),
            },
            {},
        ),
        "trtllm_fp8_per_tensor_scale_moe": (
            lambda: {
                "hidden_states": _random(6, hidden, seed=1).to(fp8),
                "gemm1_weights": _random(experts, 2 * inter, hidden, seed=3).to(fp8),
                "output1_scales_scalar": torch.ones(experts),
                "output1_scales_gate_scalar": torch.ones(experts),
                "gemm2_weights": _random(experts, hidden, inter, seed=4).to(fp8),
                "output2_scales_scalar": torch.ones(experts),
            },
            per_scales,
        ),
        "trtllm_fp8_per_channel_scale_moe": (
            lambda: {
                "hidden_states": _random(6, hidden, seed=1).to(fp8),
                "hidden_states_scale": torch.ones(6, 1),
                "gemm1_weights": _random(experts, 2 * inter, hidden, seed=3).to(fp8),
                "gemm1_per_channel_weight_scale": torch.ones(experts, 2 * inter),
                "output1_scale_scalar": torch.ones(experts),
                "output1_scale_gate_scalar": torch.ones(experts),
                "gemm2_weights": _random(experts, hidden, inter, seed=4).to(fp8),
                "gemm2_per_channel_weight_scale": torch.ones(experts, hidden),
                "output2_scale_scalar": torch.ones(experts),
            },
            per_scales,
        ),
        "trtllm_mxint4_block_scale_moe": (
            lambda: {
                "hidden_states": _random(6, hidden, seed=1).to(bf16),
                "gemm1_weights": _bytes(experts, 2 * inter, hidden // 2, seed=3),
                "gemm1_weights_scale": torch.ones(experts, 2 * inter, hidden // 32, dtype=bf16),
                "gemm2_weights": _bytes(experts, hidden, inter // 2, seed=4),
                "gemm2_weights_scale": torch.ones(experts, hidden, inter // 32, dtype=bf16),
            },
            dict.fromkeys(("gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit")),
        ),
    }


def _fp8_moe(f, experts, top_k, hidden, inter, replay):
    """The FP8 and MXINT4 trtllm MoE by keyword, each alone where fi-patch gives it an op, writing
    routing_replay_out where it takes it (0.6.8 on), and beside it into an output where it takes
    one (FP8 from 0.6.14, MXINT4 from 0.6.8), writing both; FP8 per channel with workspace_buffer
    where it takes one (0.7.4): DeepSeek's 128-wide block scales, per-tensor scales, per-channel
    scales (0.7.0 on, neither), and MXINT4 weights with bfloat16 activations (which returns a
    list)."""
    moe, boundaries = f.fused_moe, f.utils._fi_patch_boundaries
    kinds = {k: v for k, v in _moe_kinds(experts, hidden, inter).items() if k in _FP8_MOE}
    cases = {}
    for name, (tensors, fixed) in kinds.items():
        fn, entry = getattr(moe, name, None), boundaries.get(name)
        # A text the patch leaves as it is (MXINT4 before 0.6.5, FP8 per tensor in 0.6.3 - 0.6.4)
        # has no boundary; one that should and is not ready fails its cases.
        if fn is None or entry is None:
            continue
        names = ["routing_logits", *tensors()]

        def call(*values, fn=fn, names=names, fixed=fixed, **more):
            keys = [*names, "routing_replay_out", "output"]
            named = {keys[i]: values[i] for i in range(len(values))}
            named.update(more)
            return fn(
                routing_bias=None,
                num_experts=experts,
                top_k=top_k,
                intermediate_size=inter,
                local_expert_offset=0,
                local_num_experts=experts,
                routing_method_type=1,
                **_grouping(fn),
                **fixed,
                **named,
            )

        def problem(tensors=tensors):
            return [_random(6, experts, dtype=torch.float32), *tensors().values()]

        n = len(names)
        cases[f"{name} by keyword"] = Case(call, problem, (f"fi_patch.{name}",))
        if not _has(fn, "routing_replay_out"):
            if _has(fn, "workspace_buffer"):
                # FP8 per channel (0.7.4): its one written parameter.
                cases[f"{name} with workspace_buffer"] = Case(
                    lambda *a, call=call: call(*a[:-1], workspace_buffer=a[-1]),
                    lambda problem=problem: [*problem(), torch.zeros(4096, dtype=torch.uint8)],
                    (f"fi_patch.{name}_writes",),
                    written=(n,),
                )
            continue
        cases[f"{name} writing routing_replay_out"] = Case(
            call,
            lambda problem=problem: [*problem(), replay()],
            (f"fi_patch.{name}_writes",),
            written=(n,),
        )
        if _has(fn, "output"):
            cases[f"{name} into an output, writing routing_replay_out"] = Case(
                call,
                lambda problem=problem: [
                    *problem(),
                    replay(),
                    torch.zeros(6, hidden, dtype=torch.bfloat16),
                ],
                (f"fi_patch.{name}_out",),
                written=(n, n + 1),
            )
    return cases


def _routed_moe(f, experts, top_k, hidden, inter, replay):
    """The _routed_ trtllm MoE where fi-patch gave it an op (FP4 0.2.10 on), the routing given as
    topk_ids: each by keyword with a packed topk_ids (expert << 16 | the bfloat16 weight's bits),
    with a (topk_ids, topk_weights) pair where it takes one, writing routing_replay_out where it
    takes it, into an output where it takes one, and with workspace_buffer where that is all it
    writes (0.7.4)."""
    moe, boundaries = f.fused_moe, f.utils._fi_patch_boundaries
    common = {
        "routing_bias": None,
        "num_experts": experts,
        "top_k": top_k,
        "n_group": None,
        "topk_group": None,
        "intermediate_size": inter,
        "local_expert_offset": 0,
        "local_num_experts": experts,
        "routed_scaling_factor": None,
        "routing_method_type": 1,
    }

    def routing(seed=11):
        generator = torch.Generator().manual_seed(seed)
        chosen = torch.rand(6, experts, generator=generator).argsort(-1)[:, :top_k]
        weights = torch.softmax(torch.randn(6, top_k, generator=generator), -1)
        return chosen.to(torch.int32), weights.to(torch.bfloat16)

    def packed():
        chosen, weights = routing()
        return (chosen << 16) | (weights.view(torch.int16).to(torch.int32) & 0xFFFF)

    cases = {}
    for base, (tensors, fixed) in _moe_kinds(experts, hidden, inter).items():
        name = base.replace("_moe", "_routed_moe")
        fn = getattr(moe, name, None)
        entry = boundaries.get(name)
        if fn is None or entry is None or not entry.ready:
            continue
        names = list(tensors())
        given = {k: v for k, v in {**common, **fixed}.items() if _has(fn, k)} | _tile(fn)

        def call(ids, *values, fn=fn, names=names, given=given, **more):
            keys = [*names, "routing_replay_out", "output"]
            named = {keys[i]: values[i] for i in range(len(values))}
            return fn(topk_ids=ids, **given, **named, **more)

        def problem(tensors=tensors):
            return [packed(), *tensors().values()]

        n = 1 + len(names)
        cases[f"{name} by keyword, topk_ids packed"] = Case(call, problem, (f"fi_patch.{name}",))
        if "Tuple" in str(inspect.signature(fn).parameters["topk_ids"].annotation):
            cases[f"{name} with a (topk_ids, topk_weights) pair"] = Case(
                lambda ids, weights, *a, call=call: call((ids, weights), *a),
                lambda tensors=tensors: [*routing(), *tensors().values()],
                (f"fi_patch.{name}",),
            )
        if _has(fn, "routing_replay_out"):
            cases[f"{name} writing routing_replay_out"] = Case(
                call,
                lambda problem=problem: [*problem(), replay()],
                (f"fi_patch.{name}_writes",),
                written=(n,),
            )
        elif _has(fn, "workspace_buffer"):
            cases[f"{name} with workspace_buffer"] = Case(
                lambda *a, call=call: call(*a[:-1], workspace_buffer=a[-1]),
                lambda problem=problem: [*problem(), torch.zeros(4096, dtype=torch.uint8)],
                (f"fi_patch.{name}_writes",),
                written=(n,),
            )
        if _has(fn, "output"):
            cases[f"{name} into an output"] = Case(
                lambda *a, call=call: call(*a[:-1], output=a[-1]),
                lambda problem=problem: [*problem(), torch.zeros(6, hidden, dtype=torch.bfloat16)],
                (f"fi_patch.{name}_out",),
                written=(n,),
            )
    return cases


def _attention(f):
    """The single-request attention: decode of 32 query heads over 8 KV heads of 128 (in a traced
    frame, with return_lse, HND with tensor cores, over a dynamic KV length), and prefill (causal
    with return_lse, a value head dim of its own with o_dtype, HND, over a dynamic query length,
    and merged with merge_state, as a chunked prefill merges its parts)."""

    def decode(length=40, seed=0, hnd=False):
        shape = (8, length, 128) if hnd else (length, 8, 128)
        return [
            _random(32, 128, seed=seed),
            _random(*shape, seed=seed + 1),
            _random(*shape, seed=seed + 2),
        ]

    def prefill(queries=12, keys=20, heads=8, dim=64, value=64, seed=0):
        return [
            _random(queries, heads * 2, dim, seed=seed),
            _random(keys, heads, dim, seed=seed + 1),
            _random(keys, heads, value, seed=seed + 2),
        ]

    def chunked(q, k, v):
        first, lse_first = f.single_prefill_with_kv_cache(q, k[:8], v[:8], return_lse=True)
        rest, lse_rest = f.single_prefill_with_kv_cache(
            q, k[8:], v[8:], return_lse=True, causal=True
        )
        return f.merge_state(first, lse_first, rest, lse_rest)

    one_decode = ("fi_patch.single_decode_with_kv_cache",)
    one_prefill = ("fi_patch.single_prefill_with_kv_cache",)
    found = {
        "single_decode_with_kv_cache in a traced frame": Case(
            lambda q, k, v: f.single_decode_with_kv_cache(q, k, v) * 2, decode, one_decode
        ),
        "single_decode_with_kv_cache with return_lse": Case(
            lambda q, k, v: f.single_decode_with_kv_cache(q, k, v, return_lse=True),
            decode,
            one_decode,
        ),
        "single_decode_with_kv_cache, HND with tensor cores": Case(
            lambda q, k, v: f.single_decode_with_kv_cache(q, k, v, "HND", use_tensor_cores=True),
            lambda: decode(hnd=True),
            one_decode,
        ),
        "single_decode_with_kv_cache over a dynamic KV length": Case(
            lambda q, k, v: f.single_decode_with_kv_cache(q, k, v) + 1,
            decode,
            one_decode,
            mark_dynamic=((1, 0), (2, 0)),
            again=(lambda: decode(57, seed=3),),
        ),
        "single_prefill_with_kv_cache, causal with return_lse": Case(
            lambda q, k, v: f.single_prefill_with_kv_cache(q, k, v, causal=True, return_lse=True),
            prefill,
            one_prefill,
        ),
        "single_prefill_with_kv_cache, a value head dim of its own into float16": Case(
            lambda q, k, v: f.single_prefill_with_kv_cache(q, k, v, o_dtype=torch.float16),
            lambda: prefill(dim=96, value=64),
            one_prefill,
        ),
        "single_prefill_with_kv_cache, HND": Case(
            lambda q, k, v: f.single_prefill_with_kv_cache(
                q, k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous(), kv_layout="HND"
            ),
            prefill,
            one_prefill,
        ),
        "single_prefill_with_kv_cache over a dynamic query length": Case(
            lambda q, k, v: f.single_prefill_with_kv_cache(q, k, v, causal=True) * 2,
            prefill,
            one_prefill,
            mark_dynamic=((0, 0),),
            again=(lambda: prefill(queries=17, seed=4),),
        ),
        "single_prefill_with_kv_cache in two chunks merged by merge_state": Case(
            chunked,
            prefill,
            (*one_prefill, *one_prefill, "fi_patch_declared.merge_state"),
        ),
    }
    found.update(_trtllm_decode(f))
    if _has(f.single_prefill_with_kv_cache, "v_scale"):
        # A tensor where the op takes a number (0.6.10 on): the function's own body is traced,
        # as unpatched (a graph break at its module's build), and the call runs eagerly.
        found["single_prefill_with_kv_cache with a tensor v_scale"] = Case(
            lambda q, k, v, s: f.single_prefill_with_kv_cache(q, k, v, v_scale=s) + 1,
            lambda: [*prefill(), torch.full((), 0.5)],
            (),
            fullgraph=False,
        )
    return found


def _trtllm_decode(f):
    """trtllm_batch_decode_with_kv_cache, stateless, on its trtllm-gen kernel ("auto" on an SM100
    host): 4 requests of 32 query heads over 8 KV heads of 128, 1, 17, 40 and 64 keys in pages of
    16 out of order, the cache HND. As SGLang's trtllm_mha backend calls it (by keyword, sinks,
    out_dtype), a (k, v) pair NHD with tensor scales, into out, twice with two scales in one model,
    over a batch and a max_seq_len that grow (one compile for both), and from 0.6.12 with
    return_lse, out given with lse asked for, and lse given without return_lse. None before
    0.6.0 (no op there)."""
    decode = getattr(f, "decode", None)
    fn = getattr(decode, "trtllm_batch_decode_with_kv_cache", None)
    if fn is None or not _has(fn, "max_q_len"):
        return {}
    order = [11, 2, 7, 0, 14, 5, 9, 3, 12, 6, 1, 15, 8, 4, 13, 10]

    def inputs(batch=4, lengths=(1, 17, 40, 64), width=4, seed=0):
        tables = torch.tensor(order[: batch * width], dtype=torch.int32).reshape(batch, width)
        return [
            _random(batch, 32, 128, seed=seed),
            _random(16, 2, 8, 16, 128, seed=seed + 1),
            tables,
            _i32(*lengths),
        ]

    space = torch.zeros(1 << 20, dtype=torch.uint8)
    sinks = torch.linspace(-1.0, 1.0, 32)

    def sglang(q, kv, tables, lengths):
        return decode.trtllm_batch_decode_with_kv_cache(
            query=q,
            kv_cache=kv,
            workspace_buffer=space,
            block_tables=tables,
            seq_lens=lengths,
            max_seq_len=64,
            bmm1_scale=128**-0.5,
            bmm2_scale=1.0,
            window_left=-1,
            sinks=sinks,
            out_dtype=torch.bfloat16,
        )

    def paired(q, kv, tables, lengths, s1, s2):
        k, v = kv[:, 0].transpose(1, 2), kv[:, 1].transpose(1, 2)
        return fn(q, (k, v), space, tables, lengths, 64, s1, s2, kv_layout="NHD")

    def grown(q, kv, tables, lengths):
        return fn(q, kv, space, tables, lengths, tables.shape[1] * 16, 0.09) * 2

    one = ("fi_patch.trtllm_batch_decode_with_kv_cache",)
    written = ("fi_patch.trtllm_batch_decode_with_kv_cache_out",)
    scales = [torch.full((), 0.09), torch.full((), 0.5)]
    found = {
        "trtllm_batch_decode_with_kv_cache as SGLang's trtllm_mha backend calls it": Case(
            sglang, inputs, one
        ),
        "trtllm_batch_decode_with_kv_cache, a (k, v) pair NHD with tensor scales": Case(
            paired, lambda: [*inputs(), *scales], one
        ),
        "trtllm_batch_decode_with_kv_cache into out": Case(
            lambda q, kv, t, n, o: fn(q, kv, space, t, n, 64, 0.09, out=o),
            lambda: [*inputs(), torch.zeros(4, 32, 128, dtype=torch.bfloat16)],
            written,
            written=(4,),
        ),
        "trtllm_batch_decode_with_kv_cache twice with two scales in one model": Case(
            lambda q, kv, t, n: fn(q, kv, space, t, n, 64, 0.05) + fn(q, kv, space, t, n, 64, 0.2),
            inputs,
            one * 2,
        ),
        "trtllm_batch_decode_with_kv_cache over a batch and a max_seq_len that grow": Case(
            grown,
            lambda: inputs(batch=2, lengths=(3, 30), width=2),
            one,
            mark_dynamic=((0, 0), (2, 0), (2, 1), (3, 0)),
            again=(lambda: inputs(batch=3, lengths=(5, 33, 47), width=3, seed=4),),
        ),
    }
    if _has(fn, "return_lse"):
        found["trtllm_batch_decode_with_kv_cache with return_lse"] = Case(
            lambda q, kv, t, n: fn(q, kv, space, t, n, 64, 0.09, return_lse=True), inputs, one
        )
        found["trtllm_batch_decode_with_kv_cache, out given and lse asked for"] = Case(
            lambda q, kv, t, n, o: fn(q, kv, space, t, n, 64, 0.09, out=o, return_lse=True),
            lambda: [*inputs(), torch.zeros(4, 32, 128, dtype=torch.bfloat16)],
            written,
            written=(4,),
        )
        # 0.6.12 leaves the lse as it was, 0.6.13 on writes it: compiled as eager either way.
        found["trtllm_batch_decode_with_kv_cache, lse given without return_lse"] = Case(
            lambda q, kv, t, n, s: fn(q, kv, space, t, n, 64, 0.09, lse=s) * 2,
            lambda: [*inputs(), torch.zeros(4, 32)],
            written,
            written=(4,),
        )
    return found


def _wrappers(f):
    """run() of BatchDecodeWithPagedKVCacheWrapper after plan(), planned eagerly as engines plan
    once per batch, outside the compiled function (the constructor's pinned buffers stood in): 4
    requests of 32 query heads over 8 KV heads of 128 in pages of 16, their pages out of order.
    The cache as one tensor, as a (k, v) pair with return_lse, with out and lse given, with one
    of them given and the other asked for (allocated in the graph), HND, into
    plan()'s o_data_type float16, over a cache that grows between calls (its page count
    dynamic), through the deprecated forward() twice with two scales (SGLang's call) and
    forward_return_lse(), and two wrappers planned differently in one model, each with its own
    result."""
    order = [7, 2, 9, 0, 4, 1, 8, 3, 6, 5]

    def planned(kv_layout="NHD", pages=(1, 2, 3, 4), last=(1, 1, 8, 16), **more):
        indptr = torch.tensor([0, *pages], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        indices = torch.tensor(order[: sum(pages)], dtype=torch.int32)
        made = functools.partial(f.BatchDecodeWithPagedKVCacheWrapper, kv_layout=kv_layout)
        return _planned(made, (indptr, indices, _i32(*last)), **more)

    def inputs(pages=10, hnd=False, seed=0):
        shape = (pages, 2, 8, 16, 128) if hnd else (pages, 2, 16, 8, 128)
        return [_random(4, 32, 128, seed=seed), _random(*shape, seed=seed + 1)]

    nhd, hnd, halves = planned(), planned("HND"), planned(o_data_type=torch.float16)
    other = planned(pages=(4, 3, 2, 1), last=(16, 5, 16, 2))
    out = ("fi_patch.batch_decode_with_paged_kv_cache_run",)
    written = ("fi_patch.batch_decode_with_paged_kv_cache_run_out",)
    forward = "fi_patch.batch_decode_with_paged_kv_cache_forward"
    lse_forward = ("fi_patch.batch_decode_with_paged_kv_cache_forward_return_lse",)

    def into(q, kv, o, lse):
        return nhd.run(q, kv, out=o, lse=lse, return_lse=True)

    return {
        "BatchDecodeWithPagedKVCacheWrapper.run, the cache one tensor": Case(
            lambda q, kv: nhd.run(q, kv) * 2, inputs, out
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run, a (k, v) pair with return_lse": Case(
            lambda q, kv: nhd.run(q, (kv[:, 0], kv[:, 1]), return_lse=True), inputs, out
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run, out and lse given": Case(
            into,
            lambda: [*inputs(), torch.zeros(4, 32, 128, dtype=torch.bfloat16), torch.zeros(4, 32)],
            written,
            written=(2, 3),
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run, out given and lse asked for": Case(
            lambda q, kv, o: nhd.run(q, kv, out=o, return_lse=True),
            lambda: [*inputs(), torch.zeros(4, 32, 128, dtype=torch.bfloat16)],
            written,
            written=(2,),
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run, lse given and out not, return_lse": Case(
            lambda q, kv, s: nhd.run(q, kv, lse=s, return_lse=True),
            lambda: [*inputs(), torch.zeros(4, 32)],
            written,
            written=(2,),
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run, HND": Case(
            lambda q, kv: hnd.run(q, kv) + 1, lambda: inputs(hnd=True), out
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run into plan()'s o_data_type float16": Case(
            lambda q, kv: halves.run(q, kv), inputs, out
        ),
        "BatchDecodeWithPagedKVCacheWrapper.run over a cache that grows": Case(
            lambda q, kv: nhd.run(q, kv) - 1,
            inputs,
            out,
            mark_dynamic=((1, 0),),
            again=(lambda: inputs(pages=13, seed=5),),
        ),
        # SGLang's call: forward() sets the scales on the wrapper, then runs. Twice with two
        # scales: each op must run with its own (traced, the stores would land after the graph).
        "BatchDecodeWithPagedKVCacheWrapper.forward twice with two sm_scales, as SGLang calls it": (
            Case(
                lambda q, kv: nhd.forward(q, kv, sm_scale=0.1) + nhd.forward(q, kv, sm_scale=0.2),
                inputs,
                (forward, forward),
            )
        ),
        "BatchDecodeWithPagedKVCacheWrapper.forward_return_lse": Case(
            lambda q, kv: nhd.forward_return_lse(q, kv, sm_scale=0.05), inputs, lse_forward
        ),
        "two BatchDecodeWithPagedKVCacheWrappers planned differently in one model": Case(
            lambda q, kv: nhd.run(q, kv) + other.run(q, kv, return_lse=True)[0], inputs, out * 2
        ),
        **_prefill_wrappers(f, order),
        **_ragged_wrappers(f),
    }


def _planned(made, planning, sizes=(32, 8, 128, 16), **more):
    """A wrapper made by `made` (its class, given all but the workspace), its pinned buffers
    stood in, then planned with `planning` (the indptrs, indices and last page lengths) for
    `sizes`: 32 query heads over 8 KV heads of 128 in pages of 16, bfloat16."""
    with kernels.unpinned():
        wrapper = made(torch.empty(1024 * 1024, dtype=torch.uint8))
    bf16 = torch.bfloat16
    wrapper.plan(*planning, *sizes, q_data_type=bf16, kv_data_type=bf16, **more)
    return wrapper


def _ragged_wrappers(f):
    """run() of BatchPrefillWithRaggedKVCacheWrapper after plan(): 4 requests of 3, 2, 1 and 3
    new tokens over 3, 17, 40 and 64 keys and values of their own, 32 query heads over 8 KV heads
    of 128. Positionally, causal with return_lse, with out and lse given, HND, into plan()'s
    o_data_type float16 (bfloat16 before 0.7.0, as run() allocates it), an lse heads first
    (lse_layout "HN", 0.7.1 on), through the
    deprecated forward() twice with two scales, causal (SGLang's extend), and
    forward_return_lse(), and two wrappers planned differently in one model."""
    wrapper_class = f.BatchPrefillWithRaggedKVCacheWrapper

    def planned(kv_layout="NHD", tokens=(3, 2, 1, 3), keys=(3, 17, 40, 64), **more):
        qo = torch.tensor([0, *tokens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        kv = torch.tensor([0, *keys], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        made = functools.partial(wrapper_class, kv_layout=kv_layout, backend="fa2")
        return _planned(made, (qo, kv), sizes=(32, 8, 128), **more)

    def inputs(hnd=False, seed=0, tokens=9, keys=124):
        shape = (8, keys, 128) if hnd else (keys, 8, 128)
        return [
            _random(tokens, 32, 128, seed=seed),
            _random(*shape, seed=seed + 1),
            _random(*shape, seed=seed + 2),
        ]

    nhd, hnd, causal = planned(), planned("HND"), planned(causal=True)
    halves, forwarded_by = planned(o_data_type=torch.float16), planned()
    other = planned(tokens=(1, 1, 4, 3), keys=(2, 9, 30, 83), causal=True)
    out = ("fi_patch.batch_prefill_with_ragged_kv_cache_run",)
    written = ("fi_patch.batch_prefill_with_ragged_kv_cache_run_out",)
    forward = "fi_patch.batch_prefill_with_ragged_kv_cache_forward"
    name = "BatchPrefillWithRaggedKVCacheWrapper"

    def into(q, k, v, o, lse):
        return nhd.run(q, k, v, out=o, lse=lse, return_lse=True)

    def forwarded(q, k, v):
        first = forwarded_by.forward(q, k, v, causal=True, sm_scale=0.1)
        return first + forwarded_by.forward(q, k, v, causal=True, sm_scale=0.2)

    found = {
        name + ".run, positionally": Case(lambda q, k, v: nhd.run(q, k, v) * 2, inputs, out),
        name + ".run causal with return_lse": Case(
            lambda q, k, v: causal.run(q, k, v, return_lse=True), inputs, out
        ),
        name + ".run, out and lse given": Case(
            into,
            lambda: [*inputs(), torch.zeros(9, 32, 128, dtype=torch.bfloat16), torch.zeros(9, 32)],
            written,
            written=(3, 4),
        ),
        name + ".run, HND": Case(
            lambda q, k, v: hnd.run(q, k, v) + 1, lambda: inputs(hnd=True), out
        ),
        name + ".run into plan()'s o_data_type float16": Case(
            lambda q, k, v: halves.run(q, k, v), inputs, out
        ),
        name + ".forward twice with two sm_scales, causal, as SGLang's extend calls it": Case(
            forwarded, inputs, (forward, forward)
        ),
        name + ".forward_return_lse": Case(
            lambda q, k, v: forwarded_by.forward_return_lse(q, k, v, causal=True, sm_scale=0.05),
            inputs,
            (forward + "_return_lse",),
        ),
        f"two {name}s planned differently in one model": Case(
            lambda q, k, v: nhd.run(q, k, v) + other.run(q, k, v, return_lse=True)[0],
            inputs,
            out * 2,
        ),
    }
    if _has(wrapper_class.run, "lse_layout"):
        found[name + ".run, an lse given heads first (lse_layout HN)"] = Case(
            lambda q, k, v, lse: nhd.run(q, k, v, lse=lse, return_lse=True, lse_layout="HN"),
            lambda: [*inputs(), torch.zeros(32, 9)],
            written,
            written=(3,),
        )
    return found


def _prefill_wrappers(f, order):
    """run() of BatchPrefillWithPagedKVCacheWrapper after plan(), planned as the decode wrapper's
    cases plan theirs: 4 requests of 3, 2, 1 and 3 new tokens over 3, 17, 40 and 64 keys. The
    cache as one tensor, causal as a (k, v) pair with return_lse, with out and lse given, HND,
    into plan()'s o_data_type float16, over a cache that grows between calls, an lse heads first
    (lse_layout "HN", 0.7.1 on), through the deprecated forward() twice with two scales, causal
    (SGLang's call), and forward_return_lse(), and two wrappers planned differently in one
    model."""
    wrapper_class = f.BatchPrefillWithPagedKVCacheWrapper

    def planned(kv_layout="NHD", tokens=(3, 2, 1, 3), last=(3, 1, 8, 16), **more):
        qo = torch.tensor([0, *tokens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
        indices = torch.tensor(order, dtype=torch.int32)
        planning = (qo, _i32(0, 1, 3, 6, 10), indices, _i32(*last))
        made = functools.partial(wrapper_class, kv_layout=kv_layout, backend="fa2")
        return _planned(made, planning, **more)

    def inputs(pages=10, hnd=False, seed=0, tokens=9):
        shape = (pages, 2, 8, 16, 128) if hnd else (pages, 2, 16, 8, 128)
        return [_random(tokens, 32, 128, seed=seed), _random(*shape, seed=seed + 1)]

    nhd, hnd, causal = planned(), planned("HND"), planned(causal=True)
    # forward() sets causal and the scales on its own wrapper: the others keep their plan's.
    halves, forwarded_by = planned(o_data_type=torch.float16), planned()
    other = planned(tokens=(1, 1, 4, 3), last=(2, 9, 3, 16), causal=True)
    out = ("fi_patch.batch_prefill_with_paged_kv_cache_run",)
    written = ("fi_patch.batch_prefill_with_paged_kv_cache_run_out",)
    forward = "fi_patch.batch_prefill_with_paged_kv_cache_forward"
    name = "BatchPrefillWithPagedKVCacheWrapper"

    def into(q, kv, o, lse):
        return nhd.run(q, kv, out=o, lse=lse, return_lse=True)

    def forwarded(q, kv):
        first = forwarded_by.forward(q, kv, causal=True, sm_scale=0.1)
        return first + forwarded_by.forward(q, kv, causal=True, sm_scale=0.2)

    found = {
        name + ".run, the cache one tensor": Case(lambda q, kv: nhd.run(q, kv) * 2, inputs, out),
        name + ".run causal, a (k, v) pair with return_lse": Case(
            lambda q, kv: causal.run(q, (kv[:, 0], kv[:, 1]), return_lse=True), inputs, out
        ),
        name + ".run, out and lse given": Case(
            into,
            lambda: [*inputs(), torch.zeros(9, 32, 128, dtype=torch.bfloat16), torch.zeros(9, 32)],
            written,
            written=(2, 3),
        ),
        name + ".run, HND": Case(lambda q, kv: hnd.run(q, kv) + 1, lambda: inputs(hnd=True), out),
        name + ".run into plan()'s o_data_type float16": Case(
            lambda q, kv: halves.run(q, kv), inputs, out
        ),
        name + ".run over a cache that grows": Case(
            lambda q, kv: causal.run(q, kv) - 1,
            inputs,
            out,
            mark_dynamic=((1, 0),),
            again=(lambda: inputs(pages=13, seed=5),),
        ),
        name + ".forward twice with two sm_scales, causal, as SGLang calls it": Case(
            forwarded, inputs, (forward, forward)
        ),
        name + ".forward_return_lse": Case(
            lambda q, kv: forwarded_by.forward_return_lse(q, kv, causal=True, sm_scale=0.05),
            inputs,
            (forward + "_return_lse",),
        ),
        f"two {name}s planned differently in one model": Case(
            lambda q, kv: nhd.run(q, kv) + other.run(q, kv, return_lse=True)[0], inputs, out * 2
        ),
    }
    if _has(wrapper_class.run, "lse_layout"):
        found[name + ".run, an lse given heads first (lse_layout HN)"] = Case(
            lambda q, kv, lse: nhd.run(q, kv, lse=lse, return_lse=True, lse_layout="HN"),
            lambda: [*inputs(), torch.zeros(32, 9)],
            written,
            written=(2,),
        )
    return found


def _cascade(f):
    def states(lse_dtype=torch.float32):
        return [
            _random(5, 4, 64),
            _random(5, 4, seed=1, dtype=lse_dtype),
            _random(5, 4, 64, seed=2),
            _random(5, 4, seed=3, dtype=lse_dtype),
        ]

    def stacked():
        return [_random(5, 3, 4, 64), _random(5, 3, 4, seed=1, dtype=torch.float32)]

    merge, merges = ("fi_patch_declared.merge_state",), ("fi_patch_declared.merge_states",)
    return {
        "merge_state": Case(lambda *a: f.merge_state(*a), states, merge),
        "merge_state with a bfloat16 lse": Case(
            lambda *a: f.merge_state(*a), lambda: states(torch.bfloat16), merge
        ),
        "merge_state_in_place": Case(
            lambda *a: f.merge_state_in_place(*a),
            states,
            ("fi_patch_declared.merge_state_in_place",),
            written=(0, 1),
        ),
        "merge_states": Case(lambda v, s: f.merge_states(v, s), stacked, merges),
        "merge_states on meta tensors": Case(
            lambda v, s: f.merge_states(v, s),
            lambda: [t.to("meta") for t in stacked()],
            merges,
            values=False,
        ),
    }


def _paging(f):
    def appended(tupled):
        def inputs():
            cache = _random(4, 2, 8, 2, 64, seed=1)
            return [_random(3, 2, 64), _random(3, 2, 64, seed=2), cache]

        batch, positions = _i32(0, 0, 1), _i32(0, 1, 0)
        indices, indptr, last = _i32(0, 1, 2), _i32(0, 1, 3), _i32(2, 1)

        def call(k, v, cache):
            paged = (cache[:, 0], cache[:, 1]) if tupled else cache
            f.append_paged_kv_cache(k, v, batch, positions, paged, indices, indptr, last)
            return cache.sum()

        return Case(call, inputs, ("fi_patch_declared.append_paged_kv_cache",), written=(2,))

    return {
        "append_paged_kv_cache, one cache tensor": appended(False),
        "append_paged_kv_cache, a (k, v) pair of views": appended(True),
        "packbits": Case(
            lambda x: f.packbits(x > 0),
            lambda: [_random(100, dtype=torch.float32)],
            ("fi_patch_declared.packbits",),
        ),
        "packbits, little": Case(
            lambda x: f.packbits(x > 0, bitorder="little"),
            lambda: [_random(100, dtype=torch.float32)],
            ("fi_patch_declared.packbits",),
        ),
    }


def _sampling(f):
    def probs(rows=4, seed=0):
        return torch.softmax(_random(rows, 128, seed=seed, dtype=torch.float32) * 3, -1)

    def seeded(rows=4):
        return [probs(rows), torch.tensor([7], dtype=torch.int64), torch.tensor([0])]

    top_p, top_k = ("fi_patch.top_p_sampling_from_probs",), ("fi_patch.top_k_sampling_from_probs",)
    joint = ("fi_patch.top_k_top_p_sampling_from_probs",)
    return {
        "top_p_sampling_from_probs with seed and offset tensors": Case(
            lambda p, s, o: f.top_p_sampling_from_probs(p, 0.9, seed=s, offset=o), seeded, top_p
        ),
        "top_p_sampling_from_probs, top_p per row, return_valid": Case(
            lambda p, s, o: f.top_p_sampling_from_probs(
                p, torch.full((4,), 0.8), seed=s, offset=o, return_valid=True
            ),
            seeded,
            top_p,
        ),
        "top_k_sampling_from_probs with a seed and an offset number": Case(
            lambda p: f.top_k_sampling_from_probs(p, 10, seed=3, offset=4), lambda: [probs()], top_k
        ),
        "top_k_top_p_sampling_from_probs, a dynamic batch": Case(
            lambda p, s, o: f.top_k_top_p_sampling_from_probs(p, 20, 0.9, seed=s, offset=o),
            lambda: seeded(6),
            joint,
            mark_dynamic=((0, 0),),
            again=(lambda: seeded(3),),
        ),
        "top_p_sampling_from_probs without seed and offset": Case(
            lambda p: f.top_p_sampling_from_probs(p, 0.9),
            lambda: [probs()],
            ("fi_patch.top_p_sampling_from_probs_uncapturable",),
        ),
        "two top_p_sampling_from_probs calls without seed and offset": Case(
            lambda p: (f.top_p_sampling_from_probs(p, 0.9), f.top_p_sampling_from_probs(p, 0.9)),
            lambda: [probs()],
            ("fi_patch.top_p_sampling_from_probs_uncapturable",) * 2,
        ),
        "top_k_top_p_sampling_from_probs without seed and offset": Case(
            lambda p: f.top_k_top_p_sampling_from_probs(p, 20, 0.9),
            lambda: [probs()],
            ("fi_patch.top_k_top_p_sampling_from_probs_uncapturable",),
        ),
        "top_k_sampling_from_probs with check_nan": Case(
            lambda p, s, o: f.top_k_sampling_from_probs(p, 10, check_nan=True, seed=s, offset=o),
            seeded,
            ("fi_patch.top_k_sampling_from_probs_uncapturable",),
        ),
        "min_p_sampling_from_probs with seed and offset tensors, return_valid": Case(
            lambda p, s, o: f.min_p_sampling_from_probs(
                p, 0.2, seed=s, offset=o, return_valid=True
            ),
            seeded,
            ("fi_patch.min_p_sampling_from_probs",),
        ),
        "min_p_sampling_from_probs, min_p per row, without seed and offset": Case(
            lambda p: f.min_p_sampling_from_probs(p, torch.full((4,), 0.3)),
            lambda: [probs()],
            ("fi_patch.min_p_sampling_from_probs_uncapturable",),
        ),
        **_renorms(f, probs),
        "top_k_top_p_sampling_from_probs, joint, indices": Case(
            lambda p, s, o, i: f.top_k_top_p_sampling_from_probs(
                p, 20, 0.9, indices=i, filter_apply_order="joint", seed=s, offset=o
            ),
            lambda: [*seeded(), torch.tensor([3, 0, 0, 2, 1])],
            joint,
        ),
    }


def _renorms(f, probs):
    """The renorm samplers: top_p_renorm_probs gives float32 whatever its input (FlashInfer's own
    fake said the input's dtype), the top-k pair the input's dtype (from 0.6.0); each output
    used by the code after it, as a sampler's caller uses it."""

    def half(rows=4, seed=0, dtype=torch.bfloat16):
        return probs(rows, seed).to(dtype)

    return {
        "top_p_renorm_probs of bfloat16 probs, scaled after": Case(
            lambda p: f.top_p_renorm_probs(p, 0.8) * 2,
            lambda: [half()],
            ("fi_patch.top_p_renorm_probs",),
        ),
        "top_p_renorm_prob (its other name), top_p per row": Case(
            lambda p: f.sampling.top_p_renorm_prob(p, torch.tensor([0.5, 0.7, 0.9, 0.99])),
            lambda: [probs()],
            ("fi_patch.top_p_renorm_probs",),
        ),
        "top_k_renorm_probs of float16 probs, a dynamic batch": Case(
            lambda p: f.top_k_renorm_probs(p, 10) + 0,
            lambda: [half(6, dtype=torch.float16)],
            ("fi_patch.top_k_renorm_probs",),
            mark_dynamic=((0, 0),),
            again=(lambda: [half(3, seed=1, dtype=torch.float16)],),
        ),
        "top_k_mask_logits of bfloat16 logits, then softmax": Case(
            lambda x: torch.softmax(f.top_k_mask_logits(x, torch.tensor([1, 5, 10, 128])), -1),
            lambda: [_random(4, 128, seed=2)],
            ("fi_patch.top_k_mask_logits",),
        ),
    }


def _quantizers(f):
    global_scale = torch.tensor([2.0])
    fp4 = (
        ("flashinfer.fp4_quantize",)
        if hasattr(torch.ops.flashinfer, "fp4_quantize")
        else ("fi_patch.flashinfer_fp4_quantize",)
    )
    cases = {
        "fp4_quantize": Case(
            lambda x: f.fp4_quantize(x, global_scale), lambda: [_random(16, 64)], fp4
        ),
        "fp4_quantize, column-major input": Case(
            lambda x: f.fp4_quantize(x.T, global_scale), lambda: [_random(64, 16)], fp4
        ),
        "fp4_quantize, linear scales, column-major input": Case(
            lambda x: f.fp4_quantize(x.T, global_scale, is_sf_swizzled_layout=False),
            lambda: [_random(64, 16)],
            fp4,
        ),
        "mxfp8_quantize": Case(
            lambda x: f.mxfp8_quantize(x), lambda: [_random(16, 64)], ("fi_patch.mxfp8_quantize",)
        ),
        "nvfp4_batched_quantize": Case(
            lambda x: f.nvfp4_batched_quantize(x, global_scale),
            lambda: [_random(2, 16, 64)],
            ("fi_patch.nvfp4_batched_quantize",),
        ),
        "scaled_fp4_grouped_quantize": Case(
            lambda x, m: f.scaled_fp4_grouped_quantize(x, m, torch.tensor([2.0, 4.0])),
            lambda: [_random(2, 16, 64), _i32(16, 9)],
            ("fi_patch.scaled_fp4_grouped_quantize",),
        ),
        "silu_and_mul_scaled_nvfp4_experts_quantize": Case(
            lambda x, m: f.silu_and_mul_scaled_nvfp4_experts_quantize(
                x, m, torch.tensor([2.0, 4.0])
            ),
            lambda: [_random(2, 16, 128), _i32(16, 9)],
            ("fi_patch.silu_and_mul_scaled_nvfp4_experts_quantize",),
        ),
        "block_scale_interleave": Case(
            lambda s: f.block_scale_interleave(s),
            lambda: [_bytes(20, 8)],
            ("fi_patch.block_scale_interleave",),
        ),
    }
    if _has(f.block_scale_interleave, "out"):
        cases["block_scale_interleave out="] = Case(
            lambda s, o: f.block_scale_interleave(s, out=o),
            lambda: [_bytes(20, 8), _bytes(128 * 8, seed=1)],
            ("fi_patch.block_scale_interleave_out",),
            written=(1,),
        )
    return cases


def _gemms(f):
    def fp4_operands(m=8, n=32, k=128):
        a, w = _bytes(m, k // 2), _bytes(n, k // 2, seed=1)
        scales = _bytes(m, k // 16, seed=2), _bytes(n, k // 16, seed=3)
        return [a, w, *(s.view(torch.float8_e4m3fn) for s in scales), torch.tensor([0.5])]

    fp8 = torch.float8_e4m3fn
    one = torch.ones(())

    def mm_fp4(a, w, sa, sw, alpha):
        return f.mm_fp4(a, w.T, sa, sw.T, alpha, backend="cutlass")

    return {
        "mm_fp4, cutlass": Case(mm_fp4, fp4_operands, ("fi_patch.mm_fp4",)),
        "mm_fp4, a dynamic batch": Case(
            lambda *a: mm_fp4(*a) + 1,
            fp4_operands,
            ("fi_patch.mm_fp4",),
            mark_dynamic=((0, 0), (2, 0)),
            again=(lambda: fp4_operands(m=5),),
        ),
        "mm_fp4 out=": Case(
            lambda a, w, sa, sw, alpha, o: f.mm_fp4(
                a, w.T, sa, sw.T, alpha, out=o, backend="cutlass"
            ),
            lambda: [*fp4_operands(), _random(8, 32)],
            ("fi_patch.mm_fp4_out",),
            written=(5,),
        ),
        "bmm_fp8 out=": Case(
            lambda a, w, o: f.bmm_fp8(
                a, w.transpose(-2, -1), one, one, torch.bfloat16, out=o, backend="cutlass"
            ),
            lambda: [
                _random(2, 8, 64).to(fp8),
                _random(2, 32, 64, seed=1).to(fp8),
                _random(2, 8, 32, seed=2),
            ],
            ("fi_patch.bmm_fp8_out",),
            written=(2,),
        ),
        # The trtllm_low_latency backend takes the weight prepared: (k // 128, n, 128).
        "mm_fp8, trtllm_low_latency": Case(
            lambda a, w: f.mm_fp8(a, w, backend="trtllm_low_latency"),
            lambda: [_random(8, 256).to(fp8), _random(2, 32, 128, seed=1).to(fp8)],
            ("fi_patch.mm_fp8",),
        ),
        "mm_fp8 out=": Case(
            lambda a, w, o: f.mm_fp8(a, w, out=o, backend="trtllm_low_latency"),
            lambda: [
                _random(8, 256).to(fp8),
                _random(2, 32, 128, seed=1).to(fp8),
                _random(8, 32, seed=2),
            ],
            ("fi_patch.mm_fp8_out",),
            written=(2,),
        ),
        "bmm_fp8, cutlass": Case(
            lambda a, w: f.bmm_fp8(
                a, w.transpose(-2, -1), one, one, torch.bfloat16, backend="cutlass"
            ),
            lambda: [_random(2, 8, 64).to(fp8), _random(2, 32, 64, seed=1).to(fp8)],
            ("fi_patch.bmm_fp8",),
        ),
    }


def _grad(f):
    """A model not under torch.no_grad: inputs that require grad."""

    def req(t):
        return t.requires_grad_()

    return {
        "silu_and_mul on an input that requires grad": Case(
            lambda x: f.silu_and_mul(x * 1.0),
            lambda: [req(_random(4, 256))],
            ("fi_patch.silu_and_mul",),
            grad=True,
        ),
        "merge_state on inputs that require grad": Case(
            lambda va, sa, vb, sb: f.merge_state(va * 1.0, sa * 1.0, vb, sb),
            lambda: [
                req(_random(5, 4, 64)),
                req(_random(5, 4, seed=1, dtype=torch.float32)),
                _random(5, 4, 64, seed=2),
                _random(5, 4, seed=3, dtype=torch.float32),
            ],
            ("fi_patch_declared.merge_state",),
            grad=True,
        ),
        "merge_states on inputs that require grad": Case(
            lambda v, s: f.merge_states(v * 1.0, s),
            lambda: [req(_random(5, 3, 4, 64)), _random(5, 3, 4, seed=1, dtype=torch.float32)],
            ("fi_patch_declared.merge_states",),
            grad=True,
        ),
        "packbits on an input that requires grad": Case(
            lambda x: f.packbits((x * 1.0) > 0),
            lambda: [req(_random(100, dtype=torch.float32))],
            ("fi_patch_declared.packbits",),
            grad=True,
        ),
        "rmsnorm on an input that requires grad": Case(
            lambda x, w: f.rmsnorm(x * 1.0, w),
            lambda: [req(_random(4, 64)), _random(64, seed=1)],
            ("fi_patch_declared.rmsnorm",),
            grad=True,
        ),
    }


def _logging(f):
    """Run with FLASHINFER_LOGLEVEL=1 (the test sets it): FlashInfer's API-logging wrapper."""
    return {
        "rmsnorm with API logging on": Case(
            lambda x, w: f.rmsnorm(x, w) * 2,
            lambda: [_random(4, 64), _random(64, seed=1)],
            ("fi_patch_declared.rmsnorm",),
        ),
        "packbits with API logging on": Case(
            lambda x: f.packbits(x > 0),
            lambda: [_random(100, dtype=torch.float32)],
            ("fi_patch_declared.packbits",),
        ),
        "silu_and_mul with API logging on": Case(
            lambda x: f.silu_and_mul(x) * 2, lambda: [_random(4, 256)], ("fi_patch.silu_and_mul",)
        ),
    }


def _model(f):
    from decoder import case

    return {"a decoder layer as engines write it": case(f, Case, _random, _bytes)}
