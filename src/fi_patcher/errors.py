"""One error hierarchy, and the one table that maps it to exit codes.

Every error a person can meet is a ``FiPatchError`` with a message (what happened and where) and a
remedy (what to do). Only ``cli.main`` catches them; anything else is a bug and exits 1.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Iterable, Sequence
from typing import Self


class ExitCode(enum.IntEnum):
    """Exit codes of every command. docs/exit-codes.md is checked against this table by a test."""

    OK = 0
    """Done: applied, already applied, reverted, nothing to do, or every target is fine."""
    INTERNAL = 1
    """A bug in fi-patch: reported as one (where to report it, and its last frames), never as a
    traceback."""
    USAGE = 2
    """Bad command-line usage (also Typer's own code for it)."""
    NEEDS_APPLY = 3
    """check: a patch is pristine, wiped by a reinstall, made by hand, or its run was interrupted;
    `fi-patch apply` fixes it."""
    NOT_INSTALLED = 4
    """flashinfer-python is not installed in the target environment."""
    ENVIRONMENT = 5
    """The target environment cannot be found or its interpreter cannot be run."""
    UNSUPPORTED = 6
    """A function's text fi-patch does not know, in a file that has not changed since it was
    installed (state unknown); or a layout fi-patch does not know."""
    DRIFTED = 7
    """The target file changed since it was installed or since fi-patch wrote it."""
    LAYOUT = 8
    """The installation cannot be patched safely: editable, duplicated, or missing its file."""
    STORE = 9
    """fi-patch's own records (manifest, backup) are unreadable, newer, or fail their hash check."""
    WRITE = 10
    """A file could not be written (permissions, disk full) or the environment lock was busy."""
    INERT = 11
    """torch in the target is a CPU build: the patch would change nothing there."""
    TOOLKIT_MISMATCH = 12
    """torch's CUDA version and the nvcc FlashInfer would run differ in major.minor."""
    VERIFY_FAILED = 13
    """A proof in the target failed; apply or revert put back the files it covers."""
    NO_TORCH = 14
    """torch is not installed in the target environment."""
    REQUIREMENT = 15
    """A patch named with --patch needs what the target lacks: a newer torch, or another patch."""
    LEFT_OUT_UNKNOWN = 16
    """Done, but a patch was left out for want of knowledge: its function's text is none fi-patch
    knows (a gap in fi-patch, where a CPU torch, left out with 0, is a fact of the host). check:
    apply would write nothing, and would leave it out."""
    INTERRUPTED = 130
    """Stopped by SIGINT (Ctrl-C): every file is put back, committed, or stranded with its backup,
    and the report says which (128 + the signal's number, as a shell reports it)."""
    TERMINATED = 143
    """Stopped by SIGTERM: as INTERRUPTED."""


class FiPatchError(Exception):
    """Root of every error fi-patch reports to a person."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, remedy: str | None = None, details: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.remedy = remedy
        self.details = details

    def adding(self, details: Sequence[str]) -> Self:
        """The same error, with more lines in its details."""
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.args = self.args
        other.details = (*self.details, *details)
        return other


def severity(code: ExitCode) -> float:
    """How grave a code is, to choose the one that speaks for several: a patch left out for want
    of knowledge ranks just above OK and below everything else (a target that needs apply, or
    refuses, says so first); the others by number."""
    return 0.5 if code is ExitCode.LEFT_OUT_UNKNOWN else float(code)


def worst(codes: Iterable[ExitCode]) -> ExitCode:
    """The gravest of `codes` (OK where there are none)."""
    return max(codes, key=severity, default=ExitCode.OK)


def gravest(errors: Sequence[FiPatchError]) -> FiPatchError | None:
    """The refusal with the highest exit code (the first of those), the others named in its
    details, each once."""
    if not errors:
        return None
    first = max(errors, key=lambda e: severity(e.exit_code))
    others = dict.fromkeys(
        f"also refused: {e.message}" for e in errors if e.message != first.message
    )
    return first.adding(tuple(others)) if others else first


class UsageError(FiPatchError):
    exit_code = ExitCode.USAGE


class EnvironmentProblem(FiPatchError):
    """The target environment is missing, not an environment, or its interpreter fails."""

    exit_code = ExitCode.ENVIRONMENT


class NotInstalled(FiPatchError):
    exit_code = ExitCode.NOT_INSTALLED


class Unsupported(FiPatchError):
    exit_code = ExitCode.UNSUPPORTED


class UnknownLeftOut(FiPatchError):
    """Never raised: the evidence a patch left out for want of knowledge carries (the text found,
    its hashes, the shape `--force` would write). `--patch` naming it refuses with `Unsupported`
    and the same details."""

    exit_code = ExitCode.LEFT_OUT_UNKNOWN


class Drifted(FiPatchError):
    exit_code = ExitCode.DRIFTED


class LayoutProblem(FiPatchError):
    exit_code = ExitCode.LAYOUT


class StoreProblem(FiPatchError):
    exit_code = ExitCode.STORE


class StoreUnreadable(StoreProblem):
    """fi-patch's records exist but cannot be read (another user's): a read-only question can
    still be answered from hashes."""


class WriteFailed(FiPatchError):
    exit_code = ExitCode.WRITE


class Internal(FiPatchError):
    """An exception fi-patch did not expect: a bug, reported as one."""

    exit_code = ExitCode.INTERNAL


class Inert(FiPatchError):
    exit_code = ExitCode.INERT


class ToolkitMismatch(FiPatchError):
    exit_code = ExitCode.TOOLKIT_MISMATCH


class VerificationFailed(FiPatchError):
    exit_code = ExitCode.VERIFY_FAILED


class NoTorch(FiPatchError):
    exit_code = ExitCode.NO_TORCH


class RequirementUnmet(FiPatchError):
    exit_code = ExitCode.REQUIREMENT


class Interrupted(FiPatchError):
    """SIGINT (Ctrl-C) stopped the command; the result says what each file holds."""

    exit_code = ExitCode.INTERRUPTED


class Terminated(Interrupted):
    """SIGTERM stopped the command; the result says what each file holds."""

    exit_code = ExitCode.TERMINATED


def stopped_by(signum: int) -> type[Interrupted]:
    """The error for a command a signal stopped."""
    return Terminated if signum == signal.SIGTERM else Interrupted
