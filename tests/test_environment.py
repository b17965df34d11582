"""Finding the target, and saying plainly why a target cannot be used."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, state_of
from tests.support.releases import CUDA
from tests.support.tiers import SLOW
from tests.support.venvs import python_of, site_packages


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
    assert patch_result(run.json)["state"] == "pristine"


@SLOW
def _cuda(result: dict[str, list[dict[str, str]]]) -> dict[str, str]:
    """cuda-version-torch-first's entry in one target's result."""
    (found,) = [p for p in result["patches"] if p["patch"] == CUDA]
    return found


def test_several_targets_report_each_and_exit_with_the_highest_code(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    patched, pristine = venv_with("0.5.0"), venv_with("0.7.4")
    assert fi_patch(runner, "apply", "--venv", patched, "--no-verify").code == ExitCode.OK
    missing = tmp_path / "missing"
    run = fi_patch(
        runner,
        "check",
        "--venv",
        patched,
        "--python",
        python_of(pristine),
        "--venv",
        missing,
        "--json",
    )
    assert run.code == ExitCode.ENVIRONMENT
    # Every --venv in order, then every --python.
    first, second, third = run.json["results"]
    assert (first["environment"], _cuda(first)["state"]) == (str(patched), "patched")
    assert second["target"] == f"--venv {missing}"
    assert "no such environment" in second["error"]["message"]
    assert (third["environment"], _cuda(third)["state"]) == (str(pristine), "pristine")

    wide = CliRunner(env={"VIRTUAL_ENV": None, "NO_COLOR": "1", "COLUMNS": "250"})
    people = fi_patch(wide, "check", "--venv", patched, "--venv", pristine)
    assert people.code == ExitCode.NEEDS_APPLY
    assert "summary" in people.text
    summary = people.stdout.split("\nsummary\n", 1)[1]
    # Each target on its line with its exit code, its result below it.
    # The registry's first patch leads: 0.5.0 has no API-logging wrapper, 0.7.4 has.
    old = "api-logging-under-compile not-applicable, cuda-version-torch-first patched,"
    assert f"--venv {patched}  exit 0\n  {old}" in summary
    new = "api-logging-under-compile pristine, cuda-version-torch-first pristine,"
    assert f"--venv {pristine}  exit 3\n  {new}" in summary


def test_stray_output_from_pth_files_cannot_break_the_probe(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    noise = 'import sys; sys.stdout.write("noise {\\"prefix\\": \\"/elsewhere\\"}\\n")\n'
    (site_packages(venv) / "zz-noise.pth").write_text(noise)
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_json_error_document(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "apply", "--venv", tmp_path / "nope", "--json")
    assert run.code == ExitCode.ENVIRONMENT
    document = run.json
    assert document["exit_code"] == ExitCode.ENVIRONMENT
    (failed,) = document["results"]
    assert (failed["target"], failed["status"]) == (f"--venv {tmp_path / 'nope'}", "error")
    assert failed["error"]["kind"] == "EnvironmentProblem"
    assert "no such environment" in failed["error"]["message"]


def test_environment_variables_of_the_caller_do_not_redirect_the_probe(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    runner = CliRunner(
        env={"PYTHONPATH": str(tmp_path), "PYTHONHOME": "/nonexistent", "VIRTUAL_ENV": None}
    )
    assert os.environ.get("PYTHONHOME") is None
    run = fi_patch(runner, "check", "--venv", venv, "--json")
    assert patch_result(run.json)["state"] == "pristine"


def test_a_payload_larger_than_a_pipe_reaches_a_target_that_reads_late() -> None:
    """The proofs go to the target on its stdin (twelve patches' proofs, before and after, are
    several hundred kilobytes). A target that starts reading after fi-patch's first look (a
    loaded machine) must still get all of it: once, such a run waited for its timeout."""
    from fi_patcher.environment import run_target

    payload = b"x" * 300_000
    script = "import sys, time; time.sleep(0.5); print(len(sys.stdin.buffer.read()))"
    done = run_target(Path(sys.executable), ["-c", script], timeout=60, what="test", stdin=payload)
    assert (done.returncode, done.stdout.strip()) == (0, "300000")
