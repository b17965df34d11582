"""What apply prints, as the real tool prints it: by default a summary short enough to read in a
terminal of 80 columns or in a log (an operator applying to eight venvs reads eight of them);
the diff with --diff, fi-patch's op runtime named in one line unless --full-diff; each patch's
line and each proof's text with -v."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.expected import files_of, named_in_summary, target_of
from tests.support.releases import RELEASES
from tests.support.tiers import releases

SHORT = 40
"""The most lines a default apply prints on a release every patch applies to (the issue's
"about 40 or fewer")."""
# Rich's codes for colour and for the spinner's redraws, which add no line.
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def _environ() -> dict[str, str]:
    dropped = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "VIRTUAL_ENV", "CONDA_PREFIX")
    dropped += ("COLUMNS", "LINES", "NO_COLOR")
    return {k: v for k, v in os.environ.items() if k not in dropped}


def _command(venv: Path, *words: str) -> list[str]:
    return [sys.executable, "-m", "fi_patcher", *words, "--venv", str(venv)]


def _in_a_terminal(command: list[str], columns: int = 80) -> tuple[int, str]:
    """`command` with stdout and stderr on a pseudo-terminal `columns` wide: its exit code and
    what the terminal showed, without colour codes, each spinner redraw's carriage return
    dropped."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=_environ()
    )
    os.close(follower)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower closed: Linux says EIO
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    code = process.wait(timeout=600)
    text = ANSI.sub("", shown.decode("utf-8", "replace")).replace("\r\n", "\n")
    return code, "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("version", releases(["0.7.0", "0.7.4"], "0.7.4"))
def test_a_default_apply_is_a_summary_in_a_terminal_and_piped(
    venv_with: MakeVenv, version: str
) -> None:
    """Every patch that applies to the release, proven: about 40 lines or fewer, at 80 columns
    in a terminal (the spinner on stderr) and piped as a log (the long steps on stderr), each
    file written on a line of its own with its patches, the proofs on one, no diff."""
    venv = venv_with(version)
    applicable = RELEASES[version].shapes
    code, shown = _in_a_terminal(_command(venv, "apply"))
    assert code == ExitCode.OK, shown
    lines = _lines(shown)
    assert len(lines) <= SHORT, shown
    assert [line for line in lines if len(line) > 80 and str(venv) not in line] == [], shown
    said = " ".join(shown.split())
    count = len(applicable)
    assert f"proofs: {count} of {count} red before the patch, {count} of {count} pass after" in said
    assert (
        f"applied {count} patches in " in said
        and "(--diff shows them, `revert` undoes them)" in said
    )
    # Each file's line names its patches; where they would wrap, a family of three or more is
    # named once by the start its ids share (twelve trtllm MoE patches in core.py, six
    # sampling ones in sampling.py), and -v names each on a line of its own.
    for relpath in files_of(version):
        held = sorted(p for p in applicable if target_of(p, version) == relpath)
        assert named_in_summary(said, relpath, held) == held
    assert "flashinfer/fused_moe/core.py: op-cutlass-fused-moe, op-trtllm-* (12)" in said
    assert "flashinfer/sampling.py: op-min-p-sampling-from-probs, op-top-* (6)" in said
    assert f"environment {venv} " in said
    assert "files kept in the environment's .fi-patch/backups" in said
    assert "@@" not in shown and "+++" not in shown and " after: " not in shown

    reverted = subprocess.run(
        _command(venv, "revert"), capture_output=True, text=True, env=_environ(), check=False
    )
    assert reverted.returncode == ExitCode.OK, reverted.stderr
    assert len(_lines(reverted.stdout + reverted.stderr)) <= SHORT, reverted.stdout

    piped = subprocess.run(
        _command(venv, "apply"), capture_output=True, text=True, env=_environ(), check=False
    )
    assert piped.returncode == ExitCode.OK, piped.stderr
    assert len(_lines(piped.stdout + piped.stderr)) <= SHORT, piped.stdout + piped.stderr
    files = [line for line in piped.stdout.splitlines() if line.startswith("applied to ")]
    assert len(files) == len(files_of(version)), piped.stdout
    assert "@@" not in piped.stdout


def test_diff_shows_the_changes_and_verbose_each_proof(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """0.7.4: --diff prints each file's diff with fi-patch's op runtime named in one line,
    --full-diff prints it whole, a dry run prints the short form, and -v each proof's text."""
    venv = venv_with("0.7.4")
    dry = fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--no-verify", "--json")
    (planned,) = dry.json["results"]
    whole = {f["relpath"]: f["diff"] for f in planned["files"]}

    shown = fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--no-verify")
    assert shown.code == ExitCode.OK
    assert "dry run: this diff would be applied; nothing was changed" in shown.stdout
    runtime = re.findall(
        r"^\+ *# \.\.\. fi-patch's op runtime placed by declared-ops-custom: ([\d,]+) more "
        r"lines, from src/fi_patcher/placed/ \(--full-diff shows them\)$",
        shown.stdout,
        re.M,
    )
    assert len(runtime) == 1 and int(runtime[0].replace(",", "")) > 500
    assert whole["flashinfer/jit/cpp_ext.py"] in shown.stdout
    assert whole["flashinfer/utils.py"] not in shown.stdout
    assert len(shown.stdout.splitlines()) < len("".join(whole.values()).splitlines()) / 2

    full = fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--no-verify", "--full-diff")
    assert all(text in full.stdout for text in whole.values())

    applied = fi_patch(runner, "apply", "--venv", venv, "--diff", "-v")
    assert applied.code == ExitCode.OK, applied.text
    assert whole["flashinfer/activation.py"] in applied.stdout
    assert "fi-patch's op runtime placed by declared-ops-custom" in applied.stdout
    assert "cuda-version-torch-first before: fails at torch.compile(fullgraph=True)" in (
        applied.stdout
    )
    assert "op-mm-fp4 after: passes" in applied.stdout
    assert "applied to flashinfer/gemm/gemm_base.py" not in applied.stdout
    assert "applied op-mm-fp4 to flashinfer/gemm/gemm_base.py" in applied.stdout
    assert "op-trtllm-* (" not in applied.stdout
    assert "applied op-trtllm-bf16-routed-moe to flashinfer/fused_moe/core.py" in applied.stdout

    quiet = fi_patch(runner, "revert", "--venv", venv, "-q")
    assert quiet.code == ExitCode.OK
    assert "(op-bmm-fp8, op-mm-fp4, op-mm-fp8)" not in quiet.stdout
    assert "restored the original bytes of flashinfer/gemm/gemm_base.py" in quiet.stdout
