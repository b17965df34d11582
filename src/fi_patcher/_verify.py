# The verification: run inside the target interpreter, in a fresh process, as
# `python -I -c <this text> MODE FILE MARKER`, MODE being "before" or "after" the patch.
#
# It imports the real modules, checks that the one imported is FILE, and traces a function that
# branches on is_cuda_version_at_least("12.8") with torch.compile(fullgraph=True, backend="eager"),
# watching for any process started while tracing. The answer is framed JSON on stdout.
import json
import os
import sys
import traceback

BEGIN = "<<<fi-patch-probe>>>"
END = "<<<fi-patch-probe-end>>>"
mode, expected_file, marker = sys.argv[1], sys.argv[2], sys.argv[3]
answer: "dict[str, object]" = {"mode": mode, "stage": "import torch"}
started: "list[str]" = []
watching = [False]


def audit(event: str, arguments: object) -> None:
    if watching[0] and event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork"):
        started.append(event)


sys.addaudithook(audit)
try:
    import torch

    answer["torch_version"] = torch.__version__
    answer["torch_cuda"] = torch.version.cuda
    try:
        import packaging

        answer["packaging_version"] = packaging.__version__
    except Exception:
        pass
    answer["stage"] = "import flashinfer.jit.cpp_ext"
    from flashinfer.jit import cpp_ext

    answer["module_file"] = os.path.realpath(cpp_ext.__file__)
    with open(cpp_ext.__file__, encoding="utf-8") as handle:
        answer["marker_present"] = marker in handle.read()
    answer["is_expected_file"] = answer["module_file"] == os.path.realpath(expected_file)
    if mode == "after":
        answer["stage"] = "get_cuda_version()"
        answer["value"] = str(cpp_ext.get_cuda_version())

    def branch(x: "torch.Tensor") -> "torch.Tensor":
        if cpp_ext.is_cuda_version_at_least("12.8"):
            return x + 1
        return x - 1

    answer["stage"] = "torch.compile(fullgraph=True) trace"
    torch._dynamo.reset()
    compiled = torch.compile(branch, fullgraph=True, backend="eager")
    watching[0] = True
    try:
        traced = compiled(torch.zeros(3))
    finally:
        watching[0] = False
    answer["processes_during_trace"] = len(started)
    eager = branch(torch.zeros(3))
    answer["traced"] = traced.tolist()
    answer["eager"] = eager.tolist()
    answer["stage"] = "done"
except BaseException as exc:
    answer["error"] = {
        "type": type(exc).__module__ + "." + type(exc).__qualname__,
        "message": str(exc)[:6000],
        "frames": [
            [frame.filename, frame.lineno, frame.name]
            for frame in traceback.extract_tb(exc.__traceback__)[-20:]
        ],
    }
    answer["processes_during_trace"] = len(started)
sys.stdout.write("\n" + BEGIN + json.dumps(answer) + END + "\n")
sys.stdout.flush()
