"""Several fi-patch processes on one environment at once: the lock makes them take turns."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import sha256
from tests.support.cli import fi_patch, patch_result, state_of
from tests.support.expected import expected
from tests.support.releases import (
    DECODE,
    FP4_OLD,
    MOE_CORE,
    PREFILL,
    RELEASES,
    TARGET,
    UTILS,
    released_text,
)
from tests.support.venvs import target_file

VERSION = "0.5.0"


def start(*arguments: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "fi_patcher", *map(str, arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_eight_concurrent_applies_write_once(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with(VERSION)
    processes = [start("apply", "--venv", venv, "--no-verify", "--json") for _ in range(8)]
    outcomes = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0] * 8, [err for _, err in outcomes]
    actions = sorted(patch_result(json.loads(out))["action"] for out, _ in outcomes)
    assert actions == ["already-applied"] * 7 + ["applied"]
    assert target_file(venv).read_bytes() == expected(VERSION).encode()
    compile(target_file(venv).read_bytes(), str(target_file(venv)), "exec")
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
    # One backup per file written, each FlashInfer's original: cpp_ext.py, fp4_quantization.py
    # for fp4-quantize-op-boundary, utils.py for the declared-ops patches, decode.py and
    # prefill.py for the single-request attention, and fused_moe/core.py for the fused MoE.
    backups = sorted(b.read_bytes() for b in (venv / ".fi-patch" / "backups").iterdir())
    written = (TARGET, FP4_OLD, UTILS, DECODE, PREFILL, MOE_CORE)
    originals = [released_text(RELEASES[VERSION], f) for f in written]
    assert backups == sorted(originals)


def test_revert_racing_apply(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with(VERSION)
    original = sha256(target_file(venv))
    patched = hashlib.sha256(expected(VERSION).encode()).hexdigest()
    for _ in range(4):
        racers = [
            start("apply", "--venv", venv, "--no-verify"),
            start("revert", "--venv", venv),
            start("apply", "--venv", venv, "--no-verify"),
        ]
        for racer in racers:
            _, err = racer.communicate(timeout=300)
            assert racer.returncode == 0, err
        state, code = state_of(runner, venv)
        now = sha256(target_file(venv))
        # Whoever went last decided; either way the bytes and the record agree.
        if state == "patched":
            assert (now, code) == (patched, ExitCode.OK)
        else:
            assert (state, code, now) == ("pristine", ExitCode.NEEDS_APPLY, original)
        assert not list(target_file(venv).parent.glob(".cpp_ext.py.*"))


def pending(venv: Path) -> bool:
    manifest = venv / ".fi-patch" / "manifest.json"
    try:
        files = json.loads(manifest.read_text())["files"]
    except (OSError, ValueError):
        return False
    return any(f["pending"] is not None for f in files)


def test_a_running_apply_is_told_from_an_interrupted_one(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """While a real apply is writing and proving (its journal entry is there), check names it
    with its pid, and a second apply waits for it, says whom it waits for, and finds the work
    done."""
    venv = venv_with("0.7.4")
    first = start("apply", "--venv", venv, "--json")
    # The deadline catches a hang, not a slow machine: pre-flight and the proofs before the
    # write took more than 120 s once, beside another test's proofs on a 2-core machine (why
    # was not found; alone it takes 47 s in all).
    deadline = time.monotonic() + 300
    try:
        while not pending(venv):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the apply never wrote its journal entry"
            time.sleep(0.02)
    except AssertionError:
        # Not left running into the next test.
        first.kill()
        first.communicate()
        raise
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    (result,) = check.json["results"]
    assert result["busy"]["pid"] == first.pid and result["busy"]["command"] == "apply"
    assert f"fi-patch apply (pid {first.pid}, since " in patch_result(check.json)["reason"]
    assert (
        "is writing or proving this file now, not interrupted"
        in (patch_result(check.json)["reason"])
    )
    second = start("-v", "apply", "--venv", venv, "--json", "--no-verify")
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert f"waiting for fi-patch apply (pid {first.pid}" in err
    assert first.communicate(timeout=300)[0] and first.returncode == 0
    assert {p["action"] for p in json.loads(out)["results"][0]["patches"]} == {
        "already-applied",
        "not-applicable",
    }
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
