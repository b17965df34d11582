"""How a target's proofs are shared among processes: dealt round-robin, four or more to a
process, never more processes than asked, the cores or the memory give."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fi_patcher.proofs import (
    PER_PROCESS,
    ProofRequest,
    _shares,
    proof_processes,
    proven_in,
    shared_by,
)
from fi_patcher.registry import load_patches


@pytest.mark.parametrize(
    ("proofs", "processes", "count"),
    [
        pytest.param(0, 4, 0, id="no proof, no process"),
        pytest.param(1, 4, 1, id="cuda-version-torch-first alone"),
        pytest.param(7, 16, 1, id="fewer than two processes' worth"),
        pytest.param(8, 16, 2, id="two processes' worth"),
        pytest.param(38, 1, 1, id="0.7.4 on one core"),
        pytest.param(38, 2, 2, id="0.7.4 on two cores"),
        pytest.param(38, 16, 9, id="0.7.4 on sixteen cores: four or more proofs each"),
        pytest.param(38, 0, 1, id="none asked: one"),
    ],
)
def test_shared_by(proofs: int, processes: int, count: int) -> None:
    assert shared_by(proofs, processes) == count


def test_the_proofs_are_dealt_so_that_neighbours_part() -> None:
    patches = load_patches()
    requests = [ProofRequest(p, "after", Path("/x.py")) for p in patches[:10]]
    shares = _shares(requests, 2)
    assert [len(s) for s in shares] == [5, 5]
    assert list(shares[0]) == requests[0::2] and list(shares[1]) == requests[1::2]
    assert _shares(requests[: PER_PROCESS * 2 - 1], 8) == [requests[: PER_PROCESS * 2 - 1]]


def test_the_progress_says_how_many_processes() -> None:
    python = Path("/root/ml-env/bin/python")
    assert proven_in(python, 1, 8, fresh=True) == (
        "in a fresh process of /root/ml-env/bin/python (importing torch and FlashInfer)"
    )
    assert proven_in(python, 38, 1) == "in /root/ml-env/bin/python (importing torch and FlashInfer)"
    assert proven_in(python, 38, 2, fresh=True) == (
        "in 2 fresh processes of /root/ml-env/bin/python (each importing torch and FlashInfer)"
    )


def test_targets_share_the_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    one = proof_processes(1)
    assert 1 <= one <= cores
    assert proof_processes(cores * 2) == 1
    assert proof_processes(2) == max(1, one // 2)
