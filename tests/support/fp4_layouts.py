"""Run inside a target venv: fp4_quantize's outputs over a grid of shapes and layouts, as JSON.

    python -I fp4_layouts.py MODE [MODE ...]     (MODE: eager, ours, upstream)

- `eager`: the release's own fp4_quantize, run on CPU tensors with only the compiled kernel
  replaced. From 0.4.0 FlashInfer allocates the outputs in Python and the kernel fills them: the
  stand-in fills nothing. Up to 0.3.1.post1 the C++ op allocates them: the stand-in allocates
  what csrc/nv_internal/tensorrt_llm/thop/fp4Quantize.cpp does (the input's shape with k / 2
  bytes, and a flat byte buffer of the swizzled or linear scale-factor size). Every argument the
  kernel receives is recorded, so that two runs can be compared.
- `ours`: fi-patch's op, fi_patch::flashinfer_fp4_quantize, under FakeTensorMode (its fake).
- `upstream`: FlashInfer's own op, flashinfer::fp4_quantize (0.6.12 on), under FakeTensorMode.

Each case gives the two outputs' shape, stride and dtype, or the error's type. The fakes run
first: `eager` replaces module globals for the rest of the process.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
from typing import Any

import torch

SHAPES = [(128, 256), (1, 64), (200, 96), (96, 64), (3, 5, 128), (3, 64, 128), (2, 4, 7, 64)]
LAYOUTS = {
    "swizzled-128x4": (True, False),
    "swizzled-8x4": (True, True),
    "linear": (False, False),
}
CASES = [
    (shape, order, layout, sf_vec_size)
    for shape in SHAPES
    for order in ("row-major", "column-major")
    for layout in LAYOUTS
    for sf_vec_size in (16, 32)
]
kernel_calls: list[object] = []


def described(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return [list(value.shape), list(value.stride()), str(value.dtype)]
    if isinstance(value, (list, tuple)):
        return [described(v) for v in value]
    return value


def pad(value: int, to: int) -> int:
    return (value + to - 1) // to * to


class Kernel:
    """The compiled module's stand-in: records each call; allocates where the C++ op did."""

    def fp4_quantize(self, *arguments: object) -> object:
        kernel_calls.append(described(arguments))
        if isinstance(arguments[2], torch.Tensor):
            return None  # FlashInfer allocated out_val and out_sf in Python.
        # 0.2.6 - 0.2.8 pass five values: no 8x4 layout, rows always padded to 128.
        source, _, sf_vec_size, _, swizzled, layout_8x4 = (*arguments[:6], False)[:6]
        assert isinstance(source, torch.Tensor) and isinstance(sf_vec_size, int)
        k = source.shape[-1]
        m = source.numel() // k
        columns = k // sf_vec_size
        size = pad(m, 8 if layout_8x4 else 128) * pad(columns, 4) if swizzled else m * columns
        values = torch.empty((*source.shape[:-1], k // 2), dtype=torch.uint8)
        return values, torch.empty((size,), dtype=torch.uint8)


class Spec:
    def build_and_load(self, *arguments: object) -> Kernel:
        return Kernel()


def fp4_module() -> object:
    for name in ("flashinfer.quantization.fp4_quantization", "flashinfer.fp4_quantization"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if any(n.startswith("get_fp4_quantization") for n in vars(module)):
            return module
    raise RuntimeError("no module defines get_fp4_quantization*")


def inputs(shape: tuple[int, ...], order: str) -> torch.Tensor:
    if order == "row-major":
        return torch.randn(*shape, dtype=torch.bfloat16)
    *lead, m, k = shape
    return torch.randn(*lead, k, m, dtype=torch.bfloat16).transpose(-2, -1)


def outcome(call: Any, *arguments: Any, **options: Any) -> dict[str, object]:
    try:
        return {"out": described(call(*arguments, **options))}
    except Exception as exc:  # the error's type is the answer
        return {"error": type(exc).__name__}


def run(mode: str) -> list[object]:
    import flashinfer  # noqa: F401 - the op is defined on import

    module = fp4_module()
    if mode == "eager":
        for name in list(vars(module)):
            if re.fullmatch(r"gen_fp4_quantization(_sm\d+)?_module", name):
                setattr(module, name, lambda *a, **k: Spec())
        if hasattr(module, "get_compute_capability"):
            module.get_compute_capability = lambda device: (10, 0)  # type: ignore[attr-defined]
    public = module.fp4_quantize  # type: ignore[attr-defined]
    parameters = inspect.signature(public).parameters
    extra = {"enable_pdl": False, "is_global_scale_inversed": False, "backend": "cuda"}
    answers = []
    for shape, order, layout, sf_vec_size in CASES:
        swizzled, layout_8x4 = LAYOUTS[layout]
        x = inputs(shape, order)
        options = {
            "sf_vec_size": sf_vec_size,
            "sf_use_ue8m0": sf_vec_size == 32,
            "is_sf_swizzled_layout": swizzled,
            "is_sf_8x4_layout": layout_8x4,
        }
        del kernel_calls[:]
        if mode == "eager":
            mine = {k: v for k, v in {**options, **extra}.items() if k in parameters}
            result = outcome(public, x, torch.ones(1), **mine)
            result["kernel"] = list(kernel_calls)
        else:
            op = (
                torch.ops.fi_patch.flashinfer_fp4_quantize
                if mode == "ours"
                else torch.ops.flashinfer.fp4_quantize
            )
            names = [a.name for a in op.default._schema.arguments]
            mine = {k: v for k, v in {**options, **extra}.items() if k in names}
            result = outcome(faked, op, x, mine)
        answers.append({"case": [list(shape), order, layout, sf_vec_size], **result})
    return answers


def faked(op: Any, x: torch.Tensor, options: dict[str, object]) -> Any:
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    fake_x, fake_scale = mode.from_tensor(x), mode.from_tensor(torch.ones(1))
    with mode:
        return op(fake_x, fake_scale, **options)


if __name__ == "__main__":
    modes = sorted(sys.argv[1:], key=lambda mode: mode == "eager")
    json.dump({mode: run(mode) for mode in modes}, sys.stdout)
