# The proof runner: run inside the target interpreter as `python -I -B prove.py`, with the proofs
# to run as JSON on stdin:
#
#   {"proofs": [{"patch": ID, "mode": "before" | "after", "file": PATH, "marker": TEXT,
#                "source": TEXT}, ...]}
#
# The proofs given run here, in this one fresh process (fi-patch may share a target's proofs among
# several): torch and FlashInfer are imported once. Each proof's source defines `prove(ctx)`; it
# imports what it needs from the target, and reports through `ctx`: `ctx.stage(text)` names the
# step under way (an exception is reported at it), `ctx.problem(text)` makes the proof red,
# `ctx.passes(text)` says what green showed, `ctx.note(text)` adds a line to a green report's
# details, `ctx.fact(key, value)` keeps a fact.
# `ctx.processes()` counts the processes started inside a `with` block, `ctx.compiled(fn)` is
# `torch.compile(fn, fullgraph=True, backend="eager")`, and `ctx.graph_calls(fn, *args)` traces fn
# with fullgraph and a backend that records the graph and never runs it, returning the targets
# of its calls (`ctx.graph_nodes(fn, *args)`: the call nodes themselves, with their metadata).
# `ctx.dispatched()` is a TorchDispatchMode that records the name of every op dispatched while it
# is on (its `ops`).
#
# Whatever a proof does, the runner also checks that a module was imported from FILE (not another
# copy) and, after the patch, that FILE carries the patch's marker. The answer is framed JSON on
# stdout: every proof's problems, summary, facts, any error with its frames, and the seconds it
# took in this process (benchmarks/run.py reads them; fi-patch does not).
import contextlib
import json
import os
import sys
import threading
import time
import traceback
import types

BEGIN = "<<<fi-patch-probe>>>"
END = "<<<fi-patch-probe-end>>>"
EVENTS = ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork")
started = []
watching = [False]


def audit(event, arguments):
    if watching[0] and event in EVENTS:
        started.append(event)


class Recorded(Exception):
    """Raised by the recording backend instead of running the graph."""


class Context:
    def __init__(self, request):
        self.mode = request["mode"]
        self.file = request["file"]
        self.marker = request["marker"]
        self.answer = {
            "patch": request["patch"],
            "mode": self.mode,
            "stage": "start",
            "problems": [],
            "summary": "",
            "notes": [],
            "facts": {},
        }

    def stage(self, text):
        self.answer["stage"] = text

    def problem(self, text):
        self.answer["problems"].append(text)

    def passes(self, text):
        self.answer["summary"] = text

    def note(self, text):
        self.answer["notes"].append(text)

    def fact(self, key, value):
        self.answer["facts"][key] = value

    @contextlib.contextmanager
    def processes(self):
        seen = []
        before = len(started)
        watching[0] = True
        try:
            yield seen
        finally:
            watching[0] = False
            seen.extend(started[before:])

    def compiled(self, fn):
        import torch

        torch._dynamo.reset()
        return torch.compile(fn, fullgraph=True, backend="eager")

    def dispatched(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        class Dispatched(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                self.ops.append(str(func))
                return func(*args, **(kwargs or {}))

        return Dispatched()

    def graph_calls(self, fn, *args):
        return [str(node.target) for node in self.graph_nodes(fn, *args)]

    def graph_nodes(self, fn, *args):
        import torch

        graphs = []

        def record(graph_module, example_inputs):
            graphs.append(graph_module)

            def never_run(*inputs):
                raise Recorded()

            return never_run

        torch._dynamo.reset()
        try:
            torch.compile(fn, fullgraph=True, backend=record)(*args)
        except Recorded:
            pass
        return [
            node for graph in graphs for node in graph.graph.nodes if node.op == "call_function"
        ]


def error_of(exc):
    return {
        "type": type(exc).__module__ + "." + type(exc).__qualname__,
        "message": str(exc)[:6000],
        "frames": [
            [frame.filename, frame.lineno, frame.name]
            for frame in traceback.extract_tb(exc.__traceback__)[-20:]
        ],
    }


def imported_from(path):
    """Whether some imported module was loaded from `path`."""
    wanted = os.path.realpath(path)
    for module in list(sys.modules.values()):
        found = getattr(module, "__file__", None)
        if found and os.path.realpath(found) == wanted:
            return True
    return False


def run(request, torch_error):
    ctx = Context(request)
    if torch_error is not None:
        ctx.stage("import torch")
        ctx.answer["error"] = torch_error
        return ctx.answer
    # A module of its own, in sys.modules: Dynamo (torch 2.8) looks up the module of every
    # function it traces, the proof's own lambdas among them.
    module = types.ModuleType("fi_patch_proof")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    try:
        exec(compile(request["source"], "<proof of %s>" % request["patch"], "exec"), namespace)
        namespace["prove"](ctx)
    except BaseException as exc:
        ctx.answer["error"] = error_of(exc)
        return ctx.answer
    if not imported_from(ctx.file):
        ctx.problem("no module was imported from %s: the target imports another copy" % ctx.file)
    if ctx.mode == "after":
        with open(ctx.file, encoding="utf-8") as handle:
            if ctx.marker not in handle.read():
                ctx.problem("%s does not carry fi-patch's marker" % ctx.file)
    return ctx.answer


def orphaned(parent):
    """fi-patch runs this process in a session of its own: if fi-patch dies (SIGKILL, the OOM
    killer), nothing else would stop it, so it stops itself."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(3)


threading.Thread(target=orphaned, args=(os.getppid(),), daemon=True).start()
sys.addaudithook(audit)
requests = json.load(sys.stdin)["proofs"]
answer = {"python": sys.executable}
torch_error = None
try:
    import torch

    answer["torch_version"] = torch.__version__
    answer["torch_cuda"] = torch.version.cuda
except BaseException as exc:
    torch_error = error_of(exc)
try:
    import packaging

    answer["packaging_version"] = packaging.__version__
except Exception:
    pass
answer["proofs"] = []
for request in requests:
    start = time.perf_counter()
    proved = run(request, torch_error)
    proved["seconds"] = round(time.perf_counter() - start, 4)
    answer["proofs"].append(proved)
sys.stdout.write("\n" + BEGIN + json.dumps(answer, default=repr) + END + "\n")
sys.stdout.flush()
sys.stderr.flush()
# Tearing down an interpreter that has imported torch and Dynamo takes seconds, and this process
# has nothing left to clean up: it wrote nothing but its answer, which is out.
os._exit(0)
