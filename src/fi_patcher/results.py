"""What a command did on one target, as values: each carries its exit code and a status.

`render` and `documents` show these and decide nothing; neither imports the orchestration.
The exit code of a result is computed here, and nowhere else: `check`'s from the verdict of what
apply would do (`ApplyVerdict`, decided by `decision` from apply's own plan), apply's and
revert's from what stopped them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fi_patcher.errors import ExitCode, FiPatchError, UnknownLeftOut, worst
from fi_patcher.model import Assessment, PatchState
from fi_patcher.options import Target
from fi_patcher.processes import Running
from fi_patcher.proofs import Preflight, ProofReport

Status = Literal["ok", "partial", "error"]
"""ok: done (a patch left out for want of knowledge included); partial: it ended in an error
after changing something (the files say what); error: it changed nothing."""
PatchAction = Literal[
    "applied",
    "would-apply",
    "rewritten",
    "would-rewrite",
    "already-applied",
    "not-applicable",
    "left-out",
    "finished",
    "rolled-back",
    "reverted",
    "cleared-record",
    "nothing-to-revert",
    "stranded",
]
FileAction = Literal[
    "written",
    "would-write",
    "finished",
    "rolled-back",
    "restored",
    "reverted",
    "cleared-record",
    "tidied",
    "stranded",
]
"""restored: bytes an interrupted run left failed their proof, and FlashInfer's original
replaced them; cleared-record: a file that held chosen patches is the original again (or its
release is gone), and only fi-patch's record of it went; tidied: the same for a file that held
none of the chosen patches; stranded: a write that failed and could not be undone either, so the
file holds fi-patch's new bytes, and its backup and journal entry stay for the next command."""
CHANGED: frozenset[FileAction] = frozenset({"written", "restored", "reverted", "stranded"})
"""The actions after which the file holds other bytes than before the command."""
RECORDED: frozenset[FileAction] = frozenset({"finished", "cleared-record", "tidied"})
"""The actions that changed only fi-patch's records of the file."""


@dataclass(frozen=True)
class PatchOutcome:
    """What a command did with one patch."""

    state: PatchState
    """The patch's state when the command started."""
    action: PatchAction
    message: str = ""
    before: ProofReport | None = None
    after: ProofReport | None = None
    unknown: UnknownLeftOut | None = None
    """Left out for want of knowledge: the evidence (the text found, the shape --force would
    write)."""


def restored(relpath: str) -> str:
    """What a revert says of a file it gave its original bytes again (not rebuilt with others)."""
    return f"restored the original bytes of {relpath}"


@dataclass(frozen=True)
class FileOutcome:
    """What a command did to one file."""

    relpath: str
    path: Path
    action: FileAction
    holds: tuple[str, ...]
    """The patches the file holds afterwards."""
    message: str = ""
    diff: str = ""
    backup: Path | None = None


@dataclass(frozen=True)
class Outcome:
    """The result of apply or revert on one target."""

    target: Target
    assessment: Assessment
    patches: tuple[PatchOutcome, ...]
    files: tuple[FileOutcome, ...] = ()
    preflight: Preflight | None = None
    warnings: tuple[str, ...] = ()
    failure: FiPatchError | None = None
    """What stopped the command after its first write; `files` says what it changed."""
    running: tuple[Running, ...] = ()
    """Processes of the environment that started before the write with torch loaded: those
    that imported FlashInfer keep the old code."""

    @property
    def changed(self) -> bool:
        return any(f.action in CHANGED for f in self.files)

    @property
    def exit_code(self) -> ExitCode:
        """What stopped the command; else 16 where a patch was left out for want of
        knowledge; else 0."""
        if self.failure is not None:
            return self.failure.exit_code
        return worst(p.unknown.exit_code for p in self.patches if p.unknown is not None)

    @property
    def status(self) -> Status:
        if self.failure is None:
            return "ok"
        touched = self.changed or any(f.action in RECORDED for f in self.files)
        return "partial" if touched else "error"


Would = Literal["write", "nothing", "left-out", "refuse"]
"""What apply would do with one patch: write it (or finish an interrupted write), nothing (in
place, or nothing to patch), leave it out (and say why), or refuse (with an exit code)."""


@dataclass(frozen=True)
class ApplyVerdict:
    """What apply would do with one patch now, decided from apply's own plan."""

    would: Would
    refusal: FiPatchError | None = None
    unknown: UnknownLeftOut | None = None
    """Where apply would leave it out for want of knowledge: the evidence."""

    @property
    def exit_code(self) -> ExitCode:
        """check's code for it: 3 only where apply would write, the refusal's where it would
        refuse, 16 where it would leave it out for want of knowledge, 0 where it would do
        nothing."""
        if self.refusal is not None:
            return self.refusal.exit_code
        if self.unknown is not None:
            return self.unknown.exit_code
        return ExitCode.NEEDS_APPLY if self.would == "write" else ExitCode.OK


@dataclass(frozen=True)
class Checked:
    """The result of check on one target: the states, what apply would do with each patch and
    with the target (`refusal`: what it would stop on), and the proofs `--verify` ran."""

    target: Target
    assessment: Assessment
    verdicts: Mapping[str, ApplyVerdict] = field(default_factory=dict)
    refusal: FiPatchError | None = None
    """The refusal apply would stop on (the gravest), whether a patch's or the target's own."""
    reports: Mapping[str, ProofReport] = field(default_factory=dict)
    preflight: Preflight | None = None
    """The pre-flight apply's decision was judged by, where apply would write."""

    def code_of(self, state: PatchState) -> ExitCode:
        """One patch's code: what apply would do with it; under --verify, 13 where its proof
        after the patch fails."""
        report = self.reports.get(state.patch.id)
        if report is not None and report.mode == "after" and not report.passed:
            return ExitCode.VERIFY_FAILED
        verdict = self.verdicts.get(state.patch.id)
        return verdict.exit_code if verdict is not None else ExitCode.OK

    @property
    def exit_code(self) -> ExitCode:
        """What apply would exit with: the refusal it would stop on, else 3 where it would
        write, else 16 where it would leave a patch out for want of knowledge, else 0; a failed
        proof under --verify counts too."""
        codes = [self.code_of(s) for s in self.assessment.patches]
        if self.refusal is not None:
            codes.append(self.refusal.exit_code)
        return worst(codes)

    @property
    def status(self) -> Status:
        done = (ExitCode.OK, ExitCode.LEFT_OUT_UNKNOWN)
        return "ok" if self.exit_code in done else "error"


@dataclass(frozen=True)
class Failed:
    """A target the command could not work on at all: nothing was changed there."""

    spec: str
    """The target as given: `--venv DIR` or `--python PATH`."""
    error: FiPatchError

    @property
    def exit_code(self) -> ExitCode:
        return self.error.exit_code

    @property
    def status(self) -> Status:
        return "error"


Result = Outcome | Checked | Failed
