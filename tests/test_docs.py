"""The documents say what the code does."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from fi_patcher.errors import ExitCode
from fi_patcher.registry import load_patches, span

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = Path(__file__).resolve().parents[1] / "README.md"


def test_exit_code_table_matches_the_code() -> None:
    rows = re.findall(r"^\| +(\d+) \| (\w+) \|", (DOCS / "exit-codes.md").read_text(), re.M)
    assert [(int(code), name) for code, name in rows] == [(c.value, c.name) for c in ExitCode]


def test_readme_exit_codes_match_the_code() -> None:
    rows = re.findall(r"^\| +(\d+) \| `(\w+)`", README.read_text(), re.M)
    assert [(int(code), name) for code, name in rows] == [(c.value, c.name) for c in ExitCode]


def test_patch_catalog_lists_every_patch_shape_range_and_proof() -> None:
    """docs/patches.md names exactly the registered patches, each with every shape, range, hash,
    requirement and proof script."""
    text = (DOCS / "patches.md").read_text()
    documented = re.findall(r"^## `([a-z0-9-]+)`$", text, re.M)
    assert documented == [p.id for p in load_patches()]
    for patch in load_patches():
        section = text.split(f"## `{patch.id}`", 1)[1].split("\n## ", 1)[0]
        assert f"`{patch.target}`" in section and f"`{patch.function}`" in section
        for shape in patch.shapes:
            assert f"| {shape.name} | {span(shape.versions)} |" in section
            for digest in shape.function_sha256:
                assert digest in section
            if shape.target is not None:
                assert f"`{shape.target}`" in section
        for exemption in patch.not_applicable:
            assert f"| - | {span(exemption.versions)} |" in section
        assert f"in_target/proofs/{patch.proof.script}" in section
        if patch.requires.torch is not None:
            assert f"torch {patch.requires.torch}" in section
        for required in patch.requires.patches:
            assert f"`{required}`" in section


def test_every_json_state_is_documented() -> None:
    from fi_patcher.model import State

    text = (DOCS / "json.md").read_text()
    for state in State:
        assert f"`{state.value}`" in text


def test_fault_table_names_every_fault_test() -> None:
    documented = set(re.findall(r"\| `(test_\w+)` \|", (DOCS / "faults.md").read_text()))
    faults = Path(__file__).resolve().parent / "faults"
    written = {
        name
        for path in faults.glob("test_*.py")
        for name in re.findall(r"^def (test_\w+)\(", path.read_text(), re.M)
    }
    assert documented == written
    assert len(written) >= 25


def test_readme_ranges_are_the_catalogs() -> None:
    """README.md's releases column of each patch spans its shapes' ranges, lowest to highest."""
    from packaging.version import Version

    text = README.read_text()
    for patch in load_patches():
        lows = [s.version for sh in patch.shapes for s in sh.versions if s.operator in (">=", "==")]
        highs = [
            s.version for sh in patch.shapes for s in sh.versions if s.operator in ("<=", "==")
        ]
        whole = f"{min(lows, key=Version)} \u2013 {max(highs, key=Version)}"
        (row,) = re.findall(rf"^\| `{re.escape(patch.id)}` \|.*\| ([^|]+) \|$", text, re.M)
        assert row == whole, patch.id


def _span(patch: object) -> str:
    """The releases of `patch`'s shapes, lowest to highest, as README.md writes them."""
    from packaging.version import Version

    shapes = patch.shapes  # type: ignore[attr-defined]
    lows = [s.version for sh in shapes for s in sh.versions if s.operator in (">=", "==")]
    highs = [s.version for sh in shapes for s in sh.versions if s.operator in ("<=", "==")]
    return f"{min(lows, key=Version)} \u2013 {max(highs, key=Version)}"


def test_readme_opens_with_each_family_s_entry_points_and_releases() -> None:
    """The family table README.md opens with names each entry point an op-* patch routes, in the
    row of its releases, and the crash fix's and API logging's releases are their patches'."""
    text = README.read_text()
    table = text[: text.index("| patch | what it changes | releases |")]
    rows = re.findall(r"^\|\s*([^|]*?)\s*\|\s*([^|]+?)\s*\|\s*([^|]*?)\s*\|$", table, re.M)
    assert len(rows) >= 10
    by_name = {
        name: releases for _, names, releases in rows for name in re.findall(r"`([\w.]+)`", names)
    }
    for patch in load_patches():
        if patch.id.startswith("op-"):
            # A wrapper's method by its class: BatchDecodeWithPagedKVCacheWrapper.run.
            method = getattr(patch.operation, "method", False)
            name = f"{patch.scope}.{patch.function}" if method else patch.function
            assert by_name[name] == _span(patch), patch.id
    families = {family: releases for family, _, releases in rows if family}
    patches = {p.id: p for p in load_patches()}
    assert families["the crash above"] == _span(patches["cuda-version-torch-first"])
    assert families["API logging"] == _span(patches["api-logging-under-compile"])


def test_versions_written_out_are_the_package_s() -> None:
    """Wheel names and fi-patch's marker lines shown in the docs and examples carry the
    version the package has now: a version bump that forgets one fails here."""
    from fi_patcher import __version__

    pages = [README, *DOCS.glob("*.md"), *(README.parent / "examples").rglob("*.*")]
    seen = 0
    for page in pages:
        text = page.read_text()
        for found in re.findall(r"fi_patch-(\d+\.\d+\.\d+)-", text):
            assert found == __version__, page
            seen += 1
        for found in re.findall(r"# fi-patch: [a-z0-9-]+ \(fi-patch (\d+\.\d+\.\d+)\)", text):
            assert found == __version__, page
            seen += 1
    assert seen >= 5


ROOT = README.parent
PAGES = [README, *sorted(DOCS.glob("*.md")), *sorted((ROOT / "examples").rglob("*.md"))]
# A path of ours written in prose: it starts at a top-level folder of the repository, or at a
# package folder of fi_patcher's (docs/patches.md names the proofs as `in_target/proofs/x.py`).
TOP = r"\.ci|src|tests|docs|scripts|patches|benchmarks|examples"
PATH = re.compile(rf"(?<![\w./-])((?:{TOP}|in_target|placed)/[\w./*-]*[\w*/])")
OUTSIDE = (
    ".." + "/shared",
    "shared/" + "research",
    "/" + "work/",
    "/tmp/" + "wt/",
    "/root/" + ".pyenv",
)
"""What points outside the repository: the workspace it was written in, its notes, this machine's
own folders. A user of the repository has none of them."""


def _exists(reference: str, base: Path) -> bool:
    if "*" in reference:
        return any(base.glob(reference))
    return (base / reference).exists()


def test_markdown_links_resolve_in_the_repository() -> None:
    """Every relative link in README.md, docs/ and examples/ names a file of the repository."""
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (page.parent / target.split("#", 1)[0]).resolve()
            if not path.is_relative_to(ROOT) or not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken
    assert len(PAGES) >= 10


def test_paths_named_in_the_docs_exist() -> None:
    """A path written in the docs' prose (`tests/support/tiers.py`, `patches/*.toml`) is one the
    repository has: a renamed or removed file fails here, not in a reader's hands."""
    package = ROOT / "src" / "fi_patcher"
    missing, seen = [], 0
    for page in PAGES:
        for reference in PATH.findall(page.read_text()):
            if "NAME" in reference:  # a template: patches/op-NAME.toml
                continue
            base = package if reference.startswith(("in_target/", "placed/")) else ROOT
            seen += 1
            if not _exists(reference, base):
                missing.append(f"{page.relative_to(ROOT)}: {reference}")
    assert not missing
    assert seen >= 50


def test_nothing_points_outside_the_repository() -> None:
    """No tracked file names the workspace the project was written in or this machine's folders."""
    listed = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=True, text=True
    ).stdout
    found = []
    for name in filter(None, listed.split("\0")):
        try:
            text = (ROOT / name).read_text()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        found += [f"{name}: {mark}" for mark in OUTSIDE if mark in text]
    assert not found
