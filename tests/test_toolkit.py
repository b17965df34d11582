"""The toolkit the server will use: `--cuda-home DIR` and `--server-env FILE` name the nvcc the
pre-flight judges, instead of the one fi-patch's own environment finds; `check` and `apply` say
which nvcc they judged and where it came from.

The venvs hold torch's CUDA 13.0 build; the toolkits are stand-ins whose nvcc prints a release
as `nvcc --version` does (real processes). fi-patch's own CUDA_HOME names one toolkit and the
option another, so that each test fails where fi-patch follows the wrong one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode, UsageError
from fi_patcher.toolkit import SYSTEMD_PATH, parse_environment, server_env
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result
from tests.support.releases import CUDA
from tests.support.toolkits import toolkit


def running_with(cuda_home: Path) -> CliRunner:
    """fi-patch run with CUDA_HOME set in its own environment."""
    return CliRunner(
        env={
            "CUDA_HOME": str(cuda_home),
            "VIRTUAL_ENV": None,
            "CONDA_PREFIX": None,
            "NO_COLOR": "1",
        }
    )


# --- the file ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "values"),
    [
        pytest.param("CUDA_HOME=/opt/cuda\n", {"CUDA_HOME": "/opt/cuda"}, id="plain"),
        pytest.param(
            "# the server\n\n; old style\n  CUDA_HOME=/opt/cuda  \n",
            {"CUDA_HOME": "/opt/cuda"},
            id="comments-blank-lines-and-spaces",
        ),
        pytest.param("CUDA_HOME='/opt/my cuda'\n", {"CUDA_HOME": "/opt/my cuda"}, id="single"),
        pytest.param('PATH="/a:/b"\n', {"PATH": "/a:/b"}, id="double"),
        pytest.param('A="say \\"hi\\""\n', {"A": 'say "hi"'}, id="double-escapes"),
        pytest.param("A=\n", {"A": ""}, id="empty"),
        pytest.param("A=x=y\n", {"A": "x=y"}, id="equals-in-value"),
        pytest.param("CUDA_HOME = /opt/cuda\n", {"CUDA_HOME": "/opt/cuda"}, id="spaces-around"),
        pytest.param("A=1\r\nA=2\r\n", {"A": "2"}, id="crlf-last-wins"),
    ],
)
def test_environment_file_reads_as_systemd_does(text: str, values: dict[str, str]) -> None:
    assert parse_environment(text, "f") == values


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        pytest.param("A=1\nexport CUDA_HOME=/x\n", 2, "not KEY=VALUE", id="export"),
        pytest.param("CUDA_HOME\n", 1, "not KEY=VALUE", id="no-equals"),
        pytest.param("1A=x\n", 1, "not KEY=VALUE", id="bad-name"),
        pytest.param("A='/x\n", 1, "quote is not closed", id="open-quote"),
        pytest.param("PATH=/a:\\\n/b\n", 1, "next line", id="continued"),
    ],
)
def test_a_malformed_environment_file_is_refused(text: str, line: int, why: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse_environment(text, "server.env")
    assert raised.value.message.startswith(f"--server-env server.env, line {line}: ")
    assert why in raised.value.message
    assert raised.value.remedy is not None and "KEY=VALUE" in raised.value.remedy


def test_the_file_gives_only_what_finds_nvcc_and_systemd_s_path(tmp_path: Path) -> None:
    file = tmp_path / "server.env"
    file.write_text("CUDA_PATH=/opt/cuda\nHF_HOME=/data\n")
    named = server_env(file)
    assert dict(named.variables) == {"CUDA_PATH": "/opt/cuda", "PATH": SYSTEMD_PATH}
    assert named.path_default and named.origin == f"--server-env {file}"


# --- refusals, before any target --------------------------------------------------------------


def test_a_cuda_home_that_is_not_a_toolkit_is_usage(runner: CliRunner, tmp_path: Path) -> None:
    gone = fi_patch(runner, "check", "--venv", tmp_path, "--cuda-home", tmp_path / "nope")
    assert gone.code == ExitCode.USAGE
    assert f"--cuda-home {tmp_path / 'nope'}: no such directory" in gone.text
    assert "fix: name the toolkit's folder, the one that holds bin/nvcc" in gone.text
    empty = fi_patch(runner, "apply", "--venv", tmp_path, "--cuda-home", tmp_path, "--json")
    assert empty.code == ExitCode.USAGE
    assert empty.json["error"]["kind"] == "UsageError"
    assert f"{tmp_path}/bin/nvcc is not there" in empty.json["error"]["message"]


def test_an_unreadable_or_malformed_server_env_is_usage(runner: CliRunner, tmp_path: Path) -> None:
    missing = fi_patch(runner, "check", "--venv", tmp_path, "--server-env", tmp_path / "x.env")
    assert missing.code == ExitCode.USAGE
    assert "cannot read it: No such file or directory" in missing.text
    assert "Traceback" not in missing.text
    folder = fi_patch(runner, "apply", "--venv", tmp_path, "--server-env", tmp_path)
    assert folder.code == ExitCode.USAGE and "cannot read it" in folder.text
    malformed = tmp_path / "bad.env"
    malformed.write_text("CUDA_HOME /usr/local/cuda\n")
    bad = fi_patch(runner, "check", "--venv", tmp_path, "--server-env", malformed, "--json")
    assert bad.code == ExitCode.USAGE
    assert bad.json["error"]["message"] == f"--server-env {malformed}, line 1: it is not KEY=VALUE"


def test_cuda_home_and_server_env_together_is_usage(runner: CliRunner, tmp_path: Path) -> None:
    file = tmp_path / "server.env"
    file.write_text("CUDA_HOME=/x\n")
    home = toolkit(tmp_path / "cuda", "13.0")
    run = fi_patch(runner, "check", "--venv", tmp_path, "--cuda-home", home, "--server-env", file)
    assert run.code == ExitCode.USAGE
    assert "give --cuda-home or --server-env, not both" in run.text


# --- the nvcc judged --------------------------------------------------------------------------


def test_fi_patch_s_own_toolkit_is_judged_and_named(venv_with: MakeVenv, tmp_path: Path) -> None:
    """Without an option, what fi-patch's environment finds, and says so."""
    venv = venv_with("0.7.0")
    old = toolkit(tmp_path / "cuda-12.4", "12.4")
    people = fi_patch(running_with(old), "check", "--venv", venv)
    assert people.code == ExitCode.TOOLKIT_MISMATCH, people.text
    assert f"nvcc: {old}/bin/nvcc (12.4), from CUDA_HOME in fi-patch's environment" in people.text
    assert "name it: --cuda-home DIR, or --server-env FILE" in people.text


def test_cuda_home_names_the_server_s_toolkit(venv_with: MakeVenv, tmp_path: Path) -> None:
    """fi-patch's own CUDA_HOME is 12.4 (exit 12 without the option); the server's is 13.0."""
    venv = venv_with("0.7.0")
    old, server = toolkit(tmp_path / "cuda-12.4", "12.4"), toolkit(tmp_path / "cuda-13.0", "13.0")
    runner = running_with(old)
    checked = fi_patch(runner, "check", "--venv", venv, "--cuda-home", server)
    assert checked.code == ExitCode.NEEDS_APPLY, checked.text
    assert f"nvcc: {server}/bin/nvcc (13.0), from --cuda-home" in checked.text
    document = fi_patch(runner, "check", "--venv", venv, "--cuda-home", server, "--json").json
    (result,) = document["results"]
    preflight = result["preflight"]
    assert preflight["nvcc_path"] == f"{server}/bin/nvcc"
    assert (preflight["nvcc_from"], preflight["toolkit_named"]) == ("--cuda-home", True)
    assert preflight["mismatch"] is False
    applied = fi_patch(
        runner, "apply", "--venv", venv, "--patch", CUDA, "--cuda-home", server, "--no-verify"
    )
    assert applied.code == ExitCode.OK, applied.text
    assert f"nvcc: {server}/bin/nvcc (13.0), from --cuda-home" in applied.text


def test_server_env_names_the_toolkit_fi_patch_does_not_see(
    venv_with: MakeVenv, tmp_path: Path
) -> None:
    """fi-patch's own CUDA_HOME matches torch; the server's file names a 12.4 toolkit: apply
    would give the server a compiler for another CUDA, so check and apply refuse (exit 12)."""
    venv = venv_with("0.7.0")
    good, old = toolkit(tmp_path / "cuda-13.0", "13.0"), toolkit(tmp_path / "cuda-12.4", "12.4")
    file = tmp_path / "vllm.env"
    file.write_text(f'# written by the deploy\nCUDA_HOME="{old}"\nHF_HOME=/data\n')
    runner = running_with(good)
    assert fi_patch(runner, "check", "--venv", venv).code == ExitCode.NEEDS_APPLY
    checked = fi_patch(runner, "check", "--venv", venv, "--server-env", file, "--json")
    assert checked.code == ExitCode.TOOLKIT_MISMATCH, checked.stdout
    (result,) = checked.json["results"]
    assert result["preflight"]["nvcc_from"] == f"CUDA_HOME in --server-env {file}"
    assert patch_result(checked.json, CUDA)["refusal"]["kind"] == "ToolkitMismatch"
    refused = fi_patch(runner, "apply", "--venv", venv, "--server-env", file)
    assert refused.code == ExitCode.TOOLKIT_MISMATCH, refused.text
    assert f"nvcc 12.4 ({old}/bin/nvcc, from CUDA_HOME in --server-env {file})" in refused.text
    assert "give the server a CUDA 13.0 toolkit" in refused.text


def test_server_env_path_and_systemd_s_default(venv_with: MakeVenv, tmp_path: Path) -> None:
    """The file's PATH finds nvcc where it sets no CUDA_HOME; where it sets none of the three,
    fi-patch's own CUDA_HOME still does not count: systemd's default PATH does."""
    venv = venv_with("0.7.0")
    old, server = toolkit(tmp_path / "cuda-12.4", "12.4"), toolkit(tmp_path / "cuda-13.0", "13.0")
    runner = running_with(old)
    on_path = tmp_path / "path.env"
    on_path.write_text(f"PATH={server}/bin:/usr/bin\n")
    run = fi_patch(runner, "check", "--venv", venv, "--server-env", on_path)
    assert run.code == ExitCode.NEEDS_APPLY, run.text
    assert f"nvcc: {server}/bin/nvcc (13.0), from PATH in --server-env {on_path}" in run.text
    bare = tmp_path / "bare.env"
    bare.write_text("HF_HOME=/data\n")
    document = fi_patch(runner, "check", "--venv", venv, "--server-env", bare, "--json").json
    preflight = document["results"][0]["preflight"]
    assert str(old) not in (preflight["nvcc_path"] or "")
    assert "fi-patch's environment" not in (preflight["nvcc_from"] or "")
    assert preflight["toolkit_named"] is True
