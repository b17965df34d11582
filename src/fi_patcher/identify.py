"""What each patch finds in the installed files, told by their content: its function in a known
shape, nothing to patch, or a text fi-patch has never seen. Pure: `ast` and hashes only.

The version is a cross-check (`registry.expected`): where its ranges name something else than
the files hold, the `Fit` carries a note saying what they hold, and the files decide.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from fi_patcher.model import Exemption, Fit, Patch, Shape, Verdict
from fi_patcher.recognise import (
    Match,
    Unrecognised,
    defines,
    locate,
    nested,
    parse,
    recognise_in,
    sha256_text,
    structure_sha256,
)
from fi_patcher.registry import expected, holds, span


@dataclass(frozen=True)
class Reading:
    """One file as read, parsed once for every patch that looks at it."""

    relpath: str
    text: str | None
    """None: the file is absent, or not UTF-8."""
    tree: ast.Module | None
    """Parsed; read with `keep` (check's reading), the bodies of the top-level functions and
    classes no patch reads are empty."""
    problem: str = ""
    """Why there is no text or no tree."""

    @property
    def absent(self) -> bool:
        return self.problem == f"{self.relpath} is absent"


def read(relpath: str, source: bytes | None, keep: Collection[str] | None = None) -> Reading:
    """The file parsed; with `keep` (`looked_into`), the bodies of its other top-level functions
    and classes emptied."""
    if source is None:
        return Reading(relpath, None, None, f"{relpath} is absent")
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reading(relpath, None, None, f"{relpath} is not UTF-8 ({exc.reason})")
    tree = parse(text)
    if isinstance(tree, Unrecognised):
        return Reading(relpath, text, None, f"{relpath} is {tree.reason}")
    if keep is not None:
        _prune(tree, keep)
    return Reading(relpath, text, tree)


def looked_into(patches: Iterable[Patch]) -> dict[str, frozenset[str]]:
    """By file, the top-level functions whose bodies a patch reads: its function, or the
    outermost function of its scope (`flashinfer_api.decorator`), in every file it may live in."""
    names: dict[str, set[str]] = {}
    for patch in patches:
        outer = patch.scope.split(".")[0] if patch.scope and nested(patch.scope) else ""
        for relpath in patch.targets:
            names.setdefault(relpath, set()).update(n for n in (patch.function, outer) if n)
    return {relpath: frozenset(held) for relpath, held in names.items()}


def _prune(tree: ast.Module, keep: Collection[str]) -> None:
    """Empty the bodies of the top-level functions and classes not in `keep`: the trees of every
    file stay alive while each patch looks at its own, and FlashInfer's largest files
    (gemm/gemm_base.py, fused_moe/core.py: 13,000 and 8,000 lines) are mostly bodies no patch
    reads. Their names, lines, decorators and the statements between them stay: what `where`,
    `identify` and `recognise_in` read (top-level names, imports, what follows a function). This
    holds while what a patch places after its function is no `def` or `class` (`_bounded` reads
    the two statements there): the test of this pruning reads patched files too."""
    for node in tree.body:
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.name not in keep
        ):
            node.body = [ast.Pass()]


def where(patch: Patch, readings: Mapping[str, Reading], version: str) -> Patch:
    """The patch with `target` set to the file that holds its function: the first of its
    targets that defines it where the patch's `scope` says (top level, an else branch, a function).
    Where none does, the file its version's shape names, or else its own file if it exists, or
    the first that exists."""
    held = [r for r in (readings.get(t) for t in patch.targets) if r is not None]
    found = [
        r.relpath
        for r in held
        if r.tree is not None and defines(r.tree, patch.function, patch.scope)
    ]
    shape = expected(patch, version).shape
    existing = [r.relpath for r in held if not r.absent]
    named = [shape.target or patch.target] if shape is not None else []
    choice = [*found, *named, *(t for t in existing if t == patch.target), *existing]
    return replace(patch, target=choice[0]) if choice else patch


def identify(patch: Patch, reading: Reading | None, version: str) -> Fit:
    """What `patch` (as `where` placed it) finds in its file."""
    relpath = patch.target
    by_version = expected(patch, version)
    reading = reading or read(relpath, None)
    if reading.absent:
        # A file that is not there has none of the functions an exemption may name.
        exemption = next((e for e in patch.not_applicable if e.absent is not None), None)
        return _nothing(patch, exemption, by_version, version, reading.problem)
    if reading.text is None or reading.tree is None:
        return Fit(Verdict.UNKNOWN, None, reading.problem)
    tree, text = reading.tree, reading.text
    if not defines(tree, patch.function, patch.scope):
        exemption = next((e for e in patch.not_applicable if e.absent == patch.function), None)
        return _nothing(patch, exemption, by_version, version, f"no {patch.function} in {relpath}")
    located = locate(tree, text, patch.function, patch.scope)
    if isinstance(located, Unrecognised):
        return Fit(Verdict.UNKNOWN, None, located.reason)
    node, found = located
    raw = sha256_text(found.text)
    mine = shapes_in(patch, relpath)
    exact = [s for s in mine if raw in s.function_sha256]
    if by_version.shape in exact:
        exact = [by_version.shape, *(s for s in exact if s is not by_version.shape)]
    if exact:
        matched = recognise_in(tree, text, patch, exact, structural=False)
        if isinstance(matched, Match):
            return Fit(
                Verdict.KNOWN,
                matched.shape,
                f"shape {matched.shape.name} ({span(matched.shape.versions)})",
                note=_carries(patch, matched.shape, by_version, version),
            )
        return Fit(Verdict.UNKNOWN, None, matched.reason, found=found)
    for exemption in patch.not_applicable:
        if _holds(exemption, tree, raw, patch.function):
            return _nothing(patch, exemption, by_version, version, exemption.reason)
    structure = structure_sha256(node)
    similar = next((s for s in mine if s.structure_sha256 == structure), None)
    return Fit(
        Verdict.UNKNOWN,
        None,
        f"the text of {patch.function} is not one fi-patch knows (sha256 {raw[:12]}…)",
        structural=similar,
        hashes=(raw, structure),
        found=found,
    )


def shapes_in(patch: Patch, relpath: str) -> list[Shape]:
    """The patch's shapes whose function lives in `relpath`."""
    return [s for s in patch.shapes if (s.target or patch.target) == relpath]


def _holds(exemption: Exemption, tree: ast.Module, raw: str, function: str) -> bool:
    if raw in exemption.function_sha256:
        return True
    if exemption.defines is not None:
        return defines(tree, exemption.defines)
    return exemption.absent not in (None, function) and not defines(tree, exemption.absent or "")


def _nothing(
    patch: Patch, exemption: Exemption | None, by_version: Fit, version: str, told: str
) -> Fit:
    """Nothing to patch, told by the file. An exemption's own words where its range holds the
    version (or where it says what the file holds, not since when); the file's fact otherwise."""
    reason = told
    if exemption is not None and (exemption.absent is None or holds(exemption.versions, version)):
        reason = exemption.reason
    note = None
    if by_version.verdict is Verdict.KNOWN and by_version.shape is not None:
        note = (
            f"{version} is in the range of shape {by_version.shape.name}, but its files hold "
            f"nothing to patch ({told})"
        )
    return Fit(Verdict.NOT_APPLICABLE, None, reason, note=note)


def _carries(patch: Patch, shape: Shape, by_version: Fit, version: str) -> str | None:
    """The cross-check: None where the version's range names this very shape."""
    if by_version.shape is not None and by_version.shape.name == shape.name:
        return None
    if by_version.verdict is Verdict.KNOWN and by_version.shape is not None:
        said = f"its range names shape {by_version.shape.name}"
    elif by_version.verdict is Verdict.NOT_APPLICABLE:
        said = f"its range says nothing to patch ({by_version.reason})"
    elif "not a valid version" in by_version.reason:
        said = by_version.reason
    else:
        said = "it is in no known range"
    return (
        f"{version} carries the {patch.function} of shape {shape.name} "
        f"({span(shape.versions)}); {said}: the file decides"
    )
