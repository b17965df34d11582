"""FP4 quantization inside a compiled graph, on a real GPU: the check the CPU proofs cannot make.

Run it with the target environment's own python, after `fi-patch apply` there:

    fi-patch apply --venv /root/ml-env
    /root/ml-env/bin/python scripts/gpu/fp4_compiled.py --out fp4-gpu.json

(`make gpu-check TARGET=/root/ml-env` does both.) It covers every fp4 patch: from 0.6.12 the
compiled graph holds FlashInfer's op, before it fi-patch's (fp4-quantize-op-boundary). For a grid
of shapes and layouts it compares
`torch.compile(fullgraph=True)` of `flashinfer.fp4_quantize` with the eager call, bit for bit,
then captures the compiled function in a CUDA graph, replays it on new input, and compares again.
It prints one line per case and writes the same as JSON with --out.

Exit status: 0 all cases equal, 1 a case differs or fails, 77 no CUDA device (nothing checked;
CI never runs this script).
"""

from __future__ import annotations

import inspect
import sys
import traceback

from replay import main


def cases(torch):  # type: ignore[no-untyped-def]
    """(name, input, keyword arguments): NVFP4 and MXFP4, every layout, batch dims, column-major."""
    bf16, fp16 = torch.bfloat16, torch.float16
    grid = [
        ("nvfp4 128x256 bf16 swizzled-128x4", (128, 256), bf16, {}),
        ("nvfp4 300x512 fp16 swizzled-128x4", (300, 512), fp16, {}),
        ("nvfp4 1x64 bf16 swizzled-8x4", (1, 64), bf16, {"is_sf_8x4_layout": True}),
        ("nvfp4 96x128 bf16 linear", (96, 128), bf16, {"is_sf_swizzled_layout": False}),
        ("nvfp4 4x32x128 bf16 batch", (4, 32, 128), bf16, {}),
        ("nvfp4 128x256 bf16 enable_pdl", (128, 256), bf16, {"enable_pdl": True}),
        (
            "mxfp4 128x256 bf16 ue8m0 sf32",
            (128, 256),
            bf16,
            {"sf_vec_size": 32, "sf_use_ue8m0": True},
        ),
    ]
    for name, shape, dtype, kwargs in grid:
        yield name, torch.randn(*shape, dtype=dtype, device="cuda"), kwargs
    column = torch.randn(256, 128, dtype=bf16, device="cuda").t()
    yield "nvfp4 128x256 bf16 column-major", column, {}


def same(torch, a, b) -> bool:  # type: ignore[no-untyped-def]
    return all(
        x.shape == y.shape and torch.equal(x.view(torch.uint8), y.view(torch.uint8))
        for x, y in zip(a, b, strict=True)
    )


def check(torch, flashinfer, name, x, kwargs) -> dict[str, object]:  # type: ignore[no-untyped-def]
    global_scale = (
        None if kwargs.get("sf_use_ue8m0") else torch.tensor([448.0 * 6.0], device="cuda")
    )

    def quantize(x, global_scale):  # type: ignore[no-untyped-def]
        return flashinfer.fp4_quantize(x, global_scale, **kwargs)

    result: dict[str, object] = {"case": name}
    try:
        eager = quantize(x, global_scale)
        torch._dynamo.reset()
        compiled = torch.compile(quantize, fullgraph=True)
        result["compiled_equals_eager"] = same(torch, compiled(x, global_scale), eager)
        static = x.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                compiled(static, global_scale)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = compiled(static, global_scale)
        fresh = torch.randn_like(x)
        static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        result["graph_replay_equals_eager"] = same(torch, captured, quantize(fresh, global_scale))
    except Exception as exc:  # a case that fails is reported, and the others still run
        result["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    result["passed"] = bool(
        result.get("compiled_equals_eager") and result.get("graph_replay_equals_eager")
    )
    return result


def run(torch, flashinfer):  # type: ignore[no-untyped-def]
    """Each case the release's fp4_quantize takes, checked. Releases before 0.2.11.post2 have no
    enable_pdl: a case needing a parameter the installed fp4_quantize lacks is not this
    release's, and is left out (and named)."""
    accepted = inspect.signature(flashinfer.fp4_quantize).parameters
    chosen = [c for c in cases(torch) if set(c[2]) <= set(accepted)]
    left_out = [c[0] for c in cases(torch) if not set(c[2]) <= set(accepted)]
    if left_out:
        print(f"not in flashinfer {flashinfer.__version__}: {', '.join(left_out)}")
    return [check(torch, flashinfer, *case) for case in chosen], left_out


if __name__ == "__main__":
    sys.exit(main(__doc__, run))
