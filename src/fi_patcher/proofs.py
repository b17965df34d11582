"""Proof inside the target: the pre-flight before any write, and the patches' proofs.

Both run as subprocesses of the target's own interpreter (`in_target/preflight.py`,
`in_target/prove.py` with one script per patch from `in_target/proofs/`), never in fi-patch's
process. Judging their answers is pure and lives here too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from fi_patcher.environment import run_script, script_text
from fi_patcher.errors import FiPatchError, Inert, NoTorch, RequirementUnmet, ToolkitMismatch
from fi_patcher.model import Judgement, Mode, Patch
from fi_patcher.shares import dealt
from fi_patcher.toolkit import ServerToolkit, own_source

VERIFY_TIMEOUT = 600.0


@dataclass(frozen=True)
class Preflight:
    """torch's version, and the nvcc FlashInfer would run where a patch compares them."""

    python: Path
    torch_found: bool
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_location: str | None = None
    torch_error: str | None = None
    nvcc_checked: bool = False
    nvcc_path: str | None = None
    nvcc_source: str | None = None
    nvcc_version: str | None = None
    nvcc_problem: str | None = None
    nvcc_from: str | None = None
    """Where the nvcc judged came from, for people: `--cuda-home`, `CUDA_HOME in fi-patch's
    environment`, `PATH in --server-env FILE`."""
    toolkit_named: bool = False
    """The server's toolkit was named (--cuda-home, --server-env), not fi-patch's own."""

    @property
    def mismatch(self) -> bool:
        if self.torch_cuda is None or self.nvcc_version is None:
            return False
        return _major_minor(self.torch_cuda) != _major_minor(self.nvcc_version)

    def describe(self) -> str:
        return f"torch {self.torch_version}: torch.version.cuda = {self.torch_cuda!r}"

    def nvcc_judged(self) -> str | None:
        """Which nvcc the pre-flight judged and where it came from; None where it judged none
        (no patch written here compares the toolkit)."""
        if not self.nvcc_checked:
            return None
        if self.nvcc_version is not None:
            return f"{self.nvcc_path} ({self.nvcc_version}), from {self.nvcc_from}"
        if self.nvcc_path is not None:
            return f"{self.nvcc_path}, from {self.nvcc_from}: {self.nvcc_problem}"
        return f"none ({self.nvcc_problem})"


def preflight(
    python: Path, timeout: float, *, nvcc: bool, toolkit: ServerToolkit | None = None
) -> Preflight:
    """torch's facts, and with `nvcc`, the nvcc FlashInfer would run: found by `toolkit`'s
    variables (the server's), or by fi-patch's own where none is named."""
    arguments = ["nvcc"] if nvcc else []
    if nvcc and toolkit is not None:
        arguments.append(json.dumps(dict(toolkit.variables)))
    answer = run_script(python, "preflight.py", arguments, timeout=timeout, what="pre-flight")
    torch = answer.get("torch", {})
    found = answer.get("nvcc", {})
    source = found.get("source")
    origin = toolkit.source if toolkit is not None else own_source
    return Preflight(
        python=python,
        torch_found=bool(torch.get("found")),
        torch_version=torch.get("version"),
        torch_cuda=torch.get("cuda"),
        torch_location=torch.get("location"),
        torch_error=torch.get("error"),
        nvcc_checked="nvcc" in answer,
        nvcc_path=found.get("path"),
        nvcc_source=source,
        nvcc_version=found.get("version") if found.get("found") else None,
        nvcc_problem=found.get("reason"),
        nvcc_from=origin(source) if source is not None else None,
        toolkit_named=toolkit is not None,
    )


def needs_nvcc(patches: Sequence[Patch]) -> bool:
    return any("cuda-toolkit" in p.preflight for p in patches)


def judge_preflight(
    facts: Preflight, patches: Sequence[Patch], *, explicit: bool, allow_mismatch: bool
) -> Judgement:
    """For each patch apply would write: refused (no torch, a toolkit mismatch), left out, or let
    through with warnings. One rule for every fact that makes a patch useless here (a torch too
    old for it, a CPU torch for get_cuda_version): the patch is left out, or refused with that
    fact's exit code when the user named it."""
    missing = _no_torch(facts)
    if missing is not None:
        return Judgement(refused={p.id: missing for p in patches})
    left_out: dict[str, str] = {}
    refused: dict[str, FiPatchError] = {}
    warnings: list[str] = []
    for patch in patches:
        unfit = _torch_unmet(facts, patch) or _inert(facts, patch)
        if unfit is not None and explicit:
            phrase, kind, remedy = unfit
            refused[patch.id] = kind(f"{patch.id} {phrase}", remedy=remedy)
        elif unfit is not None:
            left_out[patch.id] = f"it {unfit[0]}"
        elif "cuda-toolkit" in patch.preflight:
            judged = _judge_toolkit(facts, allow_mismatch)
            if isinstance(judged, ToolkitMismatch):
                refused[patch.id] = judged
            else:
                warnings.extend(judged)
    return Judgement(tuple(warnings), left_out, refused)


def _no_torch(facts: Preflight) -> NoTorch | None:
    if not facts.torch_found:
        return NoTorch(
            f"torch is not installed for {facts.python}",
            remedy="install torch in that environment (the patches and their proofs need it), "
            "or point --venv/--python at the environment your server runs in",
        )
    if facts.torch_error is not None:
        return NoTorch(
            f"cannot read torch's version in {facts.python}: {facts.torch_error}",
            remedy="reinstall torch in that environment",
        )
    return None


Unfit = tuple[str, type[FiPatchError], str]
"""Why a patch is no use here (a phrase after its id or "it"), the error that refuses it when
it is named, and the remedy."""


def _torch_unmet(facts: Preflight, patch: Patch) -> Unfit | None:
    wanted = patch.requires.torch
    if wanted is None:
        return None
    version = _version(facts.torch_version)
    if version is not None and wanted.contains(Version(version.base_version)):
        return None
    phrase = f"needs torch {wanted}; {facts.python} has torch {facts.torch_version}"
    return phrase, RequirementUnmet, "install a newer torch in that environment"


def _inert(facts: Preflight, patch: Patch) -> Unfit | None:
    if "cuda-toolkit" not in patch.preflight or facts.torch_cuda is not None:
        return None
    phrase = (
        f"would change nothing: torch {facts.torch_version} in {facts.python} is a CPU build "
        "(torch.version.cuda is None), so the patched get_cuda_version would fall back to nvcc"
    )
    return phrase, Inert, "install a CUDA build of torch in this environment, then apply"


def _judge_toolkit(facts: Preflight, allow_mismatch: bool) -> tuple[str, ...] | ToolkitMismatch:
    if facts.nvcc_version is None:
        where = f", from {facts.nvcc_from}" if facts.nvcc_from else ""
        return (
            f"no nvcc found ({facts.nvcc_problem}{where}): torch's CUDA {facts.torch_cuda} is the "
            "only source of the version, and FlashInfer's JIT cannot compile here until a "
            "toolkit is installed",
        )
    if not facts.mismatch:
        return ()
    message = (
        f"toolkit mismatch: torch.version.cuda is {facts.torch_cuda} but FlashInfer would run "
        f"nvcc {facts.nvcc_version} ({facts.nvcc_path}, from {facts.nvcc_from}); patched, "
        f"FlashInfer would choose compiler flags for CUDA {facts.torch_cuda} "
        "(-static-global-template-stub=false, -DENABLE_FP4, the SM12x arch suffix) that "
        f"nvcc {facts.nvcc_version} may not accept"
    )
    if allow_mismatch:
        return (message + "; proceeding because of --allow-mismatch",)
    assert facts.torch_cuda is not None
    wanted = _major_minor_text(facts.torch_cuda)
    if facts.toolkit_named:
        remedy = (
            f"give the server a CUDA {wanted} toolkit (the one torch was built with) and name "
            "it here as the server's unit names it, or install the torch built for the "
            "server's toolkit; --allow-mismatch proceeds anyway"
        )
    else:
        remedy = (
            f"point CUDA_HOME at a CUDA {wanted} toolkit (the one torch was built with); where "
            "the server finds another toolkit than fi-patch does, name it: --cuda-home DIR, or "
            "--server-env FILE (its EnvironmentFile); --allow-mismatch proceeds anyway"
        )
    return ToolkitMismatch(message, remedy=remedy)


# --- the proofs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProofRequest:
    """Run `patch`'s proof in `mode` (before or after the patch); `file` is the patch's target,
    which the target must import."""

    patch: Patch
    mode: Mode
    file: Path


@dataclass(frozen=True)
class ProofReport:
    """What one proof saw, judged."""

    patch: str
    mode: Mode
    passed: bool
    summary: str
    details: tuple[str, ...] = ()


def prove(
    python: Path, requests: Sequence[ProofRequest], timeout: float, processes: int = 1
) -> dict[str, ProofReport]:
    """Run every proof in fresh processes of the target and judge what each saw: one process,
    or up to `processes` at once, each with a share of the proofs (`shares.dealt`). Each process
    imports torch and FlashInfer once, and each proof stands alone (it imports what it needs),
    so a share proves in its own process what it would among the others. A process that fails
    fails the whole, as one process would, and stops the other shares' processes."""
    shares = dealt(requests, processes)
    if len(shares) <= 1:
        answers = [answered(python, share, timeout) for share in shares]
    else:
        answers = _in_parallel(python, shares, timeout)
    reports = {
        report.patch: report
        for facts in answers
        for report in (judge_proof(answer, facts) for answer in facts.get("proofs", []))
    }
    return {r.patch.id: reports[r.patch.id] for r in requests if r.patch.id in reports}


def _in_parallel(
    python: Path, shares: Sequence[Sequence[ProofRequest]], timeout: float
) -> list[dict[str, Any]]:
    """Each share's answer, its process run in a thread of its own. The first share to fail
    (its error, or a signal's Stop at its next look) cancels the others, whose processes are
    killed at their next look; the wait is in slices, so that the waiting thread also runs a
    signal's handler (Python runs them in the main thread alone, once it wakes)."""
    # Here, not at the top: concurrent.futures imports logging, which every command would pay.
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    cancel = threading.Event()
    with ThreadPoolExecutor(len(shares)) as pool:
        futures = [pool.submit(answered, python, share, timeout, cancel) for share in shares]
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=_SLICE, return_when=FIRST_EXCEPTION)
                failed = next((f.exception() for f in done if f.exception() is not None), None)
                if failed is not None:
                    raise failed
        except BaseException:
            cancel.set()
            raise
        return [future.result() for future in futures]


_SLICE = 0.1
"""Seconds the waiting thread waits for the shares before it looks at the signals again."""


def answered(
    python: Path,
    requests: Sequence[ProofRequest],
    timeout: float,
    cancel: threading.Event | None = None,
) -> dict[str, Any]:
    """The proof runner's answer to `requests`, in one fresh process of the target: each proof's
    answer in `proofs` (with the seconds it took there, which benchmarks/run.py reads)."""
    payload = {
        "proofs": [
            {
                "patch": r.patch.id,
                "mode": r.mode,
                "file": str(r.file),
                "marker": r.patch.marker_prefix,
                "source": script_text(f"proofs/{r.patch.proof.script}"),
            }
            for r in requests
        ]
    }
    return run_script(
        python,
        "prove.py",
        [],
        timeout=timeout,
        what="proofs",
        stdin=json.dumps(payload).encode("utf-8"),
        timeout_flag="--verify-timeout",
        cancel=cancel,
    )


def judge_proof(answer: dict[str, Any], process: dict[str, Any]) -> ProofReport:
    """Green when the proof raised nothing and found no problem."""
    patch = str(answer.get("patch"))
    mode: Mode = "after" if answer.get("mode") == "after" else "before"
    error = answer.get("error")
    if error is not None:
        facts = {**process, "stage": answer.get("stage"), "error": error}
        return ProofReport(patch, mode, False, _failure_summary(facts, error), _error_lines(error))
    problems = [str(p) for p in answer.get("problems", [])]
    if problems:
        return ProofReport(patch, mode, False, "fails: " + "; ".join(problems), tuple(problems))
    summary = str(answer.get("summary") or "")
    notes = tuple(str(n) for n in answer.get("notes", []))
    return ProofReport(patch, mode, True, f"passes ({summary})" if summary else "passes", notes)


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
