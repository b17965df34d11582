"""What a wrapper's run() does around torch.compile beyond equal outputs, inside a target venv
where fi-patch applied its patches: run by tests/test_compiled.py with the target's interpreter.
Prints one JSON line:

- "unplanned": the exception a run() without plan() raises eagerly, and compiled (fullgraph,
  Inductor): FlashInfer's own, both ways;
- "eager ops": fi-patch's ops an eager run() dispatched (none);
- "keys": the keys of two wrappers, and of a third made after the first was let go (never one
  seen before);
- "graphs": how many graphs one compiled function gave, called with one wrapper, then another,
  then the first again (Dynamo guards on the key: the second wrapper recompiles, the first
  finds its own graph again), and "equal": whether each call gave its own wrapper's result.
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


def planned(f, last):
    wrapper = made(f)
    bf16 = torch.bfloat16
    indptr = torch.tensor([0, 1, 2], dtype=torch.int32)
    indices = torch.tensor([1, 0], dtype=torch.int32)
    last = torch.tensor(last, dtype=torch.int32)
    wrapper.plan(indptr, indices, last, 8, 2, 64, 4, q_data_type=bf16, kv_data_type=bf16)
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
    print(json.dumps(found))


if __name__ == "__main__":
    main()
