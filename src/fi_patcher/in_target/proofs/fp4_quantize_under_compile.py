# Proof of fp4-quantize-under-compile, run by prove.py inside the target (see its contract).
#
# torch.compile(fullgraph=True) of a function calling flashinfer.fp4_quantize(x, gs), with a
# backend that records the graph and never runs it (so a CPU is enough): the graph must hold
# exactly one call, of the op flashinfer::fp4_quantize. Unpatched, the trace stops at the device
# query (on a GPU: in the JIT registry) before any op.

OP = ("flashinfer.fp4_quantize", "flashinfer.fp4_quantize.default")


def prove(ctx):
    import torch

    ctx.stage("import flashinfer")
    import flashinfer
    import flashinfer.quantization.fp4_quantization

    def quantize(x, global_scale):
        return flashinfer.fp4_quantize(x, global_scale)

    x = torch.randn(128, 256, dtype=torch.bfloat16)
    ctx.stage("torch.compile(fullgraph=True) trace of flashinfer.fp4_quantize(x, gs)")
    with ctx.processes() as started:
        calls = ctx.graph_calls(quantize, x, torch.ones(1))
    ours = [c for c in calls if c in OP]
    flashinfer_calls = [c for c in calls if c.startswith("flashinfer.")]
    ctx.fact("calls", calls)
    if len(ours) != 1 or len(flashinfer_calls) != 1:
        ctx.problem("the graph holds %s, not one flashinfer.fp4_quantize call" % (calls,))
    if started:
        ctx.problem("%d process(es) started while tracing" % len(started))
    ctx.passes(
        "fullgraph trace holds one flashinfer.fp4_quantize call and no other FlashInfer call"
    )
