"""The whole life of a patch on real venvs holding real FlashInfer releases.

For each release: check, dry run, apply (exact bytes), apply again (no-op), check, revert (exact
original bytes, equal to RECORD's hash), check. 0.2.14.post1, 0.3.1.post1 and 0.4.0 are sdist-only
releases: their venvs are assembled from the sdist's files and real PKG-INFO (see
tests/support/venvs.py); the others are real wheel installs by pip.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fi_patcher.errors import ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch, state_of
from tests.support.releases import RELEASES, TARGET, released_text
from tests.support.venvs import site_packages, target_file
from tests.test_codemod import expected

PATCHABLE = [v for v, r in RELEASES.items() if r.shape]


def record_sha256(venv: Path) -> str:
    (info,) = site_packages(venv).glob("flashinfer_python-*.dist-info")
    for line in (info / "RECORD").read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if path == TARGET:
            value = digest.removeprefix("sha256=")
            return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    raise AssertionError("RECORD does not list cpp_ext.py")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("version", PATCHABLE)
def test_apply_check_revert_round_trip(
    runner: CliRunner, venv_with: MakeVenv, version: str
) -> None:
    venv = venv_with(version)
    path = target_file(venv)
    original = released_text(RELEASES[version])
    assert path.read_bytes() == original
    assert record_sha256(venv) == sha256(path)
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)

    dry = fi_patch(runner, "apply", "--venv", venv, "--dry-run", "--json")
    assert dry.code == ExitCode.OK
    (planned,) = dry.json["results"]
    assert planned["action"] == "would-apply"
    assert planned["shape"] == RELEASES[version].shape
    assert path.read_bytes() == original
    assert not (venv / ".fi-patch").exists()

    applied = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert applied.code == ExitCode.OK, applied.stderr
    assert "applied cuda-version-torch-first" in applied.text
    assert path.read_bytes() == expected(version).encode("utf-8")
    assert planned["diff"] in applied.stdout.replace("\r", "")
    assert state_of(runner, venv) == ("patched", ExitCode.OK)

    again = fi_patch(runner, "apply", "--venv", venv, "--no-verify", "--json")
    assert again.code == ExitCode.OK
    assert again.json["results"][0]["action"] == "already-applied"
    assert path.read_bytes() == expected(version).encode("utf-8")

    reverted = fi_patch(runner, "revert", "--venv", venv)
    assert reverted.code == ExitCode.OK, reverted.stderr
    assert "restored the original bytes" in reverted.text
    assert path.read_bytes() == original
    assert sha256(path) == record_sha256(venv)
    assert state_of(runner, venv) == ("pristine", ExitCode.NEEDS_APPLY)
    assert list((venv / ".fi-patch" / "backups").iterdir()) == []

    nothing = fi_patch(runner, "revert", "--venv", venv)
    assert nothing.code == ExitCode.OK
    assert "nothing to revert" in nothing.text


@pytest.mark.parametrize("version", ["0.2.13", "0.2.14"])
def test_not_applicable_release(runner: CliRunner, venv_with: MakeVenv, version: str) -> None:
    venv = venv_with(version)
    before = target_file(venv).read_bytes()
    assert state_of(runner, venv) == ("not-applicable", ExitCode.OK)
    run = fi_patch(runner, "apply", "--venv", venv, "--no-verify")
    assert run.code == ExitCode.OK
    assert "not applicable: nothing to patch" in run.text
    assert target_file(venv).read_bytes() == before
    assert not (venv / ".fi-patch").exists()


def test_backup_and_manifest(runner: CliRunner, venv_with: MakeVenv) -> None:
    venv = venv_with("0.6.18.post1")
    original = target_file(venv).read_bytes()
    assert fi_patch(runner, "apply", "--venv", venv, "--no-verify").code == ExitCode.OK
    store = venv / ".fi-patch"
    assert store.stat().st_mode & 0o777 == 0o700
    (backup,) = (store / "backups").iterdir()
    assert backup.read_bytes() == original
    assert backup.name == hashlib.sha256(original).hexdigest() + ".py"
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["schema"] == 1
    (entry,) = manifest["entries"]
    assert entry["version"] == "0.6.18.post1"
    assert entry["relpath"] == TARGET
    assert entry["sha256_before"] == hashlib.sha256(original).hexdigest()
    assert entry["sha256_after"] == sha256(target_file(venv))
    assert entry["record_sha256"] == entry["sha256_before"]
    assert entry["shape"] == "B"
