"""The value types every command shares: the target it works on, and how it was asked to work.

They sit below the orchestration (`api`), the write protocol and the results, which all need
them, so that none of those imports another for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fi_patcher.environment import PROBE_TIMEOUT
from fi_patcher.errors import UsageError
from fi_patcher.model import Interpreter
from fi_patcher.proofs import VERIFY_TIMEOUT
from fi_patcher.toolkit import ServerToolkit


@dataclass(frozen=True)
class Target:
    interpreter: Interpreter
    chosen_by: str


class Progress(Protocol):
    """Told each step of a command as it starts. A `long` step is one a person or a log waits
    on (the pre-flight, a proof, a write, the lock): told even where no one watches a terminal,
    so that a CI log shows where the time goes."""

    def __call__(self, message: str, *, long: bool = False) -> None: ...


def quiet(message: str, *, long: bool = False) -> None:
    """The default progress callback: say nothing."""


def counted(count: int, noun: str) -> str:
    """`1 file`, `2 files`, `3 patches`: for the steps' messages."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith(('ch', 's')) else 's'}"


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    force: bool = False
    """apply: patch a function whose text is unknown where its structure is a known shape's,
    and let the proofs decide; revert: overwrite a file that changed since fi-patch wrote it."""
    verify: bool = True
    allow_mismatch: bool = False
    timeout: float = PROBE_TIMEOUT
    """For the probe, the pre-flight and the compile check."""
    verify_timeout: float = VERIFY_TIMEOUT
    """For each process that runs proofs (it imports torch and FlashInfer)."""
    proof_processes: int = 1
    """How many processes may share the proofs at once (`shares.proof_processes`)."""
    progress: Progress = quiet
    toolkit: ServerToolkit | None = None
    """The server's toolkit (--cuda-home, --server-env) the pre-flight judges; None: the one
    fi-patch's own environment finds."""

    @property
    def lock_wait(self) -> float:
        """As long as another fi-patch may hold the lock: its probe, pre-flight and compile
        check, and two proof processes (before and after)."""
        return 2 * self.verify_timeout + 3 * self.timeout + 60


def unproven_force(options: Options) -> UsageError | None:
    """--force writes a change over a text fi-patch does not know: only its proofs can say it
    works there, so it never goes without them."""
    if not (options.force and not options.verify):
        return None
    return UsageError(
        "--force cannot go with --no-verify: a forced change is written over a text fi-patch "
        "does not know, and only the proofs can say it works",
        remedy="drop --no-verify: apply --force proves the change and rolls back what the "
        "proofs do not pass",
    )
