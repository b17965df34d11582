"""An interrupt is an outcome: SIGINT or SIGTERM during apply ends with the usual report of what
each file holds, in text and as the one JSON document, and exit 130 (143).

Real: fi-patch's CLI in a process of its own, signalled from outside (as `timeout -s INT` or a
terminal's Ctrl-C would) while it proves what it wrote, on real venvs holding FlashInfer 0.7.0.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import met, records, signalled, started
from tests.support.cli import states_of
from tests.support.releases import (
    ACTIVATION,
    API_LOGGING,
    CONCAT_OPS,
    CUDA,
    DECODE,
    FP4,
    FP8_QUANT,
    GEMM,
    MOE_CORE,
    PREFILL,
    RELEASES,
    ROUTING_DSV3,
    SAMPLING,
    TARGET,
    UTILS,
    released_text,
)
from tests.support.tiers import SLOW
from tests.support.venvs import fp4_file, target_file

RELEASE = "0.7.0"


def _said(process: subprocess.Popen[str], phrase: str) -> None:
    """Wait until fi-patch says (with -v) that it started `phrase`."""
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if phrase in line:
            return
    raise AssertionError(seen)


def _signalled_at(process: subprocess.Popen[str], phrase: str, signum: int) -> None:
    """Send `signum` once fi-patch says (with -v) that it started `phrase`."""
    _said(process, phrase)
    process.send_signal(signum)


def _untouched(venv: Path) -> bool:
    release = RELEASES[RELEASE]
    return target_file(venv).read_bytes() == released_text(release, TARGET) and fp4_file(
        venv
    ).read_bytes() == released_text(release, FP4)


@pytest.mark.parametrize(
    ("signum", "code"),
    [
        pytest.param(signal.SIGINT, ExitCode.INTERRUPTED, id="sigint", marks=SLOW),
        pytest.param(signal.SIGTERM, ExitCode.TERMINATED, id="sigterm"),
    ],
)
def test_a_signal_while_proving_puts_every_file_back_and_says_so(
    runner: CliRunner, venv_with: MakeVenv, signum: int, code: ExitCode
) -> None:
    venv = venv_with(RELEASE)
    with started("-v", "apply", "--venv", venv, "--json") as process:
        _signalled_at(process, "proving the patched code", signum)
        out, err = process.communicate(timeout=300)
    assert process.returncode == code, err
    document = json.loads(out)
    assert document["exit_code"] == code
    (result,) = document["results"]
    assert (result["status"], result["exit_code"]) == ("error", code)
    name = signal.Signals(signum).name
    assert result["error"]["kind"] == ("Terminated" if signum == signal.SIGTERM else "Interrupted")
    assert result["error"]["message"] == (
        f"interrupted by {name} while proving the written files: every file fi-patch wrote is "
        "as it was before"
    )
    assert {f["relpath"]: f["action"] for f in result["files"]} == {
        ACTIVATION: "rolled-back",
        API_LOGGING: "rolled-back",
        CONCAT_OPS: "rolled-back",
        GEMM: "rolled-back",
        MOE_CORE: "rolled-back",
        ROUTING_DSV3: "rolled-back",
        DECODE: "rolled-back",
        PREFILL: "rolled-back",
        TARGET: "rolled-back",
        FP4: "rolled-back",
        FP8_QUANT: "rolled-back",
        SAMPLING: "rolled-back",
        UTILS: "rolled-back",
    }
    assert {p["action"] for p in result["patches"]} <= {"rolled-back", "not-applicable"}
    assert _untouched(venv)
    assert records(venv) == []
    assert states_of(runner, venv)[1] == ExitCode.NEEDS_APPLY


@SLOW
def test_ctrl_c_in_text_names_each_file_put_back(venv_with: MakeVenv) -> None:
    venv = venv_with(RELEASE)
    with started("-v", "apply", "--venv", venv) as process:
        _signalled_at(process, "proving the patched code", signal.SIGINT)
        out, err = process.communicate(timeout=300)
    assert process.returncode == ExitCode.INTERRUPTED, err
    said = " ".join((out + err).split())
    assert "error: interrupted by SIGINT while proving the written files" in said
    assert f"{target_file(venv)}: put back as it was" in said
    assert f"{fp4_file(venv)}: put back as it was" in said
    assert "cuda-version-torch-first: rolled back" in said
    assert "fix: run `fi-patch apply` again when you are ready" in said
    assert _untouched(venv)


def test_a_signal_before_any_write_says_nothing_was_written(venv_with: MakeVenv) -> None:
    venv = venv_with(RELEASE)
    with started("-v", "apply", "--venv", venv, "--json") as process:
        _signalled_at(process, "proving the unpatched code", signal.SIGTERM)
        out, _ = process.communicate(timeout=300)
    assert process.returncode == ExitCode.TERMINATED
    (result,) = json.loads(out)["results"]
    assert result["error"]["message"].endswith(
        "while proving the unpatched code: nothing was written"
    )
    assert result["files"] == []
    assert _untouched(venv)
    assert not (venv / ".fi-patch" / "manifest.json").exists() or records(venv) == []


def test_every_target_of_a_signalled_apply_is_put_back(venv_with: MakeVenv) -> None:
    """Several targets are worked on in threads: the signal reaches each of them. It is sent once
    both prove what they wrote (one alone would be a race: the other might have finished)."""
    first, second = venv_with(RELEASE), venv_with(RELEASE)
    arguments = ("apply", "--venv", first, "--venv", second, "--json")
    with met(2, *arguments) as process:
        _signalled_at(process, "every target is proving", signal.SIGINT)
        out, err = process.communicate(timeout=300)
    assert process.returncode == ExitCode.INTERRUPTED, err
    results = json.loads(out)["results"]
    assert len(results) == 2
    for venv, result in zip((first, second), results, strict=True):
        assert result["exit_code"] == ExitCode.INTERRUPTED, result
        assert _untouched(venv)


@SLOW
def test_a_second_ctrl_c_does_not_cut_the_undo_short(venv_with: MakeVenv) -> None:
    venv = venv_with(RELEASE)
    with started("-v", "apply", "--venv", venv, "--json") as process:
        _signalled_at(process, "proving the patched code", signal.SIGINT)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=300)
    assert process.returncode == ExitCode.INTERRUPTED, err
    (result,) = json.loads(out)["results"]
    assert {f["action"] for f in result["files"]} == {"rolled-back"}
    assert _untouched(venv)
    assert records(venv) == []


def test_a_signal_during_the_last_write_with_nothing_to_prove_puts_it_back(
    venv_with: MakeVenv,
) -> None:
    """apply --no-verify of one file: the signal comes as the file is replaced (sent by fi-patch
    to itself from a hook there, as a shell would send it); no proof follows, and still the file
    goes back."""
    venv = venv_with("0.5.0")
    run = signalled("after-replace", "apply", "--venv", venv, "--no-verify", "--patch", CUDA)
    assert run.returncode == ExitCode.TERMINATED, run.stderr
    said = " ".join((run.stdout + run.stderr).split())
    assert "interrupted by SIGTERM while writing: every file fi-patch wrote is as it was" in said
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.5.0"], TARGET)
    assert records(venv) == []


def test_the_proof_process_stops_when_fi_patch_is_killed(venv_with: MakeVenv) -> None:
    """The target's processes run in a session of their own (a Ctrl-C reaches fi-patch alone):
    when fi-patch dies by SIGKILL, its proof process stops itself rather than run on."""
    venv = venv_with(RELEASE)
    with started("-v", "apply", "--venv", venv) as process:
        _said(process, "proving the patched code")
        deadline = time.monotonic() + 30
        while not (children := _children(process.pid)):
            assert time.monotonic() < deadline, "the proof process never started"
            time.sleep(0.05)
        process.kill()
        process.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in children):
        assert time.monotonic() < deadline, f"{children} still run"
        time.sleep(0.2)


def test_a_target_whose_child_left_its_session_is_not_waited_for() -> None:
    """A process of the target that starts one of its own in a new session, holding the same
    pipes (a daemon may), is out of reach of the kill fi-patch sends when the time is
    up: fi-patch gives up its pipes a few seconds later instead of waiting for that one to end."""
    from fi_patcher.environment import run_target
    from fi_patcher.errors import EnvironmentProblem

    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(40)'],"
        " start_new_session=True)\n"
        "time.sleep(40)\n"
    )
    began = time.monotonic()
    try:
        run_target(Path(sys.executable), ["-c", script], timeout=2, what="test")
    except EnvironmentProblem as problem:
        assert "did not finish the test within 2 s" in str(problem)
    else:
        raise AssertionError("the run ended by itself")
    assert time.monotonic() - began < 25  # that one ends itself at 40 s


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue  # a thread that ended since the folder was listed
    return found


def _running(pid: int) -> bool:
    """Alive, and not a zombie waiting for whoever adopted it to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
