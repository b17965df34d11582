"""What the GPU scripts share: a case compiled against eager, bit for bit, and replayed in a
CUDA graph. Imported by the scripts beside it (their folder is on sys.path when they run)."""

from __future__ import annotations

import traceback


def same(torch, a, b) -> bool:  # type: ignore[no-untyped-def]
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
        for x, y in zip(a, b)  # noqa: B905 (lengths compared above; Python 3.8 targets)
    )


def check(torch, name, makers, fn) -> dict[str, object]:  # type: ignore[no-untyped-def]
    result: dict[str, object] = {"case": name}
    try:
        inputs = [make() for make in makers]
        eager = [o.clone() for o in fn(*[i.clone() for i in inputs])]
        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True)
        result["compiled_equals_eager"] = same(torch, compiled(*[i.clone() for i in inputs]), eager)
        static = [i.clone() for i in inputs]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                compiled(*[i.clone() for i in inputs])
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = compiled(*static)
        fresh = [make() for make in makers]
        for holder, value in zip(static, fresh):  # noqa: B905 (Python 3.8 targets)
            holder.copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        expected = fn(*[i.clone() for i in fresh])
        result["graph_replay_equals_eager"] = same(torch, captured, expected)
    except Exception as exc:  # a case that fails is reported, and the others still run
        result["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    result["passed"] = bool(
        result.get("compiled_equals_eager") and result.get("graph_replay_equals_eager")
    )
    return result
