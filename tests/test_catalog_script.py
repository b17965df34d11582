"""scripts/catalog.py on a copy of the catalog, with real releases from the index.

A final release whose functions did not change is one command: on a copy whose shape B of
get_cuda_version stops at 0.7.2.post1, `add 0.7.4` extends the range in the TOML, in
docs/patches.md and in README.md to what this checkout says, and appends a case per patch. A
release with a text fi-patch does not know (0.2.9rc1's fp4_quantize) writes nothing and says
which function, its hashes and the shape of the same structure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.releases import CUDA

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "catalog.py"
PAGES = ("docs/patches.md", "README.md")


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "patches", copy / "patches")
    for page in PAGES:
        (copy / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, copy / page)
    return copy


def _catalog(copy: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        env={**os.environ, "FI_PATCH_CATALOG_ROOT": str(copy)},
        timeout=600,
        check=False,
    )


def _shrink(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)
    path.write_text(text.replace(old, new))


def test_adding_a_release_whose_functions_did_not_change_is_one_command(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    _shrink(copy / "patches" / f"{CUDA}.toml", '">=0.4.0,<=0.7.4"', '">=0.4.0,<=0.7.2.post1"')
    _shrink(
        copy / "docs/patches.md", "| B | 0.4.0 \u2013 0.7.4 |", "| B | 0.4.0 \u2013 0.7.2.post1 |"
    )
    # The patch's row and its family's row in the table README.md opens with.
    for row in ("first; nvcc only as the fallback", "the crash above | `get_cuda_version`"):
        readme = copy / "README.md"
        line = next(x for x in readme.read_text().splitlines() if row in x)
        _shrink(readme, line, line.replace("\u2013 0.7.4 |", "\u2013 0.7.2.post1 |"))

    run = _catalog(copy, "add", "0.7.4")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0.7.4: written" in run.stdout
    for page in PAGES:
        assert (copy / page).read_text() == (ROOT / page).read_text(), page
    for toml in sorted((ROOT / "patches").glob("*.toml")):
        written = (copy / "patches" / toml.name).read_text()
        original = toml.read_text()
        assert written.startswith(original.rstrip("\n") + '\n\n[[cases]]\nversion = "0.7.4"\n')
    cuda = (copy / "patches" / f"{CUDA}.toml").read_text()
    assert cuda.endswith(
        'verdict = "known"\nshape = "B"\nwhy = "added by scripts/catalog.py: shape B"\n'
    )


def test_a_release_with_a_new_text_writes_nothing_and_says_what_is_new(tmp_path: Path) -> None:
    copy = _copy(tmp_path)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    run = _catalog(copy, "add", "0.2.9rc1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "0.2.9rc1: nothing written" in run.stdout
    assert "fp4-quantize-op-boundary: unknown in flashinfer/fp4_quantization.py" in run.stdout
    assert "fp4_quantize text sha256: " in run.stdout
    assert "the known shape of the same structure: " in run.stdout
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before


def test_a_range_is_never_widened_into_another(tmp_path: Path) -> None:
    """A copy whose shape 0.6.13 of fp4_quantize stops at 0.6.18.post1 and whose shape 0.7.1
    starts at 0.7.0: 0.7.0.post1 carries 0.6.13's text, but widening that range would reach into
    0.7.1's. Nothing is written; the clash is named."""
    copy = _copy(tmp_path)
    toml = copy / "patches" / "fp4-quantize-under-compile.toml"
    _shrink(toml, '">=0.6.13,<=0.7.0.post1"', '">=0.6.13,<=0.6.18.post1"')
    _shrink(toml, '">=0.7.1,<=0.7.2.post1"', '">=0.7.0,<=0.7.2.post1"')
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    run = _catalog(copy, "add", "0.7.0.post1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "widening a range would overlap another" in run.stdout
    assert "fp4-quantize-under-compile: 0.6.13 would reach 0.7.0 \u2013 0.7.2.post1" in run.stdout
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before
