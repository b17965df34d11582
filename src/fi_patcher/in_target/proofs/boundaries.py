# Proof of the op-* patches (fi-patch's op boundary for one public entry point each), run by
# prove.py inside the target (see its contract). One script for all of them: the patch under
# proof (ctx.answer["patch"], op-silu-and-mul say) names the entry point (silu_and_mul).
#
# For each call form of the entry point (positional, by keyword, with out=, with a batch
# dimension marked dynamic):
# - torch.compile(fullgraph=True) with a backend that records the graph and never runs it holds
#   exactly one fi_patch op (NAME, or NAME_out where out= is passed) and nothing else of
#   FlashInfer's, and starts no process;
# - an eager call, with the entry point's module getters stood in (the CPU has no kernel),
#   dispatches no op: the entry point runs as it is. The GEMMs first ask the device (answered as
#   a GPU host answers: compute capability 10.0) and allocate their output before the
#   workspace; the eager call stops at the workspace, and what it allocated is its output;
# - the op run eagerly (the traced path outside a trace: its body calls the entry point by
#   keyword, the getters stood in) and the op's fake, run the way Dynamo runs it (the traced
#   path under a FakeTensorMode), both give the shapes, strides and dtypes the eager call returns.
# And for each input the entry point refuses, the op and its fake raise the exception the eager
# call raises (its type).
# Unpatched, flashinfer.utils has no _fi_patch_boundaries and the trace stops in the JIT loader.


def forms(torch, f, name):
    """How the entry point is called: (what, a function of tensors, the tensors, the dimension
    marked dynamic or None), and the inputs it refuses: (what, the same). Each entry point's
    forms are its own function, in FORMS (the quantizers' in QUANTIZERS; the samplers' made by
    _sampling, the renorm samplers' by _renorm)."""

    def fn(*args, **kwargs):
        # Looked up at each call, as a caller's `flashinfer.NAME(...)` is.
        return getattr(f, name)(*args, **kwargs)

    if name in FORMS:
        return FORMS[name](torch, fn)
    if name in QUANTIZERS:
        return QUANTIZERS[name](torch, f, fn)
    if name in SAMPLERS:
        return _sampling(torch, f, fn, name)
    if name in RENORMS:
        return _renorm(torch, f, fn, name)
    if name == "concat_mla_k":
        return _concat_mla_k(torch)
    if name == "trtllm_batch_decode_with_kv_cache":
        # Not in flashinfer's namespace: flashinfer.decode's, where SGLang calls it.
        return _trtllm_decode(
            torch, lambda *a, **k: f.decode.trtllm_batch_decode_with_kv_cache(*a, **k)
        )
    if name == "fused_topk_deepseek":
        return _fused_topk_deepseek(torch, f)
    if name in MOE:
        return _trtllm_moe(torch, f, name)
    if name == "cutlass_fused_moe":
        return _cutlass_fused_moe(torch, f)
    if name in WRAPPERS:
        return WRAPPERS[name](torch, f)
    return None, None


def _bf16(torch, *shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


def _activation(torch, fn):
    def t(*shape):
        return _bf16(torch, *shape)

    calls = [
        ("positional", lambda x: fn(x), (t(4, 256),), None),
        ("by keyword", lambda x: fn(input=x, enable_pdl=False), (t(2, 3, 128),), None),
        ("out=", lambda x, o: fn(x, out=o), (t(4, 256), t(4, 128)), None),
        ("positional out", lambda x, o: fn(x, o, False), (t(4, 256), t(4, 128)), None),
        ("float16", lambda x: fn(x), (t(4, 64).half(),), None),
        ("a dynamic batch dimension", lambda x: fn(x) * 2, (t(8, 3, 256),), 0),
    ]
    refused = [
        ("an odd last dimension", lambda x: fn(x), (t(4, 255),)),
        ("out of the wrong shape", lambda x, o: fn(x, out=o), (t(4, 256), t(4, 64))),
    ]
    return calls, refused


def _mm_fp4(torch, fn):
    # a: (m, k/2) packed FP4; b: the (k/2, n) transposed view of an (n, k/2) weight; the block
    # scales' layout is the kernel's business, their dtype the check's.
    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    a = torch.randint(0, 255, (8, 64), dtype=torch.uint8)
    w = torch.randint(0, 255, (32, 64), dtype=torch.uint8)
    sa, sw = torch.empty(8, 8, dtype=fp8), torch.empty(32, 8, dtype=fp8)
    alpha = torch.ones(1)
    by_keyword = {"a_descale": sa, "out_dtype": torch.float16, "backend": "cutlass"}
    calls = [
        (
            "positional",
            lambda a, w: fn(a, w.T, sa, sw.T, alpha, bf16, None, 16, False, "cutlass"),
            (a, w),
            None,
        ),
        ("by keyword", lambda a, w: fn(a=a, b=w.T, b_descale=sw.T, **by_keyword), (a, w), None),
        (
            "out=",
            lambda a, w, o: fn(a, w.T, sa, sw.T, alpha, out=o, backend="cutlass"),
            (a, w, torch.empty(8, 32, dtype=bf16)),
            None,
        ),
        (
            "a dynamic batch dimension",
            lambda a, w: fn(a, w.T, sa, sw.T, alpha, backend="cutlass") + 1,
            (a, w),
            0,
        ),
    ]
    refused = [
        ("k that differs", lambda a, w: fn(a, w[:, :32].T, sa, sw.T, alpha), (a, w)),
        (
            "out_dtype float32",
            lambda a, w: fn(a, w.T, sa, sw.T, alpha, out_dtype=torch.float32),
            (a, w),
        ),
    ]
    return calls, refused


def _bmm_fp8(torch, fn):
    # A: (b, m, k); B: the (b, k, n) transposed view of a (b, n, k) weight.
    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    A, W = torch.randn(2, 8, 64).to(fp8), torch.randn(2, 32, 64).to(fp8)
    one = torch.ones(())
    by_keyword = {"A_scale": one, "B_scale": one, "dtype": torch.float16, "backend": "cublas"}
    calls = [
        ("positional", lambda A, W: fn(A, W.transpose(-2, -1), one, one, bf16), (A, W), None),
        ("by keyword", lambda A, W: fn(A=A, B=W.transpose(-2, -1), **by_keyword), (A, W), None),
        (
            "out=",
            lambda A, W, o: fn(A, W.transpose(-2, -1), one, one, bf16, out=o),
            (A, W, torch.empty(2, 8, 32, dtype=bf16)),
            None,
        ),
        (
            "a dynamic batch dimension",
            lambda A, W: fn(A, W.transpose(-2, -1), one, one, bf16) * 2,
            (torch.randn(4, 8, 64).to(fp8), torch.randn(4, 32, 64).to(fp8)),
            0,
        ),
    ]
    refused = [
        ("dtype float32", lambda A, W: fn(A, W.transpose(-2, -1), one, one, torch.float32), (A, W))
    ]
    return calls, refused


def _mm_fp8(torch, fn):
    # a: (m, k); b: the (k // 128, n, 128) weight prepare_low_latency_gemm_weights makes.
    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
    a, w, alpha = torch.randn(8, 256).to(fp8), torch.randn(2, 32, 128).to(fp8), torch.ones(1)
    calls = [
        ("positional", lambda a, w: fn(a, w, alpha), (a, w), None),
        (
            "by keyword",
            lambda a, w: fn(a=a, b=w, alpha=alpha, backend="trtllm_low_latency"),
            (a, w),
            None,
        ),
        (
            "out=",
            lambda a, w, o: fn(a, w, alpha, out=o),
            (a, w, torch.empty(8, 32, dtype=bf16)),
            None,
        ),
        ("a dynamic batch dimension", lambda a, w: fn(a, w) - 1, (a, w), 0),
    ]
    refused = [
        ("out_dtype float16", lambda a, w: fn(a, w, alpha, torch.float16), (a, w)),
        (
            "out of the wrong shape",
            lambda a, w, o: fn(a, w, alpha, out=o),
            (a, w, torch.empty(8, 16, dtype=bf16)),
        ),
    ]
    return calls, refused


# The quantizers run on meta tensors: a device that is not the CPU, as the kernels' own Python
# allocates for a GPU, with no memory behind it.
def _meta(torch, *shape, dtype=None):
    return torch.empty(*shape, dtype=dtype or torch.bfloat16, device="meta")


def _mxfp8_quantize(torch, f, fn):
    x = _meta(torch, 4, 256)
    layouts = f.SfLayout
    calls = [
        ("positional", lambda x: fn(x), (x,), None),
        (
            "by keyword, linear scales",
            lambda x: fn(input=x, is_sf_swizzled_layout=False, alignment=32, enable_pdl=False),
            (_meta(torch, 2, 3, 128),),
            None,
        ),
        (
            "8x4 scales",
            lambda x: fn(x, sf_swizzle_layout=layouts.layout_8x4),
            (_meta(torch, 12, 64),),
            None,
        ),
        ("alignment 128", lambda x: fn(x, True, 128), (_meta(torch, 5, 96),), None),
        ("float16 on the CPU", lambda x: fn(x), (torch.randn(4, 64).half(),), None),
        ("a dynamic batch dimension", lambda x: fn(x)[1], (_meta(torch, 8, 3, 128),), 0),
    ]
    refused = [
        ("a last dimension not a multiple of 32", lambda x: fn(x), (_meta(torch, 4, 48),)),
        ("an unknown backend", lambda x: fn(x, backend="triton"), (x,)),
        (
            "8x4 scales on the CPU",
            lambda x: fn(x, sf_swizzle_layout=layouts.layout_8x4),
            (torch.randn(4, 64),),
        ),
    ]
    return calls, refused


def _nvfp4_batched_quantize(torch, f, fn):
    scale = _meta(torch, 1, dtype=torch.float32)
    calls = [
        ("positional", lambda a: fn(a, scale), (_meta(torch, 2, 64, 128),), None),
        (
            "by keyword",
            lambda a: fn(a=a, a_global_sf=scale, sf_vec_size=16),
            (_meta(torch, 3, 200, 96),),
            None,
        ),
        ("a dynamic batch dimension", lambda a: fn(a, scale)[0], (_meta(torch, 4, 32, 64),), 0),
    ]
    refused = [("a 2-D input", lambda a: fn(a, scale), (_meta(torch, 64, 128),))]
    return calls, refused


def _experts(torch, f, fn, k):
    """scaled_fp4_grouped_quantize and silu_and_mul_scaled_nvfp4_experts_quantize. k: how many
    input columns make one quantized column (1; 2 for the silu experts: gate and up)."""
    mask = _meta(torch, 4, dtype=torch.int32)
    scales = _meta(torch, 4, dtype=torch.float32)
    calls = [
        ("positional", lambda a: fn(a, mask, scales), (_meta(torch, 4, 100, 128 * k),), None),
        (
            "by keyword",
            lambda a: fn(a=a, mask=mask, a_global_sf=scales),
            (_meta(torch, 4, 300, 80 * k),),
            None,
        ),
        (
            "a dynamic token dimension",
            lambda a: fn(a, mask, scales)[0],
            (_meta(torch, 4, 64, 64 * k),),
            1,
        ),
    ]
    refused = [
        ("k not a multiple of 16", lambda a: fn(a, mask, scales), (_meta(torch, 4, 8, 40 * k),))
    ]
    return calls, refused


def _block_scale_interleave(torch, f, fn):
    import inspect

    uint8 = torch.uint8
    calls = [
        ("positional", lambda x: fn(x), (_meta(torch, 100, 8, dtype=uint8),), None),
        (
            "by keyword, 3-D bfloat16",
            lambda x: fn(unswizzled_sf=x),
            (_meta(torch, 2, 130, 5),),
            None,
        ),
        (
            "by its other name",
            lambda x: f.nvfp4_block_scale_interleave(x),
            (_meta(torch, 128, 4, dtype=uint8),),
            None,
        ),
        ("a dynamic dimension", lambda x: fn(x), (_meta(torch, 300, 16, dtype=uint8),), 0),
    ]
    refused = [
        ("float32 scales", lambda x: fn(x), (_meta(torch, 128, 4, dtype=torch.float32),)),
        ("a 1-D input", lambda x: fn(x), (_meta(torch, 64, dtype=uint8),)),
    ]
    if "out" in inspect.signature(f.block_scale_interleave).parameters:
        out = (_meta(torch, 100, 8, dtype=uint8), _meta(torch, 1024, dtype=uint8))
        calls.append(("out=", lambda x, o: fn(x, out=o), out, None))
        wrong = (out[0], _meta(torch, 512, dtype=uint8))
        refused.append(("out of the wrong size", lambda x, o: fn(x, out=o), wrong))
    return calls, refused


def _concat_mla_k(torch):
    """concat_mla_k (flashinfer.concat_ops', which flashinfer does not export) writes k and
    returns nothing: each form returns k, whose layout the eager call, the op and its fake are
    compared on (prove checks that the op declares k written). Called as vLLM's op calls it
    (positionally, k fresh), by keyword, over a dynamic token count; refused: another backend
    (0.7.0 on)."""
    import inspect

    import flashinfer.concat_ops as concat_ops

    def fn(*args, **kwargs):
        concat_ops.concat_mla_k(*args, **kwargs)
        return args[0] if args else kwargs["k"]

    def parts(tokens):
        return (
            _meta(torch, tokens, 16, 192),
            _meta(torch, tokens, 16, 128),
            _meta(torch, tokens, 1, 64),
        )

    calls = [
        ("positional", lambda k, n, r: fn(k, n, r), parts(8), None),
        ("by keyword", lambda k, n, r: fn(k=k, k_nope=n, k_rope=r), parts(8), None),
        ("a dynamic token count", lambda k, n, r: fn(k, n, r), parts(24), 0),
    ]
    refused = []
    if "backend" in inspect.signature(concat_ops.concat_mla_k).parameters:
        refused.append(("another backend", lambda k, n, r: fn(k, n, r, backend="tile"), parts(8)))
    return calls, refused


def _single_decode(torch, fn):
    """single_decode_with_kv_cache on meta tensors: 32 query heads over 8 KV heads of 128, as a
    grouped-query model decodes; positionally, by keyword with return_lse, the HND layout with
    tensor cores and a v_scale, float16 with a sliding window and a soft cap, q a slice of a wider
    tensor (out contiguous), and a dynamic KV length; refused: an unknown pos_encoding_mode and an
    unknown kv_layout (KeyError)."""

    def cache(length=64, dtype=torch.bfloat16, hnd=False):
        shape = (8, length, 128) if hnd else (length, 8, 128)
        return _meta(torch, *shape, dtype=dtype), _meta(torch, *shape, dtype=dtype)

    q, (k, v) = _meta(torch, 32, 128), cache()
    half = _meta(torch, 32, 128, dtype=torch.float16)
    calls = [
        ("positional", lambda q, k, v: fn(q, k, v), (q, k, v), None),
        (
            "by keyword, return_lse",
            lambda q, k, v: fn(q=q, k=k, v=v, return_lse=True),
            (q, k, v),
            None,
        ),
        (
            "HND with tensor cores and a v_scale",
            lambda q, k, v: fn(q, k, v, "HND", use_tensor_cores=True, v_scale=0.5),
            (q, *cache(hnd=True)),
            None,
        ),
        (
            "float16, a sliding window and a soft cap",
            lambda q, k, v: fn(q, k, v, window_left=16, logits_soft_cap=30.0),
            (half, *cache(dtype=torch.float16)),
            None,
        ),
        (
            "q a slice of a wider tensor",
            lambda x, k, v: fn(x[:, :128], k, v),
            (_meta(torch, 32, 384), k, v),
            None,
        ),
        ("a dynamic KV length", lambda k, v, q: fn(q, k, v) * 2, (*cache(96), q), 0),
    ]
    refused = [
        (
            "an unknown pos_encoding_mode",
            lambda q, k, v: fn(q, k, v, pos_encoding_mode="XPOS"),
            (q, k, v),
        ),
        ("an unknown kv_layout", lambda q, k, v: fn(q, k, v, kv_layout="NDH"), (q, k, v)),
    ]
    return calls, refused


def _single_prefill(torch, fn):
    """single_prefill_with_kv_cache on meta tensors: 16 queries of 32 heads over 64 keys of 8
    heads; positionally, causal by keyword with return_lse, the HND layout with o_dtype float16, a
    value head dim of its own (192 and 128, as MLA's prefill), FP8 with o_dtype bfloat16, and a
    dynamic query length; refused: an unknown kv_layout (KeyError) and FP8 with a sliding window
    (AssertionError)."""
    fp8 = torch.float8_e4m3fn

    def kv(dtype=torch.bfloat16, hnd=False, heads=8, dim=128, value=128):
        shape = (heads, 64, dim) if hnd else (64, heads, dim)
        values = (*shape[:-1], value)
        return _meta(torch, *shape, dtype=dtype), _meta(torch, *values, dtype=dtype)

    q = _meta(torch, 16, 32, 128)
    q8 = _meta(torch, 16, 32, 128, dtype=fp8)
    calls = [
        ("positional", lambda q, k, v: fn(q, k, v), (q, *kv()), None),
        (
            "causal by keyword, return_lse",
            lambda q, k, v: fn(q=q, k=k, v=v, causal=True, return_lse=True),
            (q, *kv()),
            None,
        ),
        (
            "HND with o_dtype float16",
            lambda q, k, v: fn(q, k, v, kv_layout="HND", o_dtype=torch.float16),
            (q, *kv(hnd=True)),
            None,
        ),
        (
            "a value head dim of its own",
            lambda q, k, v: fn(q, k, v, causal=True),
            (_meta(torch, 16, 16, 192), *kv(heads=16, dim=192)),
            None,
        ),
        (
            "FP8 with o_dtype",
            lambda q, k, v: fn(q, k, v, o_dtype=torch.bfloat16),
            (q8, *kv(fp8)),
            None,
        ),
        ("a dynamic query length", lambda q, k, v: fn(q, k, v, causal=True) + 1, (q, *kv()), 0),
    ]
    refused = [
        ("an unknown kv_layout", lambda q, k, v: fn(q, k, v, kv_layout="NDH"), (q, *kv())),
        ("FP8 with a sliding window", lambda q, k, v: fn(q, k, v, window_left=8), (q8, *kv(fp8))),
    ]
    return calls, refused


def _trtllm_decode(torch, fn):
    """trtllm_batch_decode_with_kv_cache on meta tensors: 4 requests of 32 query heads over 8 KV
    heads of 128, pages of 16, the cache HND as one tensor (pages, 2, heads, page, dim); "auto"
    chooses trtllm-gen (the device answered as SM100, HOST), xqa by name. Positionally; by keyword
    as SGLang's trtllm_mha backend calls it (sinks, out_dtype); a (k, v) pair NHD; tensor scales;
    out given; xqa; out_dtype float16; a dynamic batch; a max_seq_len read from a dynamic size
    (a SymInt); from 0.6.12 return_lse, out and lse given, out given with lse asked for, and lse
    given alone, with and without return_lse. Refused: an out of another shape and out_dtype
    float32 on trtllm-gen (ValueError), an unknown backend (KeyError), out_dtype "nvfp4" on xqa
    (no schema type: the function's own body, as unpatched, ValueError); from 0.6.12 return_lse on
    xqa (NotImplementedError) and an lse of another shape (ValueError); from 0.7.0 the DCP
    speculative decode without an lse (left to the function's own body: ValueError)."""
    import inspect

    import flashinfer.decode

    parameters = inspect.signature(flashinfer.decode.trtllm_batch_decode_with_kv_cache).parameters
    q = _meta(torch, 4, 32, 128)
    kv = _meta(torch, 16, 2, 8, 16, 128)
    nhd = _meta(torch, 16, 16, 8, 128)
    tables = torch.empty(4, 4, dtype=torch.int32, device="meta")
    lengths = torch.empty(4, dtype=torch.int32, device="meta")
    space = torch.empty(1 << 20, dtype=torch.uint8, device="meta")
    sinks = torch.empty(32, dtype=torch.float32, device="meta")
    scale = torch.empty(1, dtype=torch.float32, device="meta")
    out = _meta(torch, 4, 32, 128)
    lse = torch.empty(4, 32, dtype=torch.float32, device="meta")
    paged = (q, kv, space, tables, lengths)

    def sglang(q, kv, space, tables, lengths, sinks):
        return fn(
            query=q,
            kv_cache=kv,
            workspace_buffer=space,
            block_tables=tables,
            seq_lens=lengths,
            max_seq_len=64,
            bmm1_scale=0.088,
            bmm2_scale=1.0,
            window_left=-1,
            sinks=sinks,
            out_dtype=torch.bfloat16,
        )

    calls = [
        ("positionally", lambda *a: fn(*a, 64, 0.088, 1.0), paged, None),
        ("by keyword as SGLang calls it", sglang, (*paged, sinks), None),
        (
            "a (k, v) pair, NHD",
            lambda q, k, v, *a: fn(q, (k, v), *a, 64, 0.088, kv_layout="NHD"),
            (q, nhd, nhd, space, tables, lengths),
            None,
        ),
        (
            "tensor scales",
            lambda *a: fn(*a[:5], 64, bmm1_scale=a[5], bmm2_scale=a[6]),
            (*paged, scale, scale),
            None,
        ),
        ("out given", lambda *a: fn(*a[:5], 64, 0.088, out=a[5]), (*paged, out), None),
        ("xqa", lambda *a: fn(*a, 64, 0.088, backend="xqa"), paged, None),
        ("out_dtype float16", lambda *a: fn(*a, 64, out_dtype=torch.float16), paged, None),
        ("a dynamic batch", lambda *a: fn(*a, 64, 0.088) * 2, paged, 0),
        (
            "a max_seq_len read from a dynamic size",
            lambda kv, q, *a: fn(q, kv, *a, kv.shape[0] * 16, 0.088),
            (kv, q, space, tables, lengths),
            0,
        ),
    ]
    refused = [
        (
            "an out of another shape",
            lambda *a: fn(*a[:5], 64, out=a[5]),
            (*paged, _meta(torch, 4, 32, 64)),
        ),
        ("out_dtype float32", lambda *a: fn(*a, 64, out_dtype=torch.float32), paged),
        ("an unknown backend", lambda *a: fn(*a, 64, backend="tensorrt"), paged),
        (
            'out_dtype "nvfp4" on xqa',
            lambda *a: fn(*a, 64, out_dtype="nvfp4", backend="xqa"),
            paged,
        ),
    ]
    if "return_lse" not in parameters:
        return calls, refused
    calls += [
        ("return_lse", lambda *a: fn(*a, 64, 0.088, return_lse=True), paged, None),
        (
            "out and lse given, return_lse",
            lambda *a: fn(*a[:5], 64, out=a[5], lse=a[6], return_lse=True),
            (*paged, out, lse),
            None,
        ),
        (
            "out given, lse asked for",
            lambda *a: fn(*a[:5], 64, out=a[5], return_lse=True),
            (*paged, out),
            None,
        ),
        (
            "lse given with return_lse, out allocated",
            lambda *a: fn(*a[:5], 64, lse=a[5], return_lse=True),
            (*paged, lse),
            None,
        ),
        # 0.6.12 leaves it unwritten, 0.6.13 on writes it: the out op either way.
        (
            "lse given without return_lse, out allocated",
            lambda *a: fn(*a[:5], 64, lse=a[5]),
            (*paged, lse),
            None,
        ),
    ]
    refused += [
        ("return_lse on xqa", lambda *a: fn(*a, 64, backend="xqa", return_lse=True), paged),
        (
            "an lse of another shape",
            lambda *a: fn(*a[:5], 64, lse=a[5], return_lse=True),
            (*paged, lse[:, :8]),
        ),
    ]
    if "causal_seqlens_kv_global" in parameters:
        # The function's own body (0.7.0 on), which refuses it before any kernel.
        refused.append(
            (
                "the DCP speculative decode without an lse",
                lambda *a: fn(*a, 64, causal_seqlens_kv_global=a[4]),
                paged,
            )
        )
    return calls, refused


def _batch_decode(torch, f):
    """BatchDecodeWithPagedKVCacheWrapper.run after plan(), on the CPU: 4 requests of 32 query
    heads over 8 KV heads of 128, pages of 16 (their KV lengths 1, 17, 40 and 64). The forms of
    _run_forms, then HND (a wrapper planned so), plan()'s o_data_type float16, a dynamic batch,
    and the deprecated forward() (SGLang's call, to its own op) and forward_return_lse()."""
    plain, hnd = _planned_decode(torch, f, "NHD"), _planned_decode(torch, f, "HND")
    halves = _planned_decode(torch, f, "NHD", o_data_type=torch.float16)
    q = torch.randn(4, 32, 128, dtype=torch.bfloat16)
    kv = torch.randn(8, 2, 16, 8, 128, dtype=torch.bfloat16)
    calls, refused = _run_forms(torch, plain, q, kv)
    calls += [
        ("HND", lambda q, kv: hnd.run(q, kv), (q, kv.transpose(2, 3).contiguous()), None),
        ("o_data_type float16", lambda q, kv: halves.run(q, kv) * 2, (q, kv), None),
        ("a dynamic batch", lambda q, kv: plain.run(q, kv) + 1, (q, kv), 0),
    ]
    # SGLang's call: forward() with the scales it sets on the wrapper.
    named = "forward() with sm_scale and logits_soft_cap, as SGLang calls it"
    calls += _alias_forms(plain, q, kv, named, sm_scale=0.1, logits_soft_cap=30.0)
    return calls, refused


def _run_forms(torch, plain, q, kv):
    """The forms every wrapper's run() takes, on `plain`: the cache as one tensor positionally,
    as a (k, v) pair with return_lse, with out and lse given, with out given and lse asked for
    (allocated in the graph), with PDL asked for (enable_pdl, passed to the op); refused: a cache
    that is neither a tensor nor a pair (a list: KeyError, from run() itself), an out of another
    dtype and an lse of another shape (ValueError, from the fake as from run())."""
    out = torch.empty(*q.shape[:-1], kv.shape[-1], dtype=q.dtype)
    lse = torch.empty(*q.shape[:2], dtype=torch.float32)
    calls = [
        ("the cache one tensor, positionally", lambda q, kv: plain.run(q, kv), (q, kv), None),
        (
            "a (k, v) pair, return_lse",
            lambda q, k, v: plain.run(q, (k, v), return_lse=True),
            (q, kv[:, 0], kv[:, 1]),
            None,
        ),
        (
            "out and lse given",
            lambda q, kv, out, lse: plain.run(q, kv, out=out, lse=lse, return_lse=True),
            (q, kv, out, lse),
            None,
        ),
        (
            "out given, lse asked for",
            lambda q, kv, out: plain.run(q, kv, out=out, return_lse=True),
            (q, kv, out),
            None,
        ),
        ("PDL (enable_pdl=True)", lambda q, kv: plain.run(q, kv, enable_pdl=True), (q, kv), None),
    ]
    refused = [
        ("a cache in a list", lambda q, k, v: plain.run(q, [k, v]), (q, kv[:, 0], kv[:, 1])),
        ("an out of another dtype", lambda q, kv, o: plain.run(q, kv, out=o), (q, kv, out.half())),
        (
            "an lse of another shape",
            lambda q, kv, o, s: plain.run(q, kv, out=o, lse=s, return_lse=True),
            (q, kv, out, lse[:2]),
        ),
    ]
    return calls, refused


def _alias_forms(plain, q, kv, named, **state):
    """The deprecated forward() (the form `named`) with the state it sets on the wrapper, as
    SGLang calls it, and forward_return_lse(), where the release has them."""
    calls = []
    if hasattr(plain, "forward"):
        calls.append((named, lambda q, kv: plain.forward(q, kv, **state), (q, kv), None))
    if hasattr(plain, "forward_return_lse"):
        calls.append(
            ("forward_return_lse()", lambda q, kv: plain.forward_return_lse(q, kv), (q, kv), None)
        )
    return calls


def _batch_prefill(torch, f):
    """BatchPrefillWithPagedKVCacheWrapper.run after plan(), on the CPU: 4 requests of 3, 2, 1
    and 3 new tokens, 32 query heads over 8 KV heads of 128, pages of 16 (their KV lengths 3, 17,
    40 and 64). The forms of _run_forms, then HND, causal, plan()'s o_data_type float16, a
    dynamic token count, the deprecated forward() (SGLang's call, causal, to its own op) and
    forward_return_lse(), and an lse given heads first (lse_layout "HN", 0.7.1 on)."""
    import inspect

    plain, hnd = _planned_prefill(torch, "NHD"), _planned_prefill(torch, "HND")
    causal = _planned_prefill(torch, "NHD", causal=True)
    halves = _planned_prefill(torch, "NHD", o_data_type=torch.float16)
    q = torch.randn(9, 32, 128, dtype=torch.bfloat16)
    kv = torch.randn(8, 2, 16, 8, 128, dtype=torch.bfloat16)
    calls, refused = _run_forms(torch, plain, q, kv)
    calls += [
        ("HND", lambda q, kv: hnd.run(q, kv), (q, kv.transpose(2, 3).contiguous()), None),
        ("causal", lambda q, kv: causal.run(q, kv) * 2, (q, kv), None),
        ("o_data_type float16", lambda q, kv: halves.run(q, kv) * 2, (q, kv), None),
        ("a dynamic token count", lambda q, kv: plain.run(q, kv) + 1, (q, kv), 0),
    ]
    named = "forward() causal with sm_scale and logits_soft_cap, as SGLang calls it"
    calls += _alias_forms(plain, q, kv, named, causal=True, sm_scale=0.1, logits_soft_cap=30.0)
    if "lse_layout" in inspect.signature(plain.run).parameters:
        heads_first = torch.empty(32, 9, dtype=torch.float32)
        calls.append(
            (
                "an lse given heads first (lse_layout HN), no out, return_lse",
                lambda q, kv, s: plain.run(q, kv, lse=s, return_lse=True, lse_layout="HN"),
                (q, kv, heads_first),
                None,
            )
        )
    return calls, refused


def _batch_ragged(torch, f):
    """BatchPrefillWithRaggedKVCacheWrapper.run after plan(), on the CPU: 4 requests of 3, 2, 1
    and 3 new tokens over 3, 17, 40 and 64 keys, 32 query heads over 8 KV heads of 128. Called as
    the paged wrappers' run() is (positionally, return_lse, out and lse given, out given and lse
    asked for, PDL), then HND, causal, plan()'s o_data_type float16 (allocated bfloat16 before
    0.7.0, as run() does), a dynamic token count, the deprecated forward() (SGLang's extend,
    causal, to its own op) and forward_return_lse(), and an lse given heads first (lse_layout "HN",
    0.7.1 on); refused: an out of another dtype, an lse of another shape."""
    import inspect

    plain, hnd = _planned_ragged(torch, "NHD"), _planned_ragged(torch, "HND")
    causal = _planned_ragged(torch, "NHD", causal=True)
    halves = _planned_ragged(torch, "NHD", o_data_type=torch.float16)
    q = torch.randn(9, 32, 128, dtype=torch.bfloat16)
    k, v = torch.randn(124, 8, 128, dtype=torch.bfloat16), torch.randn(124, 8, 128).bfloat16()
    out = torch.empty(9, 32, 128, dtype=torch.bfloat16)
    lse = torch.empty(9, 32, dtype=torch.float32)
    calls = [
        ("positionally", lambda q, k, v: plain.run(q, k, v), (q, k, v), None),
        ("return_lse", lambda q, k, v: plain.run(q, k, v, return_lse=True), (q, k, v), None),
        (
            "out and lse given",
            lambda q, k, v, o, s: plain.run(q, k, v, out=o, lse=s, return_lse=True),
            (q, k, v, out, lse),
            None,
        ),
        (
            "out given, lse asked for",
            lambda q, k, v, o: plain.run(q, k, v, out=o, return_lse=True),
            (q, k, v, out),
            None,
        ),
        (
            "PDL (enable_pdl=True)",
            lambda q, k, v: plain.run(q, k, v, enable_pdl=True),
            (q, k, v),
            None,
        ),
        (
            "HND",
            lambda q, k, v: hnd.run(q, k, v),
            (q, k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()),
            None,
        ),
        ("causal", lambda q, k, v: causal.run(q, k, v) * 2, (q, k, v), None),
        ("o_data_type float16", lambda q, k, v: halves.run(q, k, v) * 2, (q, k, v), None),
        ("a dynamic token count", lambda q, k, v: plain.run(q, k, v) + 1, (q, k, v), 0),
    ]
    named = "forward() causal with sm_scale and logits_soft_cap, as SGLang's extend calls it"
    state = {"causal": True, "sm_scale": 0.1, "logits_soft_cap": 30.0}
    calls.append((named, lambda q, k, v: plain.forward(q, k, v, **state), (q, k, v), None))
    calls.append(
        ("forward_return_lse()", lambda q, k, v: plain.forward_return_lse(q, k, v), (q, k, v), None)
    )
    if "lse_layout" in inspect.signature(plain.run).parameters:
        heads_first = torch.empty(32, 9, dtype=torch.float32)
        calls.append(
            (
                "an lse given heads first (lse_layout HN), no out, return_lse",
                lambda q, k, v, s: plain.run(q, k, v, lse=s, return_lse=True, lse_layout="HN"),
                (q, k, v, heads_first),
                None,
            )
        )
    refused = [
        (
            "an out of another dtype",
            lambda q, k, v, o: plain.run(q, k, v, out=o),
            (q, k, v, out.half()),
        ),
        (
            "an lse of another shape",
            lambda q, k, v, o, s: plain.run(q, k, v, out=o, lse=s, return_lse=True),
            (q, k, v, out, lse[:2]),
        ),
    ]
    return calls, refused


def _planned_ragged(torch, kv_layout, **more):
    """A BatchPrefillWithRaggedKVCacheWrapper on the CPU, planned for 4 requests of 3, 2, 1 and 3
    new tokens over 3, 17, 40 and 64 keys, 32 query heads over 8 KV heads of 128."""
    qo_indptr = torch.tensor([0, 3, 5, 6, 9], dtype=torch.int32)
    kv_indptr = torch.tensor([0, 3, 20, 60, 124], dtype=torch.int32)
    planned = (qo_indptr, kv_indptr, 32, 8, 128)
    wrapper_class = "BatchPrefillWithRaggedKVCacheWrapper"
    return _planned(torch, "prefill", wrapper_class, planned, kv_layout, more)


def _planned_prefill(torch, kv_layout, **more):
    """A BatchPrefillWithPagedKVCacheWrapper on the CPU, planned for 4 requests of 3, 2, 1 and 3
    new tokens over KV lengths 3, 17, 40 and 64 (pages of 16), 32 query heads over 8 KV heads of
    128."""
    qo_indptr = torch.tensor([0, 3, 5, 6, 9], dtype=torch.int32)
    indptr = torch.tensor([0, 1, 3, 6, 10], dtype=torch.int32)
    indices = torch.arange(10, dtype=torch.int32) % 8
    last = torch.tensor([3, 1, 8, 16], dtype=torch.int32)
    planned = (qo_indptr, indptr, indices, last, 32, 8, 128, 16)
    wrapper_class = "BatchPrefillWithPagedKVCacheWrapper"
    return _planned(torch, "prefill", wrapper_class, planned, kv_layout, more)


def _planned_decode(torch, f, kv_layout, **more):
    """A BatchDecodeWithPagedKVCacheWrapper on the CPU, planned for 4 requests of 32 query heads
    over 8 KV heads of 128, pages of 16 (their KV lengths 1, 17, 40 and 64)."""
    indptr = torch.tensor([0, 1, 3, 6, 10], dtype=torch.int32)
    indices = torch.arange(10, dtype=torch.int32) % 8
    last = torch.tensor([1, 1, 8, 16], dtype=torch.int32)
    planned = (indptr, indices, last, 32, 8, 128, 16)
    return _planned(torch, "decode", "BatchDecodeWithPagedKVCacheWrapper", planned, kv_layout, more)


def _planned(torch, module, wrapper_class, planned, kv_layout, more):
    """A wrapper of flashinfer.MODULE on the CPU, planned as an engine plans it before its
    compiled region: its constructor's pinned host buffers unpinned (pinning needs a driver),
    the backend "auto" chooses fa2 (the choice asks the device), and the JIT module plan() builds
    stood in (Planned: run()'s kernel does nothing)."""
    import importlib

    space = vars(importlib.import_module("flashinfer." + module))
    saved = dict(space)
    for key, value in list(space.items()):
        if key.startswith("get_") and "module" in key and callable(value):
            space[key] = lambda *a, **k: Planned()
    space["torch"] = _Unpinned(torch)
    space["get_compute_capability"] = lambda device: (10, 0)
    space["determine_attention_backend"] = lambda *args, **kwargs: "fa2"
    # The ragged plan() moves auto's fa2 to fmha_v2 on SM120 (0.6.16 on) and to cudnn or cutlass
    # on SM100 (0.7.1 on): here it stays fa2.
    space["_blackwell_ragged_auto_upgrade"] = lambda *args, **kwargs: None
    space["_should_use_fmha_v2_sm120"] = lambda *args, **kwargs: False
    try:
        workspace = torch.empty(1024 * 1024, dtype=torch.uint8)
        wrapper = space[wrapper_class](workspace, kv_layout)
        bf16 = torch.bfloat16
        wrapper.plan(*planned, q_data_type=bf16, kv_data_type=bf16, **more)
    finally:
        space.clear()
        space.update(saved)
    return wrapper


class _Unpinned(object):
    """torch as a wrapper's module sees it while the wrapper is made and planned on a host
    without a driver: pin_memory=True asks for nothing."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if name in ("empty", "zeros", "tensor", "zeros_like", "empty_like"):

            def unpinned(*args, **kwargs):
                kwargs.pop("pin_memory", None)
                return value(*args, **kwargs)

            return unpinned
        return value


def _fused_topk_deepseek(torch, f):
    """fused_topk_deepseek (flashinfer.fused_moe's) writes topk_values, topk_indices and, where
    given, routing_replay_out, and returns nothing: each form returns them (prove checks that the
    op declares them written). Called as
    SGLang's op calls it (DeepSeek-V3's 256 experts in 8 groups, 4 of them chosen, top 8,
    positionally), by keyword, with routing_replay_out (0.6.8 on), over a dynamic token count;
    refused: a topk above the kernel's 8."""
    import inspect

    def fn(scores, bias, values, indices, *replay, topk=8):
        kwargs = {"routing_replay_out": replay[0]} if replay else {}
        f.fused_moe.fused_topk_deepseek(scores, bias, 8, 4, topk, 2.5, values, indices, **kwargs)
        return (values, indices, *replay)

    def problem(tokens, topk=8):
        return (
            _meta(torch, tokens, 256, dtype=torch.float32),
            _meta(torch, 256, dtype=torch.float32),
            _meta(torch, tokens, topk, dtype=torch.float32),
            _meta(torch, tokens, topk, dtype=torch.int32),
        )

    def by_keyword(scores, bias, values, indices):
        f.fused_moe.fused_topk_deepseek(
            scores=scores,
            bias=bias,
            n_group=8,
            topk_group=4,
            topk=8,
            routed_scaling_factor=2.5,
            topk_values=values,
            topk_indices=indices,
            launch_with_pdl=False,
        )
        return values, indices

    calls = [
        ("positional", fn, problem(16), None),
        ("by keyword", by_keyword, problem(16), None),
        ("a dynamic token count", fn, problem(40), 0),
    ]
    parameters = inspect.signature(f.fused_moe.fused_topk_deepseek).parameters
    if "routing_replay_out" in parameters:
        replay = (*problem(16), _meta(torch, 64, 8, dtype=torch.int16))
        calls.insert(2, ("routing_replay_out", fn, replay, None))
    refused = [("topk 9", lambda *a: fn(*a, topk=9), problem(16, topk=9))]
    return calls, refused


MOE = (
    "trtllm_bf16_moe",
    "trtllm_fp4_block_scale_moe",
    "trtllm_fp8_block_scale_moe",
    "trtllm_fp8_per_tensor_scale_moe",
    "trtllm_fp8_per_channel_scale_moe",
    "trtllm_mxint4_block_scale_moe",
    "trtllm_bf16_routed_moe",
    "trtllm_fp4_block_scale_routed_moe",
    "trtllm_fp8_block_scale_routed_moe",
    "trtllm_fp8_per_tensor_scale_routed_moe",
    "trtllm_fp8_per_channel_scale_routed_moe",
    "trtllm_mxint4_block_scale_routed_moe",
)
"""The trtllm fused MoE, and the _routed_ variant of each (the routing given as topk_ids)."""


def _trtllm_moe(torch, f, name):
    """The trtllm fused MoE (flashinfer.fused_moe's), finalized, on meta tensors: 8 experts, top 2,
    a hidden size of 256, each entry point's tensors as _moe_inputs gives them. Called as SGLang
    calls it: by keyword, into its own output, with tune_max_num_tokens the next power of two of
    the token count (FlashInfer's next_positive_power_of_2, which Dynamo traces symbolically),
    over a dynamic token count; positionally with FlashInfer's defaults; with routing_replay_out;
    FP4 with bfloat16 activations; with valid_hidden_size where the release has it; FP8 per
    channel, which takes neither output nor routing_replay_out, with workspace_buffer (0.7.4 on).
    Refused: routing_replay_out of another dtype, an output of too few rows (MXINT4 from 0.7.0
    only, FP4 from 0.6.0: before, their kernel module's op takes any), a valid_hidden_size past
    the hidden size, FP8 per channel's float32 activations (and bfloat16 from 0.7.1). A _routed_
    variant takes a packed int32 topk_ids (expert << 16, a bfloat16 weight below) in the logits'
    place, and, where its annotation says so, a (topk_ids, topk_weights) pair too."""
    import inspect
    import typing

    def fused(*args, **kwargs):
        # Looked up at each call, as a caller's `flashinfer.fused_moe.NAME(...)` is.
        return getattr(f.fused_moe, name)(*args, **kwargs)

    parameters = inspect.signature(getattr(f.fused_moe, name)).parameters
    routed = "_routed_" in name
    base = name.replace("_routed_", "_")
    fp4 = base == "trtllm_fp4_block_scale_moe"
    experts, top_k, hidden, inter = 8, 2, 256, 128
    inputs, fixed = _moe_inputs(torch, base, experts, hidden, inter)

    def problem(tokens):
        if routed:
            routing = _meta(torch, tokens, top_k, dtype=torch.int32)
        else:
            routing = _meta(torch, tokens, experts, dtype=torch.float32)
        return (routing, *(_meta(torch, *shape(tokens), dtype=dtype) for _, shape, dtype in inputs))

    def named(arguments, **more):
        values = dict(
            **{"topk_ids" if routed else "routing_logits": arguments[0]},
            routing_bias=None,
            num_experts=experts,
            top_k=top_k,
            n_group=None,
            topk_group=None,
            intermediate_size=inter,
            local_expert_offset=0,
            local_num_experts=experts,
            routed_scaling_factor=None,
            routing_method_type=1,
            **{inputs[i][0]: arguments[1 + i] for i in range(len(arguments) - 1)},
            **fixed,
            **more,
        )
        # FP4's tile_tokens_dim (0.5, deprecated) has no default: None, as SGLang passed it.
        tile = parameters.get("tile_tokens_dim")
        if tile is not None and tile.default is inspect.Parameter.empty:
            values["tile_tokens_dim"] = None
        # FP8's n_group, topk_group and routed_scaling_factor are an int, an int and a float up
        # to 0.4.1, which its kernels take (no None): 0, 0 and 1.0 there.
        for key, value in (("n_group", 0), ("topk_group", 0), ("routed_scaling_factor", 1.0)):
            if getattr(parameters.get(key), "annotation", None) in (int, float, "int", "float"):
                values[key] = value
        return {k: v for k, v in values.items() if k in parameters}

    def power_of_two(tokens):
        return f.utils.next_positive_power_of_2(tokens)

    def by_keyword(*arguments):
        return fused(**named(arguments, do_finalize=True))

    def positional(*arguments):
        values = named(arguments)
        order = []
        for parameter in parameters:
            if parameter not in values:
                break
            order.append(values[parameter])
        return fused(*order)

    def into(*arguments):
        *arguments, output = arguments
        tokens = arguments[0].shape[0]
        more = {"tune_max_num_tokens": power_of_two(tokens), "do_finalize": True}
        return fused(**named(arguments, output=output, **more))

    def replayed(*arguments):
        *arguments, replay = arguments
        return fused(**named(arguments, routing_replay_out=replay))

    def output(tokens):
        return (*problem(tokens), _meta(torch, tokens, hidden))

    calls = [
        ("by keyword", by_keyword, problem(16), None),
        ("positional, FlashInfer's defaults", positional, problem(16), None),
        ("a dynamic token count", by_keyword, problem(40), 0),
    ]
    kinds = typing.get_args(parameters["topk_ids"].annotation) if routed else ()
    if any(typing.get_origin(kind) is tuple for kind in kinds):
        # Unpacked routing: int32 experts and bfloat16 weights, each (tokens, top_k).
        def paired(ids, weights, *arguments):
            return fused(**named(((ids, weights), *arguments), do_finalize=True))

        weights = _meta(torch, 16, top_k, dtype=torch.bfloat16)
        pair = (problem(16)[0], weights, *problem(16)[1:])
        calls.append(("a (topk_ids, topk_weights) pair", paired, pair, None))
    if "output" in parameters:
        calls.append(("out: output=, as SGLang calls it", into, output(16), None))
        calls.append(("out: output=, a dynamic token count", into, output(40), 0))
    refused = []
    if "routing_replay_out" in parameters:
        replay = _meta(torch, 64, top_k, dtype=torch.int16)
        calls.append(("writes: routing_replay_out", replayed, (*problem(16), replay), None))
        wrong = _meta(torch, 64, top_k, dtype=torch.int32)
        refused.append(("an int32 routing_replay_out", replayed, (*problem(16), wrong)))
        # 0.6.17 - 0.6.18.post1 refuse it beside fused shared experts, in the replay check.
        import flashinfer.fused_moe.core as core

        check = getattr(core, "_validate_routing_replay_out", None)
        if (
            check is not None
            and "num_fused_shared_experts" in parameters
            and "num_fused_shared_experts" in inspect.signature(check).parameters
        ):

            def shared(*arguments):
                *arguments, replay = arguments
                more = {"routing_replay_out": replay, "num_fused_shared_experts": 1}
                return fused(**named(arguments, **more))

            refused.append(
                ("routing_replay_out beside a shared expert", shared, (*problem(16), replay))
            )
    # MXINT4's kernel module's op checks a given output from 0.7.0 (with valid_hidden_size) only,
    # FP4's from 0.6.0 (0.2.10 - 0.5.3's, which take tile_tokens_dim, take any).
    mxint4 = base == "trtllm_mxint4_block_scale_moe"
    unchecked = (mxint4 and "valid_hidden_size" not in parameters) or (
        fp4 and "tile_tokens_dim" in parameters
    )
    if "output" in parameters:
        short = (*problem(16), output(8)[-1])
        if not unchecked:
            refused.append(("an output of too few rows", into, short))
        else:
            calls.append(("out: an output of too few rows, unchecked", into, short, None))
    if base == "trtllm_fp8_per_channel_scale_moe":
        # The kernel module's op takes bfloat16 activations in 0.7.0; the function refuses them
        # from 0.7.1, where its own check names float8_e4m3fn (its code, not the routed one's).
        def activations(dtype):
            return (problem(16)[0], _meta(torch, 16, hidden, dtype=dtype), *problem(16)[2:])

        entry = getattr(f.utils, "_fi_patch_boundaries", {}).get(name)
        own = inspect.unwrap(entry.fn if entry is not None else getattr(f.fused_moe, name))
        bf16 = ("bfloat16 activations", by_keyword, activations(torch.bfloat16))
        if "float8_e4m3fn" in own.__code__.co_names:
            refused.append(bf16)
        else:
            calls.append((*bf16, None))
        refused.append(("float32 activations", by_keyword, activations(torch.float32)))
    if fp4:
        # MXFP4 weights with bfloat16 activations, which have no scales.
        def unscaled(logits, states, *weights):
            return by_keyword(logits, states, None, *weights)

        bf16 = (problem(16)[0], _meta(torch, 16, hidden), *problem(16)[3:])
        calls.append(("bfloat16 activations", unscaled, bf16, None))
    if "valid_hidden_size" in parameters:

        def narrower(width):
            return lambda *a: fused(**named(a, valid_hidden_size=width))

        calls.append(("valid_hidden_size", narrower(200), problem(16), None))
        refused.append(("valid_hidden_size past the hidden size", narrower(300), problem(16)))
    if "workspace_buffer" in parameters and "routing_replay_out" not in parameters:
        # Its one written parameter (0.7.4 on): FP8 per channel and the routed FP4, FP8 block
        # scales and MXINT4 take no routing_replay_out.
        def carved(*arguments):
            *arguments, workspace = arguments
            return fused(**named(arguments, workspace_buffer=workspace))

        workspace = _meta(torch, 1 << 20, dtype=torch.uint8)
        calls.append(("writes: workspace_buffer", carved, (*problem(16), workspace), None))
    return calls, refused


def _cutlass_fused_moe(torch, f):
    """cutlass_fused_moe (flashinfer.fused_moe's) on meta tensors, bfloat16 unquantized (and
    two quantized kinds): 8 experts, top 2, a hidden size of 256, an intermediate size of 128,
    the routing as token_selected_experts (int32) and token_final_scales (float32). Called by
    keyword; positionally with FlashInfer's defaults; over a dynamic token count; into its own
    output as SGLang calls it (tune_max_num_tokens the next power of two of the token count,
    the list's first taken), and the whole list (of four; of one before 0.3.0); with an
    ActivationType (0.5.0 on); FP8 and NVFP4 weights; with workspace_buffer (0.6.16 on).
    Refused: an output of too few rows, the min-latency mode; from 0.7.2 a clamped_relu2_limit
    without ClampedRelu2, and ClampedRelu2 without its limit. profile_ids of one tactic (0.6.16
    on) is refused where the kernel module reads them and a call form where it runs the
    autotuner whatever they say (0.6.16.post3 - 0.6.17): the eager call says which, and the fake
    must agree either way. Before 0.3.0, the flags the function itself refuses
    (_cutlass_listing_one)."""
    import inspect

    import flashinfer.fused_moe.core as core

    def fused(*args, **kwargs):
        # Looked up at each call, as a caller's `flashinfer.fused_moe.cutlass_fused_moe(...)` is.
        return f.fused_moe.cutlass_fused_moe(*args, **kwargs)

    parameters = inspect.signature(f.fused_moe.cutlass_fused_moe).parameters
    experts, top_k, hidden, inter = 8, 2, 256, 128
    fp8, bf16 = torch.float8_e4m3fn, torch.bfloat16

    def problem(tokens):
        return (
            _meta(torch, tokens, hidden),
            _meta(torch, tokens, top_k, dtype=torch.int32),
            _meta(torch, tokens, top_k, dtype=torch.float32),
            _meta(torch, experts, 2 * inter, hidden),
            _meta(torch, experts, hidden, inter),
        )

    def named(arguments, **more):
        x, ids, scales, fc1, fc2 = arguments[:5]
        values = {
            "input": x,
            "token_selected_experts": ids,
            "token_final_scales": scales,
            "fc1_expert_weights": fc1,
            "fc2_expert_weights": fc2,
            "output_dtype": torch.bfloat16,
            "quant_scales": [],
        }
        values.update(more)
        return values

    def by_keyword(*arguments):
        return fused(**named(arguments))

    def positional(*arguments):
        return fused(*arguments, torch.bfloat16, [])

    def listed(*arguments):
        *arguments, output = arguments
        tokens = f.utils.next_positive_power_of_2(arguments[0].shape[0])
        return fused(**named(arguments, output=output, tune_max_num_tokens=tokens))

    def into(*arguments):
        return listed(*arguments)[0]

    def sized(*arguments):
        # The output allocated from the input's token count, as SGLang allocates it: the two
        # counts are one symbol over a dynamic token count.
        return into(*arguments, arguments[0].new_empty((arguments[0].shape[0], hidden)))

    def activated(*arguments):
        return fused(**named(arguments, activation_type=core.ActivationType.Swiglu))

    def quantized(*arguments):
        # The kind's quant_scales follow its five tensors.
        return fused(**named(arguments[:5], quant_scales=list(arguments[5:])))

    def kind(activations, weights, packed, scales):
        # The kernel reads the scales; the allocation does not.
        sizes = (experts, hidden, inter)
        return _cutlass_kind(torch, problem(16), sizes, activations, weights, packed, scales)

    def output(tokens):
        return (*problem(tokens), _meta(torch, tokens, hidden))

    calls = [
        ("by keyword", by_keyword, problem(16), None),
        ("positional, FlashInfer's defaults", positional, problem(16), None),
        ("a dynamic token count", by_keyword, problem(40), 0),
        ("out: output=, as SGLang calls it", into, output(16), None),
        ("out: output=, a dynamic token count", sized, problem(40), 0),
        ("out: output=, the whole list", listed, output(16), None),
        # activation_type arrives in 0.5.0 (before it, Swiglu).
        *(
            [("an ActivationType", activated, problem(16), None)]
            if "activation_type" in parameters
            else []
        ),
        # FP8 with per-tensor scales (four), and NVFP4 weights packed sixteen to an int64 with
        # bfloat16 activations (six scales): the output stays output_dtype, its width
        # fc2_expert_weights' rows.
        ("FP8 weights and activations", quantized, kind(fp8, fp8, 1, 4), None),
        ("NVFP4 weights, bfloat16 activations", quantized, kind(bf16, torch.int64, 16, 6), None),
    ]

    def latency(*arguments):
        return fused(**named(arguments, min_latency_mode=True))

    refused = [
        ("an output of too few rows", into, (*problem(16), output(8)[-1])),
        ("the min-latency mode", latency, problem(16)),
    ]
    more, limits = _cutlass_by_release(torch, core, parameters, fused, named, problem(16))
    return calls + more, refused + limits


def _cutlass_listing_one(parameters, fused, named, problem, getter, standing):
    """Where the kernel module returns a list of one (before 0.4.0; the eager call says so), the
    function refuses what the Blackwell build lacks before it asks the device, and its fake
    must too: each flag the release has, refused where the eager call raises, a call form where
    it does not (0.2.13's W4 group scaling and MXFP8 activations). The eager calls run on the
    getter's module, with `standing`, as the proof runs every eager call."""
    read = _run(lambda *a: fused(**named(a)), problem, getter, standing)
    calls, refused = [], []
    if read[0] != "returns" or len(read[1]) != 1:
        return calls, refused
    flags = (
        "use_deepseek_fp8_block_scale",
        "use_w4a8_group_scaling",
        # 0.2.13's name for it, which the function takes.
        "use_w4_group_scaling",
        "use_mxfp8_act_scaling",
    )
    for flag in (f for f in flags if f in parameters):

        def flagged(*arguments, flag=flag):
            return fused(**named(arguments, **{flag: True}))

        if _run(flagged, problem, getter, standing)[0] == "raises":
            refused.append(("%s=True" % flag, flagged, problem))
        else:
            calls.append(("%s=True, which it takes" % flag, flagged, problem, None))
    return calls, refused


def _cutlass_kind(torch, problem, sizes, activations, weights, packed, scales):
    """A quantized kind's tensors for cutlass_fused_moe: its activations, its weights with
    `packed` values to an element along the last dimension, and `scales` float32 quant_scales."""
    experts, hidden, inter = sizes
    _, ids, routed, _, _ = problem
    tokens = ids.shape[0]
    return (
        _meta(torch, tokens, hidden, dtype=activations),
        ids,
        routed,
        _meta(torch, experts, 2 * inter, hidden // packed, dtype=weights),
        _meta(torch, experts, hidden, inter // packed, dtype=weights),
        *(_meta(torch, experts, dtype=torch.float32) for _ in range(scales)),
    )


def _cutlass_by_release(torch, core, parameters, fused, named, problem):
    """cutlass_fused_moe's forms and refusals where the release has their parameter:
    workspace_buffer and profile_ids (0.6.16 on), clamped_relu2_limit (0.7.2 on); before 0.4.0,
    the kinds the function itself refuses or takes (FP8 block scales, W4A8 group scaling and
    MXFP8 activations)."""
    # Eager calls run as the proof runs every eager call, on the function's own module (its name
    # in flashinfer.fused_moe may be the routing function, whose module is flashinfer.utils),
    # read from its kernel module's getter (0.2.9 - 0.2.12 name theirs for SM100).
    getter = getattr(core, "get_cutlass_fused_moe_module", None)
    getter = getter or core.get_cutlass_fused_moe_sm100_module
    standing = stand_ins(torch, "cutlass_fused_moe")
    calls, refused = _cutlass_listing_one(parameters, fused, named, problem, getter, standing)
    if "workspace_buffer" in parameters:

        def carved(*arguments):
            *arguments, workspace = arguments
            return fused(**named(arguments, workspace_buffer=workspace))

        workspace = _meta(torch, 1 << 20, dtype=torch.uint8)
        calls.append(("writes: workspace_buffer", carved, (*problem, workspace), None))
    if "profile_ids" in parameters:

        def profiled(*arguments):
            return fused(**named(arguments, profile_ids=[0]))

        read = _run(profiled, problem, getter, standing)
        if read[0] == "raises":
            refused.append(("profile_ids of one tactic", profiled, problem))
        else:
            calls.append(("profile_ids of one tactic, which it ignores", profiled, problem, None))
    if "clamped_relu2_limit" in parameters:
        clamped = core.ActivationType.ClampedRelu2

        def limited(*arguments):
            *arguments, limit = arguments
            return fused(**named(arguments, clamped_relu2_limit=limit))

        def unlimited(*arguments):
            return fused(**named(arguments, activation_type=clamped))

        limit = _meta(torch, 1, dtype=torch.float32)
        refused.append(("a clamped_relu2_limit without ClampedRelu2", limited, (*problem, limit)))
        refused.append(("ClampedRelu2 without its limit", unlimited, problem))
    return calls, refused


class _Hostless(object):
    """torch as the entry point's module sees it on a host without a driver: torch.cuda.device(d),
    which cutlass_fused_moe enters around its kernel module's call (0.6.16 on), a context that
    does nothing (on a meta or CPU device torch raises); torch.cuda.get_device_capability(),
    which it asks itself before 0.6.16, an SM100 host's answer; torch.classes, the stand-in
    runner's class (0.2.9 - 0.2.11.post1); everything else torch's own."""

    def __init__(self, module, cuda=False):
        self._module = module
        self._cuda = cuda

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if self._cuda and name == "device":
            import contextlib

            return lambda *args, **kwargs: contextlib.nullcontext()
        if self._cuda and name == "get_device_capability":
            return lambda *args, **kwargs: (10, 0)
        if name == "classes" and not self._cuda:
            # 0.2.9 - 0.2.11.post1's MoERunner makes its runner from torch.classes (the build's
            # TorchScript class): the stand-in runner.
            return _Classes()
        return _Hostless(value, cuda=True) if name == "cuda" and not self._cuda else value


class _Classes(object):
    """torch.classes as 0.2.9 - 0.2.11.post1's CUTLASS MoE reads it: every namespace's every
    class is the stand-in runner's."""

    def __init__(self, namespace=None):
        self._namespace = namespace

    def __getattr__(self, name):
        return Runners() if self._namespace else _Classes(name)


def _moe_inputs(torch, name, experts, hidden, inter):
    """Each trtllm MoE's tensors after the routing logits, (parameter, shape by token count,
    dtype), in the kernels' layouts, and the parameters it is given one value of."""
    u8, fp8, f32, bf16 = torch.uint8, torch.float8_e4m3fn, torch.float32, torch.bfloat16
    if name == "trtllm_bf16_moe":
        return [
            ("hidden_states", lambda t: (t, hidden), bf16),
            # BlockMajorK: (experts, K // 128, M, 128).
            ("gemm1_weights", lambda t: (experts, hidden // 128, 2 * inter, 128), bf16),
            ("gemm2_weights", lambda t: (experts, inter // 128, hidden, 128), bf16),
        ], {}
    if name == "trtllm_fp8_block_scale_moe":
        return [
            ("hidden_states", lambda t: (t, hidden), fp8),
            ("hidden_states_scale", lambda t: (hidden // 128, t), f32),
            ("gemm1_weights", lambda t: (experts, 2 * inter, hidden), fp8),
            ("gemm1_weights_scale", lambda t: (experts, 2 * inter // 128, hidden // 128), f32),
            ("gemm2_weights", lambda t: (experts, hidden, inter), fp8),
            ("gemm2_weights_scale", lambda t: (experts, hidden // 128, inter // 128), f32),
        ], {}
    if name == "trtllm_fp8_per_tensor_scale_moe":
        return [
            ("hidden_states", lambda t: (t, hidden), fp8),
            ("gemm1_weights", lambda t: (experts, 2 * inter, hidden), fp8),
            ("output1_scales_scalar", lambda t: (experts,), f32),
            ("output1_scales_gate_scalar", lambda t: (experts,), f32),
            ("gemm2_weights", lambda t: (experts, hidden, inter), fp8),
            ("output2_scales_scalar", lambda t: (experts,), f32),
        ], {"use_routing_scales_on_input": False}
    if name == "trtllm_fp8_per_channel_scale_moe":
        return [
            ("hidden_states", lambda t: (t, hidden), fp8),
            ("hidden_states_scale", lambda t: (t, 1), f32),
            ("gemm1_weights", lambda t: (experts, 2 * inter, hidden), fp8),
            ("gemm1_per_channel_weight_scale", lambda t: (experts, 2 * inter), f32),
            ("output1_scale_scalar", lambda t: (experts,), f32),
            ("output1_scale_gate_scalar", lambda t: (experts,), f32),
            ("gemm2_weights", lambda t: (experts, hidden, inter), fp8),
            ("gemm2_per_channel_weight_scale", lambda t: (experts, hidden), f32),
            ("output2_scale_scalar", lambda t: (experts,), f32),
        ], {"use_routing_scales_on_input": False}
    if name == "trtllm_mxint4_block_scale_moe":
        # Two 4-bit weights a byte, a bfloat16 scale per 32.
        return [
            ("hidden_states", lambda t: (t, hidden), bf16),
            ("gemm1_weights", lambda t: (experts, 2 * inter, hidden // 2), u8),
            ("gemm1_weights_scale", lambda t: (experts, 2 * inter, hidden // 32), bf16),
            ("gemm2_weights", lambda t: (experts, hidden, inter // 2), u8),
            ("gemm2_weights_scale", lambda t: (experts, hidden, inter // 32), bf16),
        ], dict.fromkeys(("gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit"))
    unused = ("gemm1_bias", "gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit", "gemm2_bias")
    unused += ("output1_scale_scalar", "output1_scale_gate_scalar", "output2_scale_scalar")
    return [
        ("hidden_states", lambda t: (t, hidden // 2), u8),
        ("hidden_states_scale", lambda t: (t, hidden // 16), fp8),
        ("gemm1_weights", lambda t: (experts, 2 * inter, hidden // 2), u8),
        ("gemm1_weights_scale", lambda t: (experts, 2 * inter, hidden // 16), fp8),
        ("gemm2_weights", lambda t: (experts, hidden, inter // 2), u8),
        ("gemm2_weights_scale", lambda t: (experts, hidden, inter // 16), fp8),
    ], dict.fromkeys(unused)


FORMS = {
    "silu_and_mul": _activation,
    "gelu_and_mul": _activation,
    "gelu_tanh_and_mul": _activation,
    "mm_fp4": _mm_fp4,
    "bmm_fp8": _bmm_fp8,
    "mm_fp8": _mm_fp8,
    "single_decode_with_kv_cache": _single_decode,
    "single_prefill_with_kv_cache": _single_prefill,
}
"""Each entry point's call forms, by name (the quantizers' are in QUANTIZERS, the samplers'
made by _sampling, the renorm samplers' (RENORMS) by _renorm)."""

WRAPPERS = {
    "batch_decode_with_paged_kv_cache_run": _batch_decode,
    "batch_prefill_with_paged_kv_cache_run": _batch_prefill,
    "batch_prefill_with_ragged_kv_cache_run": _batch_ragged,
}
"""The wrappers' methods' call forms, by the patch's name: each makes and plans its wrappers."""

QUANTIZERS = {
    "mxfp8_quantize": _mxfp8_quantize,
    "nvfp4_batched_quantize": _nvfp4_batched_quantize,
    "scaled_fp4_grouped_quantize": lambda torch, f, fn: _experts(torch, f, fn, 1),
    "silu_and_mul_scaled_nvfp4_experts_quantize": lambda torch, f, fn: _experts(torch, f, fn, 2),
    "block_scale_interleave": _block_scale_interleave,
}


SAMPLERS = (
    "top_p_sampling_from_probs",
    "top_k_sampling_from_probs",
    "top_k_top_p_sampling_from_probs",
    "min_p_sampling_from_probs",
)


def _sampling(torch, f, fn, name):
    """The samplers on meta tensors, with seed and offset given (the device's generator is the
    GPU's): top_k and top_p as numbers and as tensors, indices, return_valid, filter_apply_order.
    The vocabulary (128) keeps top_k_top_p off its fast path (65536 and more), which needs a
    kernel's values."""
    import inspect

    k, p, m = name.startswith("top_k"), "top_p" in name, name.startswith("min_p")
    # The sampler's own parameters after probs: (top_k,) (top_p,) (min_p,) or (top_k, top_p).
    numbers = (5,) * k + (0.9,) * p + (0.1,) * m
    named = {}
    if k:
        named["top_k"] = _meta(torch, 4, dtype=torch.int32)
    if p:
        named["top_p"] = _meta(torch, 4, dtype=torch.float32)
    if m:
        named["min_p"] = _meta(torch, 4, dtype=torch.float32)
    calls = _sampling_calls(torch, fn, numbers, named, k and p)
    if "top_k_max" in inspect.signature(getattr(f, name)).parameters:
        tensors = tuple(named.values())
        probs = _meta(torch, 4, 128, dtype=torch.float32)
        calls.append(
            ("top_k_max", lambda x: fn(x, *tensors, top_k_max=8, **SEEDED), (probs,), None)
        )
    return calls, _sampling_refused(torch, fn, numbers, k and p)


SEEDED = {"seed": 7, "offset": 0}


def _sampling_calls(torch, fn, numbers, named, joint):
    int64, tensors = torch.int64, tuple(named.values())
    probs = _meta(torch, 4, 128, dtype=torch.float32)
    order = ("top_k_first",) * joint
    calls = [
        (
            "positional",
            lambda x: fn(x, *numbers, None, *order, True, None, False, 7, 0),
            (probs,),
            None,
        ),
        (
            "by keyword, tensors",
            lambda x: fn(probs=x, deterministic=False, **named, **SEEDED),
            (probs,),
            None,
        ),
        ("return_valid", lambda x: fn(x, *numbers, return_valid=True, **SEEDED), (probs,), None),
        (
            "indices",
            lambda x, i: fn(x, *numbers, indices=i, **SEEDED),
            (probs, _meta(torch, 6, dtype=int64)),
            None,
        ),
        (
            "seed and offset tensors",
            lambda x: fn(
                x, *numbers, seed=_meta(torch, 1, dtype=int64), offset=_meta(torch, 4, dtype=int64)
            ),
            (probs,),
            None,
        ),
        (
            "a dynamic batch dimension",
            lambda x: fn(x, *tensors, **SEEDED) + 1,
            (_meta(torch, 4, 128, dtype=torch.float32),),
            0,
        ),
    ]
    if joint:
        calls.append(
            (
                "joint",
                lambda x: fn(x, *numbers, filter_apply_order="joint", **SEEDED),
                (probs,),
                None,
            )
        )
    return calls


def _sampling_refused(torch, fn, numbers, joint):
    int64, int32 = torch.int64, torch.int32
    probs = _meta(torch, 4, 128, dtype=torch.float32)

    def seeds(size, dtype):
        return {"seed": _meta(torch, size, dtype=dtype), "offset": _meta(torch, size, dtype=dtype)}

    refused = [
        (
            "a seed tensor with an offset number",
            lambda x: fn(x, *numbers, seed=_meta(torch, 1, dtype=int64), offset=0),
            (probs,),
        ),
        ("an int32 seed", lambda x: fn(x, *numbers, **seeds(1, int32)), (probs,)),
        ("a seed per row of another batch", lambda x: fn(x, *numbers, **seeds(3, int64)), (probs,)),
    ]
    if joint:
        refused.append(
            (
                "an unknown filter_apply_order",
                lambda x: fn(x, *numbers, filter_apply_order="top_p_first", **SEEDED),
                (probs,),
            )
        )
    return refused


RENORMS = {
    "top_p_renorm_probs": ("probs", "top_p", 0.9, "float32"),
    "top_k_renorm_probs": ("probs", "top_k", 5, "int32"),
    "top_k_mask_logits": ("logits", "top_k", 5, "int32"),
}
"""The renorm samplers: the name of their input, of their threshold, a threshold number, and the
dtype of a threshold tensor."""


def _renorm(torch, f, fn, name):
    """The renorm samplers on meta tensors: the threshold as a number and as a tensor, float32
    and bfloat16 input (top_p_renorm_probs gives float32 for both, and from 0.6.7 refuses 1-D
    probs; the top-k pair the input's dtype, and refuses float64), a slice of a wider tensor (its
    output contiguous), FlashInfer's other name for the function (top_p_renorm_prob,
    top_k_renorm_prob) where it has one, and is_deterministic where the release has it."""
    import inspect

    given, threshold, number, dtype = RENORMS[name]
    tensor = _meta(torch, 4, dtype=getattr(torch, dtype))
    x, bf16 = _meta(torch, 4, 128), _meta(torch, 4, 128, dtype=torch.bfloat16)
    calls = [
        ("positional", lambda x: fn(x, number), (x,), None),
        ("by keyword, a tensor", lambda x: fn(**{given: x, threshold: tensor}), (x,), None),
        ("bfloat16", lambda x: fn(x, number), (bf16,), None),
        (
            "a slice of a wider tensor",
            lambda x: fn(x[:, :128], number),
            (_meta(torch, 4, 256),),
            None,
        ),
        ("a dynamic batch dimension", lambda x: fn(x, number) + 1, (x,), 0),
    ]
    other = name[:-1] if name.endswith("_probs") else ""
    if other and hasattr(f.sampling, other):
        renamed = ("by its other name", lambda x: getattr(f.sampling, other)(x, number))
        calls.append((*renamed, (x,), None))
    deterministic = "is_deterministic" in inspect.signature(getattr(f, name)).parameters
    if deterministic:
        forced = ("is_deterministic", lambda x: fn(x, number, is_deterministic=True))
        calls.append((*forced, (x,), None))
    if name != "top_p_renorm_probs":
        wide = _meta(torch, 4, 128, dtype=torch.float64)
        return calls, [("float64", lambda x: fn(x, number), (wide,))]
    # From 0.6.7 (where is_deterministic came) the workspace's size is read from probs' second
    # dimension first.
    if deterministic:
        return calls, [("1-D probs", lambda x: fn(x, number), (_meta(torch, 128),))]
    return calls, []


class Reached(Exception):
    """Raised by the stood-in workspace: the eager call got past its output's allocation. It
    carries the output, the local `out` of the GEMM that asked for the workspace."""

    def __init__(self, out):
        super().__init__("past the output's allocation")
        self.out = out


def stand_ins(torch, name):
    """Names in the entry point's module (and flashinfer.utils) answered as a GPU host answers,
    or stopping the eager call at its workspace, by entry point. BUILT: a module getter that runs
    as it is, uncached, with the JIT specs it builds from stood in: the quantizers allocate their
    outputs in the getter's functions, and only the kernels do nothing."""
    if name in QUANTIZERS:
        return {
            "get_compute_capability": lambda device: (10, 0),
            "get_fp4_quantization_module": BUILT,
            "get_mxfp8_quantization_sm100_module": BUILT,
        }
    if name in SAMPLERS or name in RENORMS:
        # 0.7.4's row-states buffer asks whether the stream is capturing: a GPU host's answer.
        def row_states(name, device, num_bytes=1024):
            return torch.zeros(num_bytes, dtype=torch.uint8, device=device)

        return {"get_sampling_module": BUILT, "_get_row_states_buffer": row_states}
    if name == "fused_topk_deepseek":
        # @backend_requirement asks the device's capability first.
        return {"get_compute_capability": lambda device: (10, 0)}
    if name in MOE:
        # Its getter loads the kernels' cubins (0.6) and asks the device's capability (0.7).
        return {
            "get_trtllm_moe_sm100_module": _trtllm_moe_module(),
            "setup_cubin_loader": lambda *args, **kwargs: None,
            "get_compute_capability": lambda device: (10, 0),
        }
    if name == "cutlass_fused_moe":
        # Its getter builds the architecture's kernels; MoERunner asks them for a runner.
        return {
            "get_cutlass_fused_moe_module": RUNNERS,
            # 0.2.9 - 0.2.12's getter, for SM100 alone.
            "get_cutlass_fused_moe_sm100_module": RUNNERS,
            "get_compute_capability": lambda device: (10, 0),
            "torch": _Hostless(torch),
        }
    if name in ("single_decode_with_kv_cache", "single_prefill_with_kv_cache"):
        # The backend's choice asks the device; up to 0.2.6 the prefill module's getter is
        # curried (get_single_prefill_module(backend)(...)), which decode calls with tensor cores.
        return {
            "determine_attention_backend": lambda *args, **kwargs: "fa2",
            "get_single_prefill_module": Curried,
        }
    if name == "trtllm_batch_decode_with_kv_cache":
        # "auto" asks the device's capability (SM100: trtllm-gen), trtllm-gen and xqa its SM
        # count; xqa's kernel (flashinfer.xqa.xqa, which xqa_batch_decode_with_kv_cache calls)
        # does nothing, as the trtllm-gen module's kernels do.
        return {**HOST[name], "get_device_sm_count": lambda device: 132, "xqa": Stub()}
    if name not in ("mm_fp4", "bmm_fp8", "mm_fp8"):
        return {}

    def workspace(*args, **kwargs):
        import sys

        raise Reached(sys._getframe(1).f_locals.get("out"))

    return {
        "get_compute_capability": lambda device: (10, 0),
        "_get_cache_buf": workspace,
        "_get_stream_cache_buf": workspace,
        # mm_fp8's trtllm_low_latency path: the GEMM itself, after its output is allocated.
        "trtllm_low_latency_gemm": workspace,
    }


BUILT = object()
RUNNERS = object()

# Names of flashinfer.utils answered as a GPU host answers for the whole proof, the trace
# included, by entry point: where the op's fake asks the device (trtllm_batch_decode_with_kv_cache's
# "auto" backend, from FlashInfer's own get_compute_capability), as it answers on a GPU host, where
# Dynamo's fake tensors are on the device.
HOST = {"trtllm_batch_decode_with_kv_cache": {"get_compute_capability": lambda device: (10, 0)}}


def _trtllm_moe_module():
    """The trtllm MoE module getter run as it is, its JIT spec stood in: the kernel module's ops
    (their checks, allocation and autotuner) run, and the kernels do nothing. From 0.6.16 the
    getter asks the current CUDA device which build to load: the build for SM100 then."""
    import flashinfer.fused_moe.core as core

    impl = getattr(core, "_get_trtllm_moe_sm100_module_impl", None)
    getter = core.get_trtllm_moe_sm100_module

    def module():
        return built(impl, MoeKernels)(False) if impl is not None else built(getter, MoeKernels)()

    return module


# The trtllm MoE kernels whose output, (num_tokens, hidden) bfloat16, the function returns: BF16's,
# FP8 per tensor's and FP8 block scales' before 0.6.5. Each allocates it (BF16's always, FP8 per
# tensor's up to 0.4.0, FP8 block scales' up to 0.3.1.post1, both from 0.5.3), or writes the one
# its kernel module's op passes and returns (FP8 block scales' in 0.4.0 - 0.5.2, FP8 per tensor's
# in 0.4.1 - 0.5.2): the stand-in gives a new one either way.
# Where hidden_states is among the arguments FlashInfer passes each, by the kernel's name and
# their number.
ALLOCATING = {
    ("trtllm_bf16_moe", 17): 2,
    ("trtllm_bf16_moe", 18): 2,
    ("trtllm_fp8_per_tensor_scale_moe", 19): 2,
    ("trtllm_fp8_per_tensor_scale_moe", 20): 2,
    ("trtllm_fp8_per_tensor_scale_moe", 21): 2,
    ("trtllm_fp8_per_tensor_scale_moe", 22): 2,
    ("trtllm_fp8_block_scale_moe", 20): 2,
    ("trtllm_fp8_block_scale_moe", 21): 2,
    ("trtllm_fp8_block_scale_moe", 22): 2,
    ("trtllm_fp8_block_scale_moe", 24): 4,
    ("trtllm_fp8_block_scale_moe", 25): 4,
}

# The trtllm MoE kernels that return the output they are passed, finalized, in a list, which the
# kernel module's op returns (FP4's, with tile_tokens_dim, 0.2.10 - 0.4.0: 30 arguments in 0.2.10 -
# 0.2.11.post1's, 31 in 0.2.11.post2 - 0.2.12's, 32 in 0.2.13's, 33 from 0.2.14; 0.4.1's op returns
# a list of its own, as 0.5.0 - 0.6.7.post3's, whose kernel also takes 32, where the proof calls
# it finalized): where that output is among their arguments, as above.
LISTING = {
    ("trtllm_fp4_block_scale_moe", 30): 29,
    ("trtllm_fp4_block_scale_moe", 31): 30,
    ("trtllm_fp4_block_scale_moe", 32): 30,
    ("trtllm_fp4_block_scale_moe", 33): 31,
}


def built(getter, stub=None):
    """The module getter, uncached, with every gen_*_module of its module answering a JIT spec
    whose build_and_load() gives a Stub (or `stub`): the getter's own functions run, and the
    kernels they call do nothing."""
    inner = getattr(getter, "__wrapped__", getter)

    class Spec(object):
        # Before 0.3.0 the CUTLASS MoE's getter names the class it loads (class_name), which the
        # build gives from 0.2.11.post2.
        def build_and_load(self, **kwargs):
            return stub() if stub is not None else Stub()

        # 0.7's trtllm MoE getter asks where its libraries are.
        def get_library_path(self):
            return ""

        def get_library_paths(self):
            return []

    def run(*args, **kwargs):
        space = inner.__globals__
        # 0.2.9 - 0.3.0.post1's trtllm MoE getter calls trtllm_gen_fused_moe_sm100_module.
        spec = ("gen_", "trtllm_gen_")
        saved = {k: v for k, v in space.items() if k.startswith(spec) and k.endswith("_module")}
        for key in saved:
            space[key] = lambda *a, **k: Spec()
        try:
            return inner(*args, **kwargs)
        finally:
            space.update(saved)

    return run


def layout(value):
    """Shapes, strides and dtypes of a tensor or a tuple of them."""
    if isinstance(value, (tuple, list)):
        return [layout(v) for v in value]
    if value is None or not hasattr(value, "stride"):
        return repr(value)
    return [list(value.shape), list(value.stride()), str(value.dtype)]


class Stub(object):
    """A module getter's result whose every kernel does nothing."""

    def __call__(self, *args, **kwargs):
        return None

    def __getattr__(self, name):
        def kernel(*args, **kwargs):
            return None

        return kernel


class MoeKernels(Stub):
    """The trtllm MoE kernels: those that return their output (ALLOCATING) give a new one, of the
    shape and dtype the kernel gives, those that return the one passed in a list (LISTING) give
    that list; the others do nothing."""

    def __getattr__(self, name):
        def kernel(*args, **kwargs):
            if (name, len(args)) in LISTING:
                return [args[LISTING[name, len(args)]]]
            at = ALLOCATING.get((name, len(args)))
            if at is None:
                return None
            import torch

            hidden = args[at]
            return hidden.new_empty((hidden.shape[0], hidden.shape[-1]), dtype=torch.bfloat16)

        return kernel


class Planned(Stub):
    """A JIT module whose plan gives a plan_info (run() asserts that it has one) and whose every
    kernel does nothing."""

    def plan(self, *args, **kwargs):
        return [0]


class Curried(Stub):
    """A module getter (or what it gives) that gives a Stub when called: 0.2.6's
    get_single_prefill_module(backend) gives the getter of the rest."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return Stub()


class Runners(Stub):
    """A Stub whose init() gives a runner whose every kernel does nothing (the CUTLASS MoE's
    MoERunner keeps what init gives, and runs its kernels); before 0.3.0 the module is the
    runner's class, which MoERunner calls."""

    def __call__(self, *args, **kwargs):
        return Runner()

    def __getattr__(self, name):
        if name == "init":
            return lambda *args, **kwargs: Runner()
        return Stub.__getattr__(self, name)


class Runner(Stub):
    """The CUTLASS MoE's runner: run_moe returns the output it is given, as the kernel's runMoe
    does before 0.4.0 (whose kernel module returns it in a list of one); the later kernel
    modules ignore what it returns. Every other kernel does nothing."""

    def run_moe(self, output, *args, **kwargs):
        return output


def prove(ctx):
    import torch

    ctx.stage("import flashinfer")
    import flashinfer

    name = ctx.answer["patch"][len("op-") :].replace("-", "_")
    calls, refused = forms(torch, flashinfer, name)
    standing = stand_ins(torch, name)
    if calls is None:
        ctx.problem("the proof has no calls of %s" % name)
        return
    entry = _entry(ctx, name)
    with _host(HOST.get(name, {})):
        _proved(ctx, torch, name, entry, standing, calls, refused)


def _proved(ctx, torch, name, entry, standing, calls, refused):
    """The call forms traced, run eagerly and through the op and its fake; the refused inputs
    raised alike; the op's written parameters declared."""
    traced = [
        what
        for what, fn, arguments, dynamic in calls
        if _traced(ctx, torch, name, entry, standing, what, fn, arguments, dynamic)
    ]
    if entry is None or not entry.ready:
        return
    unwritten = _unwritten(torch, entry)
    if unwritten:
        ctx.problem(
            "%s writes %s, which its op does not declare written" % (name, ", ".join(unwritten))
        )
    for what, fn, arguments in refused:
        ctx.stage("%s refuses %s: eager against the op and its fake" % (name, what))
        eager = _eager(ctx, fn, arguments, entry.fn, standing)
        through = _through_op(torch, fn, arguments, entry, standing)
        faked = _faked(torch, fn, arguments, entry)
        if eager[0] != "raises" or eager != through or eager != faked:
            ctx.problem(
                "%s, %s: the eager call gives %s, the op run eagerly %s, the fake %s"
                % (name, what, eager, through, faked)
            )
    ctx.fact("call forms traced to one op", traced)
    ctx.passes(
        "%s traces to one fi_patch op per call (%s), runs as it is eagerly, and its op and the "
        "op's fake give the eager call's shapes, strides, dtypes and errors (%s)"
        % (
            name,
            ", ".join(traced),
            ", ".join(what for what, _, _ in refused) or "it refuses no input before its kernel",
        )
    )


class _host(object):
    """flashinfer.utils's names in `answers` answered so while the block runs."""

    def __init__(self, answers):
        self.answers, self.saved = answers, {}

    def __enter__(self):
        import flashinfer.utils as utils

        self.saved = {k: getattr(utils, k) for k in self.answers if hasattr(utils, k)}
        for key, value in self.answers.items():
            setattr(utils, key, value)

    def __exit__(self, *exc):
        import flashinfer.utils as utils

        for key in self.answers:
            if key in self.saved:
                setattr(utils, key, self.saved[key])
            else:
                delattr(utils, key)


def _unwritten(torch, entry):
    """The parameters the entry point writes that its op's schema (NAME_writes's, where the op
    returns its output and the parameters are optional) does not mark written: Inductor would
    take them as read only."""
    op = getattr(torch.ops.fi_patch, entry.name + "_writes", None)
    if getattr(entry, "method", False) or getattr(entry, "allocated", None) is not None:
        # A method's written parameters (out, lse) are its out op's, and so are those of a
        # function whose outputs are given as a method's are.
        op = getattr(torch.ops.fi_patch, entry.name + "_out", None)
    op = op if op is not None else getattr(torch.ops.fi_patch, entry.name)
    schema = op.default._schema
    marked = {a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write}
    return [w for w in entry.writes if w not in marked]


def _entry(ctx, name):
    """The entry point's op boundary, or None; a problem where it has no op."""
    import flashinfer.utils as utils

    entry = getattr(utils, "_fi_patch_boundaries", {}).get(name)
    if entry is None and hasattr(utils, "_fi_patch_declared"):
        ctx.problem(
            "flashinfer.utils has no op boundary for %s: it holds declared-ops-custom as an "
            "older fi-patch wrote it, without the op boundary's code (`fi-patch revert --patch "
            "declared-ops-custom`, then apply again)" % name
        )
    elif entry is None:
        ctx.problem("flashinfer.utils has no op boundary for %s" % name)
    elif not entry.ready:
        ctx.problem("%s has no op: %s" % (name, entry.reason))
    return entry


def _traced(ctx, torch, name, entry, standing, what, fn, arguments, dynamic):
    """One call form: its fullgraph trace holds the one op (NAME_out where it passes out, which
    declares it mutated) and starts no process; eagerly it dispatches no op; the op run eagerly
    and its fake give the eager call's outputs."""
    import re

    arguments = [a.clone() for a in arguments]
    if dynamic is not None:
        torch._dynamo.mark_dynamic(arguments[0], dynamic)
    ctx.stage("torch.compile(fullgraph=True) trace of %s, %s" % (name, what))
    try:
        with ctx.processes() as started:
            graph = [str(n.target) for n in ctx.graph_nodes(fn, *arguments)]
    except Exception as exc:
        ctx.problem("%s, %s, does not trace: %s" % (name, what, _first_line(exc)))
        return False
    op = name + "_out" if re.search(r"\bout\b", what) else name
    op = name + "_writes" if re.search(r"\bwrites\b", what) else op
    # A wrapper's other method (a form named "forward() ..."): the op of its own, named as the
    # method's op is, its name in the method's place.
    method = re.match(r"(\w+)\(\)", what)
    if method and getattr(entry, "method", False):
        op = name[: len(name) - len(entry.fn.__name__)] + method.group(1)
    wanted = ("fi_patch.%s" % op, "fi_patch.%s.default" % op)
    mine = [c for c in graph if c in wanted]
    theirs = [c for c in graph if c.startswith(("flashinfer.", "fi_patch"))]
    ctx.fact("graph, %s" % what, graph)
    if len(mine) != 1 or theirs != mine:
        ctx.problem("%s, %s: the graph holds %s, not one %s" % (name, what, graph, wanted[0]))
        return False
    if started:
        ctx.problem("%s, %s: %d process(es) started while tracing" % (name, what, len(started)))
    ctx.stage("an eager call of %s, %s, against the op and its fake" % (name, what))
    eager = _eager(ctx, fn, arguments, entry.fn, standing)
    through = _through_op(torch, fn, arguments, entry, standing)
    faked = _faked(torch, fn, arguments, entry)
    if eager[0] == "dispatched":
        ctx.problem("%s, %s: an eager call dispatched %s" % (name, what, eager[1]))
        return False
    if eager[0] != "returns" or eager != through or eager != faked:
        ctx.problem(
            "%s, %s: the eager call gives %s, the op run eagerly %s, the fake %s"
            % (name, what, eager[1], through[1], faked[1])
        )
        return False
    return True


def _eager(ctx, fn, arguments, entry_point, standing):
    """The entry point run eagerly with its module getters stood in, and the names `standing`
    gives: ("returns", layout), ("raises", exception type) or ("dispatched", fi-patch's ops)."""
    mode = ctx.dispatched()
    with mode:
        result = _run(fn, arguments, entry_point, standing)
    dispatched = [o for o in mode.ops if "fi_patch" in o]
    return ("dispatched", dispatched) if dispatched else result


def _through_op(torch, fn, arguments, entry, standing):
    """fn run eagerly with the entry point's traced path in its place: the op itself runs (its
    body calls the entry point by keyword, the module getters stood in)."""
    return _instead(entry, lambda: _run(fn, arguments, entry.fn, standing))


def _faked(torch, fn, arguments, entry):
    """fn run as Dynamo runs it: the entry point's traced path (its op, and so the op's fake)
    under a FakeTensorMode. ("returns", layout) or ("raises", exception type)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    # The call forms close over some tensors (scales, alpha), as a caller's code does: Dynamo
    # makes them fake too.
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [mode.from_tensor(a) for a in arguments]

    def call():
        try:
            with mode:
                return ("returns", layout(fn(*fakes)))
        except Exception as exc:
            return ("raises", type(exc).__name__)

    return _instead(entry, call)


def _instead(entry, call):
    """call() with flashinfer's name for the entry point bound to its traced path, the path its
    routing function takes while torch.compile traces it (the call forms look the function up
    there, as a caller's `flashinfer.NAME(...)` does)."""
    import sys

    if entry.traced is None or entry.routed is None:
        return ("raises", "no traced path")
    # Every name FlashInfer's modules give it: nvfp4_block_scale_interleave is
    # block_scale_interleave, flashinfer.sampling.top_p_renorm_prob is top_p_renorm_probs,
    # flashinfer.fused_moe re-exports fused_topk_deepseek.
    spaces = [
        m
        for name, m in list(sys.modules.items())
        if m is not None and (name == "flashinfer" or name.startswith("flashinfer."))
    ]
    names = [(space, k) for space in spaces for k, v in vars(space).items() if v is entry.routed]
    # A wrapper's method: its class holds the routing function, and those of the methods that
    # call it (forward(), its aliases).
    classes = {id(c): c for space in spaces for c in vars(space).values() if isinstance(c, type)}
    routes = {id(e.routed): e for e in [entry, *getattr(entry, "aliases", [])] if e.routed}
    held = [(c, k, v) for c in classes.values() for k, v in list(vars(c).items())]
    names += [(c, k) for c, k, v in held if id(v) in routes and v is routes[id(v)].routed]
    swapped = [(space, name, getattr(space, name)) for space, name in names]
    for space, name, routed in swapped:
        setattr(space, name, entry.traced if routed is entry.routed else routes[id(routed)].traced)
    try:
        return call()
    finally:
        for space, name, routed in swapped:
            setattr(space, name, routed)


def _run(fn, arguments, entry_point, standing):
    """fn on fresh copies of the arguments, with the entry point's module getters (and those of
    flashinfer.utils) stood in by kernels that do nothing, and the names `standing` gives: the
    GEMMs stop at their workspace, past their output's allocation, which is then the result."""
    import inspect

    import flashinfer.utils

    spaces = [inspect.unwrap(entry_point).__globals__, vars(flashinfer.utils)]
    saved = []
    for space in spaces:
        for key, value in list(space.items()):
            if key in standing:
                saved.append((space, key, value))
                if standing[key] is BUILT:
                    space[key] = built(value)
                elif standing[key] is RUNNERS:
                    space[key] = built(value, Runners)
                else:
                    space[key] = standing[key]
            elif key.startswith("get_") and "module" in key and callable(value):
                saved.append((space, key, value))
                space[key] = lambda *a, **k: Stub()
    try:
        return ("returns", layout(fn(*[a.clone() for a in arguments])))
    except Reached as reached:
        return ("returns", layout(reached.out))
    except Exception as exc:
        return ("raises", type(exc).__name__)
    finally:
        for space, key, value in reversed(saved):
            space[key] = value


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")
