"""Proof inside the target: the toolkit pre-flight, and the Dynamo trace before and after.

Both run as subprocesses of the target's own interpreter (`_preflight.py`, `_verify.py`), never in
fi-patch's process. Judging their answers is pure and lives here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from fi_patcher.environment import run_script
from fi_patcher.errors import Inert, NoTorch, ToolkitMismatch

VERIFY_TIMEOUT = 600.0


@dataclass(frozen=True)
class Preflight:
    """torch's CUDA version and the nvcc FlashInfer would run, as the target sees them."""

    python: Path
    torch_found: bool
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_location: str | None = None
    torch_error: str | None = None
    nvcc_path: str | None = None
    nvcc_source: str | None = None
    nvcc_version: str | None = None
    nvcc_problem: str | None = None

    @property
    def mismatch(self) -> bool:
        if self.torch_cuda is None or self.nvcc_version is None:
            return False
        return _major_minor(self.torch_cuda) != _major_minor(self.nvcc_version)

    def describe(self) -> str:
        torch = f"torch {self.torch_version}: torch.version.cuda = {self.torch_cuda!r}"
        if self.nvcc_version is not None:
            nvcc = f"nvcc {self.nvcc_version} at {self.nvcc_path} (from {self.nvcc_source})"
        else:
            nvcc = f"no nvcc ({self.nvcc_problem})"
        return f"{torch}; {nvcc}"


@dataclass(frozen=True)
class TraceReport:
    """What `_verify.py` saw in one fresh process of the target."""

    mode: str
    passed: bool
    summary: str
    details: tuple[str, ...] = ()


def preflight(python: Path, timeout: float) -> Preflight:
    answer = run_script(python, "_preflight.py", [], timeout=timeout, what="pre-flight")
    torch = answer.get("torch", {})
    nvcc = answer.get("nvcc", {})
    return Preflight(
        python=python,
        torch_found=bool(torch.get("found")),
        torch_version=torch.get("version"),
        torch_cuda=torch.get("cuda"),
        torch_location=torch.get("location"),
        torch_error=torch.get("error"),
        nvcc_path=nvcc.get("path"),
        nvcc_source=nvcc.get("source"),
        nvcc_version=nvcc.get("version") if nvcc.get("found") else None,
        nvcc_problem=nvcc.get("reason"),
    )


def judge_preflight(facts: Preflight, allow_mismatch: bool) -> tuple[str, ...]:
    """Refuse what the patch cannot make right; return the warnings for what it may."""
    if not facts.torch_found:
        raise NoTorch(
            f"torch is not installed for {facts.python}",
            remedy="install torch in that environment (the patch reads torch.version.cuda), "
            "or point --venv/--python at the environment your server runs in",
        )
    if facts.torch_error is not None:
        raise NoTorch(
            f"cannot read torch's version in {facts.python}: {facts.torch_error}",
            remedy="reinstall torch in that environment",
        )
    if facts.torch_cuda is None:
        raise Inert(
            f"torch {facts.torch_version} in {facts.python} is a CPU build "
            "(torch.version.cuda is None): the patched get_cuda_version would fall back to nvcc "
            "and change nothing",
            remedy="install a CUDA build of torch in this environment, then apply",
        )
    if facts.nvcc_version is None:
        return (
            f"no nvcc found ({facts.nvcc_problem}): torch's CUDA {facts.torch_cuda} is the "
            "only source of the version, and FlashInfer's JIT cannot compile here until a "
            "toolkit is installed",
        )
    if not facts.mismatch:
        return ()
    message = (
        f"toolkit mismatch: torch.version.cuda is {facts.torch_cuda} but FlashInfer would run "
        f"nvcc {facts.nvcc_version} ({facts.nvcc_path}, from {facts.nvcc_source}); patched, "
        f"FlashInfer would choose compiler flags for CUDA {facts.torch_cuda} "
        "(-static-global-template-stub=false, -DENABLE_FP4, the SM12x arch suffix) that "
        f"nvcc {facts.nvcc_version} may not accept"
    )
    if allow_mismatch:
        return (message + "; proceeding because of --allow-mismatch",)
    raise ToolkitMismatch(
        message,
        remedy=f"point CUDA_HOME at a CUDA {_major_minor_text(facts.torch_cuda)} toolkit (the "
        "one torch was built with) and run fi-patch with the same environment as the server; "
        "--allow-mismatch proceeds anyway",
    )


def trace(python: Path, mode: str, file: Path, marker: str, timeout: float) -> TraceReport:
    """Run `_verify.py` in a fresh process of the target and judge what it saw."""
    facts = run_script(
        python, "_verify.py", [mode, str(file), marker], timeout=timeout, what="verification"
    )
    return judge_trace(facts)


def judge_trace(facts: dict[str, Any]) -> TraceReport:
    mode = str(facts.get("mode"))
    error = facts.get("error")
    if error is not None:
        return TraceReport(mode, False, _failure_summary(facts, error), _error_lines(error))
    problems = []
    if not facts.get("is_expected_file"):
        problems.append(f"imported {facts.get('module_file')}, not the file fi-patch checked")
    if mode == "after":
        if not facts.get("marker_present"):
            problems.append("the imported cpp_ext.py does not carry fi-patch's marker")
        cuda = facts.get("torch_cuda")
        if cuda is None or facts.get("value") != str(Version(cuda)):
            problems.append(
                f"get_cuda_version() returned {facts.get('value')}, torch.version.cuda is {cuda}"
            )
        if facts.get("processes_during_trace"):
            problems.append(f"{facts['processes_during_trace']} process(es) started while tracing")
    if facts.get("traced") != facts.get("eager"):
        problems.append(
            f"the compiled function returned {facts.get('traced')}, eager {facts.get('eager')}"
        )
    if problems:
        return TraceReport(mode, False, "fails: " + "; ".join(problems), tuple(problems))
    summary = "passes"
    if mode == "after":
        summary += (
            f" (get_cuda_version() = {facts.get('value')}, fullgraph trace started no process, "
            f"result {facts.get('traced')} equals eager)"
        )
    return TraceReport(mode, True, summary)


def diagnose_packaging(facts: dict[str, Any]) -> str | None:
    """The known case where Dynamo itself cannot build a `Version`, named exactly."""
    error = facts.get("error") or {}
    torch_version = _version(facts.get("torch_version"))
    packaging_version = _version(facts.get("packaging_version"))
    if torch_version is None or packaging_version is None:
        return None
    files = [str(frame[0]) for frame in error.get("frames", [])]
    text = str(error.get("message", ""))
    in_packaging = "issuperset" in text or any(f.endswith("packaging/version.py") for f in files)
    in_packaging = in_packaging or "packaging/version.py" in text
    old_torch = torch_version.release[:2] <= (2, 6)
    fast_path = packaging_version.release[:2] >= (26, 1)
    if not (in_packaging and old_torch and fast_path):
        return None
    return (
        f"Dynamo in torch {torch_version} cannot trace packaging.version.Version(...) with "
        f"packaging {packaging_version}: packaging 26.1 added a fast path through "
        "set.issuperset that torch <= 2.6 cannot trace; install packaging<26.1 in this "
        "environment, or use torch >= 2.9"
    )


def _failure_summary(facts: dict[str, Any], error: dict[str, Any]) -> str:
    stage = facts.get("stage")
    kind = str(error.get("type", "error")).rsplit(".", 1)[-1]
    headline = next((line for line in str(error.get("message", "")).splitlines() if line), "")
    packaging = diagnose_packaging(facts)
    if packaging is not None:
        return f"fails at {stage}: {packaging}"
    where = _user_frames(error)
    at = f" (at {where})" if where else ""
    return f"fails at {stage}: {kind}: {headline}{at}"


def _user_frames(error: dict[str, Any]) -> str:
    """The frames Dynamo lists under 'from user code:', shortened to file:line function."""
    message = str(error.get("message", ""))
    if "from user code:" not in message:
        return ""
    frames = []
    for line in message.split("from user code:", 1)[1].splitlines():
        line = line.strip()
        if line.startswith("File "):
            parts = line.split('"')
            if len(parts) >= 3 and "/torch/" not in parts[1]:
                name = Path(parts[1]).name
                rest = parts[2].strip(", ").replace("line ", "").split(", in ")
                if len(rest) == 2:
                    frames.append(f"{name}:{rest[0]} {rest[1]}")
    return " → ".join(frames[1:] if len(frames) > 1 else frames)


def _error_lines(error: dict[str, Any]) -> tuple[str, ...]:
    lines = [f"{error.get('type')}: "]
    lines[0] += next((x for x in str(error.get("message", "")).splitlines() if x), "")
    lines.extend(str(error.get("message", "")).splitlines()[1:40])
    return tuple(line for line in lines if line.strip())


def _major_minor(version: str) -> tuple[int, ...]:
    parsed = _version(version)
    return parsed.release[:2] if parsed is not None else ()


def _major_minor_text(version: str) -> str:
    return ".".join(str(part) for part in _major_minor(version))


def _version(text: object) -> Version | None:
    if not isinstance(text, str):
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None
