"""What apply and revert do to files: links, bytecode, modes, reinstalls, drift, forcing."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode, WriteFailed
from fi_patcher.store import Store
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, patch_result, state_of, states_of
from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.expected import expected
from tests.support.releases import CUDA, FP4, RELEASES, TARGET, fetch, released_text
from tests.support.venvs import (
    fp4_file,
    python_of,
    reinstall,
    replace_bytes,
    rerecord,
    site_packages,
    target_file,
    written_files,
)

WHICH_CODE = """
import importlib.machinery, sys
path = sys.argv[1]
name = "flashinfer.jit.cpp_ext"
code = importlib.machinery.SourceFileLoader(name, path).get_code(name)
fresh = compile(open(path, "rb").read(), path, "exec", dont_inherit=True)
print("current" if code == fresh else "stale")
"""


def code_seen(venv: Path) -> str:
    """What a fresh interpreter in the venv runs for cpp_ext.py: its source or stale bytecode."""
    completed = subprocess.run(
        [python_of(venv), "-c", WHICH_CODE, target_file(venv)],
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.strip()


def compile_unchecked(venv: Path) -> None:
    subprocess.run(
        [
            python_of(venv),
            "-m",
            "compileall",
            "-q",
            "-f",
            "--invalidation-mode",
            "unchecked-hash",
            target_file(venv),
        ],
        check=True,
    )


NOBODY = 65534
CHECKED_HASH = 0b11
"""The flags of a hash-based .pyc that the interpreter checks against its source (PEP 552)."""


def pyc_flags(cached: Path) -> int:
    return int.from_bytes(cached.read_bytes()[4:8], "little")


def loaded_bytecode(venv: Path) -> str:
    """What `import flashinfer` (and flashinfer.concat_ops, which it does not import) says under
    -v, in an environment that writes no bytecode (as Dockerfiles often set it): the .pyc files it
    ran, and those it found stale."""
    completed = subprocess.run(
        [python_of(venv), "-v", "-c", "import flashinfer, flashinfer.concat_ops"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return completed.stderr


def test_the_bytecode_pip_left_is_written_for_each_new_text_and_back_on_revert(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """Where no interpreter may write bytecode, deleting what pip compiled would make every
    start compile the patched files again (gemm_base.py alone is 0.5 MB): fi-patch writes the
    new text's bytecode instead, and on revert the original's."""
    venv = venv_with("0.7.4")
    files = written_files(venv)
    cached = {
        f: f.parent / "__pycache__" / f"{f.stem}.{sys.implementation.cache_tag}.pyc" for f in files
    }
    assert all(pyc.exists() for pyc in cached.values())
    originals = {f: f.read_bytes() for f in files}
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    changed = [f for f in files if f.read_bytes() != originals[f]]
    assert len(changed) == 13
    seen = loaded_bytecode(venv)
    for source in changed:
        assert pyc_flags(cached[source]) == CHECKED_HASH
        assert f"# code object from '{cached[source]}'" in seen, source
    assert "stale" not in seen and "bad magic" not in seen

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    seen = loaded_bytecode(venv)
    for source in changed:
        assert source.read_bytes() == originals[source]
        assert f"# code object from '{cached[source]}'" in seen, source
    assert "stale" not in seen and "bad magic" not in seen


def test_a_file_without_bytecode_gets_none(runner: CliRunner, venv_with: MakeVenv) -> None:
    """As `pip install --no-compile` or uv left it: fi-patch adds no bytecode of its own."""
    venv = venv_with("0.7.4")
    path = target_file(venv)
    for cached in (path.parent / "__pycache__").glob("cpp_ext.*.pyc"):
        cached.unlink()
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert list((path.parent / "__pycache__").glob("cpp_ext.*.pyc")) == []
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert list((path.parent / "__pycache__").glob("cpp_ext.*.pyc")) == []


def test_new_bytecode_keeps_the_owner_and_mode_of_the_old(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """root applying to another user's environment: the .pyc it writes is still that user's."""
    venv = venv_with("0.7.4")
    path = target_file(venv)
    (cached,) = (path.parent / "__pycache__").glob("cpp_ext.*.pyc")
    replace_bytes(cached, cached.read_bytes())  # a file of this test's own before chown
    os.chown(cached, NOBODY, NOBODY)
    cached.chmod(0o640)
    for command in ("apply", "revert"):
        assert fi_patch(runner, command, "--venv", venv, "--no-verify").code == ExitCode.OK
        found = cached.stat()
        assert (found.st_uid, found.st_gid, found.st_mode & 0o7777) == (NOBODY, NOBODY, 0o640)
        assert pyc_flags(cached) == CHECKED_HASH


def test_a_temporary_bytecode_file_a_killed_run_left_is_cleared(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """What a kill while the .pyc was being written leaves (atomic_write's temporary name):
    the next command clears it, as it clears those beside the source."""
    venv = venv_with("0.7.4")
    folder = target_file(venv).parent / "__pycache__"
    left = folder / f".cpp_ext.{sys.implementation.cache_tag}.pyc.k1ll3d.fi-patch-tmp"
    left.write_bytes(b"half a pyc")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert not left.exists()


def test_hardlinked_twin_keeps_the_original_bytes(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.7.4")
    path = target_file(venv)
    twin = tmp_path / "twin.py"
    os.link(path, twin)
    original = twin.read_bytes()
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert twin.read_bytes() == original
    assert path.stat().st_ino != twin.stat().st_ino
    assert path.read_bytes() == expected("0.7.4").encode()
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert twin.read_bytes() == original == path.read_bytes()


def test_unchecked_hash_bytecode_does_not_hide_the_patch(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    path = target_file(venv)
    original = path.read_bytes()
    compile_unchecked(venv)
    assert code_seen(venv) == "current"
    # The hazard, shown without fi-patch: a changed source behind an unchecked-hash pyc is ignored.
    replace_bytes(path, expected("0.5.0").encode())
    assert code_seen(venv) == "stale"
    replace_bytes(path, original)
    compile_unchecked(venv)

    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert code_seen(venv) == "current"
    (cached,) = (path.parent / "__pycache__").glob("cpp_ext.*.pyc")
    assert pyc_flags(cached) == CHECKED_HASH  # valid for the new text alone
    compile_unchecked(venv)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert code_seen(venv) == "current"


def test_file_mode_is_kept(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.5.0")
    path = target_file(venv)
    replace_bytes(path, path.read_bytes())  # a file of this test's own before chmod
    path.chmod(0o640)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert path.stat().st_mode & 0o7777 == 0o640
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert path.stat().st_mode & 0o7777 == 0o640


def test_reinstall_wipes_the_patch_and_apply_restores_it(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.6.18.post1")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    reinstall(venv, RELEASES["0.6.18.post1"])
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.6.18.post1"])
    assert state_of(runner, venv) == ("wiped", ExitCode.NEEDS_APPLY)

    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.6.18.post1"])


def test_edit_elsewhere_in_the_file_is_drift_against_record(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    replace_bytes(target_file(venv), target_file(venv).read_bytes() + b"# local edit\n")
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.DRIFTED
    assert (
        "get_cuda_version is the original, but the file differs from RECORD"
        in (patch_result(check.json)["reason"])
    )


def test_revert_refuses_a_file_changed_after_apply_unless_forced(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.5.0")
    path = target_file(venv)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    changed = path.read_bytes() + b"# changed by hand\n"
    replace_bytes(path, changed)
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.DRIFTED
    # check and revert say the same, and it is true: the backup can restore the original.
    reason = patch_result(check.json)["reason"]
    assert f"{path} changed since fi-patch wrote it" in reason
    assert "`fi-patch revert --force` puts FlashInfer's original back" in reason
    assert "no record" not in reason

    refused = fi_patch(runner, "revert", "--venv", venv)
    assert refused.code == ExitCode.DRIFTED
    assert f"{path} changed since fi-patch wrote it" in refused.text
    assert "`fi-patch revert --force` restores the original bytes" in refused.text
    assert path.read_bytes() == changed

    forced = fi_patch(runner, "revert", "--venv", venv, "--force")
    assert forced.code == ExitCode.OK
    assert path.read_bytes() == released_text(RELEASES["0.5.0"])


def test_patched_file_whose_record_is_gone_is_adopted(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """fi-patch's folder deleted: its text over RECORD's original is still recognised (as a fix
    made by hand, or by a fi-patch whose record is gone), and apply records it again with a
    backup that revert can use."""
    venv = venv_with("0.5.0")
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    shutil.rmtree(venv / ".fi-patch")
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.NEEDS_APPLY
    assert patch_result(check.json)["state"] == "hand-patched"
    assert "or by a fi-patch whose record is gone" in patch_result(check.json)["reason"]
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert target_file(venv).read_bytes() == released_text(RELEASES["0.5.0"])


def test_uv_venv_without_pip_and_uv_cache_links(runner: CliRunner, tmp_path: Path) -> None:
    """A venv made by uv, FlashInfer installed by uv, whose files are hardlinks into uv's cache."""
    uv = Path(sys.executable).parent / "uv"
    cache = tmp_path / "uv-cache"
    environ = {
        **os.environ,
        "UV_CACHE_DIR": str(cache),
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_LINK_MODE": "hardlink",
        "UV_OFFLINE": "1",
    }
    venv = tmp_path / "uv-venv"
    base = os.path.realpath(sys.executable)
    subprocess.run([uv, "venv", "-q", "--python", base, venv], check=True, env=environ)
    assert not (venv / "bin" / "pip").exists()
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "-q",
            "--python",
            python_of(venv),
            "--no-deps",
            fetch(RELEASES["0.5.0"]),
        ],
        check=True,
        env=environ,
    )
    use(venv, shared(CUDA_TORCH))
    path = target_file(venv)
    cached = [p for p in cache.rglob("cpp_ext.py") if p.stat().st_ino == path.stat().st_ino]
    assert cached, "uv did not hardlink the file from its cache"
    original = path.read_bytes()

    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert cached[0].read_bytes() == original
    assert state_of(runner, venv) == ("patched", ExitCode.OK)
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert path.read_bytes() == original
    assert hashlib.sha256(original).hexdigest()[:12] == RELEASES["0.5.0"].sha256_prefixes[TARGET]
    assert site_packages(venv) == path.parents[2]


HAND_FIX = "    if torch.version.cuda is not None:\n        return Version(torch.version.cuda)\n"


def test_a_fix_made_by_hand_over_a_text_fi_patch_does_not_know_is_drifted(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    """A build whose get_cuda_version carries a comment of its own (RECORD lists it), with the
    usual fix added by hand since: taken out, the file is RECORD's bytes, but its original is a
    text fi-patch does not know, so there is nothing it could adopt. Drifted; apply changes
    nothing, even forced."""
    venv = venv_with("0.7.4")
    path = target_file(venv)
    header = b"def get_cuda_version() -> Version:\n"
    commented = path.read_bytes().replace(header, header + b"    # a build's own comment\n", 1)
    rerecord(venv, TARGET, commented)
    assert state_of(runner, venv, only=[CUDA]) == ("unknown", ExitCode.UNSUPPORTED)
    by_hand = commented.replace(header, header + HAND_FIX.encode(), 1)
    replace_bytes(path, by_hand)
    assert state_of(runner, venv) == ("drifted", ExitCode.DRIFTED)
    run = fi_patch(runner, "apply", "--venv", venv, "--force")
    assert run.code == ExitCode.DRIFTED, run.text
    assert path.read_bytes() == by_hand


@pytest.mark.parametrize(
    "above",
    [
        pytest.param("", id="without-marker"),
        pytest.param(
            "    # fi-patch: cuda-version-torch-first (fi-patch 0.1.0)\n", id="old-marker"
        ),
    ],
)
def test_the_usual_fix_made_by_hand_is_adopted(
    runner: CliRunner, venv_with: MakeVenv, above: str
) -> None:
    """Someone added the two lines at the top of get_cuda_version, as the issue threads say:
    check calls it hand-patched, apply keeps the rebuilt original as the backup and writes its
    own text, revert gives RECORD's bytes."""
    venv = venv_with("0.7.4")
    path = target_file(venv)
    original = path.read_bytes()
    by_hand = original.replace(
        b"def get_cuda_version() -> Version:\n",
        b"def get_cuda_version() -> Version:\n" + (above + HAND_FIX).encode(),
        1,
    )
    replace_bytes(path, by_hand)
    check = fi_patch(runner, "check", "--venv", venv, "--json")
    assert check.code == ExitCode.NEEDS_APPLY
    assert patch_result(check.json)["state"] == "hand-patched"
    assert "taken out, the file is FlashInfer's original" in patch_result(check.json)["reason"]

    applied = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert applied.code == ExitCode.OK
    # Said as what it is: the fix was there already, and apply adopted it.
    assert "adopted cuda-version-torch-first in flashinfer/jit/cpp_ext.py" in applied.text
    assert "applied to flashinfer/jit/cpp_ext.py" not in applied.text
    assert path.read_bytes() == expected("0.7.4").encode()
    backups = {p.read_bytes() for p in (venv / ".fi-patch" / "backups").iterdir()}
    assert original in backups and by_hand not in backups
    assert state_of(runner, venv) == ("patched", ExitCode.OK)

    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert path.read_bytes() == original
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []


def test_the_forwarding_fix_made_by_hand_is_adopted(runner: CliRunner, venv_with: MakeVenv) -> None:
    """The op's call made by keyword by hand, as upstream did in 0.7.1: adopted the same way."""
    venv = venv_with("0.7.0")
    path = fp4_file(venv)
    original = path.read_bytes()
    op = original.split(b"def _fp4_quantize_custom_op(", 1)[1].split(b"\n\n\n", 1)[0]
    fixed = op
    for name in (b"is_sf_swizzled_layout", b"is_sf_8x4_layout", b"enable_pdl"):
        fixed = fixed.replace(b"        %s,\n" % name, b"        %s=%s,\n" % (name, name))
    assert fixed.count(b"=is_sf_") == 2
    replace_bytes(path, original.replace(op, fixed, 1))
    states, code = states_of(runner, venv)
    assert states["fp4-op-keyword-forwarding"] == "hand-patched" and code == ExitCode.NEEDS_APPLY
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    assert path.read_bytes() == expected("0.7.0", FP4).encode()
    assert fi_patch(runner, "revert", "--venv", venv).code == ExitCode.OK
    assert path.read_bytes() == original


def test_the_fix_by_hand_with_another_edit_stays_drifted(
    runner: CliRunner, venv_with: MakeVenv
) -> None:
    venv = venv_with("0.7.4")
    path = target_file(venv)
    by_hand = path.read_bytes().replace(
        b"def get_cuda_version() -> Version:\n",
        b"def get_cuda_version() -> Version:\n" + HAND_FIX.encode(),
        1,
    )
    replace_bytes(path, by_hand + b"# and a local note\n")
    assert state_of(runner, venv) == ("drifted", ExitCode.DRIFTED)
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.DRIFTED


def test_a_lock_held_too_long_names_its_holder(tmp_path: Path) -> None:
    """A real flock on a real store, held through another open file: the waiter names it."""
    store = Store(tmp_path)
    with store.lock("apply"):
        assert store.holder() is None, "a process does not wait for itself"
        other = Store(tmp_path)
        with pytest.raises(WriteFailed) as raised, other.lock("revert", timeout=0.3):
            pass
    message = raised.value.message
    assert f"fi-patch apply (pid {os.getpid()}, since " in message
    assert "has held" in message and "for more than 0.3 s" in message
    assert Store(tmp_path).holder() is None
