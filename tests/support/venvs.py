"""Real virtual environments holding real FlashInfer releases.

Wheels are installed for real, by pip (`pip --python`, so the venv itself needs no pip). The
sdist-only releases (shape A, 0.4.x) cannot be built without torch and a CUDA-era toolchain, so
their venvs are assembled from the sdist's own `flashinfer/` files and its real PKG-INFO as
METADATA, with a RECORD computed the way pip writes one. A wheel built from such an sdist has a
byte-identical cpp_ext.py (compared for 0.2.14.post1, 0.3.1 and 0.4.1), so the hashes are the
same.

Each release is installed once into a template in the test cache (tests/support/templates.py); a
test gets a clone whose files are hardlinks to the template's, the way uv links site-packages to
its cache. fi-patch must never write through such a link, and the tests would see it: every
template file is checked against its release's hash.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import venv as venv_module
from pathlib import Path

from fi_patcher.registry import load_patches
from tests.support.releases import FP4, TARGET, Release, fetch, released_files


def create_venv(path: Path) -> Path:
    """A venv without pip, as `uv venv` makes them."""
    venv_module.EnvBuilder(with_pip=False, symlinks=True).create(path)
    return path


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3*/site-packages"))
    assert len(found) == 1, found
    return found[0]


def install(venv: Path, release: Release) -> None:
    if release.kind == "wheel":
        pip(venv, "install", "--no-deps", "--no-index", str(fetch(release)))
    else:
        install_from_sdist(venv, release)


def pip(venv: Path, *arguments: str) -> None:
    """Run the test interpreter's pip against `venv`'s interpreter."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python_of(venv)), "-q", *arguments],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )


def install_into(folder: Path, release: Release) -> Path:
    """`pip install --target folder`: a copy of FlashInfer no environment's installer recorded,
    imported where a path names the folder (PYTHONPATH)."""
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run(
        [*command, "--target", str(folder), str(fetch(release))],
        check=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    return folder


def reinstall(venv: Path, release: Release) -> None:
    """What `pip install -U` or an image rebuild does to a patched file: a real reinstall."""
    pip(venv, "install", "--force-reinstall", "--no-deps", "--no-index", str(fetch(release)))


def install_from_sdist(venv: Path, release: Release) -> None:
    site = site_packages(venv)
    files = released_files(release)
    rows = []
    for name, data in sorted(files.items()):
        if name == "PKG-INFO":
            continue
        destination = site / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(data)
        rows.append(record_row(name, data))
    info_name = f"flashinfer_python-{release.version}.dist-info"
    info = site / info_name
    info.mkdir()
    metadata = {"METADATA": files["PKG-INFO"], "INSTALLER": b"fi-patch-tests\n"}
    for name, data in metadata.items():
        (info / name).write_bytes(data)
        rows.append(record_row(f"{info_name}/{name}", data))
    rows.append((f"{info_name}/RECORD", "", ""))
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    (info / "RECORD").write_text(buffer.getvalue())


def record_row(name: str, data: bytes) -> tuple[str, str, str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return name, f"sha256={digest}", str(len(data))


def clone(template: Path, destination: Path) -> Path:
    """A copy of `template` whose files are hardlinks to the template's."""
    shutil.copytree(template, destination, symlinks=True, copy_function=os.link)
    return destination


def replace_bytes(path: Path, data: bytes) -> None:
    """Change a file the safe way (a new inode), so that a test never edits a template."""
    temporary = path.with_name(path.name + ".test-tmp")
    temporary.write_bytes(data)
    if path.exists():
        os.chmod(temporary, path.stat().st_mode & 0o7777)
    temporary.replace(path)


def record_sha256(venv: Path, relpath: str = TARGET) -> str:
    """The hex sha256 that the installed distribution's RECORD lists for `relpath`."""
    (info,) = site_packages(venv).glob("flashinfer_python-*.dist-info")
    for line in (info / "RECORD").read_text().splitlines():
        path, digest, _ = line.rsplit(",", 2)
        if path == relpath:
            value = digest.removeprefix("sha256=")
            return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    raise AssertionError(f"RECORD does not list {relpath}")


def rerecord(venv: Path, relpath: str, data: bytes) -> None:
    """Install `data` as `relpath` the way an installer would: the file and RECORD agree."""
    replace_bytes(site_packages(venv) / relpath, data)
    (info,) = site_packages(venv).glob("flashinfer_python-*.dist-info")
    row = ",".join(record_row(relpath, data))
    lines = [
        row if line.startswith(relpath + ",") else line
        for line in (info / "RECORD").read_text().splitlines()
    ]
    replace_bytes(info / "RECORD", ("\n".join(lines) + "\n").encode())


def target_file(venv: Path) -> Path:
    return site_packages(venv) / TARGET


def written_files(venv: Path) -> list[Path]:
    """Every file a patch of the registry may write in any release, that exists in `venv`."""
    relpaths = dict.fromkeys(t for p in load_patches() for t in p.targets)
    paths = (site_packages(venv) / r for r in relpaths)
    return [p for p in paths if p.exists()]


def fp4_file(venv: Path) -> Path:
    return site_packages(venv) / FP4
