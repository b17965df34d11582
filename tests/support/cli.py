"""Running the CLI the way a person or a script would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fi_patcher.cli import app


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


def state_of(runner: CliRunner, venv: Path) -> tuple[str, int]:
    run = fi_patch(runner, "check", "--venv", venv, "--json")
    (result,) = run.json["results"]
    assert result["exit_code"] == run.code == run.json["exit_code"]
    return result["state"], run.code
