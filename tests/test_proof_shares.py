"""How a target's proofs are shared among processes (shares.py): dealt round-robin, four or
more to a process, never more processes than asked, the cores or the memory give; and what
proofs.prove does with the shares' processes when one of them fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from fi_patcher import shares
from fi_patcher.errors import EnvironmentProblem
from fi_patcher.proofs import ProofRequest, prove
from fi_patcher.registry import load_patches
from fi_patcher.shares import PER_PROCESS, PROCESS_MEMORY, dealt, proven_in, shared_by


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
    requests = [ProofRequest(p, "after", Path("/x.py")) for p in load_patches()[:10]]
    split = dealt(requests, 2)
    assert [list(s) for s in split] == [requests[0::2], requests[1::2]]
    assert dealt(requests[: PER_PROCESS * 2 - 1], 8) == [requests[: PER_PROCESS * 2 - 1]]


def test_the_progress_says_how_many_processes() -> None:
    python = Path("/root/ml-env/bin/python")
    assert proven_in(python, 1, 8, fresh=True) == (
        "in a fresh process of /root/ml-env/bin/python (importing torch and FlashInfer)"
    )
    assert proven_in(python, 38, 1) == "in /root/ml-env/bin/python (importing torch and FlashInfer)"
    assert proven_in(python, 38, 2, fresh=True) == (
        "in 2 fresh processes of /root/ml-env/bin/python (each importing torch and FlashInfer)"
    )


@pytest.mark.parametrize(
    ("cores", "memory", "targets", "processes"),
    [
        pytest.param(16, 64 << 30, 1, 16, id="a serving host: every core"),
        pytest.param(16, 64 << 30, 3, 5, id="three targets share sixteen cores"),
        pytest.param(16, 6 * PROCESS_MEMORY, 1, 6, id="memory for six processes"),
        pytest.param(16, PROCESS_MEMORY - 1, 1, 1, id="memory for none: one"),
        pytest.param(16, None, 1, 1, id="no /proc/meminfo (macOS): one"),
        pytest.param(2, 24 << 30, 8, 1, id="eight targets on two cores: one each"),
    ],
)
def test_proof_processes_share_the_cores_and_the_memory(
    monkeypatch: pytest.MonkeyPatch, cores: int, memory: int | None, targets: int, processes: int
) -> None:
    monkeypatch.setattr(shares, "cores", lambda: cores)
    monkeypatch.setattr(shares, "available_memory", lambda: memory)
    assert shares.proof_processes(targets) == processes


def test_this_host_s_facts_are_read() -> None:
    assert shares.cores() == len(os.sched_getaffinity(0))
    memory = shares.available_memory()
    assert memory is not None and memory > 0


# A stand-in for the target's python: each process writes its pid, then the one whose share
# holds FIRST fails at once, as a target whose interpreter cannot start the proofs does, and the
# others would take SLOW seconds, then leave a mark. None may be left running, or mark its end.
INTERPRETER = """#!/bin/sh
payload=$(cat)
echo $$ >> {pids}
case "$payload" in
  *'"patch": "{first}"'*) exit 1 ;;
esac
sleep {slow}
echo finished >> {marks}
"""


def test_a_share_that_fails_stops_the_others(tmp_path: Path) -> None:
    patches = load_patches()[:12]
    pids, marks = tmp_path / "pids", tmp_path / "marks"
    python = tmp_path / "python"
    python.write_text(INTERPRETER.format(pids=pids, marks=marks, first=patches[0].id, slow=30))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    requests = [ProofRequest(p, "after", tmp_path / "x.py") for p in patches]
    with pytest.raises(
        EnvironmentProblem, match=r"could not run fi-patch's proofs \(exit status 1\)"
    ):
        prove(python, requests, timeout=600, processes=3)
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 3
    for pid in started:
        assert not Path(f"/proc/{pid}").exists(), pid
    assert not marks.exists()
