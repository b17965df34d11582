from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.deps import CUDA_TORCH, shared, use
from tests.support.releases import RELEASES, released_text
from tests.support.venvs import (
    clone,
    create_venv,
    install,
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
    """The session's venv holding one release, built on first use. Never modify it."""

    _fingerprints: dict[str, dict[str, str]] = {}

    def get(version: str) -> Path:
        if version not in _templates:
            release = RELEASES[version]
            path = create_venv(tmp_path_factory.mktemp(f"template-{version}") / "venv")
            install(path, release)
            use(path, shared(CUDA_TORCH))
            _templates[version] = path
            _fingerprints[version] = _fingerprint(path)
        path = _templates[version]
        # A test that wrote through a hardlink would have changed every clone: catch it here.
        site = site_packages(path)
        for file in written_files(path):
            original = released_text(RELEASES[version], file.relative_to(site).as_posix())
            assert hashlib.sha256(file.read_bytes()).digest() == hashlib.sha256(original).digest()
        assert _fingerprint(path) == _fingerprints[version]
        return path

    return get


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
