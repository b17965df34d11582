# Proof of fp4-op-keyword-forwarding, run by prove.py inside the target (see its contract).
#
# The module's fp4_quantize is swapped for a recorder, and the op is called with CPU tensors and
# enable_pdl=True in its seventh place. The recorder must see enable_pdl=True, and
# is_global_scale_inversed left False. Unpatched, True lands in is_global_scale_inversed.

CALL = "torch.ops.flashinfer.fp4_quantize(x, gs, 16, False, True, False, True)"


def prove(ctx):
    import inspect

    import torch

    ctx.stage("import flashinfer.quantization.fp4_quantization")
    from flashinfer.quantization import fp4_quantization as module

    signature = inspect.signature(module.fp4_quantize)
    calls = []

    def recorder(*args, **kwargs):
        calls.append(dict(signature.bind(*args, **kwargs).arguments))
        x = args[0]
        return x.new_empty(0, dtype=torch.uint8), x.new_empty(0, dtype=torch.uint8)

    ctx.stage(CALL)
    original = module.fp4_quantize
    module.fp4_quantize = recorder
    try:
        x = torch.zeros(128, 64, dtype=torch.bfloat16)
        torch.ops.flashinfer.fp4_quantize(x, torch.ones(1), 16, False, True, False, True)
    finally:
        module.fp4_quantize = original
    if len(calls) != 1:
        ctx.problem("the op called fp4_quantize %d times, not once" % len(calls))
        return
    arguments = calls[0]
    pdl = arguments.get("enable_pdl")
    inverted = arguments.get("is_global_scale_inversed", False)
    ctx.fact("enable_pdl", pdl)
    ctx.fact("is_global_scale_inversed", inverted)
    if pdl is not True:
        ctx.problem("%s reached fp4_quantize with enable_pdl=%r" % (CALL, pdl))
    if inverted is not False:
        ctx.problem(
            "%s reached fp4_quantize with is_global_scale_inversed=%r: the global scale "
            "would be inverted" % (CALL, inverted)
        )
    ctx.passes("the op passes enable_pdl=True as enable_pdl; is_global_scale_inversed stays False")
