"""fi-patch's op boundaries (the op-* patches) inside a compiled graph, on a real GPU: what the CPU
proofs cannot run.

Run it with the target environment's own python, after `fi-patch apply` there:

    fi-patch apply --venv /root/ml-env
    /root/ml-env/bin/python scripts/gpu/boundaries.py --out boundaries-gpu.json

(`make gpu-check TARGET=/root/ml-env` runs it after the other GPU scripts.) For each entry point an
op-* patch gives an op (the activations, mm_fp4, mm_fp8, bmm_fp8, the quantizers, the samplers with
seed and offset given, the renorm samplers on bfloat16 input, concat_mla_k, fused_topk_deepseek,
trtllm_fp4_block_scale_moe into output=, SM100 only, single_decode_with_kv_cache,
single_prefill_with_kv_cache, the run() of BatchDecodeWithPagedKVCacheWrapper and
BatchPrefillWithPagedKVCacheWrapper after plan(), with use_cuda_graph=True too, and
trtllm_batch_decode_with_kv_cache),
called without and with `out=` where it takes it, it compares `torch.compile(fullgraph=True)` (the
default backend, Inductor) with the eager call, bit for bit; then captures the compiled function in
a CUDA graph, replays it on new input, and compares again.
The samplers also compile with mode="reduce-overhead" (Inductor's own CUDA graphs): with seed and
offset tensors each call equals eager; without them the op (tagged cudagraph_unsafe) runs out of
the graphs, and two calls on one input draw anew, as eager's do.
An entry point the release does not have, or whose boundary fi-patch left as it is, is named and
not checked. One line per case; JSON with --out.

Exit status: 0 every case compared equal, 1 a case differs or fails, 3 nothing compared, 77 no
CUDA device (nothing checked; CI never runs this script). A case whose eager call FlashInfer
refuses, or whose two eager calls differ (scripts/gpu/replay.py), is n/a: named, not compared,
counted neither way.
"""

from __future__ import annotations

import sys

from replay import check_made, check_reduce_overhead, main, wanted


def cases(torch, flashinfer):  # type: ignore[no-untyped-def]
    """(case, entry point, inputs, a function of them returning what it writes and returns)."""
    f = flashinfer
    bf16 = torch.bfloat16

    def t(*shape):  # type: ignore[no-untyped-def]
        return torch.randn(*shape, dtype=bf16, device="cuda")

    for name in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        yield name, name, (lambda: t(256, 8192),), (lambda x, n=name: (getattr(f, n)(x),))

        def into(x, o, n=name):  # type: ignore[no-untyped-def]
            getattr(f, n)(x, out=o)
            return (o,)

        yield name + " out=", name, (lambda: t(256, 8192), lambda: t(256, 4096)), into

    # mm_fp4: NVFP4 operands from FlashInfer's own quantizer, made by it (the quantizer is not
    # under test here); b passed as the transposed view of the (n, k/2) weight.
    m, n, k = 128, 512, 1024

    def nvfp4(x):  # type: ignore[no-untyped-def]
        scale = (448 * 6) / x.float().abs().nan_to_num().max()
        quantized, factors = f.nvfp4_quantize(x, scale.reshape(1))
        return quantized, factors, scale

    if hasattr(f, "mm_fp4") and hasattr(f, "nvfp4_quantize"):
        # Each maker quantizes fresh operands: the replay runs on new input. The scales are
        # those of the first operands (a scale is data the graph reads, like any input), made
        # at the case's first eager call: a device that cannot quantize fails that case alone.
        @once
        def scales():  # type: ignore[no-untyped-def]
            _, sa, ga = nvfp4(t(m, k))
            _, sw, gw = nvfp4(t(n, k))
            return sa, sw, (1.0 / (ga * gw)).reshape(1).float()

        def operand(rows):  # type: ignore[no-untyped-def]
            return lambda: nvfp4(t(rows, k))[0]

        def gemm(a, w):  # type: ignore[no-untyped-def]
            sa, sw, alpha = scales()
            return (f.mm_fp4(a, w.T, sa, sw.T, alpha, torch.bfloat16),)

        def gemm_into(a, w, o):  # type: ignore[no-untyped-def]
            sa, sw, alpha = scales()
            f.mm_fp4(a, w.T, sa, sw.T, alpha, torch.bfloat16, out=o)
            return (o,)

        yield "mm_fp4", "mm_fp4", (operand(m), operand(n)), gemm
        yield "mm_fp4 out=", "mm_fp4", (operand(m), operand(n), lambda: t(m, n)), gemm_into

    fp8 = torch.float8_e4m3fn
    one = torch.ones((), device="cuda")

    # mm_fp8: a (m, k) times the weight prepare_low_latency_gemm_weights makes of an (n, k) one,
    # made at the case's first eager call.
    if hasattr(f, "mm_fp8") and hasattr(f, "prepare_low_latency_gemm_weights"):
        import inspect

        # Its cache of permutation indices, a parameter without default where the release has it
        # (the first GPU run, on 0.6.8.post1 to 0.7.4, called it without).
        preparing = inspect.signature(f.prepare_low_latency_gemm_weights).parameters
        named = "permutation_indices_cache"
        cache = {named: {}} if named in preparing else {}
        prepared = once(
            lambda: f.prepare_low_latency_gemm_weights(
                torch.randn(n, k, device="cuda").to(fp8), **cache
            )
        )

        def low_latency(a):  # type: ignore[no-untyped-def]
            return (f.mm_fp8(a, prepared(), one.reshape(1)),)

        def low_latency_into(a, o):  # type: ignore[no-untyped-def]
            f.mm_fp8(a, prepared(), one.reshape(1), out=o)
            return (o,)

        a8 = (lambda: torch.randn(16, k, device="cuda").to(fp8),)
        yield "mm_fp8", "mm_fp8", a8, low_latency
        yield "mm_fp8 out=", "mm_fp8", (*a8, lambda: t(16, n)), low_latency_into

    def fp8_of(*shape):  # type: ignore[no-untyped-def]
        return lambda: torch.randn(*shape, device="cuda").to(fp8)

    def bmm(A, W):  # type: ignore[no-untyped-def]
        return (f.bmm_fp8(A, W.transpose(-2, -1), one, one, bf16),)

    def bmm_into(A, W, o):  # type: ignore[no-untyped-def]
        f.bmm_fp8(A, W.transpose(-2, -1), one, one, bf16, out=o)
        return (o,)

    yield "bmm_fp8", "bmm_fp8", (fp8_of(4, 128, 256), fp8_of(4, 512, 256)), bmm
    yield (
        "bmm_fp8 out=",
        "bmm_fp8",
        (fp8_of(4, 128, 256), fp8_of(4, 512, 256), lambda: t(4, 128, 512)),
        bmm_into,
    )

    yield from quantizers(torch, f, t)
    yield from samplers(torch, f)
    yield from mla(torch, f, t)
    yield from attention(f, t)
    yield from wrappers(torch, f, t)
    yield from trtllm_decode(torch, f, t)
    yield from moe_routing(torch, f)
    yield from fused_moe(torch, f)


def once(make):  # type: ignore[no-untyped-def]
    """make's value, made at the first call and kept. Not functools.cache: Dynamo traces a cached
    function's body at each call it meets, and would quantize or prepare again inside the graph."""
    kept = []

    def get():  # type: ignore[no-untyped-def]
        if not kept:
            kept.append(make())
        return kept[0]

    return get


def mla(torch, f, t):  # type: ignore[no-untyped-def]
    """concat_mla_k (0.6.0 on), writing k, as vLLM's MLA backend calls it: 128 heads, nope 128,
    rope 64, the rope part shared by every head."""
    concat_ops = getattr(f, "concat_ops", None)
    if concat_ops is None:
        return

    def concat(k, k_nope, k_rope):  # type: ignore[no-untyped-def]
        concat_ops.concat_mla_k(k, k_nope, k_rope)
        return (k,)

    yield (
        "concat_mla_k",
        "concat_mla_k",
        (lambda: t(512, 128, 192), lambda: t(512, 128, 128), lambda: t(512, 1, 64)),
        concat,
    )


def attention(f, t):  # type: ignore[no-untyped-def]
    """The single-request attention: decode of 32 query heads over 8 KV heads of 128 across 1024
    keys, with its lse, without it (the op's lse dropped) and with tensor cores, and a causal
    prefill of 256 queries over the same cache, with its lse and without it."""

    def decode(q, k, v):  # type: ignore[no-untyped-def]
        return f.single_decode_with_kv_cache(q, k, v, return_lse=True)

    def decode_out(q, k, v):  # type: ignore[no-untyped-def]
        return (f.single_decode_with_kv_cache(q, k, v),)

    def decode_cores(q, k, v):  # type: ignore[no-untyped-def]
        return (f.single_decode_with_kv_cache(q, k, v, use_tensor_cores=True),)

    def prefill(q, k, v):  # type: ignore[no-untyped-def]
        return f.single_prefill_with_kv_cache(q, k, v, causal=True, return_lse=True)

    def prefill_out(q, k, v):  # type: ignore[no-untyped-def]
        return (f.single_prefill_with_kv_cache(q, k, v, causal=True),)

    cache = (lambda: t(1024, 8, 128), lambda: t(1024, 8, 128))
    name = "single_decode_with_kv_cache"
    yield name + ", return_lse", name, (lambda: t(32, 128), *cache), decode
    yield name, name, (lambda: t(32, 128), *cache), decode_out
    yield name + ", tensor cores", name, (lambda: t(32, 128), *cache), decode_cores
    name = "single_prefill_with_kv_cache"
    yield name + ", causal, return_lse", name, (lambda: t(256, 32, 128), *cache), prefill
    yield name + ", causal", name, (lambda: t(256, 32, 128), *cache), prefill_out


def trtllm_decode(torch, f, t):  # type: ignore[no-untyped-def]
    """trtllm_batch_decode_with_kv_cache (0.6.0 on; flashinfer.decode's), stateless, "auto"
    choosing the device's kernel (trtllm-gen on SM100, xqa elsewhere): 16 requests of 32 query
    heads over 8 KV heads of 128, 64 to 1024 keys each in pages of 16 out of order, the cache HND
    as one tensor, as SGLang's trtllm_mha backend calls it (by keyword, out_dtype), with its lse
    (0.6.12 on; xqa refuses it: n/a there), and into out with tensor scales."""
    decode = getattr(f, "decode", None)
    if not hasattr(decode, "trtllm_batch_decode_with_kv_cache"):
        return
    import inspect

    fn = decode.trtllm_batch_decode_with_kv_cache
    name = "trtllm_batch_decode_with_kv_cache"
    generator = torch.Generator().manual_seed(1)
    lengths = torch.randint(64, 1025, (16,), generator=generator)
    pages = torch.randperm(16 * 64, generator=generator).int().reshape(16, 64).cuda()
    seq_lens = lengths.int().cuda()
    workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    inputs = (lambda: t(16, 32, 128), lambda: t(16 * 64, 2, 8, 16, 128))

    def sglang(q, kv):  # type: ignore[no-untyped-def]
        return (
            fn(
                query=q,
                kv_cache=kv,
                workspace_buffer=workspace,
                block_tables=pages,
                seq_lens=seq_lens,
                max_seq_len=1024,
                bmm1_scale=128**-0.5,
                bmm2_scale=1.0,
                window_left=-1,
                out_dtype=torch.bfloat16,
            ),
        )

    scales = (torch.full((), 128**-0.5, device="cuda"), torch.ones((), device="cuda"))

    def into(q, kv, o):  # type: ignore[no-untyped-def]
        fn(q, kv, workspace, pages, seq_lens, 1024, *scales, out=o)
        return (o,)

    yield name + ", as SGLang calls it", name, inputs, sglang
    yield name + " out=, tensor scales", name, (*inputs, lambda: t(16, 32, 128)), into
    if "return_lse" in inspect.signature(fn).parameters:

        def with_lse(q, kv):  # type: ignore[no-untyped-def]
            return fn(q, kv, workspace, pages, seq_lens, 1024, 128**-0.5, return_lse=True)

        yield name + ", return_lse", name, inputs, with_lse


def wrappers(torch, f, t):  # type: ignore[no-untyped-def]
    """The decode wrapper's run() after plan(), planned once before the compiled calls and the
    capture, as engines plan a batch: 16 requests of 32 query heads over 8 KV heads of 128, in
    pages of 16 out of order (64 to 1024 tokens each), with its lse and without, a wrapper made
    with use_cuda_graph=True (its page table in buffers of its own), as engines capture it, and
    the deprecated forward() twice with two scales, as SGLang calls it."""
    name = "batch_decode_with_paged_kv_cache_run"
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(64, 1025, (16,), generator=generator)
    pages = (lengths + 15) // 16
    total = int(pages.sum())
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), pages.cumsum(0)]).int().cuda()
    indices = torch.randperm(total, generator=generator).int().cuda()
    last = ((lengths - 1) % 16 + 1).int().cuda()

    def workspace():  # type: ignore[no-untyped-def]
        return torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device="cuda")

    plain = f.BatchDecodeWithPagedKVCacheWrapper(workspace(), "NHD")
    graphed = f.BatchDecodeWithPagedKVCacheWrapper(
        workspace(),
        "NHD",
        use_cuda_graph=True,
        paged_kv_indptr_buffer=indptr.clone(),
        paged_kv_indices_buffer=indices.clone(),
        paged_kv_last_page_len_buffer=last.clone(),
    )
    for wrapper in (plain, graphed):
        wrapper.plan(indptr, indices, last, 32, 8, 128, 16, q_data_type=torch.bfloat16)
    inputs = (lambda: t(16, 32, 128), lambda: t(total, 2, 16, 8, 128))
    yield name + ", return_lse", name, inputs, lambda q, kv: plain.run(q, kv, return_lse=True)
    yield name, name, inputs, lambda q, kv: (plain.run(q, kv),)
    yield name + ", use_cuda_graph=True", name, inputs, lambda q, kv: (graphed.run(q, kv),)
    # SGLang's call: the deprecated forward(), which sets the scale on the wrapper first; twice,
    # with two scales, so that a call that ran with the state the other left would differ.
    forward = "batch_decode_with_paged_kv_cache_forward"

    def scaled(q, kv):  # type: ignore[no-untyped-def]
        return (plain.forward(q, kv, sm_scale=0.1), plain.forward(q, kv, sm_scale=0.2))

    yield forward + ", two scales", forward, inputs, scaled
    yield from prefill_wrappers(torch, f, t, generator, workspace)


def prefill_wrappers(torch, f, t, generator, workspace):  # type: ignore[no-untyped-def]
    """The paged prefill wrapper's run() after plan(): 8 requests of 1 to 64 new tokens over 64
    to 1024 keys in pages of 16 out of order, causal, with its lse and without, with out given
    (vLLM's call), a wrapper made with use_cuda_graph=True, and the deprecated forward() twice
    with two scales, causal (SGLang's call)."""
    name = "batch_prefill_with_paged_kv_cache_run"
    tokens = torch.randint(1, 65, (8,), generator=generator)
    lengths = torch.randint(64, 1025, (8,), generator=generator)
    pages = (lengths + 15) // 16
    total, count = int(pages.sum()), int(tokens.sum())

    qo, indptr = _offsets(torch, tokens), _offsets(torch, pages)
    indices = torch.randperm(total, generator=generator).int().cuda()
    last = ((lengths - 1) % 16 + 1).int().cuda()
    plain = f.BatchPrefillWithPagedKVCacheWrapper(workspace(), "NHD")
    graphed = f.BatchPrefillWithPagedKVCacheWrapper(
        workspace(),
        "NHD",
        use_cuda_graph=True,
        qo_indptr_buf=qo.clone(),
        paged_kv_indptr_buf=indptr.clone(),
        paged_kv_indices_buf=indices.clone(),
        paged_kv_last_page_len_buf=last.clone(),
    )
    for wrapper in (plain, graphed):
        wrapper.plan(
            qo, indptr, indices, last, 32, 8, 128, 16, causal=True, q_data_type=torch.bfloat16
        )
    inputs = (lambda: t(count, 32, 128), lambda: t(total, 2, 16, 8, 128))
    yield name + ", return_lse", name, inputs, lambda q, kv: plain.run(q, kv, return_lse=True)
    yield name, name, inputs, lambda q, kv: (plain.run(q, kv),)

    def given(q, kv):  # type: ignore[no-untyped-def]
        out = torch.empty_like(q)
        plain.run(q, kv, out=out)
        return (out,)

    yield name + ", out given", name, inputs, given
    yield name + ", use_cuda_graph=True", name, inputs, lambda q, kv: (graphed.run(q, kv),)
    forward = "batch_prefill_with_paged_kv_cache_forward"

    def scaled(q, kv):  # type: ignore[no-untyped-def]
        first = plain.forward(q, kv, causal=True, sm_scale=0.1)
        return (first, plain.forward(q, kv, causal=True, sm_scale=0.2))

    yield forward + ", two scales, causal", forward, inputs, scaled
    yield from ragged_wrappers(torch, f, t, generator, workspace)


def _offsets(torch, sizes):  # type: ignore[no-untyped-def]
    """Each request's start on the device, from their sizes: (0, *sizes.cumsum()) as int32."""
    return torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)]).int().cuda()


def ragged_wrappers(torch, f, t, generator, workspace):  # type: ignore[no-untyped-def]
    """The ragged prefill wrapper's run() after plan(): 8 requests of 1 to 64 new tokens over 64
    to 1024 keys and values of their own, causal, with its lse and without, with out given, and
    the deprecated forward() twice with two scales, causal (SGLang's extend)."""
    name = "batch_prefill_with_ragged_kv_cache_run"
    tokens = torch.randint(1, 65, (8,), generator=generator)
    lengths = torch.randint(64, 1025, (8,), generator=generator)
    count, keys = int(tokens.sum()), int(lengths.sum())

    plain = f.BatchPrefillWithRaggedKVCacheWrapper(workspace(), "NHD", backend="fa2")
    plain.plan(
        _offsets(torch, tokens),
        _offsets(torch, lengths),
        32,
        8,
        128,
        causal=True,
        q_data_type=torch.bfloat16,
    )
    inputs = (lambda: t(count, 32, 128), lambda: t(keys, 8, 128), lambda: t(keys, 8, 128))
    yield name + ", return_lse", name, inputs, lambda q, k, v: plain.run(q, k, v, return_lse=True)
    yield name, name, inputs, lambda q, k, v: (plain.run(q, k, v),)

    def given(q, k, v):  # type: ignore[no-untyped-def]
        out = torch.empty_like(q)
        plain.run(q, k, v, out=out)
        return (out,)

    yield name + ", out given", name, inputs, given
    forward = "batch_prefill_with_ragged_kv_cache_forward"

    def scaled(q, k, v):  # type: ignore[no-untyped-def]
        first = plain.forward(q, k, v, causal=True, sm_scale=0.1)
        return (first, plain.forward(q, k, v, causal=True, sm_scale=0.2))

    yield forward + ", two scales, causal", forward, inputs, scaled


THRESHOLDS = {
    "top_p_sampling_from_probs": (0.9,),
    "top_k_sampling_from_probs": (50,),
    "top_k_top_p_sampling_from_probs": (50, 0.9),
    "min_p_sampling_from_probs": (0.1,),
}
"""Each sampler's own parameters after probs, as its cases and reduce_overhead's pass them."""


def samplers(torch, f):  # type: ignore[no-untyped-def]
    """The samplers' cases, with seed and offset given as tensors: the same random stream eager,
    compiled and replayed, so the samples compare bit for bit. A vocabulary of 65536 takes
    top_k_top_p_sampling_from_probs' top-k-first fast path (0.6.14 on)."""
    seed = torch.tensor([1234], dtype=torch.int64, device="cuda")
    offset = torch.tensor([0], dtype=torch.int64, device="cuda")
    given = {"seed": seed, "offset": offset}

    def probs(vocabulary):  # type: ignore[no-untyped-def]
        return lambda: torch.randn(64, vocabulary, device="cuda").softmax(-1)

    for name in (
        "top_p_sampling_from_probs",
        "top_k_sampling_from_probs",
        "min_p_sampling_from_probs",
    ):
        if not hasattr(f, name):
            continue
        sampler, numbers = getattr(f, name), THRESHOLDS[name]
        yield (
            name,
            name,
            (probs(32000),),
            lambda p, s=sampler, g=numbers: (s(p, *g, **given),),
        )
        if name == "top_p_sampling_from_probs":
            yield (
                name + " return_valid",
                name,
                (probs(32000),),
                lambda p, s=sampler, g=numbers: s(p, *g, return_valid=True, **given),
            )
    yield from renorms(torch, f, probs)
    name = "top_k_top_p_sampling_from_probs"
    if hasattr(f, name):
        for vocabulary in (32000, 65536):
            yield (
                f"{name} vocabulary {vocabulary}",
                name,
                (probs(vocabulary),),
                lambda p: (f.top_k_top_p_sampling_from_probs(p, 50, 0.9, **given),),
            )
        yield (
            name + " joint",
            name,
            (probs(32000),),
            lambda p: (
                f.top_k_top_p_sampling_from_probs(p, 50, 0.9, filter_apply_order="joint", **given),
            ),
        )


def renorms(torch, f, probs):  # type: ignore[no-untyped-def]
    """The renorm samplers on bfloat16 input: top_p_renorm_probs gives float32 (its fake says
    so), the top-k pair bfloat16; each output used after, so a wrong fake would compile the
    code after it for the wrong dtype. is_deterministic where the release has it: its default's
    float histogram may break ties one way eagerly and another compiled."""
    import inspect

    def deterministic(name):  # type: ignore[no-untyped-def]
        parameters = inspect.signature(getattr(f, name)).parameters
        return {"is_deterministic": True} if "is_deterministic" in parameters else {}

    def half(vocabulary):  # type: ignore[no-untyped-def]
        made = probs(vocabulary)
        return lambda: made().to(torch.bfloat16)

    for name, threshold in (
        ("top_p_renorm_probs", 0.9),
        ("top_k_renorm_probs", 50),
        ("top_k_mask_logits", 50),
    ):
        if hasattr(f, name):
            given = deterministic(name)
            yield (
                name + " bfloat16",
                name,
                (half(32000),),
                lambda p, n=name, t=threshold, d=given: (getattr(f, n)(p, t, **d) * 2,),
            )


def reduce_overhead(torch, f):  # type: ignore[no-untyped-def]
    """The samplers under mode="reduce-overhead": with seed and offset tensors (inside Inductor's
    CUDA graphs), and without (the op tagged cudagraph_unsafe, kept out of them)."""
    seed = torch.tensor([1234], dtype=torch.int64, device="cuda")
    offset = torch.tensor([0], dtype=torch.int64, device="cuda")
    makers = (lambda: torch.randn(64, 32000, device="cuda").softmax(-1),)
    for name in (
        "top_p_sampling_from_probs",
        "top_k_top_p_sampling_from_probs",
        "min_p_sampling_from_probs",
    ):
        if not hasattr(f, name):
            continue
        sampler, given = getattr(f, name), THRESHOLDS[name]
        yield (
            name + " with seed and offset tensors",
            name,
            makers,
            lambda p, s=sampler, g=given: (s(p, *g, seed=seed, offset=offset),),
            True,
        )
        yield (
            name + " without seed and offset",
            name,
            makers,
            lambda p, s=sampler, g=given: (s(p, *g),),
            False,
        )


def quantizers(torch, f, t):  # type: ignore[no-untyped-def]
    """The quantizers' cases. Their shapes need no padding (rows a multiple of 128, scale columns
    of 4), and every expert's mask covers all its rows: every byte compared is one the kernel
    writes. Before SM100 FlashInfer builds its FP4 and MXFP8 quantization kernels with empty
    bodies: they write nothing, and compared unwritten bytes FAILed on an H200 (docs/gpu.md).
    Two eager calls over memory filled two ways should differ there, and make the cases n/a:
    expected, not yet seen for these cases."""
    if hasattr(f, "mxfp8_quantize"):
        # Called from a function, as a caller's code calls it: Dynamo replaces the entry point
        # where it meets a call of it, not where the compiled function is the entry point.
        yield (
            "mxfp8_quantize",
            "mxfp8_quantize",
            (lambda: t(256, 4096),),
            lambda x: f.mxfp8_quantize(x),
        )
        yield (
            "mxfp8_quantize linear",
            "mxfp8_quantize",
            (lambda: t(2, 128, 1024),),
            lambda x: f.mxfp8_quantize(x, False),
        )
    one = torch.ones(1, device="cuda")
    if hasattr(f, "nvfp4_batched_quantize"):
        yield (
            "nvfp4_batched_quantize",
            "nvfp4_batched_quantize",
            (lambda: t(4, 128, 1024),),
            lambda a: f.nvfp4_batched_quantize(a, one),
        )
    experts = 4
    mask = torch.full((experts,), 128, dtype=torch.int32, device="cuda")
    scales = torch.ones(experts, device="cuda")
    for name, k in (
        ("scaled_fp4_grouped_quantize", 1024),
        ("silu_and_mul_scaled_nvfp4_experts_quantize", 2048),
    ):
        if hasattr(f, name):
            yield (
                name,
                name,
                (lambda k=k: t(experts, 128, k),),
                lambda a, n=name: getattr(f, n)(a, mask, scales),
            )
    if hasattr(f, "block_scale_interleave"):
        uint8 = torch.uint8

        def unswizzled():  # type: ignore[no-untyped-def]
            return torch.randint(0, 255, (256, 64), dtype=uint8, device="cuda")

        yield (
            "block_scale_interleave",
            "block_scale_interleave",
            (unswizzled,),
            lambda x: (f.block_scale_interleave(x),),
        )
        yield (
            "nvfp4_block_scale_interleave",
            "block_scale_interleave",
            (unswizzled,),
            lambda x: (f.nvfp4_block_scale_interleave(x),),
        )
        import inspect

        if "out" in inspect.signature(f.block_scale_interleave).parameters:

            def interleave_into(x, o):  # type: ignore[no-untyped-def]
                f.block_scale_interleave(x, out=o)
                return (o,)

            flat = lambda: torch.empty(256 * 64, dtype=uint8, device="cuda")  # noqa: E731
            yield (
                "block_scale_interleave out=",
                "block_scale_interleave",
                (unswizzled, flat),
                interleave_into,
            )


def moe_routing(torch, f):  # type: ignore[no-untyped-def]
    """fused_topk_deepseek (0.6.0 on), writing the weights and experts, as SGLang's op calls it:
    DeepSeek-V3's 256 experts in 8 groups, 4 groups chosen, top 8, float32 router logits."""
    fused = getattr(getattr(f, "fused_moe", None), "fused_topk_deepseek", None)
    if fused is None:
        return

    def route(scores, bias, values, indices):  # type: ignore[no-untyped-def]
        fused(scores, bias, 8, 4, 8, 2.5, values, indices, True)
        return values, indices

    yield (
        "fused_topk_deepseek",
        "fused_topk_deepseek",
        (
            lambda: torch.randn(128, 256, device="cuda"),
            lambda: torch.randn(256, device="cuda") * 0.1,
            lambda: torch.empty(128, 8, device="cuda"),
            lambda: torch.empty(128, 8, dtype=torch.int32, device="cuda"),
        ),
        route,
    )


def fused_moe(torch, f):  # type: ignore[no-untyped-def]
    """trtllm_fp4_block_scale_moe (0.6.0 on) as SGLang calls it: by keyword, into an output of
    its own, tune_max_num_tokens the next power of two of the token count (output= only). 32
    experts, top 4, hidden 1024, intermediate 512. The weights are random bytes in the kernels'
    layouts (an FP4 value or scale is any byte): the same bytes in both calls, so compiled and
    eager must agree bit for bit. Every trtllm MoE kernel of 0.6.0 - 0.7.4 is built for SM100
    (get_trtllm_moe_sm100_module): below it the eager call is expected to fail, which makes the
    case n/a. Not yet run on any GPU."""
    moe = getattr(f, "fused_moe", None)
    fp4 = getattr(moe, "trtllm_fp4_block_scale_moe", None)
    if fp4 is None:
        return
    experts, top_k, hidden, inter, tokens = 32, 4, 1024, 512, 64
    fp8 = torch.float8_e4m3fn

    def u8(*shape):  # type: ignore[no-untyped-def]
        return lambda: torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda")

    def scales(*shape):  # type: ignore[no-untyped-def]
        # Block scales between 2**-4 and 2**2: no NaN, no infinity.
        return lambda: torch.randint(0x20, 0x48, shape, dtype=torch.uint8, device="cuda").view(fp8)

    def as_sglang(  # type: ignore[no-untyped-def]
        logits, states, scale, w1, w1_scale, w2, w2_scale, output
    ):
        one = torch.ones(experts, device="cuda")
        fp4(
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
            output1_scale_scalar=one,
            output1_scale_gate_scalar=one,
            output2_scale_scalar=one,
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
            tune_max_num_tokens=f.utils.next_positive_power_of_2(logits.shape[0]),
            output=output,
        )
        return (output,)

    yield (
        "trtllm_fp4_block_scale_moe as SGLang calls it",
        "trtllm_fp4_block_scale_moe",
        (
            lambda: torch.randn(tokens, experts, dtype=torch.bfloat16, device="cuda"),
            u8(tokens, hidden // 2),
            scales(tokens, hidden // 16),
            u8(experts, 2 * inter, hidden // 2),
            scales(experts, 2 * inter, hidden // 16),
            u8(experts, hidden, inter // 2),
            scales(experts, hidden, inter // 16),
            lambda: torch.empty(tokens, hidden, dtype=torch.bfloat16, device="cuda"),
        ),
        as_sglang,
    )


def run(torch, flashinfer):  # type: ignore[no-untyped-def]
    """Each case whose entry point has an op boundary, checked; the others named."""
    import importlib
    import importlib.util

    import flashinfer.utils

    # flashinfer does not import concat_ops (0.6.0 on) itself.
    if importlib.util.find_spec("flashinfer.concat_ops") is not None:
        importlib.import_module("flashinfer.concat_ops")

    boundaries = getattr(flashinfer.utils, "_fi_patch_boundaries", None)
    if boundaries is None:
        return "flashinfer.utils has no _fi_patch_boundaries: apply the op-* patches first"
    made = []
    for case, name, makers, fn in cases(torch, flashinfer):
        entry = boundaries.get(name)
        ready = entry is not None and entry.ready
        reason = entry.reason if entry is not None else "no op boundary here"
        made.append((case, name, ready, reason, makers, fn))
    results, left_out = check_made(torch, made)
    for case, name, makers, fn, seeded in reduce_overhead(torch, flashinfer):
        if not wanted(name):
            continue
        entry = boundaries.get(name)
        if entry is not None and entry.ready:
            results.append(check_reduce_overhead(torch, case, makers, fn, seeded))
        else:
            left_out[case + ", reduce-overhead"] = entry.reason if entry else "no op boundary"
    return results, left_out


if __name__ == "__main__":
    sys.exit(main(__doc__, run))
