# Proof of api-logging-under-compile, run by prove.py inside the target (see its contract).
#
# FlashInfer reads FLASHINFER_LOGLEVEL once, at import; the proof sets the module's level to 1
# for its own calls and wraps a function of its own with flashinfer_api, as every public entry
# point is wrapped at that level. Eagerly, the wrapper must log the call (one line) and return
# the function's result; traced with fullgraph=True, the graph must hold the function's own ops
# alone, and compiled must equal eager. Unpatched, the trace dies at datetime.now.


def prove(ctx):
    import logging

    import torch

    ctx.stage("import flashinfer.api_logging")
    from flashinfer import api_logging as module

    lines = []

    class Kept(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    def scaled(x):
        return x * 2 + 1

    handler = Kept()
    saved = module._API_LOG_LEVEL, module._logger.level
    module._API_LOG_LEVEL = 1
    module._logger.addHandler(handler)
    module._logger.setLevel(logging.DEBUG)
    try:
        logged = module.flashinfer_api(scaled)
        ctx.stage("flashinfer_api(fn)(x) at FLASHINFER_LOGLEVEL=1, eagerly")
        x = torch.arange(6.0)
        eager = logged(x)
        ctx.fact("eager log lines", len(lines))
        if len(lines) != 1 or "scaled" not in lines[0]:
            ctx.problem("an eager call logged %r, not one line naming scaled" % (lines,))
        ctx.stage("torch.compile(flashinfer_api(fn), fullgraph=True) at FLASHINFER_LOGLEVEL=1")
        calls = ctx.graph_calls(logged, x)
        ctx.fact("graph", calls)
        if calls != [str(c) for c in ctx.graph_calls(scaled, x)]:
            ctx.problem("the graph holds %s, not fn's own ops" % calls)
        compiled = ctx.compiled(logged)(x)
        if not torch.equal(compiled, eager):
            ctx.problem("compiled returned %s, eager %s" % (compiled.tolist(), eager.tolist()))
    finally:
        module._API_LOG_LEVEL = saved[0]
        module._logger.setLevel(saved[1])
        module._logger.removeHandler(handler)
    ctx.passes(
        "at FLASHINFER_LOGLEVEL=1 the wrapper traces to fn's ops alone (%s), compiled equals "
        "eager, and an eager call logs one line" % ", ".join(calls)
    )
