"""Real FlashInfer releases, downloaded from the package registry at test time and cached.

Nothing of FlashInfer is committed: the files come from PyPI's simple index (PEP 691 JSON), are
checked against the sha256 the index publishes, and are kept in $FI_PATCH_TEST_CACHE (default
~/.cache/fi-patch-tests) so that later runs need no network.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import urllib.request
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from packaging.version import Version

INDEX = "https://pypi.org/simple/flashinfer-python/"
CACHE = Path(os.environ.get("FI_PATCH_TEST_CACHE", Path.home() / ".cache" / "fi-patch-tests"))
TARGET = "flashinfer/jit/cpp_ext.py"
FP4 = "flashinfer/quantization/fp4_quantization.py"
FP4_OLD = "flashinfer/fp4_quantization.py"
"""Where fp4_quantize lived up to 0.6.6; from 0.6.7 it re-exports it from FP4."""

CUDA = "cuda-version-torch-first"
FORWARDING = "fp4-op-keyword-forwarding"
UNDER_COMPILE = "fp4-quantize-under-compile"
OP_BOUNDARY = "fp4-quantize-op-boundary"


@dataclass(frozen=True)
class Release:
    version: str
    kind: str
    """wheel | sdist: shape-A and 0.4.x releases were published as sdists only."""
    shape: str | None
    """The shape of get_cuda_version the registry patches (A, B), None where it does not."""
    def_line: int | None = None
    """Line of `def get_cuda_version` in the released cpp_ext.py."""
    file_sha256_prefix: str | None = None
    """sha256[:12] of the released cpp_ext.py, from ../shared/research/flashinfer.md."""
    forwarding: str | None = None
    """The shape of the op's `_fp4_quantize_custom_op` the registry patches, if any."""
    under_compile: str | None = None
    """The shape of the public `fp4_quantize` the registry patches, if any."""
    fp4_sha256_prefix: str | None = None
    """sha256[:12] of the released file that defines fp4_quantize (`fp4_file`)."""
    op_boundary: str | None = None
    """The shape of the public `fp4_quantize` the op-boundary patch keys, if any."""

    @property
    def fp4_file(self) -> str:
        """The file that defines fp4_quantize in this release."""
        return FP4 if Version(self.version) >= Version("0.6.7") else FP4_OLD

    @property
    def filename(self) -> str:
        stem = f"flashinfer_python-{self.version}"
        return f"{stem}-py3-none-any.whl" if self.kind == "wheel" else f"{stem}.tar.gz"

    @property
    def shapes(self) -> dict[str, str]:
        """The shape of each patch the registry applies to this release, by patch id."""
        found = {
            CUDA: self.shape,
            FORWARDING: self.forwarding,
            OP_BOUNDARY: self.op_boundary,
            UNDER_COMPILE: self.under_compile,
        }
        return {patch: shape for patch, shape in found.items() if shape is not None}


RELEASES = {
    r.version: r
    for r in (
        # The last release without fp4_quantize: nothing applies.
        Release("0.2.8", "sdist", None, None, "4ed16c8d490e"),
        # The first release with fp4_quantize: no get_cuda_version yet, six parameters.
        Release(
            "0.2.9",
            "sdist",
            None,
            None,
            "4ed16c8d490e",
            fp4_sha256_prefix="d225c4eb0d28",
            op_boundary="0.2.9",
        ),
        Release(
            "0.2.11.post2",
            "sdist",
            None,
            None,
            "1bddf1772c7f",
            fp4_sha256_prefix="a4759ae51f2a",
            op_boundary="0.2.11.post2",
        ),
        Release(
            "0.2.13",
            "sdist",
            None,
            None,
            "c6285f2c446b",
            fp4_sha256_prefix="1208ac730283",
            op_boundary="0.2.13",
        ),
        Release(
            "0.2.14",
            "sdist",
            None,
            None,
            "34153e8a87df",
            fp4_sha256_prefix="1208ac730283",
            op_boundary="0.2.13",
        ),
        Release(
            "0.2.14.post1",
            "sdist",
            "A",
            26,
            "161ddb1906db",
            fp4_sha256_prefix="2f6fe19f0bef",
            op_boundary="0.2.14.post1",
        ),
        Release(
            "0.3.1.post1",
            "sdist",
            "A",
            38,
            "7d2448f60f32",
            fp4_sha256_prefix="0d3be1c9eee3",
            op_boundary="0.3.1",
        ),
        Release(
            "0.4.0",
            "sdist",
            "B",
            59,
            "81a4bc7476d9",
            fp4_sha256_prefix="a9406ca8c2e5",
            op_boundary="0.3.1",
        ),
        Release(
            "0.5.0",
            "wheel",
            "B",
            64,
            "78e065fa92fb",
            fp4_sha256_prefix="608dd225ea49",
            op_boundary="0.3.1",
        ),
        Release(
            "0.6.0",
            "wheel",
            "B",
            64,
            "23df0b85062e",
            fp4_sha256_prefix="02d33fd66802",
            op_boundary="0.6.0",
        ),
        # fp4_quantize moves to flashinfer/quantization/; the old module re-exports it.
        Release(
            "0.6.7",
            "wheel",
            "B",
            68,
            "8f0d51dd2f88",
            fp4_sha256_prefix="bd2989cdd58c",
            op_boundary="0.6.7",
        ),
        Release(
            "0.6.8",
            "wheel",
            "B",
            68,
            "8f0d51dd2f88",
            fp4_sha256_prefix="e260094421a4",
            op_boundary="0.6.8",
        ),
        Release(
            "0.6.10",
            "wheel",
            "B",
            68,
            "f53c0575d877",
            fp4_sha256_prefix="5cfc5b5ecfc1",
            op_boundary="0.6.10",
        ),
        # The last release without FlashInfer's own op.
        Release(
            "0.6.11.post3",
            "wheel",
            "B",
            68,
            "9d20f28baed9",
            fp4_sha256_prefix="dbd14a9718b0",
            op_boundary="0.6.11",
        ),
        # The first release with the op: both fp4 patches, each in its first shape.
        Release("0.6.12", "wheel", "B", 68, "9d20f28baed9", "positional", "0.6.12", "1a7e1c556fa8"),
        Release(
            "0.6.18.post1", "wheel", "B", 68, "c2ebe90fa1dd", "positional", "0.6.13", "a003e182bf96"
        ),
        # The last release whose op forwards positionally.
        Release("0.7.0", "wheel", "B", 68, "dd806d68794d", "positional", "0.6.13", "02770b24a2c5"),
        # Upstream forwards by keyword from here: the forwarding patch does not apply.
        Release("0.7.1", "wheel", "B", 68, "6cc6c732ac5b", None, "0.7.1", "c3fa702c5637"),
        Release("0.7.4", "wheel", "B", 68, "6cc6c732ac5b", None, "0.7.4", "d39602926b0b"),
        # A real pre-release: outside every range, yet its function is shape B.
        Release("0.6.0rc1", "wheel", None, 64, None),
    )
}


@cache
def _listing() -> dict[str, Any]:
    """The index's page for flashinfer-python (PEP 691 JSON); the last one read is kept in the
    cache, for a run without network."""
    saved = CACHE / "index.json"
    request = urllib.request.Request(
        INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            data = response.read()
    except OSError:
        return dict(json.loads(saved.read_bytes()))
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.with_suffix(".part").write_bytes(data)
    saved.with_suffix(".part").replace(saved)
    return dict(json.loads(data))


def _index() -> dict[str, dict[str, object]]:
    return {f["filename"]: f for f in _listing()["files"]}


def final_versions() -> list[str]:
    """Every final (not pre-) release of flashinfer-python on the index, lowest first."""
    versions = {Version(v) for v in _listing()["versions"]}
    return [str(v) for v in sorted(versions) if not v.is_prerelease]


def fetch(release: Release) -> Path:
    """The release's file, from the cache or the registry, verified by its sha256."""
    folder = CACHE / "dists"
    path = folder / release.filename
    digest_path = path.with_name(path.name + ".sha256")
    if (
        path.exists()
        and digest_path.exists()
        and _sha256(path.read_bytes()) == digest_path.read_text().strip()
    ):
        return path
    entry = _index()[release.filename]
    expected = entry["hashes"]["sha256"]  # type: ignore[index]
    with urllib.request.urlopen(str(entry["url"]), timeout=300) as response:
        data = response.read()
    if _sha256(data) != expected:
        raise RuntimeError(f"{release.filename}: sha256 differs from the index's")
    folder.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".part")
    temporary.write_bytes(data)
    temporary.replace(path)
    digest_path.write_text(expected + "\n")
    return path


def released_text(release: Release, relpath: str = TARGET) -> bytes:
    """The exact bytes of one file (cpp_ext.py by default) in the released archive."""
    return released_files(release)[relpath]


@cache
def released_files(release: Release) -> dict[str, bytes]:
    """Every regular file of the `flashinfer/` package in the release, by its path."""
    archive = fetch(release)
    files: dict[str, bytes] = {}
    if release.kind == "wheel":
        with zipfile.ZipFile(archive) as wheel:
            for name in wheel.namelist():
                if name.startswith("flashinfer/") and not name.endswith("/"):
                    files[name] = wheel.read(name)
        return files
    with tarfile.open(archive) as sdist:
        root = f"flashinfer_python-{release.version}/"
        for member in sdist.getmembers():
            if member.isfile() and member.name.startswith(root + "flashinfer/"):
                handle = sdist.extractfile(member)
                assert handle is not None
                files[member.name.removeprefix(root)] = handle.read()
            elif member.isfile() and member.name == root + "PKG-INFO":
                handle = sdist.extractfile(member)
                assert handle is not None
                files["PKG-INFO"] = handle.read()
    return files


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
