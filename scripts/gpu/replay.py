"""What the GPU scripts share: a case compiled against eager, bit for bit, and replayed in a
CUDA graph. Imported by the scripts beside it (their folder is on sys.path when they run)."""

from __future__ import annotations

import traceback
import zlib

PART = [0, 1]
"""--part K/N: this process checks the cases of part K of N (all of them by default)."""


def wanted(entry: str) -> bool:
    """Whether the cases of this entry point (FlashInfer's function, or the declaration it reaches)
    are this process's: all of them run in one part, where its kernels are built once."""
    return zlib.crc32(entry.encode()) % PART[1] == PART[0]


def report(result: dict[str, object]) -> dict[str, object]:
    """A case's line, printed as it ends: a run stopped at its time limit keeps what it saw. A case
    whose eager call fails (a kernel this device or release cannot run), or whose two eager calls
    differ, is `n/a`: nothing was compared, and it is neither passed nor failed."""
    if "eager_error" in result:
        verdict, why = "n/a", f"the eager call fails here: {result['eager_error']}"
    elif "eager_differs" in result:
        verdict, why = "n/a", str(result["eager_differs"])
    else:
        verdict, why = ("ok" if result["passed"] else "FAIL"), str(result.get("error", ""))
    result["verdict"] = verdict
    print(f"{verdict:<4} {result['case']}: {why}".rstrip(": "), flush=True)
    return result


def failure(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def same(torch, a, b) -> bool:  # type: ignore[no-untyped-def]
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(bits(torch, x), bits(torch, y))
        for x, y in zip(a, b)  # noqa: B905 (lengths compared above; Python 3.8 targets)
    )


def bits(torch, x):  # type: ignore[no-untyped-def]
    """FP8 compared byte for byte: torch.equal may not take a float8 dtype."""
    return x.view(torch.uint8) if x.dtype.is_floating_point and x.element_size() == 1 else x


MISTAKES = (TypeError, NameError, AttributeError, ImportError)
"""What an eager call raises when the script calls it wrong (a parameter the release names
otherwise): FAIL. Anything else it raises (FlashInfer refusing this device or backend) is n/a."""


def poison(torch, fill: int) -> None:
    """Fill with one byte value the memory the caching allocator hands out next: every cached
    segment without a live tensor let go, then new blocks of the small pool (requests up to 1 MiB,
    2 MiB segments) and of the large one taken, filled and given back, where they stay cached.
    Not filled: free space beside a live tensor (an input, a kept output) in a segment it holds.
    An output placed there escapes the check (both calls read the same old bytes), so an equal
    pair shows no unwritten byte was seen, not that none exists."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    held = [torch.full((1 << 20,), fill, dtype=torch.uint8, device="cuda") for _ in range(256)]
    held += [torch.full((20 << 20,), fill, dtype=torch.uint8, device="cuda") for _ in range(16)]
    held += [torch.full((512 << 20,), fill, dtype=torch.uint8, device="cuda") for _ in range(2)]
    torch.cuda.synchronize()
    del held


def eager_twice(torch, inputs, fn):  # type: ignore[no-untyped-def]
    """fn's outputs over memory filled with 0x00, and again over memory filled with 0xFF: equal
    where the kernel writes every byte it returns and is deterministic."""
    runs = []
    for fill in (0x00, 0xFF):
        poison(torch, fill)
        runs.append([o.clone() for o in fn(*[i.clone() for i in inputs])])
        torch.cuda.synchronize()
    return runs


def check(torch, name, makers, fn) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """fn compiled against eager, bit for bit, and replayed in a CUDA graph. Eager runs twice
    first, over memory filled with zeros and then with ones: outputs that differ (an FP4 kernel
    compiled out on a device before SM100 writes nothing, and returns what memory held) cannot be
    compared, and the case is n/a."""
    result: dict[str, object] = {"case": name}
    try:
        inputs = [make() for make in makers]
        eager, again = eager_twice(torch, inputs, fn)
    except MISTAKES as exc:  # the script's call is wrong: a failure, never n/a
        result["error"] = "the eager call: " + failure(exc)
        result["passed"] = False
        return report(result)
    except Exception as exc:  # a refusal (this device, backend or release): n/a
        result["eager_error"] = failure(exc)
        result["passed"] = False
        return report(result)
    if not same(torch, eager, again):
        result["eager_differs"] = (
            "two eager calls differ, over memory filled with 0x00 and then 0xFF: the kernel "
            "leaves bytes it returns unwritten on this device, or is not deterministic"
        )
        result["passed"] = False
        return report(result)
    try:
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
        result["error"] = failure(exc)
    result["passed"] = bool(
        result.get("compiled_equals_eager") and result.get("graph_replay_equals_eager")
    )
    return report(result)


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
        result["error"] = failure(exc)
        result["passed"] = False
    return report(result)


def check_made(torch, cases):  # type: ignore[no-untyped-def]
    """Each (case, entry, made, reason, makers, fn) of this part whose entry point fi-patch made
    an op, checked; the others named with the reason, and left out."""
    results, left_out = [], {}
    for case, entry, made, reason, makers, fn in cases:
        if not wanted(entry):
            continue
        if not made:
            left_out[case] = reason
            continue
        results.append(check(torch, case, makers, fn))
    for case, reason in left_out.items():
        print(f"left as it is: {case}: {reason}")
    return results, left_out


SKIPPED = 77
NOTHING_COMPARED = 3


def main(doc: str, run) -> int:  # type: ignore[no-untyped-def]
    """The GPU scripts' driver: `--out`, exit 77 without a device, the header line, then
    `run(torch, flashinfer)`, which returns (results, left_out) or a string saying why nothing
    ran; one line per case as it ends, JSON with --out. Exit status: 0 every case compared passed,
    1 a case failed (or nothing could run), 3 nothing compared: every case n/a (its eager call
    refused, or two eager calls differ) or left out, or none in this part."""
    import argparse
    import json
    import platform

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", help="write the results as JSON to this file")
    parser.add_argument(
        "--part",
        default="0/1",
        metavar="K/N",
        help="check only part K of N (0 <= K < N), the cases split by entry point: N processes "
        "side by side build FlashInfer's kernels at once (scripts/gpu/device.sh)",
    )
    arguments = parser.parse_args()
    k, _, n = arguments.part.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        parser.error(f"--part takes K/N with 0 <= K < N, not {arguments.part!r}")
    PART[:] = [int(k), int(n)]
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
    compared = [r for r in results if r["verdict"] != "n/a"]
    passed = sum(1 for r in compared if r["passed"])
    print(
        f"{passed} passed, {len(compared) - passed} failed, {len(results) - len(compared)} n/a"
        f" (eager fails, or two eager calls differ), {len(left_out)} left out"
    )
    if arguments.out:
        with open(arguments.out, "w") as handle:
            json.dump({**header, "cases": results, "left_out": left_out}, handle, indent=2)
    if passed < len(compared):
        return 1
    return 0 if compared else NOTHING_COMPARED
