"""Finding the target, and saying plainly why a target cannot be used."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, state_of
from tests.support.venvs import create_venv, python_of, replace_bytes, site_packages, target_file


def test_no_target_is_an_error_not_fi_patch_s_own_interpreter(runner: CliRunner) -> None:
    run = fi_patch(runner, "check")
    assert run.code == ExitCode.USAGE
    assert "no target environment" in run.text
    assert "never falls back to its own interpreter" in run.text
    assert sys.prefix not in run.stdout


def test_virtual_env_is_the_default_target(venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    runner = CliRunner(env={"VIRTUAL_ENV": str(venv), "CONDA_PREFIX": "/nonexistent"})
    run = fi_patch(runner, "apply", "--dry-run")
    assert run.code == ExitCode.OK
    assert "chosen by $VIRTUAL_ENV" in run.text
    assert str(venv) in run.text


def test_conda_prefix_is_the_next_default(venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    runner = CliRunner(env={"VIRTUAL_ENV": None, "CONDA_PREFIX": str(venv)})
    run = fi_patch(runner, "check", "--json")
    assert run.code == ExitCode.NEEDS_APPLY
    assert run.json["results"][0]["environment"] == str(venv)


def test_python_option_names_the_interpreter(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    run = fi_patch(runner, "check", "--python", python_of(venv), "--json")
    assert run.code == ExitCode.NEEDS_APPLY
    assert run.json["results"][0]["state"] == "pristine"


def test_venv_through_a_symlink(runner: CliRunner, venv_with: MakeVenv, tmp_path: Path) -> None:
    venv = venv_with("0.5.0")
    link = tmp_path / "link"
    link.symlink_to(venv)
    assert fi_patch(runner, "apply", "--venv", link, "--no-verify").code == ExitCode.OK
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
    assert fi_patch(runner, "revert", "--venv", link).code == ExitCode.OK
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_both_venv_and_python_is_usage(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "check", "--venv", tmp_path, "--python", sys.executable)
    assert run.code == ExitCode.USAGE
    assert "not both" in run.text


def test_missing_venv(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "apply", "--venv", tmp_path / "nope")
    assert run.code == ExitCode.ENVIRONMENT
    assert f"no such environment: {tmp_path / 'nope'}" in run.text


def test_file_is_not_an_environment(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    run = fi_patch(runner, "check", "--venv", tmp_path / "f")
    assert run.code == ExitCode.ENVIRONMENT
    assert "is not a directory" in run.text


def test_folder_without_python_is_not_an_environment(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "check", "--venv", tmp_path)
    assert run.code == ExitCode.ENVIRONMENT
    assert "is not a Python environment: it has no bin/python" in run.text


def _fake_python(venv: Path, script: str, mode: int = 0o755) -> None:
    python = python_of(venv)
    (venv / "bin" / "python3").unlink(missing_ok=True)
    python.unlink()
    python.write_text(script)
    python.chmod(mode)


def test_interpreter_that_fails(runner: CliRunner, tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    _fake_python(
        venv, "#!/bin/sh\necho 'libpython3.11.so.1.0: cannot open shared object' >&2\nexit 127\n"
    )
    run = fi_patch(runner, "check", "--venv", venv)
    assert run.code == ExitCode.ENVIRONMENT
    assert "could not run fi-patch's probe (exit status 127)" in run.text
    assert "cannot open shared object" in run.text


def test_interpreter_not_executable(runner: CliRunner, tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    _fake_python(venv, "not a program\n", mode=0o644)
    run = fi_patch(runner, "check", "--venv", venv)
    assert run.code == ExitCode.ENVIRONMENT
    assert "cannot run the interpreter" in run.text


def test_interpreter_that_hangs(runner: CliRunner, tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    _fake_python(venv, "#!/bin/sh\nexec sleep 30\n")
    run = fi_patch(runner, "check", "--venv", venv, "--timeout", "1")
    assert run.code == ExitCode.ENVIRONMENT
    assert "did not finish the probe within 1 s" in run.text


def test_stray_output_from_pth_files_cannot_break_the_probe(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    noise = 'import sys; sys.stdout.write("noise {\\"prefix\\": \\"/elsewhere\\"}\\n")\n'
    (site_packages(venv) / "zz-noise.pth").write_text(noise)
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_not_installed(runner: CliRunner, empty_venv: Path) -> None:
    assert state_of(runner, empty_venv) == ("not-installed", ExitCode.NOT_INSTALLED)
    run = fi_patch(runner, "apply", "--venv", empty_venv)
    assert run.code == ExitCode.NOT_INSTALLED
    assert f"flashinfer-python is not installed in {empty_venv}" in run.text
    assert not (empty_venv / ".fi-patch").exists()


def _dist_info(venv: Path) -> Path:
    (info,) = site_packages(venv).glob("flashinfer_python-*.dist-info")
    return info


def test_editable_install_is_refused(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    direct_url = {"url": "file:///src/flashinfer", "dir_info": {"editable": True}}
    # pip wrote a direct_url.json (hardlinked to the template's): replace it, never edit it.
    replace_bytes(_dist_info(venv) / "direct_url.json", json.dumps(direct_url).encode())
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.LAYOUT
    assert "editable install of file:///src/flashinfer" in run.text


def test_legacy_develop_install_is_refused(runner: CliRunner, empty_venv: Path) -> None:
    (site_packages(empty_venv) / "flashinfer-python.egg-link").write_text("/src/flashinfer\n.\n")
    run = fi_patch(runner, "check", "--venv", empty_venv)
    assert run.code == ExitCode.LAYOUT
    assert "editable (develop) install" in run.text


def test_two_dist_infos_are_refused(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    info = _dist_info(venv)
    shutil.copytree(info, info.with_name("flashinfer_python-0.4.1.dist-info"))
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.LAYOUT
    assert "installed 2 times" in run.text
    assert "flashinfer_python-0.4.1.dist-info" in run.text


def test_missing_target_file(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    target_file(venv).unlink()
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.LAYOUT
    assert "cpp_ext.py is missing" in run.text
    assert "pip install --force-reinstall --no-deps flashinfer-python==0.5.0" in run.text


def test_symlinked_target_file_is_refused(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    path = target_file(venv)
    outside = tmp_path / "outside.py"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.LAYOUT
    assert "is a symlink" in run.text
    assert outside.read_bytes() == path.read_bytes()


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        pytest.param("{not json", "is corrupt", id="corrupt"),
        pytest.param('{"schema": 99, "entries": []}', "newer fi-patch (schema 99", id="newer"),
        pytest.param('{"schema": 1, "entries": [{"x": 1}]}', "is corrupt", id="bad-entry"),
    ],
)
def test_unreadable_manifest(
    runner: CliRunner, venv_with: MakeVenv, manifest: str, message: str
) -> None:
    venv = venv_with("0.5.0")
    before = target_file(venv).read_bytes()
    (venv / ".fi-patch").mkdir()
    (venv / ".fi-patch" / "manifest.json").write_text(manifest)
    for command in ("check", "apply", "revert"):
        run = fi_patch(runner, command, "--venv", venv)
        assert run.code == ExitCode.STORE, command
        assert message in run.text
    assert target_file(venv).read_bytes() == before


def test_tampered_backup_is_not_restored(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    patched = target_file(venv).read_bytes()
    (backup,) = (venv / ".fi-patch" / "backups").iterdir()
    replace_bytes(backup, backup.read_bytes() + b"import os; os.system('true')\n")
    run = fi_patch(runner, "revert", "--venv", venv)
    assert run.code == ExitCode.STORE
    assert "does not match the manifest" in run.text
    assert target_file(venv).read_bytes() == patched


def test_missing_backup(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    for backup in (venv / ".fi-patch" / "backups").iterdir():
        backup.unlink()
    run = fi_patch(runner, "revert", "--venv", venv)
    assert run.code == ExitCode.STORE
    assert "is missing" in run.text
    assert "pip install --force-reinstall --no-deps flashinfer-python==0.5.0" in run.text


def test_json_error_document(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "apply", "--venv", tmp_path / "nope", "--json")
    assert run.code == ExitCode.ENVIRONMENT
    document = run.json
    assert document["exit_code"] == ExitCode.ENVIRONMENT
    assert document["error"]["kind"] == "EnvironmentProblem"
    assert "no such environment" in document["error"]["message"]


def test_environment_variables_of_the_caller_do_not_redirect_the_probe(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    runner = CliRunner(
        env={"PYTHONPATH": str(tmp_path), "PYTHONHOME": "/nonexistent", "VIRTUAL_ENV": None}
    )
    assert os.environ.get("PYTHONHOME") is None
    run = fi_patch(runner, "check", "--venv", venv, "--json")
    assert run.json["results"][0]["state"] == "pristine"
