"""The processes of a target environment that started before a write: those that imported
FlashInfer keep the code they imported until they are restarted. Read from /proc (Linux); nothing
is ever signalled.

Which modules a process imported is not visible from outside, but FlashInfer imports torch, whose
shared libraries are: a process without them mapped never imported FlashInfer, and is left out.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fi_patcher.model import Interpreter

PROC = Path("/proc")
COMMAND_WIDTH = 100


@dataclass(frozen=True)
class Running:
    pid: int
    command: str
    """The command line, shortened to COMMAND_WIDTH characters."""
    started: str


def started_before(interpreter: Interpreter, moment: float) -> tuple[Running, ...]:
    """Processes of the target environment that started before `moment` (seconds since the
    epoch), this one aside: run by its interpreter binary, with torch loaded and, for a venv,
    started from the venv (its bin/python, or with it as VIRTUAL_ENV)."""
    boot = _boot_time()
    if boot is None:
        return ()
    binary = os.path.realpath(interpreter.python)
    own = {os.getpid(), os.getppid()}
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in own:
            continue
        seen = _process(entry, interpreter, binary, boot)
        if seen is not None and seen[1] < moment:
            found.append(seen[0])
    return tuple(sorted(found, key=lambda r: r.pid))


def _process(
    entry: Path, interpreter: Interpreter, binary: str, boot: float
) -> tuple[Running, float] | None:
    try:
        if os.path.realpath(os.readlink(entry / "exe")) != binary:
            return None
        arguments = (entry / "cmdline").read_bytes().split(b"\0")
        stat = (entry / "stat").read_text()
    except OSError:  # gone meanwhile, or not ours to read
        return None
    command = [a.decode("utf-8", "replace") for a in arguments if a]
    if not command or (interpreter.is_venv and not _from_venv(entry, command, interpreter)):
        return None
    if not _torch_loaded(entry):
        return None
    # Field 22 of /proc/<pid>/stat, counted after the command's closing parenthesis.
    ticks = int(stat.rsplit(")", 1)[1].split()[19])
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    # The environment is named beside the list: its own path would fill the width.
    text = " ".join([_within(command[0], interpreter.prefix), *command[1:]])
    shown = text if len(text) <= COMMAND_WIDTH else text[: COMMAND_WIDTH - 1] + "…"
    when = datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds")
    return Running(int(entry.name), shown, when), started


def _within(path: str, prefix: Path) -> str:
    inside = str(prefix).rstrip(os.sep) + os.sep
    return path.removeprefix(inside) if path.startswith(inside) else path


def _from_venv(entry: Path, command: list[str], interpreter: Interpreter) -> bool:
    """A venv's processes run the base interpreter's binary: what makes them the venv's is how
    they were started."""
    prefix = str(interpreter.prefix).rstrip(os.sep)
    if command[0].startswith(prefix + os.sep):
        return True
    try:
        environ = (entry / "environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"VIRTUAL_ENV={prefix}".encode() in {v.rstrip(b"/") for v in environ}


def _torch_loaded(entry: Path) -> bool:
    """Whether the process has torch's libraries mapped; where its map cannot be read, it may
    have."""
    try:
        with (entry / "maps").open("rb") as maps:
            return any(_TORCH_LIBRARY in line for line in maps)
    except OSError:
        return True


_TORCH_LIBRARY = b"/torch/lib/lib"


def _boot_time() -> float | None:
    try:
        for line in (PROC / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except OSError:
        return None
    return None
