# Proof of fp4-quantize-op-boundary, run by prove.py inside the target (see its contract).
#
# torch.compile(fullgraph=True) of a function calling flashinfer.fp4_quantize(x, gs), with a
# backend that records the graph and never runs it (so a CPU is enough): the graph must hold
# exactly one call, of fi-patch's op fi_patch::flashinfer_fp4_quantize, and nothing else of
# FlashInfer's. Unpatched, the trace stops in fp4_quantize's body (the device query, the JIT
# module build, the kernel call) before any op. Dynamo runs the op's fake to trace on, so a
# fake that fails fails here too. The trace runs twice: static shapes, and a batch dimension
# marked dynamic, as serving engines compile.

OP = ("fi_patch.flashinfer_fp4_quantize", "fi_patch.flashinfer_fp4_quantize.default")


def prove(ctx):
    import torch

    ctx.stage("import flashinfer")
    import flashinfer

    def quantize(x, global_scale):
        return flashinfer.fp4_quantize(x, global_scale)

    for dynamic in (False, True):
        x = torch.randn(128, 256, dtype=torch.bfloat16)
        how = "a dynamic batch dimension" if dynamic else "static shapes"
        if dynamic:
            torch._dynamo.mark_dynamic(x, 0)
        ctx.stage("torch.compile(fullgraph=True) trace of flashinfer.fp4_quantize(x, gs), " + how)
        with ctx.processes() as started:
            calls = ctx.graph_calls(quantize, x, torch.ones(1))
        ours = [c for c in calls if c in OP]
        theirs = [c for c in calls if c.startswith(("flashinfer.", "fi_patch."))]
        ctx.fact("calls, " + how, calls)
        if len(ours) != 1 or len(theirs) != 1:
            ctx.problem(
                "with %s the graph holds %s, not one fi_patch.flashinfer_fp4_quantize call"
                % (how, calls)
            )
        if started:
            ctx.problem("%d process(es) started while tracing" % len(started))
    ctx.passes(
        "fullgraph trace holds one fi_patch.flashinfer_fp4_quantize call, with static shapes "
        "and with a dynamic batch dimension"
    )
