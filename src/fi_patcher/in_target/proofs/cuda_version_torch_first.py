# Proof of cuda-version-torch-first, run by prove.py inside the target (see its contract).
#
# get_cuda_version() must equal torch.version.cuda, and a function that branches on
# is_cuda_version_at_least("12.8") must trace with torch.compile(fullgraph=True) without starting
# a process, and give the eager result. Unpatched, the trace dies in subprocess (nvcc).


def prove(ctx):
    import torch

    ctx.stage("import flashinfer.jit.cpp_ext")
    from flashinfer.jit import cpp_ext

    value = None
    if ctx.mode == "after":
        from packaging.version import Version

        ctx.stage("get_cuda_version()")
        value = str(cpp_ext.get_cuda_version())
        ctx.fact("value", value)
        cuda = torch.version.cuda
        if cuda is None or value != str(Version(cuda)):
            ctx.problem("get_cuda_version() returned %s, torch.version.cuda is %s" % (value, cuda))

    def branch(x):
        if cpp_ext.is_cuda_version_at_least("12.8"):
            return x + 1
        return x - 1

    ctx.stage("torch.compile(fullgraph=True) trace")
    compiled = ctx.compiled(branch)
    with ctx.processes() as started:
        traced = compiled(torch.zeros(3)).tolist()
    eager = branch(torch.zeros(3)).tolist()
    if started:
        ctx.problem("%d process(es) started while tracing" % len(started))
    if traced != eager:
        ctx.problem("the compiled function returned %s, eager %s" % (traced, eager))
    ctx.passes(
        "get_cuda_version() = %s, fullgraph trace started no process, result %s equals eager"
        % (value, traced)
    )
