"""Docs that run: every `fi-patch …` command line shown in README.md and docs/ is run here
against a real venv, or marked as illustrative in the page itself, so that the docs cannot drift
from the tool."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.tiers import SLOW
from tests.support.venvs import python_of

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ILLUSTRATIVE = "<!-- illustrative"
# The placeholders the pages use for "your environment" and "your interpreter".
ENVIRONMENTS = ("/root/ml-env", "/opt/ml-env", "<env>", "$VIRTUAL_ENV", "X", "V")
HELPED = ("apply", "revert", "check", "list")


def shown() -> list[tuple[str, str]]:
    """(page, command) for every fi-patch command line, in page order, without duplicates."""
    found: dict[str, str] = {}
    for page in PAGES:
        fenced = False
        for line in page.read_text().splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if ILLUSTRATIVE in line:
                continue
            candidates = re.findall(r"`(fi-patch [^`]+)`", line)
            if fenced and re.match(r"\s*(\$ )?(/opt/fi-patch/bin/)?fi-patch ", line):
                candidates.append(line.split("#", 1)[0].strip())
            for command in candidates:
                command = (
                    command.split("||", 1)[0]
                    .strip()
                    .removeprefix("$ ")
                    .replace("/opt/fi-patch/bin/fi-patch", "fi-patch")
                )
                found.setdefault(" ".join(command.split()), page.name)
    return [(page, command) for command, page in found.items()]


def illustrative() -> list[str]:
    return [
        line for page in PAGES for line in page.read_text().splitlines() if ILLUSTRATIVE in line
    ]


def test_the_pages_show_commands_and_mark_what_they_do_not_run() -> None:
    commands = [command for _, command in shown()]
    assert len(commands) >= 15
    assert "fi-patch --install-completion" not in commands
    assert any("fi-patch --install-completion" in line for line in illustrative())


@SLOW
def test_every_command_the_docs_show_runs(venv_with: MakeVenv) -> None:
    """In page order, on one venv holding FlashInfer 0.7.0 (every patch applies): no command
    is a usage error or meets a bug, and each help answers."""
    venv = venv_with("0.7.0")
    runner = CliRunner(env={"VIRTUAL_ENV": str(venv), "CONDA_PREFIX": None, "NO_COLOR": "1"})
    for page, command in shown():
        words = shlex.split(command)[1:]
        for name in ENVIRONMENTS:
            words = [str(venv) if w == name else w for w in words]
        words = [str(python_of(venv)) if w.startswith("<base>/") else w for w in words]
        for run in (
            [words]
            if "<command>" not in words
            else [[name if w == "<command>" else w for w in words] for name in HELPED]
        ):
            result = fi_patch(runner, *run)
            assert result.code not in (ExitCode.USAGE, ExitCode.INTERNAL), (page, run, result.text)
            if "--help" in run:
                assert result.code == ExitCode.OK and "Usage:" in result.stdout, (page, run)
