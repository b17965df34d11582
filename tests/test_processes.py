"""Running servers keep the old code: after a write, fi-patch names the processes of the target
environment that started before it, and never signals them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.venvs import python_of

SERVER = "import flashinfer.jit.cpp_ext, time; print('ready', flush=True); time.sleep(600)"


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


def serve(
    started: list[subprocess.Popen[str]], command: list[str | Path], **kwargs: object
) -> subprocess.Popen[str]:
    """A background python that imported FlashInfer, as a serving engine has."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]
    started.append(process)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def test_processes_started_before_the_write_are_named_and_left_alone(
    runner: CliRunner, venv_with: MakeVenv, processes: list[subprocess.Popen[str]]
) -> None:
    venv = venv_with("0.7.4")
    by_path = serve(processes, [python_of(venv), "-c", SERVER])
    activated = serve(
        processes,
        ["python", "-c", SERVER],
        env={**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv}/bin:{os.environ['PATH']}"},
    )
    # Another environment's python, same base interpreter: not this environment's process.
    elsewhere = serve(
        processes, [sys.executable, "-c", SERVER.replace("flashinfer.jit.cpp_ext", "json")]
    )

    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert run.code == ExitCode.OK
    running = run.json["results"][0]["running"]
    assert [r["pid"] for r in running] == sorted([by_path.pid, activated.pid])
    assert all("import flashinfer.jit.cpp_ext" in r["command"] for r in running)
    assert elsewhere.pid not in [r["pid"] for r in running]

    later = serve(processes, [python_of(venv), "-c", SERVER])
    people = fi_patch(runner, "revert", "--venv", venv)
    assert people.code == ExitCode.OK
    assert "note: 3 process(es) of this environment started before the write" in people.text
    assert f"pid {later.pid} " in people.text
    assert all(p.poll() is None for p in processes), "fi-patch signals nothing"

    nothing = fi_patch(runner, "revert", "--venv", venv, "--json")
    assert nothing.json["results"][0]["running"] == []
