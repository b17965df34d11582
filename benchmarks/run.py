"""fi-patch's benchmarks: `make bench`. One table of ratios measured in one run.

Every figure is a ratio against a baseline measured in the same run, on the same venv, with the
runs interleaved (A, B, A, B, ...) and the median taken: these machines are shared and noisy, so
no absolute time is a target. The venvs are built like the tests build theirs: real FlashInfer
0.7.4 and 0.7.0 (the release that takes all five patches) from PyPI, the test cache's one torch
2.14.1 (CUDA 13.0 build) through a .pth file.
Writes benchmarks/results.json; docs/performance.md shows the latest table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv as venv_module
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.deps import CUDA_TORCH, shared, use  # noqa: E402
from tests.support.releases import RELEASES  # noqa: E402
from tests.support.venvs import clone, install  # noqa: E402

from fi_patcher.proofs import VERIFY_TIMEOUT, ProofRequest, answered  # noqa: E402
from fi_patcher.registry import load_patches  # noqa: E402

# Where each proof's own cost is measured: the newest release, and 0.2.13, whose fused MoE (the
# CUTLASS one's list of one among them) has the oldest texts fi-patch gives ops.
PROOF_RELEASES = ("0.7.4", "0.2.13")

FI_PATCH = [sys.executable, "-m", "fi_patcher"]
# VmHWM, not getrusage: Linux carries ru_maxrss across fork and exec, so a child of this (larger)
# process would report this process's peak instead of its own.
MEASURE_SELF = (
    "import atexit, sys\n"
    "def peak():\n"
    "    line = next(x for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
    "    sys.stderr.write('maxrss_kb=%s\\n' % line.split()[1])\n"
    "atexit.register(peak)\n"
    "sys.argv = ['fi-patch', *sys.argv[1:]]\n"
    "from fi_patcher.cli import main\n"
    "main()\n"
)
FIRST_CALL = (
    "import time\n"
    "from flashinfer.jit import cpp_ext\n"
    "start = time.perf_counter()\n"
    "cpp_ext.get_cuda_version()\n"
    "print(time.perf_counter() - start)\n"
)
# The eager cost of fi-patch's routing, in one patched process: the public entry point a caller
# calls, as it is (through fi-patch's routing function: one frame, one
# torch.compiler.is_compiling) against the same entry point with FlashInfer's own function back in
# the routing function's place (0.7.4's API wrapper around fused_add_rmsnorm holds it in a
# closure cell; silu_and_mul's name in the flashinfer module); the kernels stood in by ones that
# do nothing, so that the figure is the Python around the kernel; calls alternating in blocks,
# medians. fused_add_rmsnorm is a declared op, silu_and_mul an op boundary.
EAGER_ROUTING = (
    "import statistics, time, torch, flashinfer\n"
    "from flashinfer import activation, norm, utils\n"
    "class Kernels:\n"
    "    def __getattr__(self, name):\n"
    "        return lambda *a, **k: None\n"
    "norm.get_norm_module = lambda: Kernels()\n"
    "norm._use_cuda_norm = lambda device: True\n"
    "activation.get_act_and_mul_module = lambda name: Kernels()\n"
    "x, r = torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(4, 64, dtype=torch.bfloat16)\n"
    "w, g = torch.randn(64, dtype=torch.bfloat16), torch.randn(4, 128, dtype=torch.bfloat16)\n"
    "ENTRY = {'fused_add_rmsnorm': utils._fi_patch_declared['flashinfer::fused_add_rmsnorm'],\n"
    "         'silu_and_mul': utils._fi_patch_boundaries['silu_and_mul']}[NAME]\n"
    "ARGS = {'fused_add_rmsnorm': (x, r, w, 1e-6), 'silu_and_mul': (g,)}[NAME]\n"
    "public = getattr(flashinfer, NAME)\n"
    "cells = [c for c in public.__closure__ or () if c.cell_contents is ENTRY.routed]\n"
    "def place(function):\n"
    "    for cell in cells:\n"
    "        cell.cell_contents = function\n"
    "    if not cells:\n"
    "        setattr(flashinfer, NAME, function)\n"
    "def block(function):\n"
    "    place(function)\n"
    "    call = getattr(flashinfer, NAME)\n"
    "    start = time.perf_counter_ns()\n"
    "    for _ in range(5000):\n"
    "        call(*ARGS, enable_pdl=False)\n"
    "    return (time.perf_counter_ns() - start) / 5000\n"
    "own, routed = [], []\n"
    "for index in range(40):\n"
    "    pair = [(own, ENTRY.fn), (routed, ENTRY.routed)]\n"
    "    for seen, function in pair if index % 2 else reversed(pair):\n"
    "        seen.append(block(function))\n"
    "place(ENTRY.routed)\n"
    "print(statistics.median(routed[8:]), statistics.median(own[8:]))\n"
)
GRAPH_BREAKS = (
    "import torch, warnings\n"
    "warnings.simplefilter('ignore')\n"
    "from torch._dynamo.utils import counters\n"
    "from flashinfer.jit import cpp_ext\n"
    "def branch(x):\n"
    "    return x + 1 if cpp_ext.is_cuda_version_at_least('12.8') else x - 1\n"
    "torch.compile(branch, backend='eager')(torch.zeros(3))\n"
    "print(sum(counters['graph_break'].values()))\n"
)


def run(command: list[str | Path], check_codes: tuple[int, ...] = (0,)) -> float:
    start = time.perf_counter()
    completed = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if completed.returncode not in check_codes:
        raise RuntimeError(f"{command}: exit {completed.returncode}\n{completed.stderr[-2000:]}")
    return elapsed


def interleaved(a: Callable[[], float], b: Callable[[], float], rounds: int) -> tuple[float, float]:
    """Medians of `rounds` runs of each, alternating which goes first."""
    first, second = [], []
    for index in range(rounds):
        if index % 2:
            second.append(b())
            first.append(a())
        else:
            first.append(a())
            second.append(b())
    return statistics.median(first), statistics.median(second)


def python_output(venv: Path, code: str) -> str:
    completed = subprocess.run(
        [venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True
    )
    return completed.stdout.strip().splitlines()[-1]


class Bench:
    def __init__(self, work: Path, rounds: int) -> None:
        self.work = work
        self.rounds = rounds
        self.count = 0
        self.torch = shared(CUDA_TORCH)
        self.templates: dict[str, Path] = {}

    def venv(self, version: str = "0.7.4") -> Path:
        """A fresh clone of the release's template venv, the template made at its first use."""
        if version not in self.templates:
            template = self.work / f"template-{version}"
            venv_module.EnvBuilder(with_pip=True, symlinks=True).create(template)
            install(template, RELEASES[version])
            use(template, self.torch)
            self.templates[version] = template
        self.count += 1
        return clone(self.templates[version], self.work / f"venv-{self.count}")

    def patched(self, version: str = "0.7.4") -> Path:
        venv = self.venv(version)
        run([*FI_PATCH, "apply", "--venv", venv, "--no-verify"])
        return venv

    def proof_costs(self, version: str) -> dict[str, dict[str, float]]:
        """Each proof's own seconds, as the proof runner measures it, by patch: every proof of
        the patches the release takes run in one runner, as fi-patch runs a share of them,
        before the write on the release as installed and after it with every patch applied.
        The runner's start (importing torch and FlashInfer) is in none of them."""
        stock, patched = self.venv(version), self.patched(version)
        checked = subprocess.run(
            [*FI_PATCH, "check", "--venv", patched, "--json"], capture_output=True, text=True
        )
        entries = json.loads(checked.stdout)["results"][0]["patches"]
        catalog = {patch.id: patch for patch in load_patches()}
        taken = [(e["patch"], e["file"]) for e in entries if e["state"] == "patched"]
        costs: dict[str, dict[str, float]] = {}
        for mode, venv in (("before", stock), ("after", patched)):
            requests = [
                ProofRequest(catalog[patch], mode, Path(file.replace(str(patched), str(venv), 1)))
                for patch, file in taken
            ]
            answer = answered(venv / "bin" / "python", requests, VERIFY_TIMEOUT)
            for proof in answer["proofs"]:
                costs.setdefault(proof["patch"], {})[mode] = proof["seconds"]
        return costs

    def check_vs_pip_show(self) -> dict[str, object]:
        venv = self.venv()
        ours, pip = interleaved(
            lambda: run([*FI_PATCH, "check", "--venv", venv], (3,)),
            lambda: run([venv / "bin" / "python", "-m", "pip", "show", "flashinfer-python"]),
            self.rounds,
        )
        return figure(
            "fi-patch check / pip show flashinfer-python",
            ours,
            pip,
            ours / pip,
            "<= 0.5",
            ours / pip <= 0.5,
        )

    def check_vs_bare_start(self) -> dict[str, object]:
        venv = self.venv()
        ours, bare = interleaved(
            lambda: run([*FI_PATCH, "check", "--venv", venv], (3,)),
            lambda: run([venv / "bin" / "python", "-I", "-c", "pass"]),
            self.rounds,
        )
        return figure(
            "fi-patch check / a bare start of the target (python -I -c pass)",
            ours,
            bare,
            ours / bare,
            "<= 10",
            ours / bare <= 10,
        )

    def verify_vs_import(self) -> dict[str, object]:
        venv = self.patched()
        ours, floor = interleaved(
            lambda: run([*FI_PATCH, "check", "--venv", venv, "--verify"]),
            lambda: run([venv / "bin" / "python", "-c", "import flashinfer.jit.cpp_ext"]),
            max(3, self.rounds // 2),
        )
        return figure(
            "fi-patch check --verify (every proof) / import flashinfer.jit.cpp_ext, 0.7.4",
            ours,
            floor,
            ours / floor,
            "<= 2.0",
            ours / floor <= 2.0,
        )

    def apply_all_vs_one(self) -> dict[str, object]:
        """Every patch 0.7.0 takes, with all their proofs, against get_cuda_version's alone."""
        rounds = max(3, self.rounds // 2)
        everything, one = interleaved(
            lambda: run([*FI_PATCH, "apply", "--venv", self.venv("0.7.0")]),
            lambda: run(
                [
                    *FI_PATCH,
                    "apply",
                    "--venv",
                    self.venv("0.7.0"),
                    "--patch",
                    "cuda-version-torch-first",
                ]
            ),
            rounds,
        )
        return figure(
            "apply (every patch, its proofs) / apply --patch cuda-version-torch-first, 0.7.0",
            everything,
            one,
            everything / one,
            "<= 1.3",
            everything / one <= 1.3,
        )

    def first_call(self) -> dict[str, object]:
        stock, patched = self.venv(), self.patched()
        rounds = max(3, self.rounds)
        before, after = [], []
        for _ in range(rounds):
            before.append(float(python_output(stock, FIRST_CALL)))
            after.append(float(python_output(patched, FIRST_CALL)))
        slow, fast = statistics.median(before), statistics.median(after)
        return figure(
            "first get_cuda_version(): unpatched / patched",
            slow,
            fast,
            slow / fast,
            ">= 100",
            slow / fast >= 100,
        )

    def graph_breaks(self) -> dict[str, object]:
        stock, patched = self.venv(), self.patched()
        before = int(python_output(stock, GRAPH_BREAKS))
        after = int(python_output(patched, GRAPH_BREAKS))
        return {
            "name": "Dynamo graph breaks without fullgraph: unpatched -> patched",
            "a": before,
            "b": after,
            "ratio": None,
            "goal": "patched 0",
            "met": after == 0,
        }

    def eager_routing(self, name: str) -> dict[str, object]:
        """An eager call through fi-patch's routing function against FlashInfer's own function,
        in one patched process (nanoseconds per call)."""
        patched = self.patched()
        routed, own = map(
            float, python_output(patched, f"NAME = {name!r}\n" + EAGER_ROUTING).split()
        )
        return figure(
            f"eager {name} (kernel a no-op, ns): routed / FlashInfer's own, 0.7.4",
            routed,
            own,
            routed / own,
            "<= 1.10",
            routed / own <= 1.10,
        )

    def import_declared(self) -> dict[str, object]:
        """`import flashinfer` after every patch (the declared ops made) against before."""
        stock, patched = self.venv(), self.patched()
        after, before = interleaved(
            lambda: run([patched / "bin" / "python", "-c", "import flashinfer"]),
            lambda: run([stock / "bin" / "python", "-c", "import flashinfer"]),
            self.rounds,
        )
        return figure(
            "import flashinfer: patched / unpatched, 0.7.4",
            after,
            before,
            after / before,
            "<= 1.10",
            after / before <= 1.10,
        )

    def apply_many(self, verify: bool) -> dict[str, object]:
        flags = [] if verify else ["--no-verify"]
        together: list[float] = []
        apart: list[float] = []
        for index in range(max(1, self.rounds // 4)):
            one = [self.venv() for _ in range(8)]
            separate = [self.venv() for _ in range(8)]

            def at_once(venvs: list[Path] = one) -> float:
                return run(
                    [*FI_PATCH, "apply", *flags, *[x for v in venvs for x in ("--venv", str(v))]]
                )

            def one_by_one(venvs: list[Path] = separate) -> float:
                return sum(run([*FI_PATCH, "apply", *flags, "--venv", v]) for v in venvs)

            pair = (at_once, one_by_one) if index % 2 == 0 else (one_by_one, at_once)
            for measure in pair:
                (together if measure is at_once else apart).append(measure())
        a, b = statistics.median(together), statistics.median(apart)
        label = "apply" if verify else "apply --no-verify"
        return figure(
            f"{label}: 8 venvs in one command / 8 separate runs",
            a,
            b,
            a / b,
            "<= 0.6",
            a / b <= 0.6,
        )

    def memory(self) -> dict[str, object]:
        venv = self.venv()
        peaks = []
        for _ in range(self.rounds):
            completed = subprocess.run(
                [sys.executable, "-c", MEASURE_SELF, "check", "--venv", str(venv)],
                capture_output=True,
                text=True,
            )
            line = next(x for x in completed.stderr.splitlines() if x.startswith("maxrss_kb="))
            peaks.append(int(line.split("=")[1]) / 1024)
        peak = max(peaks)
        return {
            "name": "peak memory of fi-patch's own process, check (MB)",
            "a": round(peak, 1),
            "b": None,
            "ratio": None,
            "goal": "<= 60",
            "met": peak <= 60,
        }


def figure(name: str, a: float, b: float, ratio: float, goal: str, met: bool) -> dict[str, object]:
    return {
        "name": name,
        "a": round(a, 4),
        "b": round(b, 4),
        "ratio": round(ratio, 3),
        "goal": goal,
        "met": met,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=8, help="runs of each side (default 8)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results.json")
    parser.add_argument(
        "--proofs-only",
        action="store_true",
        help="only each proof's own seconds (a few minutes), written to benchmarks/proofs.json",
    )
    arguments = parser.parse_args()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="fi-patch-bench-"))
    try:
        bench = Bench(work, arguments.rounds)
        costs = {version: bench.proof_costs(version) for version in PROOF_RELEASES}
        show_costs(costs)
        write_costs(costs, time.perf_counter() - started)
        if arguments.proofs_only:
            return
        rows = [
            bench.check_vs_pip_show(),
            bench.check_vs_bare_start(),
            bench.verify_vs_import(),
            bench.apply_all_vs_one(),
            bench.first_call(),
            bench.graph_breaks(),
            bench.eager_routing("fused_add_rmsnorm"),
            bench.eager_routing("silu_and_mul"),
            bench.import_declared(),
            bench.apply_many(verify=True),
            bench.apply_many(verify=False),
            bench.memory(),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "rounds": arguments.rounds,
        "seconds": round(time.perf_counter() - started, 1),
        "figures": rows,
    }
    arguments.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'figure':<66} {'A':>9} {'B':>9} {'A/B':>8}  goal       met")
    for row in rows:
        ratio = "" if row["ratio"] is None else f"{row['ratio']:.3f}"
        b = "" if row["b"] is None else row["b"]
        print(
            f"{row['name']:<66} {row['a']!s:>9} {b!s:>9} {ratio:>8}  "
            f"{row['goal']:<10} {'yes' if row['met'] else 'NO'}"
        )
    print(f"({result['machine']}; {result['seconds']} s; written to {arguments.out})")


def show_costs(costs: dict[str, dict[str, dict[str, float]]]) -> None:
    for version, by_patch in costs.items():
        print(f"each proof's own seconds in one runner, FlashInfer {version}")
        print(f"{'patch':<54} {'before':>8} {'after':>8}")
        for patch, modes in sorted(by_patch.items()):
            print(f"{patch:<54} {modes.get('before', 0):>8.2f} {modes.get('after', 0):>8.2f}")
        before = sum(m.get("before", 0) for m in by_patch.values())
        after = sum(m.get("after", 0) for m in by_patch.values())
        print(f"{f'all {len(by_patch)}':<54} {before:>8.2f} {after:>8.2f}")


def write_costs(costs: dict[str, dict[str, dict[str, float]]], seconds: float) -> None:
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "seconds": round(seconds, 1),
        "proofs": costs,
    }
    (ROOT / "benchmarks" / "proofs.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
