"""Running the CLI the way a person or a script would."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fi_patcher.cli import app
from tests.support.releases import CUDA


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)

    @property
    def text(self) -> str:
        """stdout and stderr with Rich's line wrapping undone, for matching phrases."""
        return " ".join((self.stdout + self.stderr).split())


def fi_patch(runner: CliRunner, *arguments: str | Path) -> Run:
    result = runner.invoke(app, [str(a) for a in arguments])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr)


def states_of(
    runner: CliRunner, venv: Path, only: Sequence[str] = ()
) -> tuple[dict[str, str], int]:
    """Every patch's state in `venv` (or those `only` names, as `--patch` does), and `check`'s
    exit code."""
    named = [x for patch in only for x in ("--patch", patch)]
    run = fi_patch(runner, "check", "--venv", venv, "--json", *named)
    (result,) = run.json["results"]
    assert result["exit_code"] == run.code == run.json["exit_code"]
    return {p["patch"]: p["state"] for p in result["patches"]}, run.code


def state_of(
    runner: CliRunner, venv: Path, patch: str = CUDA, only: Sequence[str] = ()
) -> tuple[str, int]:
    """One patch's state (get_cuda_version's by default), and `check`'s exit code (of the
    patches `only` names, where it names some)."""
    states, code = states_of(runner, venv, only)
    return states[patch], code


def patch_result(document: Any, patch: str = CUDA) -> Any:
    """One patch's object in a single target's `--json` document."""
    (result,) = document["results"]
    return next(p for p in result["patches"] if p["patch"] == patch)
