from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.releases import RELEASES, Release, released_text
from tests.support.releases import release as release_of
from tests.support.templates import cached_venv, linkable
from tests.support.venvs import (
    clone,
    create_venv,
    install_into,
    site_packages,
    target_file,
    written_files,
)

MakeVenv = Callable[[str], Path]

pytest_plugins = ("tests.support.cleanup",)


@pytest.fixture(scope="session")
def _templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {}


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory, _templates: dict[str, Path]) -> MakeVenv:
    """The venv holding one release, from the test cache (tests/support/templates.py). Never
    modify it."""

    _fingerprints: dict[str, dict[str, str]] = {}

    def get(version: str) -> Path:
        # RELEASES describes most; any other release on the index is its wheel or sdist.
        release = release_of(version)
        if version not in _templates:
            # One an earlier run changed (that run failed for it) is built again.
            path = cached_venv(release, lambda venv: _pristine(venv, release))
            if not linkable(path, tmp_path_factory.getbasetemp()):
                copy = tmp_path_factory.mktemp(f"template-{version}") / "venv"
                path = Path(shutil.copytree(path, copy, symlinks=True))
            _templates[version] = path
            _fingerprints[version] = _fingerprint(path)
        path = _templates[version]
        # A test that wrote through a hardlink would have changed every clone: catch it here.
        assert _pristine(path, release), path
        assert _fingerprint(path) == _fingerprints[version]
        return path

    return get


def _pristine(venv: Path, release: Release) -> bool:
    """Every file a patch may write holds the release's bytes."""
    site = site_packages(venv)
    return all(
        file.read_bytes() == released_text(release, file.relative_to(site).as_posix())
        for file in written_files(venv)
    )


def _fingerprint(venv: Path) -> dict[str, str]:
    """Hashes of the files a test might be tempted to edit: metadata and the targets."""
    site = target_file(venv).parents[2]
    paths = [*written_files(venv), *sorted(site.glob("flashinfer_python-*.dist-info/*"))]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.is_file()}


@pytest.fixture
def venv_with(template: MakeVenv, tmp_path: Path) -> MakeVenv:
    """A venv of this test's own holding `version`, hardlinked to the session's template."""

    def make(version: str) -> Path:
        taken = len(list(tmp_path.glob(f"venv-{version}*")))
        name = f"venv-{version}" if not taken else f"venv-{version}-{taken + 1}"
        return clone(template(version), tmp_path / name)

    return make


@pytest.fixture
def empty_venv(tmp_path: Path) -> Path:
    return create_venv(tmp_path / "empty")


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"VIRTUAL_ENV": None, "CONDA_PREFIX": None, "NO_COLOR": "1"})


@pytest.fixture(scope="session")
def pythonpath_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FlashInfer 0.5.0 installed with `pip install --target` into a folder of its own, as a
    PYTHONPATH entry names it: a copy no environment's installer recorded. Never modify it."""
    return install_into(tmp_path_factory.mktemp("pythonpath") / "copy", RELEASES["0.5.0"])
