"""revert never speaks falsely of a file: one that is gone is not "already the original".

A patched file deleted since apply keeps its record and its backup: `revert` puts fi-patch's
backup back there (it is RECORD's original), or refuses naming the backup; `revert --patch X`
changes only the files that hold X, and reports any other record it tidies. Real venvs holding
FlashInfer 0.7.0, whose patches work on two files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import records
from tests.support.cli import fi_patch, patch_result
from tests.support.expected import expected
from tests.support.releases import (
    ACTIVATION,
    API_LOGGING,
    CONCAT_OPS,
    CUDA,
    DECODE,
    FORWARDING,
    FP4,
    FP8_QUANT,
    GEMM,
    MOE_CORE,
    PREFILL,
    RELEASES,
    ROUTING_DSV3,
    SAMPLING,
    TARGET,
    UTILS,
    released_text,
)
from tests.support.venvs import fp4_file, record_sha256, reinstall, rerecord, target_file


def _backups(venv: Path) -> set[str]:
    return {p.name for p in (venv / ".fi-patch" / "backups").iterdir()}


def _patched_then_deleted(runner: CliRunner, venv_with: MakeVenv) -> tuple[Path, set[str]]:
    """0.7.0 with every patch, and fp4_quantization.py deleted since: the venv and its backups."""
    venv = venv_with("0.7.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    kept = _backups(venv)
    fp4_file(venv).unlink()
    return venv, kept


def test_a_deleted_file_gets_its_original_back_from_the_backup(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv, kept = _patched_then_deleted(runner, venv_with)

    checked = fi_patch(runner, "check", "--venv", venv)
    assert checked.code == ExitCode.LAYOUT
    assert "is missing, but fi-patch patched it" in checked.text
    assert "`fi-patch revert` puts fi-patch's backup of its original back there" in checked.text
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.LAYOUT
    assert _backups(venv) == kept

    run = fi_patch(runner, "revert", "--venv", venv, "--json")
    assert run.code == ExitCode.OK, run.stdout
    assert "already the original" not in run.stdout
    files = {f["relpath"]: f for f in run.json["results"][0]["files"]}
    assert files[FP4]["action"] == "reverted"
    assert (
        "was missing: its original bytes are back, from fi-patch's backup" in files[FP4]["message"]
    )
    assert patch_result(run.json, FORWARDING)["action"] == "reverted"
    assert fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], FP4)
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], TARGET)
    assert records(venv) == []
    assert fi_patch(runner, "check", "--venv", venv).code == ExitCode.NEEDS_APPLY


def test_a_deleted_file_is_never_cleared_by_a_revert_of_another_patch(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv, kept = _patched_then_deleted(runner, venv_with)

    run = fi_patch(runner, "revert", "--venv", venv, "--patch", CUDA, "--json")
    assert run.code == ExitCode.OK, run.stdout
    (result,) = run.json["results"]
    assert [f["relpath"] for f in result["files"]] == [TARGET]
    assert patch_result(run.json, CUDA)["action"] == "reverted"
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], TARGET)
    assert not fp4_file(venv).exists()
    others = (
        ACTIVATION,
        API_LOGGING,
        CONCAT_OPS,
        DECODE,
        GEMM,
        FP4,
        FP8_QUANT,
        MOE_CORE,
        PREFILL,
        ROUTING_DSV3,
        SAMPLING,
        UTILS,
    )
    assert sorted(r["relpath"] for r in records(venv)) == sorted(others)
    originals = {
        relpath: hashlib.sha256(released_text(RELEASES["0.7.0"], relpath)).hexdigest()
        for relpath in others
    }
    fp4_original = originals[FP4]
    assert _backups(venv) == {f"{h}.py" for h in originals.values()} <= kept

    # The file held other patches too: only a revert of all of them puts it back.
    partial = fi_patch(runner, "revert", "--venv", venv, "--patch", FORWARDING)
    assert partial.code == ExitCode.LAYOUT, partial.text
    assert "is missing; it held fp4-op-keyword-forwarding, fp4-quantize-under-compile" in (
        partial.text
    )
    assert f"{fp4_original}.py" in partial.text
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], FP4)


def test_a_deleted_file_whose_backup_is_not_recorded_original_is_refused(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """RECORD says another original now (the file was reinstalled from another build, then
    deleted): the backup cannot be shown to be FlashInfer's original, and stays where it is."""
    venv = venv_with("0.7.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    kept = _backups(venv)
    rerecord(venv, FP4, released_text(RELEASES["0.7.0"], FP4) + b"# another build\n")
    fp4_file(venv).unlink()
    refused = fi_patch(runner, "revert", "--venv", venv)
    assert refused.code == ExitCode.LAYOUT, refused.text
    assert "cannot be shown to be FlashInfer's original" in refused.text
    assert _backups(venv) == kept
    assert target_file(venv).read_bytes() == expected("0.7.0").encode()


def test_revert_of_one_patch_reports_the_records_it_tidies(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """A reinstall put fp4_quantization.py's original back; `revert --patch` of the patch in
    cpp_ext.py changes that file only, and says it tidied the other record."""
    venv = venv_with("0.7.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    reinstall(venv, RELEASES["0.7.0"])
    assert record_sha256(venv, FP4) == hashlib.sha256(fp4_file(venv).read_bytes()).hexdigest()
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.7.0"], TARGET)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--patch", CUDA).code == 0

    run = fi_patch(runner, "revert", "--venv", venv, "--patch", CUDA, "--json")
    assert run.code == ExitCode.OK, run.stdout
    files = {f["relpath"]: f["action"] for f in run.json["results"][0]["files"]}
    # The reinstall put the other files' originals back too.
    others = (
        FP4,
        UTILS,
        ACTIVATION,
        API_LOGGING,
        CONCAT_OPS,
        DECODE,
        GEMM,
        FP8_QUANT,
        MOE_CORE,
        PREFILL,
        ROUTING_DSV3,
        SAMPLING,
    )
    tidied = dict.fromkeys(others, "tidied")
    assert files == {TARGET: "reverted", **tidied}
    assert FORWARDING not in {p["patch"] for p in run.json["results"][0]["patches"]}
    assert records(venv) == []
    people = fi_patch(runner, "revert", "--venv", venv)
    assert people.code == ExitCode.OK
    assert "nothing to revert" in people.text
