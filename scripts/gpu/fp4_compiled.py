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

Exit status: 0 every case compared equal, 1 a case differs or fails, 3 nothing compared, 77 no
CUDA device (nothing checked; CI never runs this script). A case whose eager call FlashInfer
refuses, or whose two eager calls differ (scripts/gpu/replay.py), is n/a: named, not compared,
counted neither way.
"""

from __future__ import annotations

import inspect
import sys

import replay
from replay import main, wanted


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


def check(torch, flashinfer, name, x, kwargs) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The case through replay.check: each input a fresh random tensor of x's shape, dtype and
    strides (randn_like keeps them: column-major stays column-major)."""
    global_scale = (
        None if kwargs.get("sf_use_ue8m0") else torch.tensor([448.0 * 6.0], device="cuda")
    )

    def quantize(x):  # type: ignore[no-untyped-def]
        return flashinfer.fp4_quantize(x, global_scale, **kwargs)

    return replay.check(torch, name, (lambda: torch.randn_like(x),), quantize)


def run(torch, flashinfer):  # type: ignore[no-untyped-def]
    """Each case the release's fp4_quantize takes, checked. Releases before 0.2.11.post2 have no
    enable_pdl: a case needing a parameter the installed fp4_quantize lacks is not this
    release's, and is left out (and named)."""
    if not wanted("fp4_quantize"):  # one entry point: every case in one part
        return [], []
    accepted = inspect.signature(flashinfer.fp4_quantize).parameters
    chosen = [c for c in cases(torch) if set(c[2]) <= set(accepted)]
    left_out = [c[0] for c in cases(torch) if not set(c[2]) <= set(accepted)]
    if left_out:
        print(f"not in flashinfer {flashinfer.__version__}: {', '.join(left_out)}")
    return [check(torch, flashinfer, *case) for case in chosen], left_out


if __name__ == "__main__":
    sys.exit(main(__doc__, run))
