"""The fault and bad-input scenarios, one test each (docs/faults.md lists them).

Every test asserts the message a person sees (what happened, where, what to do), the documented
exit code, and the target file's sha256 afterwards. Every fault is made for real: interpreters
that fail or hang, mounts for a read-only folder and a full disk (root needed), a reinstall and an
uninstall by pip, symlinks. Edited files are written the way an installer or a person would, with
RECORD rewritten to match where the scenario needs the file to look installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.faults.support import buggy, expect, fill, mounted, sha256, stale_temporaries
from tests.support.cli import Run, fi_patch, patch_result, state_of
from tests.support.deps import CPU_TORCH, shared, use
from tests.support.expected import expected
from tests.support.releases import (
    ACTIVATION,
    API_LOGGING,
    CONCAT_OPS,
    CUDA,
    DECODE,
    FP4,
    FP8_QUANT,
    GEMM,
    MOE_CORE,
    PREFILL,
    RELEASES,
    ROUTING_DSV3,
    SAMPLING,
    TARGET,
    UNDER_COMPILE,
    UTILS,
    fetch,
    released_text,
)
from tests.support.tiers import SLOW
from tests.support.venvs import (
    create_venv,
    fp4_file,
    pip,
    python_of,
    reinstall,
    replace_bytes,
    rerecord,
    site_packages,
    target_file,
)

ORIGINAL_074 = hashlib.sha256(released_text(RELEASES["0.7.4"])).hexdigest()


def _apply(runner: CliRunner, venv: Path, *more: str) -> Run:
    return fi_patch(runner, "apply", "--venv", venv, "--no-verify", *more)


def _dist_info(venv: Path) -> Path:
    (info,) = site_packages(venv).glob("flashinfer_python-*.dist-info")
    return info


def _rerecord(venv: Path, data: bytes) -> None:
    """Install `data` as cpp_ext.py the way an installer would: file and RECORD agree."""
    rerecord(venv, TARGET, data)


def _fake_python(venv: Path, script: str, mode: int = 0o755) -> None:
    python = python_of(venv)
    (venv / "bin" / "python3").unlink(missing_ok=True)
    python.unlink()
    python.write_text(script)
    python.chmod(mode)


# --- the environment ----------------------------------------------------------------------------


def test_venv_path_missing(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "apply", "--venv", tmp_path / "ml-env")
    expect(
        run,
        ExitCode.ENVIRONMENT,
        f"no such environment: {tmp_path / 'ml-env'}",
        "create it with `python -m venv`",
    )


def test_path_is_not_an_environment(runner: CliRunner, tmp_path: Path) -> None:
    run = fi_patch(runner, "apply", "--venv", tmp_path)
    expect(
        run,
        ExitCode.ENVIRONMENT,
        f"{tmp_path} is not a Python environment: it has no bin/python",
        "point --venv at the folder that holds bin/python",
    )


def test_interpreter_broken(runner: CliRunner, tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    _fake_python(
        venv, "#!/bin/sh\necho 'libpython3.11.so.1.0: cannot open shared object' >&2\nexit 127\n"
    )
    run = fi_patch(runner, "apply", "--venv", venv)
    expect(
        run,
        ExitCode.ENVIRONMENT,
        f"the interpreter {python_of(venv)} could not run fi-patch's probe (exit status 127)",
        "cannot open shared object",
        "check that this interpreter starts",
    )


def test_interpreter_not_executable(runner: CliRunner, tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    _fake_python(venv, "not a program\n", mode=0o644)
    run = fi_patch(runner, "apply", "--venv", venv)
    expect(
        run,
        ExitCode.ENVIRONMENT,
        f"cannot run the interpreter {python_of(venv)}",
        "Permission denied",
        "python -m venv --clear",
    )


@pytest.mark.parametrize("how", ["--venv", "--python"])
def test_interpreter_link_dangling(runner: CliRunner, tmp_path: Path, how: str) -> None:
    """Real: a venv made with a copy of the base interpreter, which is then removed."""
    base = tmp_path / "python3.11-old"
    shutil.copy2(os.path.realpath(sys.executable), base)
    venv = tmp_path / "venv"
    subprocess.run([base, "-m", "venv", "--without-pip", venv], check=True)
    base.unlink()
    target = venv if how == "--venv" else python_of(venv)
    run = fi_patch(runner, "check", how, target)
    expect(
        run,
        ExitCode.ENVIRONMENT,
        f"{python_of(venv) if how == '--python' else venv / 'bin' / 'python'} is a dangling link",
        str(base),
        "usual after a Python upgrade",
        "recreate the environment",
    )


def test_probe_times_out(runner: CliRunner, tmp_path: Path) -> None:
    venv = create_venv(tmp_path / "venv")
    _fake_python(venv, "#!/bin/sh\nexec sleep 30\n")
    run = fi_patch(runner, "apply", "--venv", venv, "--timeout", "1")
    expect(run, ExitCode.ENVIRONMENT, "did not finish the probe within 1 s", "raise --timeout")


def test_flashinfer_not_installed(runner: CliRunner, empty_venv: Path) -> None:
    run = fi_patch(runner, "apply", "--venv", empty_venv)
    expect(
        run,
        ExitCode.NOT_INSTALLED,
        f"flashinfer-python is not installed in {empty_venv}",
        "check that --venv names the environment your server runs in",
    )
    assert not (empty_venv / ".fi-patch").exists()


def test_torch_not_installed(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    use(venv, None)
    run = fi_patch(runner, "apply", "--venv", venv)
    expect(
        run,
        ExitCode.NO_TORCH,
        f"torch is not installed for {python_of(venv)}",
        "install torch in that environment",
    )
    assert sha256(target_file(venv)) == ORIGINAL_074


def test_torch_cpu_build(runner: CliRunner, venv_with: MakeVenv) -> None:
    """Named, get_cuda_version's patch is refused on a CPU torch; unnamed, it is left out
    (tests/test_verdict.py)."""
    venv = venv_with("0.7.4")
    use(venv, shared(CPU_TORCH))
    run = fi_patch(runner, "apply", "--venv", venv, "--patch", "cuda-version-torch-first")
    expect(
        run,
        ExitCode.INERT,
        "torch 2.13.0+cpu",
        "is a CPU build (torch.version.cuda is None)",
        "change nothing",
        "install a CUDA build of torch",
    )
    assert sha256(target_file(venv)) == ORIGINAL_074
    assert not (venv / ".fi-patch").exists()


# --- what is installed --------------------------------------------------------------------------


def test_unknown_version_with_edited_function_is_refused_even_forced_where_named(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.6.0rc1")
    edited = (
        target_file(venv)
        .read_bytes()
        .replace(b"return Version(matches[0])", b"return Version('1.0')")
    )
    _rerecord(venv, edited)
    # apply would leave it out and write the others; named, it is refused.
    assert state_of(runner, venv) == ("unknown", ExitCode.NEEDS_APPLY)
    assert state_of(runner, venv, only=[CUDA]) == ("unknown", ExitCode.UNSUPPORTED)
    # --force runs the proofs (it cannot go with --no-verify): refused before them here.
    run = fi_patch(runner, "apply", "--venv", venv, "--force", "--patch", CUDA)
    expect(
        run,
        ExitCode.UNSUPPORTED,
        "the text of get_cuda_version is not one fi-patch knows",
        "in FlashInfer's own file (RECORD's bytes)",
        "its structure matches no known shape either",
        "found at lines",
        "structure sha256: ",
    )
    assert target_file(venv).read_bytes() == edited


def _release_as(venv: Path, version: str, *without: str) -> None:
    """The installed release under another version, its files `without` gone from disk and
    RECORD: what a future layout looks like to fi-patch."""
    info = _dist_info(venv)
    metadata = (info / "METADATA").read_text()
    old = next(line for line in metadata.splitlines() if line.startswith("Version: "))
    replace_bytes(info / "METADATA", metadata.replace(old, f"Version: {version}", 1).encode())
    for relpath in without:
        (site_packages(venv) / relpath).unlink()
    record = info / "RECORD"
    kept = [x for x in record.read_text().splitlines() if not x.startswith(without)]
    replace_bytes(record, ("\n".join(kept) + "\n").encode())


def test_future_release_without_cpp_ext_patches_what_it_holds(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    _release_as(venv, "0.8.0", TARGET)
    run = _apply(runner, venv, "--json")
    expect(run, ExitCode.OK)
    cuda = patch_result(run.json)
    assert (cuda["state"], cuda["action"]) == ("not-applicable", "not-applicable")
    assert "flashinfer/jit/cpp_ext.py is absent" in cuda["reason"]
    compiled = patch_result(run.json, UNDER_COMPILE)
    assert (compiled["action"], compiled["shape"]) == ("applied", "0.7.4")
    assert "0.8.0 carries the fp4_quantize of shape 0.7.4" in compiled["note"]


@SLOW
def test_a_pre_release_missing_a_file_its_record_lists(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """No range names 0.7.2rc6, but its RECORD says it ships cpp_ext.py: a broken install, not
    a release with nothing to patch."""
    venv = venv_with("0.7.2rc6")
    target_file(venv).unlink()
    for command in ("check", "apply"):
        expect(
            fi_patch(runner, command, "--venv", venv),
            ExitCode.LAYOUT,
            f"{target_file(venv)} is missing, but its RECORD lists it",
            "pip install --force-reinstall --no-deps flashinfer-python==0.7.2rc6",
        )
    assert not (venv / ".fi-patch").exists()


def test_a_future_release_whose_record_lacks_the_file(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """0.7.4 as 0.8.0, its RECORD without fp4_quantization.py (still on disk): fi-patch writes
    only files the installer recorded, whatever the version."""
    venv = venv_with("0.7.4")
    _release_as(venv, "0.8.0")
    record = _dist_info(venv) / "RECORD"
    kept = [x for x in record.read_text().splitlines() if not x.startswith(FP4 + ",")]
    replace_bytes(record, ("\n".join(kept) + "\n").encode())
    before = sha256(fp4_file(venv))
    expect(_apply(runner, venv), ExitCode.LAYOUT, f"does not list {FP4}")
    assert sha256(fp4_file(venv)) == before
    assert not (venv / ".fi-patch").exists()


def test_future_release_without_any_patched_file(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    files = (TARGET, FP4, UTILS, ACTIVATION, GEMM, FP8_QUANT, SAMPLING, API_LOGGING)
    _release_as(venv, "0.8.0", *files, CONCAT_OPS, ROUTING_DSV3, MOE_CORE, DECODE, PREFILL)
    for command in ("check", "apply"):
        expect(
            fi_patch(runner, command, "--venv", venv),
            ExitCode.UNSUPPORTED,
            "flashinfer-python 0.8.0 is outside every known range, and has none of the files",
            "flashinfer/activation.py, flashinfer/api_logging.py, flashinfer/concat_ops.py, "
            "flashinfer/decode.py, flashinfer/fp4_quantization.py, flashinfer/fused_moe/core.py, "
            "flashinfer/fused_moe/fused_routing_dsv3.py, "
            "flashinfer/gemm/gemm_base.py, flashinfer/jit/cpp_ext.py, "
            "flashinfer/prefill.py, flashinfer/quantization/fp4_quantization.py, "
            "flashinfer/quantization/fp8_quantization.py, flashinfer/sampling.py, "
            "flashinfer/utils.py",
            "install a release inside the known ranges",
        )
    assert not (venv / ".fi-patch").exists()


def test_known_version_with_edited_function(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    edited = target_file(venv).read_bytes().replace(b'"bin/nvcc"', b'"bin/nvcc-12.8"', 1)
    replace_bytes(target_file(venv), edited)
    assert state_of(runner, venv) == ("drifted", ExitCode.DRIFTED)
    run = _apply(runner, venv)
    expect(
        run,
        ExitCode.DRIFTED,
        "refusing to patch: the text of get_cuda_version is not one fi-patch knows",
        "installed: flashinfer-python 0.7.4",
        "found at lines 67-87",
        "bin/nvcc-12.8",
        "pip install --force-reinstall --no-deps flashinfer-python==0.7.4",
    )
    expect(fi_patch(runner, "apply", "--venv", venv, "--force"), ExitCode.DRIFTED)
    assert target_file(venv).read_bytes() == edited


def test_editable_install(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    direct_url = {"url": "file:///src/flashinfer", "dir_info": {"editable": True}}
    # pip wrote a direct_url.json (hardlinked to the template's): replace it, never edit it.
    replace_bytes(_dist_info(venv) / "direct_url.json", json.dumps(direct_url).encode())
    before = sha256(target_file(venv))
    run = _apply(runner, venv)
    expect(
        run,
        ExitCode.LAYOUT,
        "flashinfer-python is an editable install of file:///src/flashinfer",
        "edit your checkout instead",
    )
    assert sha256(target_file(venv)) == before


def test_legacy_develop_install(runner: CliRunner, empty_venv: Path) -> None:
    (site_packages(empty_venv) / "flashinfer-python.egg-link").write_text("/src/flashinfer\n.\n")
    run = fi_patch(runner, "check", "--venv", empty_venv)
    expect(run, ExitCode.LAYOUT, "is an editable (develop) install", "edit your checkout")


def test_two_flashinfer_dist_infos(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    info = _dist_info(venv)
    shutil.copytree(info, info.with_name("flashinfer_python-0.4.1.dist-info"))
    before = sha256(target_file(venv))
    run = _apply(runner, venv)
    expect(
        run,
        ExitCode.LAYOUT,
        f"flashinfer-python is installed 2 times in {site_packages(venv)}",
        "flashinfer_python-0.4.1.dist-info",
        "flashinfer_python-0.5.0.dist-info",
        "remove the stale metadata folders",
    )
    assert sha256(target_file(venv)) == before


def test_cpp_ext_missing(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    target_file(venv).unlink()
    run = _apply(runner, venv)
    expect(
        run,
        ExitCode.LAYOUT,
        f"{target_file(venv)} is missing",
        "pip install --force-reinstall --no-deps flashinfer-python==0.5.0",
    )
    assert not target_file(venv).exists()


def test_cpp_ext_not_listed_in_record(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    record = _dist_info(venv) / "RECORD"
    kept = [x for x in record.read_text().splitlines() if not x.startswith(TARGET + ",")]
    replace_bytes(record, ("\n".join(kept) + "\n").encode())
    before = sha256(target_file(venv))
    run = _apply(runner, venv)
    expect(
        run,
        ExitCode.LAYOUT,
        "does not list flashinfer/jit/cpp_ext.py",
        "writes only files the installer recorded",
    )
    assert sha256(target_file(venv)) == before


def test_cpp_ext_not_utf8(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    latin1 = released_text(RELEASES["0.7.4"]) + "# réglage local\n".encode("latin-1")
    _rerecord(venv, latin1)
    run = _apply(runner, venv, "--patch", CUDA)
    # RECORD lists these bytes: FlashInfer's own file, which fi-patch cannot read.
    expect(run, ExitCode.UNSUPPORTED, "is not UTF-8", "pip install --force-reinstall")
    assert target_file(venv).read_bytes() == latin1
    # Unnamed, it is left out, and the others are written.
    rest = _apply(runner, venv)
    expect(rest, ExitCode.LEFT_OUT_UNKNOWN, f"{CUDA}: left out: ", "is not UTF-8")
    assert target_file(venv).read_bytes() == latin1
    assert fp4_file(venv).read_bytes() != released_text(RELEASES["0.7.4"], FP4)


def test_crlf_line_endings_are_kept(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.7.4")
    crlf = released_text(RELEASES["0.7.4"]).replace(b"\n", b"\r\n")
    _rerecord(venv, crlf)
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)
    expect(_apply(runner, venv), ExitCode.OK, f"applied to {TARGET}: {CUDA}")
    assert target_file(venv).read_bytes() == expected("0.7.4").encode().replace(b"\n", b"\r\n")
    expect(fi_patch(runner, "revert", "--venv", venv), ExitCode.OK)
    assert target_file(venv).read_bytes() == crlf


def test_target_folder_read_only(runner: CliRunner, venv_with: MakeVenv) -> None:
    """Real: the folder is bind-mounted read-only (chmod does not stop root)."""
    venv = venv_with("0.7.4")
    with mounted(target_file(venv).parent, read_only=True):
        run = _apply(runner, venv)
        expect(
            run,
            ExitCode.WRITE,
            f"cannot write {target_file(venv)}: Read-only file system",
            "run fi-patch as the user who owns the environment",
        )
        assert sha256(target_file(venv)) == ORIGINAL_074
        assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)
    assert json.loads((venv / ".fi-patch" / "manifest.json").read_text())["files"] == []
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []


def test_disk_full_while_writing_the_temporary_file(runner: CliRunner, venv_with: MakeVenv) -> None:
    """Real: the folder is a tmpfs filled to the last byte, so the write fails with ENOSPC."""
    venv = venv_with("0.7.4")
    folder = target_file(venv).parent
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) + 1024 * 1024
    with mounted(folder, size=size):
        fill(folder)
        run = _apply(runner, venv)
        expect(
            run,
            ExitCode.WRITE,
            f"cannot write {target_file(venv)}: No space left on device",
            "free some disk space",
        )
        assert sha256(target_file(venv)) == ORIGINAL_074
        assert stale_temporaries(venv) == []
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_target_file_symlink_outside_site_packages(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    outside = tmp_path / "outside.py"
    outside.write_bytes(target_file(venv).read_bytes())
    target_file(venv).unlink()
    target_file(venv).symlink_to(outside)
    before = sha256(outside)
    run = _apply(runner, venv)
    expect(
        run,
        ExitCode.LAYOUT,
        f"{target_file(venv)} is a symlink to {outside}",
        "does not write through links",
        "reinstall FlashInfer",
    )
    assert sha256(outside) == before
    assert target_file(venv).is_symlink()


def test_venv_path_given_through_a_symlink(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    link = tmp_path / "ml-env"
    link.symlink_to(venv)
    expect(_apply(runner, link), ExitCode.OK, f"environment {link}")
    assert target_file(venv).read_bytes() == expected("0.5.0").encode()
    expect(fi_patch(runner, "revert", "--venv", link), ExitCode.OK, "restored the original bytes")
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.5.0"])


# --- fi-patch's own records ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        pytest.param("{not json", "is corrupt", id="corrupted"),
        pytest.param('{"schema": 2, "files": [{"x": 1}]}', "is corrupt", id="bad-entry"),
        pytest.param('{"schema": 1, "entries": [{"x": 1}]}', "is corrupt", id="bad-old-entry"),
    ],
)
def test_manifest_corrupted(
    runner: CliRunner, venv_with: MakeVenv, manifest: str, message: str
) -> None:
    venv = venv_with("0.5.0")
    before = sha256(target_file(venv))
    (venv / ".fi-patch").mkdir()
    (venv / ".fi-patch" / "manifest.json").write_text(manifest)
    for command in ("check", "apply", "revert"):
        run = fi_patch(runner, command, "--venv", venv)
        expect(
            run,
            ExitCode.STORE,
            f"{venv / '.fi-patch' / 'manifest.json'} {message}",
            "the original bytes are still in",
        )
    assert sha256(target_file(venv)) == before


def test_manifest_from_a_newer_schema(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    before = sha256(target_file(venv))
    (venv / ".fi-patch").mkdir()
    (venv / ".fi-patch" / "manifest.json").write_text('{"schema": 99, "files": []}')
    for command in ("check", "apply", "revert"):
        run = fi_patch(runner, command, "--venv", venv)
        expect(
            run,
            ExitCode.STORE,
            "was written by a newer fi-patch (schema 99; this fi-patch reads 2)",
            "upgrade fi-patch",
        )
    assert sha256(target_file(venv)) == before


def test_backup_missing(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    expect(_apply(runner, venv), ExitCode.OK)
    patched = sha256(target_file(venv))
    for backup in (venv / ".fi-patch" / "backups").iterdir():
        backup.unlink()
    run = fi_patch(runner, "revert", "--venv", venv)
    expect(
        run,
        ExitCode.STORE,
        "is missing",
        "pip install --force-reinstall --no-deps flashinfer-python==0.5.0",
    )
    assert sha256(target_file(venv)) == patched


def test_backup_tampered(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    expect(_apply(runner, venv), ExitCode.OK)
    patched = sha256(target_file(venv))
    # Backups are named by the original's sha256: cpp_ext.py's.
    original = hashlib.sha256(released_text(RELEASES["0.5.0"])).hexdigest()
    backup = venv / ".fi-patch" / "backups" / f"{original}.py"
    replace_bytes(backup, backup.read_bytes() + b"import os; os.system('true')\n")
    run = fi_patch(runner, "revert", "--venv", venv)
    expect(
        run,
        ExitCode.STORE,
        "does not match the manifest",
        "refusing to restore it",
        "pip install --force-reinstall",
    )
    assert sha256(target_file(venv)) == patched


def test_manifest_naming_a_path_outside_the_environment(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    expect(_apply(runner, venv), ExitCode.OK)
    patched = sha256(target_file(venv))
    manifest = venv / ".fi-patch" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"][0]["relpath"] = "../../../../etc/passwd"
    manifest.write_text(json.dumps(data))
    run = fi_patch(runner, "revert", "--venv", venv)
    expect(run, ExitCode.STORE, "the manifest names an unsafe path '../../../../etc/passwd'")
    assert sha256(target_file(venv)) == patched


def test_reinstall_between_apply_and_revert(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    expect(_apply(runner, venv), ExitCode.OK)
    reinstall(venv, RELEASES["0.5.0"])
    expect(
        fi_patch(runner, "check", "--venv", venv),
        ExitCode.NEEDS_APPLY,
        "wiped",
        "a reinstall put the original back",
    )
    run = fi_patch(runner, "revert", "--venv", venv)
    expect(
        run,
        ExitCode.OK,
        "already the original bytes (a reinstall put them back)",
        "the record is cleared",
    )
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.5.0"])
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)


def test_upgrade_between_apply_and_revert(runner: CliRunner, venv_with: MakeVenv) -> None:
    """Real: pip upgrades 0.5.0 to 0.6.18.post1 after apply. check and revert name both
    versions, and apply patches the new release."""
    venv = venv_with("0.5.0")
    expect(_apply(runner, venv), ExitCode.OK)
    pip(venv, "install", "--no-deps", "--no-index", str(fetch(RELEASES["0.6.18.post1"])))
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    expect(check, ExitCode.NEEDS_APPLY)
    cuda = patch_result(check.json)
    assert cuda["state"] == "wiped"
    assert (
        "fi-patch patched flashinfer-python 0.5.0; 0.5.0 → 0.6.18.post1 was installed"
        in (cuda["reason"])
    )
    expect(
        fi_patch(runner, "revert", "--venv", venv),
        ExitCode.OK,
        "flashinfer-python 0.5.0 was replaced by 0.6.18.post1 since fi-patch patched it",
        "the record is cleared",
    )
    expect(_apply(runner, venv), ExitCode.OK, f"applied to {TARGET}: {CUDA}")
    assert target_file(venv).read_bytes() == expected("0.6.18.post1").encode()
    assert list((venv / ".fi-patch" / "backups").iterdir()) != []
    expect(fi_patch(runner, "revert", "--venv", venv), ExitCode.OK)
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.6.18.post1"])


def test_a_bug_on_one_target_loses_no_other_result(runner: CliRunner, venv_with: MakeVenv) -> None:
    """An exception fi-patch does not expect, on the first of two targets: the second is still
    reverted, and the one JSON document says both (exit 1 for the bug)."""
    first, second = venv_with("0.5.0"), venv_with("0.5.0")
    for venv in (first, second):
        expect(_apply(runner, venv), ExitCode.OK)
    child = buggy(first, "revert", "--json", "--venv", first, "--venv", second)
    assert child.returncode == ExitCode.INTERNAL, child.stderr
    assert "Traceback" not in child.stderr
    broken, reverted = json.loads(child.stdout)["results"]
    assert broken["target"] == f"--venv {first}"
    assert broken["error"]["kind"] == "Internal"
    assert "RuntimeError: a bug fi-patch did not expect" in broken["error"]["message"]
    assert "a bug in fi-patch: please report it" in broken["error"]["remedy"]
    assert any(line.startswith("at ") for line in broken["error"]["details"])
    actions = {p["patch"]: p["action"] for p in reverted["patches"]}
    assert actions[CUDA] == "reverted" and actions["api-logging-under-compile"] != "reverted"
    assert target_file(second).read_bytes() == released_text(RELEASES["0.5.0"])
    assert target_file(first).read_bytes() == expected("0.5.0").encode()


def test_uninstall_between_apply_and_revert(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    expect(_apply(runner, venv), ExitCode.OK)
    pip(venv, "uninstall", "-y", "flashinfer-python")
    run = fi_patch(runner, "revert", "--venv", venv)
    expect(
        run,
        ExitCode.OK,
        "flashinfer-python 0.5.0 was replaced by nothing (it was uninstalled)",
        "the record is cleared",
    )
    assert not target_file(venv).exists()
    assert state_of(runner, venv) == ("not-installed", ExitCode.NOT_INSTALLED)
