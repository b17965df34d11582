"""What the GPU scripts share: a case compiled against eager, bit for bit, and replayed in a
CUDA graph. Imported by the scripts beside it (their folder is on sys.path when they run)."""

from __future__ import annotations

import traceback


def same(torch, a, b) -> bool:  # type: ignore[no-untyped-def]
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(bits(torch, x), bits(torch, y))
        for x, y in zip(a, b)  # noqa: B905 (lengths compared above; Python 3.8 targets)
    )


def bits(torch, x):  # type: ignore[no-untyped-def]
    """FP8 compared byte for byte: torch.equal may not take a float8 dtype."""
    return x.view(torch.uint8) if x.dtype.is_floating_point and x.element_size() == 1 else x


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


def check_reduce_overhead(torch, name, makers, fn, seeded) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """fn compiled with mode="reduce-overhead" (Inductor's own CUDA graphs), called three times
    on new inputs. Seeded (seed and offset tensors: the op runs inside the graph), each call
    equals eager bit for bit. Unseeded (the op is tagged cudagraph_unsafe: Inductor keeps it out
    of its graphs, as a capture kept the eager call out), each call runs and draws anew, as two
    eager calls on one input do (the device's generator advances)."""
    result: dict[str, object] = {"case": name + ", reduce-overhead"}
    try:
        torch._dynamo.reset()
        compiled = torch.compile(fn, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            inputs = [make() for make in makers]
            got = [o.clone() for o in compiled(*[i.clone() for i in inputs])]
            if seeded and not same(torch, got, fn(*[i.clone() for i in inputs])):
                raise AssertionError("the compiled call differs from eager")
        if not seeded:
            inputs = [make() for make in makers]
            first = [o.clone() for o in compiled(*inputs)]
            second = [o.clone() for o in compiled(*inputs)]
            if same(torch, first, second):
                raise AssertionError("two compiled calls drew the same samples: eager's do not")
        result["passed"] = True
    except Exception as exc:  # a case that fails is reported, and the others still run
        result["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        result["passed"] = False
    return result


def check_made(torch, cases):  # type: ignore[no-untyped-def]
    """Each (case, made, reason, makers, fn) whose entry point fi-patch made an op, checked; the
    others named with the reason, and left out."""
    results, left_out = [], {}
    for case, made, reason, makers, fn in cases:
        if not made:
            left_out[case] = reason
            continue
        results.append(check(torch, case, makers, fn))
    for case, reason in left_out.items():
        print(f"left as it is: {case}: {reason}")
    return results, left_out


SKIPPED = 77


def main(doc: str, run) -> int:  # type: ignore[no-untyped-def]
    """The GPU scripts' driver: `--out`, exit 77 without a device, the header line, then
    `run(torch, flashinfer)`, which returns (results, left_out) or a string saying why nothing
    ran; one line per result, JSON with --out. 0 every case passed, 1 otherwise."""
    import argparse
    import json
    import platform

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", help="write the results as JSON to this file")
    arguments = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"no CUDA device (torch {torch.__version__}): nothing checked")
        return SKIPPED
    import flashinfer

    torch.manual_seed(0)
    header = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "flashinfer": flashinfer.__version__,
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
    }
    print(json.dumps(header))
    found = run(torch, flashinfer)
    if isinstance(found, str):
        print(found)
        return 1
    results, left_out = found
    for result in results:
        verdict = "ok  " if result["passed"] else "FAIL"
        print(f"{verdict} {result['case']}: {result.get('error', '')}".rstrip(": "))
    if arguments.out:
        with open(arguments.out, "w") as handle:
            json.dump({**header, "cases": results, "left_out": left_out}, handle, indent=2)
    return 0 if results and all(r["passed"] for r in results) else 1
