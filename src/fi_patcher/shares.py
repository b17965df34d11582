"""How a target's proofs are shared among processes: how many the host's cores and memory allow,
how many a number of proofs is worth, and which proofs go to each. Pure but for the host's facts
(`cores`, `available_memory`); the processes themselves are `proofs.prove`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

PER_PROCESS = 4
"""The fewest proofs worth a process of their own: each process first imports torch and
FlashInfer (about 2.5 s of one core), and most proofs take less than a second."""

PROCESS_MEMORY = 3 << 29
"""Bytes of memory left room for each proof process (1.5 GiB): one that proves every patch of
FlashInfer 0.7.4 peaks at about 1 GB (VmHWM, torch 2.14.1 on the CPU)."""


def cores() -> int:
    """The cores fi-patch may run on (its affinity: taskset, a container's cpuset), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes; None where it cannot be read (no /proc)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def proof_processes(targets: int) -> int:
    """How many proof processes each of `targets` worked on at once may run: the cores shared
    out, and no more than the available memory holds at PROCESS_MEMORY each (where it cannot be
    read, one process a target)."""
    memory = available_memory()
    held = memory // PROCESS_MEMORY if memory is not None else 1
    return max(1, min(cores(), held) // max(1, targets))


def shared_by(proofs: int, processes: int) -> int:
    """How many processes `proofs` proofs run in, where up to `processes` may: none for none."""
    return min(max(1, processes), proofs // PER_PROCESS) or min(proofs, 1)


def dealt(items: Sequence[T], processes: int) -> list[Sequence[T]]:
    """`items` dealt round-robin into `shared_by` shares: neighbours in the catalog are often
    proofs of one kind and cost (the fused MoE), and dealing spreads them."""
    count = shared_by(len(items), processes)
    return [items[start::count] for start in range(count)]


def proven_in(python: Path, proofs: int, processes: int, *, fresh: bool = False) -> str:
    """Where `proofs` proofs run, for the progress: `in a fresh process of PYTHON (importing
    torch and FlashInfer)`, `in 2 processes of PYTHON (each importing …)`."""
    count = shared_by(proofs, processes)
    if count > 1:
        where = f"{count} {'fresh ' if fresh else ''}processes of "
    else:
        where = "a fresh process of " if fresh else ""
    each = "each " if count > 1 else ""
    return f"in {where}{python} ({each}importing torch and FlashInfer)"
