"""SIGINT and SIGTERM as outcomes, not as a process that vanishes mid-write.

While a command runs (`handled`), the first SIGINT or SIGTERM is only noted; fi-patch stops at
the next `checkpoint` (between writes, before and after the proofs, while it waits for the lock
or for a process of the target, which it then kills), where `Stop` is raised. The write protocol
catches it, puts back what it wrote and reports what each file holds, and the command exits 130
(143 for SIGTERM) with its usual report. A second signal stops at once, wherever fi-patch is,
except where it puts files back or commits them (`shielded`).

The target's processes run in a session of their own, so that a Ctrl-C in the terminal reaches
fi-patch alone: fi-patch decides when they stop, not the terminal.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stop(BaseException):
    """Raised at a checkpoint once a signal arrived: a BaseException, so that no handler of
    fi-patch's own errors takes it for one of them."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


_received = threading.Event()
_signum = [0]
_shielded = [0]


def checkpoint() -> None:
    """Stop here if a signal arrived since the command started."""
    if _received.is_set():
        raise Stop(_signum[0])


def stop_of(interrupt: BaseException) -> Stop | None:
    """The signal behind an exception that ends a command: ours, or Python's own
    KeyboardInterrupt (fi-patch used as a library, without `handled`)."""
    if isinstance(interrupt, Stop):
        return interrupt
    if isinstance(interrupt, KeyboardInterrupt):
        return Stop(signal.SIGINT)
    return None


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """A block a second signal must not cut short either (putting files back, committing
    them, telling what each holds): the signal is noted for the next checkpoint after it."""
    _shielded[0] += 1
    try:
        yield
    finally:
        _shielded[0] -= 1


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Note SIGINT and SIGTERM for `checkpoint` while the block runs; a second one stops at
    once, outside `shielded` blocks. A signal the process was started ignoring (a background
    job of a shell without job control) stays ignored. Only the main thread can install
    handlers: elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def note(signum: int, frame: FrameType | None) -> None:
        if _received.is_set() and not _shielded[0]:
            raise Stop(signum)
        _signum[0] = signum
        _received.set()

    heeded = [s for s in SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
    previous = {s: signal.signal(s, note) for s in heeded}
    try:
        yield
    finally:
        _received.clear()
        for number, handler in previous.items():
            signal.signal(number, handler)
