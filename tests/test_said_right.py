"""Messages that say what is so: the smaller findings of the review behind "one verdict".

Each is a real case: a `pip install --target` copy on PYTHONPATH, a second metadata folder, a
venv without FlashInfer, a folder given as an interpreter, a file edited after apply, a process
of the environment that never imported FlashInfer.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.documents import SCHEMA_VERSION
from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.releases import TARGET
from tests.support.venvs import python_of, replace_bytes, site_packages, target_file


def test_help_names_the_schema_the_documents_have(runner: CliRunner) -> None:
    wide = CliRunner(env={"VIRTUAL_ENV": None, "NO_COLOR": "1", "COLUMNS": "200"})
    helped = " ".join(fi_patch(wide, "--help").stdout.split())
    assert f"(schema {SCHEMA_VERSION})" in helped
    assert fi_patch(runner, "list", "--json").json["schema"] == SCHEMA_VERSION


def test_a_copy_on_pythonpath_is_named_where_the_environment_has_none(
    empty_venv: Path, pythonpath_copy: Path
) -> None:
    folder = pythonpath_copy
    shadowed = CliRunner(env={"PYTHONPATH": str(folder), "VIRTUAL_ENV": None, "NO_COLOR": "1"})
    for command in ("check", "apply"):
        run = fi_patch(shadowed, command, "--venv", empty_venv)
        assert run.code == ExitCode.NOT_INSTALLED, run.text
        assert f"flashinfer-python is not installed in {empty_venv}" in run.text
        assert f"imports a copy from {folder / 'flashinfer'} (found through PYTHONPATH)" in run.text


def test_two_metadata_folders_say_which_matches_the_files(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """A crashed install of 0.4.1 left its metadata beside 0.5.0's: its RECORD lists other
    hashes, and the message says which folder to remove."""
    venv = venv_with("0.5.0")
    (info,) = site_packages(venv).glob("flashinfer_python-*.dist-info")
    stale = info.with_name("flashinfer_python-0.4.1.dist-info")
    shutil.copytree(info, stale)
    metadata = (stale / "METADATA").read_text().replace("\nVersion: 0.5.0\n", "\nVersion: 0.4.1\n")
    (stale / "METADATA").write_text(metadata)
    record = re.sub(
        rf"^({re.escape(TARGET)}),sha256=[^,]+,",
        r"\1,sha256=" + "A" * 43 + ",",
        (stale / "RECORD").read_text(),
        flags=re.M,
    )
    (stale / "RECORD").write_text(record)
    run = fi_patch(runner, "check", "--venv", venv)
    assert run.code == ExitCode.LAYOUT
    said = run.text
    assert f"{info}: version 0.5.0; its RECORD matches the files" in said
    assert f"{stale}: version 0.4.1; its RECORD does not match: {TARGET} differs" in said
    assert "fix: remove flashinfer_python-0.4.1.dist-info, whose RECORD does not match" in said


def test_revert_without_flashinfer_says_so_once(runner: CliRunner, empty_venv: Path) -> None:
    run = fi_patch(runner, "revert", "--venv", empty_venv)
    assert run.code == ExitCode.OK
    line = (
        "nothing to revert: fi-patch never patched here, and flashinfer-python is not "
        f"installed in {empty_venv}"
    )
    assert run.text.count(line) == 1, run.text
    assert "cuda-version-torch-first" in run.text


def test_a_folder_given_as_an_interpreter_and_the_other_way_round(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    folder = fi_patch(runner, "check", "--python", venv)
    assert folder.code == ExitCode.ENVIRONMENT
    assert f"{venv} is a directory, not an interpreter" in folder.text
    assert f"pass --venv {venv}" in folder.text
    assert "Permission denied" not in folder.text
    interpreter = fi_patch(runner, "check", "--venv", python_of(venv))
    assert interpreter.code == ExitCode.ENVIRONMENT
    assert "is not a directory, so it is not an environment" in interpreter.text
    assert f"pass --python {python_of(venv)}" in interpreter.text


def test_apply_over_a_file_changed_since_it_was_written_shows_the_change(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    path = target_file(venv)
    edited = path.read_bytes().replace(b"import torch", b"import torch  # pinned by ops", 1)
    assert edited != path.read_bytes()
    replace_bytes(path, edited)
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.DRIFTED, run.text
    said = run.text
    assert "the change since fi-patch wrote it:" in said
    assert "+import torch  # pinned by ops" in run.stderr
    assert said.count("fix:") == 1
    assert "`fi-patch revert --force` puts FlashInfer's original back" in said
    assert "--force-reinstall" not in said


def test_a_process_that_never_imported_flashinfer_is_not_named(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    idle = subprocess.Popen([python_of(venv), "-c", "import time; time.sleep(600)"])
    try:
        run = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
        assert run.code == ExitCode.OK
        assert idle.pid not in [r["pid"] for r in run.json["results"][0]["running"]]
    finally:
        idle.kill()
        idle.wait()
