# Proof of declared-ops-custom and declared-ops-fake, run by prove.py inside the target (see its
# contract). One script for both: the patch under proof (ctx.answer["patch"]) chooses the entry
# points. declared-ops-custom: those whose op returns nothing (norms, rope in place, the in-place
# merge, the paged-KV append). declared-ops-fake: those whose op returns tensors, with FlashInfer's
# declared fake (merge_state, merge_states, packbits).
#
# For each named entry point the release has: the declaration it reaches is made an op
# (flashinfer.utils._fi_patch_declared says so, or why not: then the entry point is named as left
# as it is, with the reason); torch.compile(fullgraph=True) with a backend that records the graph
# and never runs it holds exactly one fi_patch_declared op per call and nothing else of
# FlashInfer's; an eager call dispatches no op and runs FlashInfer's own function (stood in by a
# recorder: the CPU has no kernel); and, for ops that return tensors, the fake's outputs have the
# shapes, strides, dtypes and device the entry point allocates when run eagerly with its module
# getters stood in (the kernel does nothing), with its inputs on the CPU, on `meta` (another
# device than the CPU) and, for the merges, with a bfloat16 lse. Unpatched, flashinfer.utils has
# no _fi_patch_declared and every trace stops in the JIT loader.

# entry point -> (FlashInfer's declaration it reaches, whether that op returns tensors)
ENTRY_POINTS = [
    ("rmsnorm", "flashinfer::rmsnorm", False),
    ("fused_add_rmsnorm", "flashinfer::fused_add_rmsnorm", False),
    ("gemma_rmsnorm", "flashinfer::gemma_rmsnorm", False),
    ("gemma_fused_add_rmsnorm", "flashinfer::gemma_fused_add_rmsnorm", False),
    ("rmsnorm_quant", "flashinfer::rmsnorm_quant", False),
    ("fused_add_rmsnorm_quant", "flashinfer::fused_add_rmsnorm_quant", False),
    ("apply_rope_inplace", "flashinfer::apply_rope", False),
    ("apply_rope_pos_ids_inplace", "flashinfer::apply_rope_pos_ids", False),
    ("apply_llama31_rope_inplace", "flashinfer::apply_llama31_rope", False),
    ("apply_llama31_rope_pos_ids_inplace", "flashinfer::apply_llama31_rope_pos_ids", False),
    (
        "apply_rope_with_cos_sin_cache_inplace",
        "flashinfer::apply_rope_pos_ids_cos_sin_cache",
        False,
    ),
    ("mla_rope_quantize_fp8", "flashinfer::rope_quantize", False),
    ("rope_quantize_fp8", "flashinfer::rope_quantize", False),
    ("merge_state_in_place", "flashinfer::merge_state_in_place", False),
    ("append_paged_kv_cache", "flashinfer::append_paged_kv_cache", False),
    ("merge_state", "flashinfer::merge_state", True),
    ("merge_states", "flashinfer::merge_states", True),
    ("packbits", "flashinfer::packbits", True),
]

# The modules that hold entry points flashinfer does not export, in every release here.
HOMES = ("norm", "rope")


def calls(torch):
    """How each entry point is called: a function of tensors, and fresh arguments, by family."""
    import flashinfer

    table = {}
    for family in (_norms, _rope, _rope_quantized, _cascade, _paging):
        table.update(family(torch, flashinfer))
    return table


def _t(torch, *shape):
    return torch.randn(*shape, dtype=torch.bfloat16)


def _i32(torch, *values):
    return torch.tensor(values, dtype=torch.int32)


def _norms(torch, f):
    import inspect

    def pdl(name):
        # Where the entry point decides programmatic dependent launch itself, it asks the device
        # first (0.2.8's rmsnorm, say), which a CPU cannot answer: the proof says False, as a
        # caller may; the op boundary is the same either way. Asked here, before any trace:
        # Dynamo need not follow inspect.signature.
        entry_point = getattr(f, name, None)
        accepted = inspect.signature(entry_point).parameters if entry_point else {}
        return {"enable_pdl": False} if "enable_pdl" in accepted else {}

    def t(*shape):
        return _t(torch, *shape)

    fp8 = getattr(torch, "float8_e4m3fn", torch.uint8)
    kw = {name: pdl(name) for name in ("rmsnorm", "gemma_rmsnorm")}
    fused = {name: pdl(name) for name in ("fused_add_rmsnorm", "gemma_fused_add_rmsnorm")}
    return {
        "rmsnorm": (lambda x, w: f.rmsnorm(x, w, **kw["rmsnorm"]), (t(4, 64), t(64))),
        "fused_add_rmsnorm": (
            lambda x, r, w: f.fused_add_rmsnorm(x, r, w, **fused["fused_add_rmsnorm"]),
            (t(4, 64), t(4, 64), t(64)),
        ),
        "gemma_rmsnorm": (
            lambda x, w: f.gemma_rmsnorm(x, w, **kw["gemma_rmsnorm"]),
            (t(4, 64), t(64)),
        ),
        "gemma_fused_add_rmsnorm": (
            lambda x, r, w: f.gemma_fused_add_rmsnorm(x, r, w, **fused["gemma_fused_add_rmsnorm"]),
            (t(4, 64), t(4, 64), t(64)),
        ),
        "rmsnorm_quant": _scales(
            torch, f, "rmsnorm_quant", (torch.empty(4, 64, dtype=fp8), t(4, 64), t(64))
        ),
        "fused_add_rmsnorm_quant": _scales(
            torch,
            f,
            "fused_add_rmsnorm_quant",
            (torch.empty(4, 64, dtype=fp8), t(4, 64), t(4, 64), t(64)),
        ),
    }


def _scales(torch, f, name, arguments):
    """The quantising norms' call forms: `scale` a float, and, where the release types it
    Union[float, Tensor] (0.6.7 on, where the op takes it as two parameters), a tensor of one
    value, as SGLang and vLLM pass it."""
    import inspect

    module = _home(f, name)
    if module is None:
        return []
    forms = [("a float scale", lambda *a: getattr(module, name)(*a, 0.5), arguments)]
    scale = inspect.signature(getattr(module, name)).parameters["scale"].annotation
    if "Tensor" in str(scale):
        tensor = (*arguments, torch.tensor([0.5]))
        forms.append(("a tensor scale", lambda *a: getattr(module, name)(*a), tensor))
    return forms


def _home(flashinfer, name):
    """The module an entry point is called from: flashinfer, or the module of those flashinfer
    does not export (the quantising norms up to 0.6.6, the quantising rope); None where the
    release has it in none."""
    import importlib

    for module in (flashinfer, *(importlib.import_module("flashinfer." + m) for m in HOMES)):
        if hasattr(module, name):
            return module
    return None


def _rope(torch, f):
    import inspect

    def t(*shape):
        return _t(torch, *shape)

    indptr, offsets = _i32(torch, 0, 2, 6), _i32(torch, 0, 3)
    pos = torch.arange(6, dtype=torch.int32)
    cache = torch.randn(16, 64, dtype=torch.float32)
    qk = (t(6, 4, 64), t(6, 2, 64))
    rope = getattr(f, "apply_rope_with_cos_sin_cache_inplace", None)
    if rope is not None and "positions" in inspect.signature(rope).parameters:
        cos_sin = (
            lambda q, k: f.apply_rope_with_cos_sin_cache_inplace(pos.long(), q, k, 64, cache),
            (t(6, 256), t(6, 128)),
        )
    else:  # 0.2.0.post1: (q, k, cos_cache, sin_cache, pos_ids)
        cos_sin = (
            lambda q, k: f.apply_rope_with_cos_sin_cache_inplace(q, k, cache, cache, pos),
            qk,
        )
    return {
        "apply_rope_inplace": (lambda q, k: f.apply_rope_inplace(q, k, indptr, offsets), qk),
        "apply_rope_pos_ids_inplace": (lambda q, k: f.apply_rope_pos_ids_inplace(q, k, pos), qk),
        "apply_llama31_rope_inplace": (
            lambda q, k: f.apply_llama31_rope_inplace(q, k, indptr, offsets),
            qk,
        ),
        "apply_llama31_rope_pos_ids_inplace": (
            lambda q, k: f.apply_llama31_rope_pos_ids_inplace(q, k, pos),
            qk,
        ),
        "apply_rope_with_cos_sin_cache_inplace": cos_sin,
    }


def _rope_quantized(torch, f):
    """rope_quantize_fp8 and mla_rope_quantize_fp8 (flashinfer.rope's, 0.5.0 on): Python that
    allocates the outputs it is not given, then one call of the declared rope_quantize. The MLA
    form as SGLang's MLA backends call it (a 2-D key, the four outputs given, GPT-J rope), and
    the GQA form with the outputs left to the function."""

    def t(*shape):
        return _t(torch, *shape)

    module = _home(f, "rope_quantize_fp8")
    if module is None:
        return {}
    cache = torch.randn(16, 64, dtype=torch.float32)
    pos = torch.arange(6, dtype=torch.int64)
    fp8 = torch.float8_e4m3fn

    def mla(q_rope, k_rope, q_nope, k_nope, *outputs):
        return module.mla_rope_quantize_fp8(
            q_rope,
            k_rope,
            q_nope,
            k_nope,
            cache,
            pos,
            is_neox=False,
            quantize_dtype=fp8,
            q_rope_out=outputs[0],
            k_rope_out=outputs[1],
            q_nope_out=outputs[2],
            k_nope_out=outputs[3],
        )

    shapes = ((6, 4, 64), (6, 64), (6, 4, 128), (6, 128))
    outputs = tuple(torch.empty(*shape, dtype=fp8) for shape in shapes)
    return {
        "mla_rope_quantize_fp8": (mla, (*(t(*shape) for shape in shapes), *outputs)),
        "rope_quantize_fp8": (
            lambda *a: module.rope_quantize_fp8(*a, cache, pos),
            (t(6, 4, 64), t(6, 2, 64), t(6, 4, 64), t(6, 2, 64)),
        ),
    }


def _cascade(torch, f):
    def t(*shape):
        return _t(torch, *shape)

    states = (t(5, 4, 64), torch.randn(5, 4), t(5, 4, 64), torch.randn(5, 4))
    return {
        "merge_state_in_place": (lambda v, s, vo, so: f.merge_state_in_place(v, s, vo, so), states),
        "merge_state": (lambda va, sa, vb, sb: f.merge_state(va, sa, vb, sb), states),
        "merge_states": (lambda v, s: f.merge_states(v, s), (t(5, 3, 4, 64), torch.randn(5, 3, 4))),
    }


def _paging(torch, f):
    def i32(*values):
        return _i32(torch, *values)

    paged = torch.zeros(3, 2, 8, 2, 64, dtype=torch.bfloat16)
    batch, positions = i32(0, 0, 0, 1, 1, 1), i32(0, 1, 2, 0, 1, 2)
    kv_indices, kv_indptr, last = i32(0, 1, 2), i32(0, 1, 3), i32(3, 4)
    return {
        "append_paged_kv_cache": (
            lambda k, v, c: f.append_paged_kv_cache(
                k, v, batch, positions, c, kv_indices, kv_indptr, last
            ),
            (_t(torch, 6, 2, 64), _t(torch, 6, 2, 64), paged),
        ),
        "packbits": (lambda b: f.packbits(b), (torch.rand(100) > 0.5,)),
    }


def layout(value):
    """Shapes, strides, dtypes and devices of a tensor or a tuple of them."""
    if isinstance(value, (tuple, list)):
        return [layout(v) for v in value]
    if value is None:
        return None
    return [list(value.shape), list(value.stride()), str(value.dtype), value.device.type]


def variants(torch, name, arguments):
    """The inputs a returning op's fake is checked with: as the call form has them, on `meta`
    (the fake must follow the input's device), and, for the merges, with a bfloat16 lse (which
    the function converts to float32 before it allocates)."""
    found = [("", arguments), ("on meta", [a.to("meta") for a in arguments])]
    if name in ("merge_state", "merge_states"):
        lse = [a.to(torch.bfloat16) if a.dtype == torch.float32 else a for a in arguments]
        found.append(("a bfloat16 lse", lse))
    return found


def _forms(torch, name, called, returns):
    """(what, fn, arguments) for each form an entry point is proven in: those its call table
    lists, or its one call with the variants of its inputs."""
    if isinstance(called, list):
        return called
    fn, arguments = called
    found = variants(torch, name, arguments) if returns else [("", arguments)]
    return [(what, fn, given) for what, given in found]


class Stub(object):
    """A module getter's result whose every kernel does nothing, and counts its calls. Older
    releases' getters return the kernel itself (`get_module_attr("merge_state")`): it is one."""

    def __init__(self, seen):
        self.seen = seen

    def __call__(self, *args, **kwargs):
        self.seen.append("kernel")

    def __getattr__(self, name):
        def kernel(*args, **kwargs):
            self.seen.append(name)

        return kernel


def prove(ctx):
    import torch

    ctx.stage("import flashinfer")
    import flashinfer
    import flashinfer.utils as utils

    returning = ctx.answer["patch"] == "declared-ops-fake"
    declared = getattr(utils, "_fi_patch_declared", None)
    if declared is None:
        ctx.problem(
            "flashinfer.utils has no _fi_patch_declared: register_custom_op is FlashInfer's no-op"
        )
        declared = {}
    left = {name: entry.reason for name, entry in sorted(declared.items()) if not entry.ready}
    ctx.fact("declarations left as they are", left)
    for name, entry in sorted(declared.items()):
        if not entry.ready:
            ctx.note("%s left as it is: %s" % (name, entry.reason))
        elif entry.reason:
            ctx.note("%s made an op: %s" % (name, entry.reason))
    ctx.fact(
        "declarations made ops",
        sorted(name for name, entry in declared.items() if entry.ready),
    )

    table = calls(torch)
    traced, kept = [], {}
    for name, op, returns in ENTRY_POINTS:
        if returns != returning or _home(flashinfer, name) is None:
            continue
        entry = declared.get(op)
        if entry is None and declared:
            kept[name] = "%s is not declared at module level in this release" % op
            continue
        if entry is not None and not entry.ready:
            kept[name] = "%s: %s" % (op, entry.reason)
            continue
        if all(
            _proven(ctx, name, op, fn, given, entry, returns, what)
            for what, fn, given in _forms(torch, name, table[name], returns)
        ):
            traced.append(name)
    ctx.fact("entry points traced to one op", traced)
    ctx.fact("entry points left as they are", kept)
    if not traced and not ctx.answer["problems"]:
        ctx.problem("no entry point of this release traced to an op")
    ctx.passes(
        "%d entry point(s) trace to one fi_patch_declared op each (%s) and run FlashInfer's own "
        "function eagerly%s; %d left as they are%s"
        % (
            len(traced),
            ", ".join(traced),
            ", the fakes' outputs as the eager calls allocate them" if returning else "",
            len(kept),
            (": " + "; ".join("%s (%s)" % kv for kv in sorted(kept.items()))) if kept else "",
        )
    )


def _proven(ctx, name, op, fn, arguments, entry, returns, what):
    """One call form: a fullgraph trace holds the one op, an eager call runs FlashInfer's own
    function and dispatches no op, and the fake allocates what the eager call does."""
    called = "%s%s" % (name, ", " + what if what else "")
    short = op.split("::", 1)[1]
    ctx.stage("torch.compile(fullgraph=True) trace of flashinfer.%s" % called)
    try:
        with ctx.processes() as started:
            graph, faked = _trace(ctx, fn, [a.clone() for a in arguments])
    except Exception as exc:
        ctx.problem("%s does not trace: %s" % (called, _first_line(exc)))
        return False
    ours = [c for c in graph if c.startswith("fi_patch_declared.")]
    theirs = [c for c in graph if c.startswith(("flashinfer.", "fi_patch"))]
    wanted = ("fi_patch_declared." + short, "fi_patch_declared.%s.default" % short)
    if len(ours) != 1 or ours[0] not in wanted or theirs != ours:
        ctx.problem(
            "the graph of %s holds %s, not one fi_patch_declared.%s" % (called, graph, short)
        )
        return False
    if started:
        ctx.problem("%d process(es) started while tracing %s" % (len(started), called))
    ctx.stage("an eager call of flashinfer.%s" % called)
    eager = _eager(fn, arguments, entry, returns, ctx.dispatched())
    if isinstance(eager, str):
        ctx.problem("%s: %s" % (called, eager))
        return False
    if returns and faked != layout(eager):
        ctx.problem(
            "%s: the fake gives %s, the eager call allocates %s" % (called, faked, layout(eager))
        )
        return False
    return True


def _eager(fn, arguments, entry, returns, mode):
    """Run the entry point eagerly with its module getters stood in (the kernels do nothing):
    FlashInfer's declared function must run, and no op be dispatched. For an op that returns
    tensors, the outputs, to compare with the fake; otherwise None. A string says what went
    wrong."""
    import sys

    seen, entered = [], []
    code = entry.fn.__code__
    globals_ = entry.fn.__globals__
    saved = {}
    for key, value in list(globals_.items()):
        if key.startswith("get_") and "module" in key and callable(value):
            saved[key] = value
            globals_[key] = lambda *a, **k: Stub(seen)
        elif key == "get_cuda_stream":  # 0.2.0.post1 - 0.2.3 pass the stream to the kernel
            saved[key] = value
            globals_[key] = lambda *a, **k: 0

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            entered.append(frame.f_code.co_name)

    out, failed = None, None
    sys.setprofile(profile)
    try:
        with mode:
            out = fn(*[a.clone() for a in arguments])
    except Exception as exc:
        failed = _first_line(exc)
    finally:
        sys.setprofile(None)
        globals_.update(saved)
    dispatched = [o for o in mode.ops if "fi_patch" in o]
    if dispatched:
        return "an eager call dispatched %s" % dispatched
    if not entered:
        return "an eager call did not run FlashInfer's %s (%s)" % (
            entry.fn.__name__,
            failed or "no error",
        )
    if returns and failed:
        return "the eager call failed: %s" % failed
    return out if returns else None


def _trace(ctx, fn, arguments):
    """The targets of the calls in fn's fullgraph trace, and the layout of fi-patch's op's
    outputs as its fake gave them (the graph is recorded, never run)."""
    nodes = ctx.graph_nodes(fn, *arguments)
    ours = [n for n in nodes if str(n.target).startswith("fi_patch_declared.")]
    faked = layout(ours[0].meta.get("example_value")) if ours else None
    return [str(n.target) for n in nodes], faked


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")
