"""What a wrapper's run() does around torch.compile beyond equal outputs, inside a target venv
where fi-patch applied its patches: run by tests/test_compiled.py with the target's interpreter.
Prints one JSON line:

- "unplanned": the exception a run() without plan() raises eagerly, and compiled (fullgraph,
  Inductor): FlashInfer's own, both ways;
- "eager ops": fi-patch's ops an eager run() dispatched (none);
- "keys": the keys of two wrappers, and of a third made after the first was let go (never one
  seen before);
- "graphs": how many graphs one compiled function gave, called with one wrapper, then another,
  then the first again (Dynamo guards on the key: the second wrapper recompiles; the third call
  takes one of the two graphs, its key a constant or, where Dynamo made it dynamic, an input),
  and "equal": whether each call gave its own wrapper's result;
- "copy": what a compiled run() of a copy of a planned wrapper (copy.copy, which carries the
  original's key) gave against the copy's eager run() (equal: it runs as unpatched, never with
  the original's plan);
- "fp8 out": a compiled run() into an FP8 out with a v_scale (which returns a scaled copy, not
  the out given) against eager: the results equal, and the buffers given equal;
- "prefill unplanned", "prefill eager ops": the same two of BatchPrefillWithPagedKVCacheWrapper;
- "prefill cute-dsl": a prefill wrapper planned for a backend that allocates its own way
  (cute-dsl, 0.6.18 on: its run() is traced as unpatched): the exception its run() raises eagerly
  and compiled on the CPU (FlashInfer's own, both ways), and the fi_patch ops its graphs hold
  (none); "prefill cute-dsl forward": the same of its forward();
- "ragged unplanned", "ragged eager ops", "ragged cute-dsl": the same three of
  BatchPrefillWithRaggedKVCacheWrapper (cute-dsl, 0.6.8 on, chosen only by name).
"""

from __future__ import annotations

import gc
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kernels
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class Dispatched(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func).startswith("fi_patch"):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def made(f):
    with kernels.unpinned():
        return f.BatchDecodeWithPagedKVCacheWrapper(torch.empty(1 << 20, dtype=torch.uint8), "NHD")


def planned(f, last, **more):
    wrapper = made(f)
    bf16 = torch.bfloat16
    indptr = torch.tensor([0, 1, 2], dtype=torch.int32)
    indices = torch.tensor([1, 0], dtype=torch.int32)
    last = torch.tensor(last, dtype=torch.int32)
    wrapper.plan(indptr, indices, last, 8, 2, 64, 4, q_data_type=bf16, kv_data_type=bf16, **more)
    return wrapper


def raised(call):
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
    return "nothing"


def main():
    import flashinfer as f

    kernels.install()
    q = torch.randn(2, 8, 64, dtype=torch.bfloat16)
    kv = torch.randn(2, 2, 4, 2, 64, dtype=torch.bfloat16)
    found = {}

    unplanned = made(f)
    compiled = torch.compile(lambda q, kv: unplanned.run(q, kv), fullgraph=True)
    found["unplanned"] = [raised(lambda: unplanned.run(q, kv)), raised(lambda: compiled(q, kv))]

    first, second = planned(f, [4, 1]), planned(f, [2, 3])
    mode = Dispatched()
    with mode:
        first.run(q, kv)
    found["eager ops"] = mode.ops

    gone = made(f)
    keys = [first._fi_patch_key, second._fi_patch_key, gone._fi_patch_key]
    del gone
    gc.collect()
    found["keys"] = [*keys, made(f)._fi_patch_key]

    torch._dynamo.reset()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    # The wrapper the compiled function reads from a holder, as a model reads its own.
    holder = [first]
    fn = torch.compile(lambda q, kv: holder[0].run(q, kv), backend=counting)
    equal = []
    for wrapper in (first, second, first):
        holder[0] = wrapper
        equal.append(bool(torch.equal(fn(q, kv), wrapper.run(q, kv))))
    found["graphs"] = len(graphs)
    found["equal"] = equal

    # A copy carries its original's key; planned again, the copy's plan differs.
    import copy

    twin = copy.copy(first)
    twin.plan(
        torch.tensor([0, 1, 2], dtype=torch.int32),
        torch.tensor([0, 1], dtype=torch.int32),
        torch.tensor([1, 1], dtype=torch.int32),
        8,
        2,
        64,
        4,
        q_data_type=torch.bfloat16,
        kv_data_type=torch.bfloat16,
    )
    torch._dynamo.reset()
    compiled_twin = torch.compile(lambda q, kv: twin.run(q, kv))
    found["copy"] = bool(torch.equal(compiled_twin(q, kv), twin.run(q, kv)))

    # An FP8 out given with a v_scale: run() returns a scaled copy, not the out given.
    eight = planned(f, [4, 1], o_data_type=torch.float8_e4m3fn)
    torch._dynamo.reset()
    scaled = torch.compile(lambda q, kv, o: eight.run(q, kv, out=o, v_scale=0.5).float())
    buffers = [torch.zeros(2, 8, 64, dtype=torch.float8_e4m3fn) for _ in range(2)]
    eager, compiled = (
        eight.run(q, kv, out=buffers[0], v_scale=0.5).float(),
        scaled(q, kv, buffers[1]),
    )
    found["fp8 out"] = [bool(torch.equal(eager, compiled)), bool(torch.equal(*buffers))]
    found.update(prefill(f))
    found.update(ragged(f))
    print(json.dumps(found))


def prefill(f):
    """The prefill wrapper's run() without plan(), planned, and planned for cute-dsl."""
    found = {}

    def prefill_made():
        with kernels.unpinned():
            workspace = torch.empty(1 << 20, dtype=torch.uint8)
            return f.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")

    q = torch.randn(3, 8, 64, dtype=torch.bfloat16)
    kv = torch.randn(2, 2, 4, 2, 64, dtype=torch.bfloat16)
    unplanned = prefill_made()
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, kv: unplanned.run(q, kv), fullgraph=True)
    found["prefill unplanned"] = [
        raised(lambda: unplanned.run(q, kv)),
        raised(lambda: compiled(q, kv)),
    ]
    wrapper = prefill_made()
    bf16 = torch.bfloat16
    wrapper.plan(
        torch.tensor([0, 2, 3], dtype=torch.int32),
        torch.tensor([0, 1, 2], dtype=torch.int32),
        torch.tensor([1, 0], dtype=torch.int32),
        torch.tensor([4, 3], dtype=torch.int32),
        8,
        2,
        64,
        4,
        q_data_type=bf16,
        kv_data_type=bf16,
    )
    mode = Dispatched()
    with mode:
        wrapper.run(q, kv)
    found["prefill eager ops"] = mode.ops
    # Planned for cute-dsl as a host that has it plans (0.6.18 on): on the CPU its run() refuses
    # for want of the backend's own wrapper, eagerly and compiled.
    wrapper._backend = "cute-dsl"
    torch._dynamo.reset()
    graphs = []

    def recording(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if "fi_patch" in str(n.target)])
        return gm.forward

    compiled = torch.compile(lambda q, kv: wrapper.run(q, kv), backend=recording)
    found["prefill cute-dsl"] = [
        raised(lambda: wrapper.run(q, kv)),
        raised(lambda: compiled(q, kv)),
        [op for ops in graphs for op in ops],
    ]
    # forward() too is traced as it is there (its stores and the run() it calls together), not
    # refused as a call its own op cannot take.
    torch._dynamo.reset()
    forwarded = torch.compile(lambda q, kv: wrapper.forward(q, kv, causal=True), backend=recording)
    found["prefill cute-dsl forward"] = [
        raised(lambda: wrapper.forward(q, kv, causal=True)),
        raised(lambda: forwarded(q, kv)),
    ]
    return found


def ragged(f):
    """The ragged prefill wrapper's run() without plan(), planned, and planned for cute-dsl."""
    found = {}

    def made():
        with kernels.unpinned():
            workspace = torch.empty(1 << 20, dtype=torch.uint8)
            return f.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend="fa2")

    q = torch.randn(3, 8, 64, dtype=torch.bfloat16)
    k, v = torch.randn(5, 2, 64, dtype=torch.bfloat16), torch.randn(5, 2, 64, dtype=torch.bfloat16)
    unplanned = made()
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: unplanned.run(q, k, v), fullgraph=True)
    found["ragged unplanned"] = [
        raised(lambda: unplanned.run(q, k, v)),
        raised(lambda: compiled(q, k, v)),
    ]
    wrapper = made()
    bf16 = torch.bfloat16
    qo, kv = torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 4, 5], dtype=torch.int32)
    wrapper.plan(qo, kv, 8, 2, 64, q_data_type=bf16, kv_data_type=bf16)
    mode = Dispatched()
    with mode:
        wrapper.run(q, k, v)
    found["ragged eager ops"] = mode.ops
    # Planned for cute-dsl as a host that has it plans: on the CPU its run() refuses for want of
    # the backend's own state, eagerly and compiled, and no fi_patch op is in the graphs.
    wrapper._backend = "cute-dsl"
    torch._dynamo.reset()
    graphs = []

    def recording(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes if "fi_patch" in str(n.target)])
        return gm.forward

    compiled = torch.compile(lambda q, k, v: wrapper.run(q, k, v), backend=recording)
    found["ragged cute-dsl"] = [
        raised(lambda: wrapper.run(q, k, v)),
        raised(lambda: compiled(q, k, v)),
        [op for ops in graphs for op in ops],
    ]
    return found


if __name__ == "__main__":
    main()
