"""FlashInfer's declared ops inside a compiled graph, on a real GPU: what the CPU proofs cannot run.

Run it with the target environment's own python, after `fi-patch apply` there:

    fi-patch apply --venv /root/ml-env
    /root/ml-env/bin/python scripts/gpu/declared_ops.py --out declared-gpu.json

(`make gpu-check TARGET=/root/ml-env` runs it after scripts/gpu/fp4_compiled.py.) For each entry
point that declared-ops-custom and declared-ops-fake make an op (norms, the quantising norms with
a tensor scale, rope in place, the MLA rope with FP8 quantisation, the cascade merges, the
paged-KV append, packbits) it compares `torch.compile(fullgraph=True)` (the default backend,
Inductor, which trusts the ops' mutates_args) with the eager call, bit for bit, outputs and the
tensors written in place; then captures the compiled function in a CUDA graph, replays it on new
input, and compares again. An entry point the release does not have, or whose declaration
fi-patch left as it is, is named and not checked. One line per case; JSON with --out.

Exit status: 0 every case compared equal, 1 a case differs or fails, 3 nothing compared, 77 no
CUDA device (nothing checked; CI never runs this script). A case whose eager call FlashInfer
refuses, or whose two eager calls differ (scripts/gpu/replay.py), is n/a: named, not compared,
counted neither way.
"""

from __future__ import annotations

import sys

from replay import check_made, main


def cases(torch, flashinfer):  # type: ignore[no-untyped-def]
    """(entry point, the declaration it reaches, inputs, a function of them returning what it
    writes and returns)."""
    f = flashinfer
    bf16 = torch.bfloat16

    def t(*shape):  # type: ignore[no-untyped-def]
        return torch.randn(*shape, dtype=bf16, device="cuda")

    def i32(*values):  # type: ignore[no-untyped-def]
        return torch.tensor(values, dtype=torch.int32, device="cuda")

    nnz, heads, kv_heads, dim = 48, 32, 8, 128
    indptr, offsets = i32(0, 16, 48), i32(0, 100)
    pos = torch.arange(nnz, dtype=torch.int32, device="cuda")
    cache = torch.randn(4096, dim, dtype=torch.float32, device="cuda")
    page, pages = 16, 8
    batch = i32(*([0] * 16 + [1] * 32))
    positions = i32(*range(16), *range(32))
    kv_indices, kv_indptr, last = i32(*range(pages)), i32(0, 1, 3), i32(16, 16)

    def rope(fn, *extra):  # type: ignore[no-untyped-def]
        def run(q, k):  # type: ignore[no-untyped-def]
            fn(q, k, *extra)
            return q, k

        return run

    def norm_in_place(fn):  # type: ignore[no-untyped-def]
        def run(x, r, w):  # type: ignore[no-untyped-def]
            fn(x, r, w)
            return x, r

        return run

    def quantised(fn):  # type: ignore[no-untyped-def]
        # out (float8) and, for fused_add_rmsnorm_quant, residual: what the kernel writes.
        def run(o, *rest):  # type: ignore[no-untyped-def]
            fn(o, *rest)
            return (o, rest[1]) if len(rest) == 4 else (o,)

        return run

    def merge_in_place(v, s, vo, so):  # type: ignore[no-untyped-def]
        f.merge_state_in_place(v, s, vo, so)
        return v, s

    def append(k, v, paged):  # type: ignore[no-untyped-def]
        f.append_paged_kv_cache(
            k, v, batch, positions, paged, kv_indices, kv_indptr, last, kv_layout="NHD"
        )
        return (paged,)

    def cos_sin(q, k):  # type: ignore[no-untyped-def]
        f.apply_rope_with_cos_sin_cache_inplace(pos.long(), q, k, dim, cache, is_neox=True)
        return q, k

    x, w = (lambda: t(128, 4096)), (lambda: t(4096))
    q, k = (lambda: t(nnz, heads, dim)), (lambda: t(nnz, kv_heads, dim))
    yield "rmsnorm", "rmsnorm", (x, w), lambda x, w: (f.rmsnorm(x, w),)
    yield "gemma_rmsnorm", "gemma_rmsnorm", (x, w), lambda x, w: (f.gemma_rmsnorm(x, w),)
    yield (
        "fused_add_rmsnorm",
        "fused_add_rmsnorm",
        (x, x, w),
        norm_in_place(lambda *a: f.fused_add_rmsnorm(*a)),
    )
    yield (
        "gemma_fused_add_rmsnorm",
        "gemma_fused_add_rmsnorm",
        (x, x, w),
        norm_in_place(lambda *a: f.gemma_fused_add_rmsnorm(*a)),
    )
    # The scale as SGLang and vLLM pass it, a float32 tensor of one value (0.6.7 on: the op takes
    # Union[float, Tensor] as two parameters).
    o, scale = (
        (lambda: torch.empty(128, 4096, dtype=torch.float8_e4m3fn, device="cuda")),
        (lambda: torch.tensor([0.5], device="cuda")),
    )
    yield (
        "rmsnorm_quant",
        "rmsnorm_quant",
        (o, x, w, scale),
        quantised(lambda *a: f.rmsnorm_quant(*a)),
    )
    yield (
        "fused_add_rmsnorm_quant",
        "fused_add_rmsnorm_quant",
        (o, x, x, w, scale),
        quantised(lambda *a: f.fused_add_rmsnorm_quant(*a)),
    )
    # SGLang's MLA backends' form: a 2-D key (one shared latent head), the outputs given.
    mla_cache = cache[:, :64].contiguous()
    mla = [
        (lambda s=s: t(*s)) for s in ((nnz, heads, 64), (nnz, 64), (nnz, heads, 512), (nnz, 512))
    ]
    fp8 = [
        (lambda s=s: torch.empty(*s, dtype=torch.float8_e4m3fn, device="cuda"))
        for s in ((nnz, heads, 64), (nnz, 64), (nnz, heads, 512), (nnz, 512))
    ]
    yield (
        "mla_rope_quantize_fp8",
        "rope_quantize",
        (*mla, *fp8),
        lambda qr, kr, qn, kn, *out: flashinfer.rope.mla_rope_quantize_fp8(
            qr,
            kr,
            qn,
            kn,
            mla_cache,
            pos.long(),
            is_neox=False,
            q_rope_out=out[0],
            k_rope_out=out[1],
            q_nope_out=out[2],
            k_nope_out=out[3],
        ),
    )
    yield (
        "apply_rope_inplace",
        "apply_rope",
        (q, k),
        rope(lambda *a: f.apply_rope_inplace(*a), indptr, offsets),
    )
    yield (
        "apply_rope_pos_ids_inplace",
        "apply_rope_pos_ids",
        (q, k),
        rope(lambda *a: f.apply_rope_pos_ids_inplace(*a), pos),
    )
    yield (
        "apply_llama31_rope_inplace",
        "apply_llama31_rope",
        (q, k),
        rope(lambda *a: f.apply_llama31_rope_inplace(*a), indptr, offsets),
    )
    yield (
        "apply_llama31_rope_pos_ids_inplace",
        "apply_llama31_rope_pos_ids",
        (q, k),
        rope(lambda *a: f.apply_llama31_rope_pos_ids_inplace(*a), pos),
    )
    yield (
        "apply_rope_with_cos_sin_cache_inplace",
        "apply_rope_pos_ids_cos_sin_cache",
        (lambda: t(nnz, heads * dim), lambda: t(nnz, kv_heads * dim)),
        cos_sin,
    )
    v, s = (
        (lambda: t(64, heads, dim)),
        (lambda: torch.randn(64, heads, dtype=torch.float32, device="cuda")),
    )
    yield "merge_state", "merge_state", (v, s, v, s), lambda *a: f.merge_state(*a)
    yield "merge_state_in_place", "merge_state_in_place", (v, s, v, s), merge_in_place
    yield (
        "merge_states",
        "merge_states",
        (
            lambda: t(64, 4, heads, dim),
            lambda: torch.randn(64, 4, heads, dtype=torch.float32, device="cuda"),
        ),
        lambda *a: f.merge_states(*a),
    )
    yield (
        "append_paged_kv_cache",
        "append_paged_kv_cache",
        (
            lambda: t(48, kv_heads, dim),
            lambda: t(48, kv_heads, dim),
            lambda: torch.zeros(pages, 2, page, kv_heads, dim, dtype=bf16, device="cuda"),
        ),
        append,
    )
    yield (
        "packbits",
        "packbits",
        (lambda: torch.rand(4099, device="cuda") > 0.5,),
        lambda b: (f.packbits(b),),
    )


def run(torch, flashinfer):  # type: ignore[no-untyped-def]
    """Each case whose entry point the release has and made an op, checked; the others named."""
    import flashinfer.rope
    import flashinfer.utils

    declared = getattr(flashinfer.utils, "_fi_patch_declared", None)
    if declared is None:
        return "flashinfer.utils has no _fi_patch_declared: apply declared-ops-custom first"
    made = []
    for name, op, makers, fn in cases(torch, flashinfer):
        entry = declared.get("flashinfer::" + op)
        home = flashinfer.rope if name == "mla_rope_quantize_fp8" else flashinfer
        ready = hasattr(home, name) and entry is not None and entry.ready
        if entry is None:
            reason = "not in this release"
        elif not hasattr(home, name):
            reason = f"{home.__name__} does not export {name} in this release"
        else:
            reason = entry.reason
        made.append((name, op, ready, reason, makers, fn))
    return check_made(torch, made)


if __name__ == "__main__":
    sys.exit(main(__doc__, run))
