"""Add a FlashInfer release to the catalog, or show what a release holds (for maintainers).

    python scripts/catalog.py show VERSION [VERSION ...]
    python scripts/catalog.py add VERSION

Both download the release from the package index (cached as the tests cache it) and read each
patch's function in its files the way `fi-patch check` does (`fi_patcher.identify`).

`add` then either writes the data change itself, or writes nothing and says what is new:
- every patch finds a known shape, or nothing to patch: for a final release, the range of that
  shape or exemption is extended to VERSION (in the patch's TOML, in docs/patches.md's table and
  in README.md's), and a `[[cases]]` row is appended to each patch's TOML, which
  tests/test_registry.py checks against the release. A pre-release gets its rows only: ranges
  hold final releases.
- a patch finds a text it does not know: the function, its hashes and the known shape whose
  structure it has are printed, nothing is written, and the exit status is 1. Adding a hash to
  a shape or a new `[[shapes]]` entry (with a proof run) is a maintainer's change, not a script's.
Run `make test` after either.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "src"))
# The checkout whose data is read and written: this one, unless $FI_PATCH_CATALOG_ROOT names
# another (the test of this script works on a copy).
ROOT = Path(os.environ.get("FI_PATCH_CATALOG_ROOT", HERE))

from packaging.specifiers import SpecifierSet  # noqa: E402
from packaging.version import Version  # noqa: E402
from tests.support.catalog import Found, found_in  # noqa: E402

from fi_patcher.model import Fit, Patch, Verdict  # noqa: E402
from fi_patcher.registry import check_requirements, parse_patch, span  # noqa: E402


def catalog() -> tuple[Patch, ...]:
    """The patches as ROOT's TOML files have them, in registry order."""
    files = sorted((ROOT / "patches").glob("*.toml"))
    patches = tuple(sorted((parse_patch(f.name, f.read_text()) for f in files), key=_id))
    check_requirements(patches)
    return patches


def _id(patch: Patch) -> str:
    return patch.id


def main(arguments: list[str]) -> int:
    if len(arguments) >= 2 and arguments[0] == "show":
        for version in arguments[1:]:
            for found in found_in(version, catalog()).values():
                print(describe(version, found))
        return 0
    if len(arguments) == 2 and arguments[0] == "add":
        return add(arguments[1])
    print(__doc__, file=sys.stderr)
    return 2


def describe(version: str, found: Found) -> str:
    fit, patch = found.fit, found.patch
    shape = f" shape {fit.shape.name}" if fit.shape else ""
    lines = [f"{version} {patch.id}: {fit.verdict.value}{shape} in {patch.target}: {fit.reason}"]
    if fit.note:
        lines.append(f"  note: {fit.note}")
    if fit.hashes:
        similar = fit.structural.name if fit.structural else "none"
        lines += [
            f"  {patch.function} text sha256: {fit.hashes[0]}",
            f"  {patch.function} structure sha256: {fit.hashes[1]}",
            f"  the known shape of the same structure: {similar}",
        ]
    return "\n".join(lines)


def add(version: str) -> int:
    found = found_in(version, catalog())
    new = [f for f in found.values() if f.fit.verdict is Verdict.UNKNOWN]
    if new:
        print(f"{version}: nothing written; these functions are texts fi-patch does not know:")
        for f in new:
            print(describe(version, f))
        return 1
    final = not Version(version).is_prerelease
    widenings = [w for f in found.values() if final for w in [widening(f, version)] if w]
    clashes = [w for w in widenings if isinstance(w, str)]
    if clashes:
        print(f"{version}: nothing written; widening a range would overlap another:")
        print("\n".join(f"  {c}" for c in clashes))
        return 1
    for patch, label, old, wider in (w for w in widenings if not isinstance(w, str)):
        toml = ROOT / "patches" / f"{patch.id}.toml"
        toml.write_text(_range_in_toml(toml.read_text(), label, old, wider))
        for page in (ROOT / "docs" / "patches.md", ROOT / "README.md"):
            page.write_text(_range_in_page(page.read_text(), patch, label, old, wider))
    for f in found.values():
        append_case(f.patch, f.fit, version)
        print(describe(version, f))
    print(f"{version}: written; run `make test`")
    return 0


Widening = tuple[Patch, str, SpecifierSet, SpecifierSet]


def widening(found: Found, version: str) -> Widening | str | None:
    """The range of the shape or exemption that holds `version` by content, extended to it
    (None: it holds it already, or no exemption names the reason), or why it cannot be: the
    wider range would reach into another range of the patch."""
    fit = found.fit
    registered = next(p for p in catalog() if p.id == found.patch.id)
    if fit.shape is not None:
        old, label = fit.shape.versions, fit.shape.name
    else:
        exemption = next((e for e in registered.not_applicable if e.reason == fit.reason), None)
        if exemption is None:
            return None  # nothing to patch for a reason no exemption names (a file absent)
        old, label = exemption.versions, "-"
    if old.contains(version):
        return None
    bounds = [Version(s.version) for s in old] + [Version(version)]
    wider = SpecifierSet(f">={min(bounds)},<={max(bounds)}")
    ranges = [s.versions for s in registered.shapes] + [
        e.versions for e in registered.not_applicable
    ]
    for other in (r for r in ranges if r != old):
        reached = [Version(s.version) for s in other if wider.contains(s.version)]
        if reached:
            return f"{registered.id}: {label} would reach {span(other)}"
    return registered, label, old, wider


def _range_in_toml(text: str, label: str, old: SpecifierSet, wider: SpecifierSet) -> str:
    """`text` with the `versions` line of the block that has `old` (and `name = label`, for a
    shape) set to `wider`."""
    blocks = re.split(r"(?m)^(?=\[\[)", text)
    for i, block in enumerate(blocks):
        shape = block.startswith("[[shapes]]") and f'\nname = "{label}"\n' in block
        exempt = block.startswith("[[not_applicable]]") and label == "-"
        match = re.search(r'(?m)^versions = "([^"]*)"$', block)
        if (shape or exempt) and match and SpecifierSet(match.group(1)) == old:
            blocks[i] = block.replace(match.group(0), f'versions = "{_ordered(wider)}"', 1)
            return "".join(blocks)
    raise SystemExit(f"no block with versions {old} in the TOML")


def _range_in_page(
    text: str, patch: Patch, label: str, old: SpecifierSet, wider: SpecifierSet
) -> str:
    """The catalog's table row (`| label | range |`) in the patch's section, and README.md's
    row of the patch (its whole span), with the new range."""
    if f"## `{patch.id}`" in text:
        head, section = text.split(f"## `{patch.id}`", 1)
        body, _, rest = section.partition("\n## ")
        body = body.replace(f"| {label} | {span(old)} |", f"| {label} | {span(wider)} |", 1)
        return head + f"## `{patch.id}`" + body + ("\n## " + rest if rest else "")
    row = re.search(rf"(?m)^\| `{re.escape(patch.id)}` \|.*\| ([^|]+) \|$", text)
    if row is None or label == "-":
        return text
    low = row.group(1).split(" \u2013 ")[0]
    high = max(row.group(1).split(" \u2013 ")[-1], wider_high(wider), key=Version)
    text = _family_row(text, patch, row.group(1), f"{low} \u2013 {high}")
    return text.replace(row.group(0), row.group(0).replace(row.group(1), f"{low} \u2013 {high}"))


# README.md's family table names these patches' rows by family; an op-* patch's row is the one
# that names its entry point.
FAMILIES = {
    "cuda-version-torch-first": "the crash above",
    "api-logging-under-compile": "API logging",
}


def _family_row(text: str, patch: Patch, old: str, new: str) -> str:
    """README.md's family table with the row of `patch` (where it spans `old`, as the patch's
    own row did) spanning `new`."""
    if patch.id in FAMILIES:
        head = rf"\| {re.escape(FAMILIES[patch.id])} \|[^|]*"
    elif patch.id.startswith("op-"):
        head = rf"\|[^|]*\|[^|]*`{re.escape(patch.function)}`[^|]*"
    else:
        return text
    row = re.search(rf"(?m)^({head}\| ){re.escape(old)}( \|)$", text)
    return text if row is None else text.replace(row.group(0), row.group(1) + new + row.group(2))


def wider_high(versions: SpecifierSet) -> str:
    return next(s.version for s in versions if s.operator == "<=")


def _ordered(versions: SpecifierSet) -> str:
    """A range as the TOML files write it, lower bound first."""
    return ",".join(sorted((str(s) for s in versions), key=lambda s: not s.startswith(">")))


def append_case(patch: Patch, fit: Fit, version: str) -> None:
    toml = ROOT / "patches" / f"{patch.id}.toml"
    rows = ["", "[[cases]]", f'version = "{version}"', f'verdict = "{fit.verdict.value}"']
    if fit.shape is not None:
        rows.append(f'shape = "{fit.shape.name}"')
    told = f"shape {fit.shape.name}" if fit.shape is not None else fit.reason
    rows.append(f'why = "added by scripts/catalog.py: {told.replace(chr(34), chr(39))}"')
    toml.write_text(toml.read_text().rstrip("\n") + "\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
