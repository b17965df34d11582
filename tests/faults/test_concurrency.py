"""Several fi-patch processes on one environment at once: the lock makes them take turns."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import sha256
from tests.support.cli import patch_result, state_of
from tests.support.expected import expected
from tests.support.releases import RELEASES, released_text
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
    (backup,) = (venv / ".fi-patch" / "backups").iterdir()
    assert backup.read_bytes() == released_text(RELEASES[VERSION])


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
