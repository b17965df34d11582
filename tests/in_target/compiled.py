"""Compiled against eager, inside a target venv where fi-patch applied its patches.

Run by tests/test_compiled.py as `python compiled.py FAMILY...` with the target's interpreter
(cases.py holds the families and their cases); `python compiled.py --coverage` lists every op
fi-patch registered and those the cases' graphs hold. The
kernels FlashInfer's entry points reach are stood in by CPU code doing their math
(kernels.py), below FlashInfer's own Python: its checks and allocations run as on a GPU host,
and so do fi-patch's routing, ops and fakes. Each case runs eagerly, then compiled with
`aot_eager` and with Inductor (fullgraph where the case says so), on fresh copies of the same
inputs, and compares the outputs and every input the call writes. Prints one JSON line: a
result per case and backend.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cases
import kernels
import torch
from torch.utils._python_dispatch import TorchDispatchMode

BACKENDS = ("aot_eager", "inductor")
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
UNWRITTEN = ("fi_patch.cutlass_fused_moe",)
"""The ops (and their _out and _writes forms) that return tensors the kernel module allocates and
leaves unwritten, as FlashInfer's function returns them (cutlass_fused_moe's three min-latency
buffers): two runs give two sets of bytes, so opcheck's runs under AOTAutograd, which compare
outputs, are not run for them; the cases compare the output they write. Where such an op returns
only what it writes (cutlass_fused_moe before 0.3.0: the output alone, its out op nothing),
opcheck runs whole."""


def fresh(inputs):
    """Copies of the inputs (a case's tensors, or other values as they are), requires_grad kept."""
    copied = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            clone = value.detach().clone()
            copied.append(clone.requires_grad_(value.requires_grad))
        else:
            copied.append(value)
    return copied


def recording(name, graphs):
    """A backend that keeps the graph's call targets, then compiles it with `name`."""
    compile_with = torch._dynamo.lookup_backend(name)

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return compile_with(gm, example_inputs)

    return backend


def compare(eager, compiled, path="output", values=True):
    """Where `compiled` differs from `eager` (tensors, or nested tuples and lists of them):
    one line, or ""."""
    if isinstance(eager, (tuple, list)):
        if not isinstance(compiled, (tuple, list)) or len(eager) != len(compiled):
            return f"{path}: {type(eager)!r}, compiled {type(compiled)!r}"
        for index, (e, c) in enumerate(zip(eager, compiled, strict=False)):
            found = compare(e, c, f"{path}[{index}]", values)
            if found:
                return found
        return ""
    if not isinstance(eager, torch.Tensor):
        return "" if eager == compiled else f"{path}: {eager!r}, compiled {compiled!r}"
    if not isinstance(compiled, torch.Tensor):
        return f"{path}: a tensor, compiled {compiled!r}"
    if eager.device != compiled.device:
        return f"{path}: on {eager.device}, compiled on {compiled.device}"
    if eager.shape != compiled.shape or eager.dtype != compiled.dtype:
        shapes = tuple(eager.shape), eager.dtype, tuple(compiled.shape), compiled.dtype
        return "{}: {} {}, compiled {} {}".format(path, *shapes)
    if eager.requires_grad != compiled.requires_grad:
        return f"{path}: requires_grad {eager.requires_grad}, compiled {compiled.requires_grad}"
    if not values:
        return ""
    e, c = eager.detach(), compiled.detach()
    if e.dtype in (torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool):
        same = torch.equal(e, c)
    else:
        same = torch.allclose(e.float(), c.float(), rtol=1e-2, atol=1e-2, equal_nan=True)
    if same:
        return ""
    worst = (e.float() - c.float()).abs().max().item() if e.is_floating_point() else "-"
    return f"{path} differs (largest difference {worst})"


def run(case, backend):
    """One case with one backend: equal, what differs, the graphs, or the error; with
    `aot_eager`, each op of fi-patch's (or FlashInfer's) the compiled call ran, checked by
    torch.library.opcheck with the arguments it ran with."""
    torch._dynamo.reset()
    graphs = []
    inputs = case.inputs()
    expected_inputs = fresh(inputs)
    compiled_inputs = fresh(inputs)
    compiled_fn = torch.compile(
        case.fn, backend=recording(backend, graphs), fullgraph=case.fullgraph
    )
    try:
        kernels.reset()
        with case.context():
            expected = case.fn(*expected_inputs)
        for marked, dim in case.mark_dynamic:
            torch._dynamo.mark_dynamic(compiled_inputs[marked], dim)
        kernels.reset()
        with case.context():
            got = compiled_fn(*compiled_inputs)
        with case.context():
            differs = _again(case, compiled_fn)
    except Exception as exc:
        return _failed(exc, graphs)
    differs = differs or compare(expected, got, values=case.values)
    for index in case.written:
        differs = differs or compare(
            expected_inputs[index], compiled_inputs[index], f"input {index} after the call"
        )
    ops = [t for graph in graphs for t in graph if t.startswith(("fi_patch", "flashinfer"))]
    if not differs and tuple(o.removesuffix(".default") for o in ops) != case.ops:
        differs = f"the graphs hold {ops}, not {list(case.ops)}"
    result = {"equal": not differs, "differs": differs, "graphs": graphs}
    if backend == "aot_eager" and case.values:
        result["opcheck"] = _opchecked(case)
    return result


def _opchecked(case):
    """The case run eagerly on the path each entry point takes while compiling (its op), each
    op's first call kept and checked by torch.library.opcheck with the arguments it ran with."""
    recorder = Recorder()
    with case.context(), routed_to_ops(), recorder:
        case.fn(*fresh(case.inputs()))
    return recorder.opcheck()


def _again(case, compiled_fn):
    """What differs when the compiled function runs on inputs of other sizes: its outputs, and
    the inputs it writes."""
    for call in case.again:
        again = fresh(call())
        expected_inputs = fresh(again)
        found = compare(case.fn(*expected_inputs), compiled_fn(*again), "output of another batch")
        for index in case.written:
            found = found or compare(
                expected_inputs[index], again[index], f"input {index} of another batch"
            )
        if found:
            return found
    return ""


def _failed(exc, graphs):
    lines = str(exc).strip().splitlines()
    return {
        "equal": False,
        "error": "{}: {}".format(type(exc).__name__, lines[0] if lines else ""),
        "trace": traceback.format_exc()[-3000:],
        "graphs": graphs,
    }


class Recorder(TorchDispatchMode):
    """Keeps the first call of each op of fi-patch's or FlashInfer's, its arguments copied as
    they were before it ran (the op may write them)."""

    def __init__(self):
        super().__init__()
        self.calls = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if name.startswith(("fi_patch", "flashinfer")) and name not in self.calls:
            self.calls[name] = (func, _copied(args), _copied(kwargs))
        return func(*args, **kwargs)

    def opcheck(self):
        """By op: "ok", or the first line of what torch.library.opcheck found. Where an argument
        is float8, test_schema is not run, and the answer says so: it compares the arguments
        before and after the call, which torch cannot for float8 on the CPU. The generator
        stands still meanwhile: opcheck runs the op again and again and compares its outputs."""
        found = {}
        for name, (func, args, kwargs) in self.calls.items():
            every = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
            eight = any(a.dtype in FLOAT8 for a in every)
            # The out op writes the first output and returns the others.
            written = 0 if "_out" in name else 1
            unwritten = name.startswith(UNWRITTEN) and len(func._schema.returns) > written
            left = ["test_schema"] if eight else []
            left += ["test_aot_dispatch_static", "test_aot_dispatch_dynamic"] if unwritten else []
            tests = [t for t in torch.library._OPCHECK_DEFAULT_UTILS if t not in left]
            try:
                with kernels.still():
                    torch.library.opcheck(
                        func, args, kwargs, **({"test_utils": tests} if left else {})
                    )
                why = "float8 arguments" if eight else "outputs the kernel module leaves unwritten"
                found[name] = "ok ({} not run: {})".format(", ".join(left), why) if left else "ok"
            except Exception as exc:
                lines = str(exc).strip().splitlines()
                found[name] = "{}: {}".format(type(exc).__name__, lines[0] if lines else "")
        return found


class routed_to_ops:
    """Every one of fi-patch's routing functions takes the path it takes while compiling (a call
    of its op) until the block ends: the `_fi_patch_compiling` it asks (a cell of its closure)
    answers True. The ops' bodies call FlashInfer's functions themselves, which ask nothing."""

    def __enter__(self):
        import flashinfer.utils as utils

        entries = [
            *getattr(utils, "_fi_patch_boundaries", {}).values(),
            *getattr(utils, "_fi_patch_declared", {}).values(),
        ]
        self.saved = []
        for entry in entries:
            if entry.routed is not None and entry.ready:
                names = entry.routed.__code__.co_freevars
                cell = entry.routed.__closure__[names.index("_fi_patch_compiling")]
                self.saved.append((cell, cell.cell_contents))
                cell.cell_contents = _always
        return self

    def __exit__(self, *exc):
        for cell, value in self.saved:
            cell.cell_contents = value


def _always():
    return True


def _copied(value):
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def coverage(families):
    """Every op fi-patch registered in this release, and those the cases' graphs hold."""
    names = torch._C._dispatch_get_all_op_names()
    ours = [n for n in names if n.startswith(("fi_patch::", "fi_patch_declared::"))]
    registered = sorted(n.replace("::", ".") for n in ours)
    tags = {}
    for name in ours:
        namespace, op = name.split("::")
        overload = getattr(getattr(torch.ops, namespace), op).default
        tags[name.replace("::", ".")] = sorted(str(t).split(".")[-1] for t in overload.tags)
    held = sorted(
        {op for build in families.values() for case in build().values() for op in case.ops}
    )
    return {"registered": registered, "held": held, "tags": tags}


def main(names):
    import flashinfer

    kernels.install()
    families = cases.families(flashinfer)
    if names == ["--coverage"]:
        print(json.dumps(coverage(families)))
        return
    results = {}
    for name in names:
        build = families.get(name)
        if build is None:
            results[name] = None
            continue
        try:
            family = build()
        except Exception:
            results[name] = {"cases": {"error": traceback.format_exc()[-3000:]}}
            continue
        results[name] = {
            case_name: {backend: run(case, backend) for backend in BACKENDS}
            for case_name, case in family.items()
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
