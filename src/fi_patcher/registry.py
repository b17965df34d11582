"""The patch registry: the TOML files shipped as the package `fi_patcher.patches`.

Registry order is the order of the patch ids; a file's expected bytes are its original with the
applied patches inserted in that order, and a patch may only require patches before it.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any

from packaging.specifiers import InvalidSpecifier, Specifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from fi_patcher.errors import UsageError
from fi_patcher.model import (
    Boundary,
    Case,
    Declaration,
    Exemption,
    Fit,
    InsertFirst,
    KeywordArguments,
    Operation,
    Patch,
    PatchSet,
    Proof,
    Requirements,
    Shape,
    Verdict,
)
from fi_patcher.recognise import nested

PREFLIGHT_CHECKS = frozenset({"cuda-toolkit"})


class RegistryError(Exception):
    """A patch file is malformed: a bug in fi-patch's own data, caught by its tests."""


@cache
def load_patches() -> tuple[Patch, ...]:
    """Every patch shipped with fi-patch, in registry order."""
    folder = resources.files("fi_patcher.patches")
    texts = [
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".toml")
    ]
    patches = tuple(sorted((parse_patch(n, t) for n, t in texts), key=lambda p: p.id))
    check_requirements(patches)
    return patches


def choose(ids: Sequence[str] | None) -> PatchSet:
    """The patches named by `--patch` (registry order), or every patch when none is named."""
    patches = load_patches()
    if not ids:
        return PatchSet(patches)
    known = {p.id for p in patches}
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise UsageError(
            f"no patch named {', '.join(map(repr, unknown))}",
            remedy=f"choose among {', '.join(sorted(known))} (`fi-patch list` shows them)",
        )
    return PatchSet(tuple(p for p in patches if p.id in ids), explicit=True)


def parse_patch(name: str, text: str) -> Patch:
    try:
        data = tomllib.loads(text)
        declarations = tuple(_parse_declaration(d) for d in data.get("declarations", ()))
        operation = _parse_operation(data["operation"], declarations)
        shapes = tuple(_parse_shape(shape) for shape in data["shapes"])
        patch = Patch(
            id=data["id"],
            summary=data["summary"],
            distribution=data["distribution"],
            target=data["target"],
            function=data["function"],
            operation=operation,
            shapes=shapes,
            not_applicable=tuple(_parse_exemption(e) for e in data["not_applicable"]),
            proof=Proof(**data["proof"]),
            requires=_parse_requirements(data.get("requires", {})),
            preflight=tuple(data.get("preflight", ())),
            cases=tuple(
                Case(c["version"], c["verdict"], c.get("shape"), c["why"])
                for c in data.get("cases", ())
            ),
            scope=data.get("scope", ""),
            declarations=declarations,
        )
    except (tomllib.TOMLDecodeError, KeyError, TypeError, InvalidSpecifier) as exc:
        raise RegistryError(f"patch file {name}: {exc!r}") from exc
    _validate(name, patch)
    return patch


def _parse_operation(data: dict[str, Any], declarations: Sequence[Declaration]) -> Operation:
    kind = data["kind"]
    if kind == InsertFirst.kind:
        texts = {key: _statements(value) for key, value in data["texts"].items()}
        definitions = {key: _statements(v) for key, v in data.get("definitions", {}).items()}
        for key, names in data.get("definitions_from", {}).items():
            definitions[key] = placed(names, declarations)
        also = {key: tuple(v) for key, v in data.get("also_requires", {}).items()}
        return InsertFirst(texts, tuple(data["requires_names"]), definitions, also)
    if kind == KeywordArguments.kind:
        return KeywordArguments(data["call"], int(data["positional"]))
    if kind == Boundary.kind:
        return Boundary(
            data["op"],
            data["fake"],
            data.get("out", ""),
            int(data.get("returns", 1)),
            data.get("check", ""),
            tuple(data.get("types", {}).items()),
            data.get("returns_when", ""),
            tuple(data.get("only", {}).items()),
            tuple(data.get("only_none", ())),
            tuple(data.get("uncapturable", {}).items()),
            tuple(data.get("writes", ())),
            _flag(data.get("listed", False), "listed"),
            _flag(data.get("method", False), "method"),
            tuple((alias, int(count)) for alias, count in data.get("aliases", {}).items()),
            _flag(data.get("given", False), "given"),
        )
    raise KeyError(f"operation kind {kind!r}")


def _flag(value: Any, name: str) -> bool:
    """A TOML bool, refused as anything else ("false" is a true string)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} = {value!r} is not true or false")
    return value


def _parse_declaration(data: dict[str, Any]) -> Declaration:
    return Declaration(
        op=data["op"],
        versions=SpecifierSet(data["versions"]),
        mutates=tuple(data["mutates"]),
        launcher=data["launcher"],
        parameters=tuple(data["parameters"]),
        writes=tuple(data["writes"]),
        verdict=data["verdict"],
        why=data["why"],
        reason=data.get("reason", ""),
        fake_why=data.get("fake_why", ""),
    )


def _declaration_problems(declarations: Sequence[Declaration]) -> list[str]:
    """What contradicts itself in the [[declarations]] rows: a verdict unknown, or at odds with
    the row's own columns; a left-out row without its reason; fi-patch's fake named for an op
    the placed code has none for."""
    problems = [
        f"declaration {d.op}: verdict {d.verdict!r} is not one of {', '.join(d.VERDICTS)}"
        for d in declarations
        if d.verdict not in d.VERDICTS
    ]
    problems += [
        f"declaration {d.op}: a left-out declaration says why"
        for d in declarations
        if d.verdict == "left-out" and not d.reason
    ]
    problems += [
        f"declaration {d.op}: declared {d.mutates}, writes {d.writes}: the verdict is "
        f"{'right' if set(d.mutates) == set(d.writes) else 'corrected'}"
        for d in declarations
        if d.verdict in ("right", "corrected")
        and (d.verdict == "right") != (set(d.mutates) == set(d.writes))
    ]
    own = _own_fakes() if any(d.fake_why for d in declarations) else set()
    problems += [
        f"declaration {d.op}: fake_why says its fake is replaced, and placed/declared_ops.py "
        "has no fake of fi-patch's for it"
        for d in declarations
        if d.fake_why and d.op not in own
    ]
    return problems


def _own_fakes() -> set[str]:
    """The ops placed/declared_ops.py has a fake of fi-patch's for (`_fi_patch_declared_fakes`)."""
    text = resources.files("fi_patcher.placed").joinpath("declared_ops.py").read_text("utf-8")
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == DECLARED_FAKES:
            assert isinstance(node.value, ast.Dict)
            return {ast.literal_eval(k) for k in node.value.keys if k is not None}
    return set()


DECLARED_FAKES = "_fi_patch_declared_fakes"


# The lines of a placed file that fi-patch fills with the patch's [[declarations]]: what each
# declaration's op mutates, and the ops whose declared fake fi-patch's own replaces, and why.
CHECKED_LINE = "_fi_patch_checked = {}  # rendered by fi-patch from the patch's [[declarations]]"
OWN_FAKES_LINE = (
    "_fi_patch_own_fakes = {}  # rendered by fi-patch from the patch's [[declarations]] (fake_why)"
)


def placed(names: str | Sequence[str], declarations: Sequence[Declaration]) -> str:
    """The statements of `fi_patcher/placed/NAME` for each name, in order (the comments above
    each file's first statement stay behind), with the checked declarations rendered from
    `declarations` into the file that holds their line."""
    files = [names] if isinstance(names, str) else list(names)
    texts = [
        resources.files("fi_patcher.placed").joinpath(n).read_text(encoding="utf-8") for n in files
    ]
    if declarations and not any(CHECKED_LINE in t for t in texts):
        raise KeyError(f"placed files {files} have no line {CHECKED_LINE!r}")
    checked: dict[str, dict[tuple[str, ...], tuple[str, ...] | str]] = {}
    for declaration in declarations:
        by = checked.setdefault(declaration.op, {})
        if by.setdefault(declaration.mutates, declaration.placed) != declaration.placed:
            raise KeyError(f"{declaration.op}: two rows declare {declaration.mutates} differently")
    rows = "".join(f"    {op!r}: {by!r},\n" for op, by in sorted(checked.items()))
    fakes = {d.op: d.fake_why for d in declarations if d.fake_why}
    own = "".join(f"    {op!r}: {why!r},\n" for op, why in sorted(fakes.items()))
    statements = []
    for text in texts:
        text = text.replace(CHECKED_LINE, "_fi_patch_checked = {\n" + rows + "}")
        text = text.replace(OWN_FAKES_LINE, "_fi_patch_own_fakes = {\n" + own + "}")
        lines = text.splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
        statements.append(_statements("".join(lines[first:])))
    return "\n\n".join(statements)


def _parse_exemption(data: dict[str, Any]) -> Exemption:
    return Exemption(
        versions=SpecifierSet(data["versions"]),
        reason=data["reason"],
        absent=data.get("absent"),
        defines=data.get("defines"),
        function_sha256=frozenset(data.get("function_sha256", ())),
    )


def _statements(text: str) -> str:
    return text.strip("\n") + "\n"


def _parse_shape(data: dict[str, Any]) -> Shape:
    return Shape(
        name=data["name"],
        versions=SpecifierSet(data["versions"]),
        function_sha256=frozenset(data["function_sha256"]),
        structure_sha256=data["structure_sha256"],
        note=data["note"],
        text=data.get("text"),
        target=data.get("target"),
        returns=_count(data.get("returns"), f"shape {data['name']}: returns"),
        check=_name(data.get("check"), f"shape {data['name']}: check"),
    )


def _count(value: Any, name: str) -> int | None:
    """A TOML integer, or None where absent; refused as anything else (true is no count)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{name} = {value!r} is not a whole number")
    return value


def _name(value: Any, name: str) -> str | None:
    """A TOML string that is a Python name, or None where absent."""
    if value is not None and not (isinstance(value, str) and value.isidentifier()):
        raise TypeError(f"{name} = {value!r} is not a function's name")
    return value


def _method_problems(patch: Patch, boundary: Boundary) -> list[str]:
    """A method's boundary: its class (`scope`), and the methods that call it (`aliases`)."""
    problems = []
    if boundary.method and (boundary.listed or boundary.uncapturable or not patch.scope):
        problems.append("method = true takes a scope (the class) and no listed or uncapturable")
    if boundary.aliases and not boundary.method:
        problems.append("aliases take method = true")
    if boundary.given and (boundary.method or boundary.listed or boundary.uncapturable):
        problems.append("given = true takes no method, listed or uncapturable")
    if boundary.given and not boundary.out:
        problems.append("given = true takes the out parameter (out)")
    return problems + [
        f"aliases: {a} = {n} is not a method's name and 1 to {boundary.returns} outputs"
        for a, n in boundary.aliases
        if not (a.isidentifier() and 1 <= n <= boundary.returns)
    ]


def _boundary_problems(patch: Patch, boundary: Boundary) -> list[str]:
    problems = [f"shape {s.name} names no rule for its fake" for s in patch.shapes if not s.text]
    rules = boundary_rules()
    if boundary.fake not in rules:
        problems.append(f"placed/op_boundary.py has no fake {boundary.fake!r}")
    problems += [
        f"shape {s.name}: the fake {boundary.fake} has no rule {s.text!r}"
        for s in patch.shapes
        if s.text and boundary.fake in rules and s.text not in rules[boundary.fake]
    ]
    named = boundary_types()
    problems += [
        f"parameter {p}: the op has no type {t!r} (it knows {', '.join(named)})"
        for p, t in boundary.types
        if t not in named
    ]
    if not boundary.op.isidentifier():
        problems.append(f"op {boundary.op!r} is not a name")
    if boundary.returns < 1 and not boundary.writes:
        problems.append("an op boundary returns one tensor or more, or writes its parameters")
    if boundary.returns == 0 and (boundary.out or boundary.returns_when or boundary.uncapturable):
        problems.append("returns = 0 takes no out, returns_when or uncapturable")
    # The uncapturable op declares nothing written: a call it takes would write undeclared.
    if boundary.writes and boundary.uncapturable:
        problems.append("writes = [...] takes no uncapturable")
    problems += _method_problems(patch, boundary)
    if boundary.listed and (boundary.returns < 1 or boundary.returns_when):
        problems.append("listed = true needs returns of 1 or more, and no returns_when")
    problems += [
        f"writes: {w!r} is not a parameter name" for w in boundary.writes if not w.isidentifier()
    ]
    if boundary.returns_when and boundary.returns < 2:
        problems.append(f"returns_when = {boundary.returns_when!r} needs returns = 2 or more")
    problems += [
        f"only: {p} = {v!r} is not a parameter name and a string or a bool"
        for p, v in boundary.only
        if not (
            p.isidentifier()
            and (isinstance(v, bool) or (isinstance(v, str) and v.isprintable() and '"' not in v))
        )
    ]
    problems += [
        f"only_none: {p!r} is not a parameter name"
        for p in boundary.only_none
        if not (isinstance(p, str) and p.isidentifier())
    ]
    problems += [
        f"{p} is in both only and only_none" for p, _ in boundary.only if p in boundary.only_none
    ]
    problems += [
        f"uncapturable: {p} = {v!r} is not a parameter name and one of "
        f"{', '.join(boundary.UNCAPTURABLE)}"
        for p, v in boundary.uncapturable
        if not (p.isidentifier() and v in boundary.UNCAPTURABLE)
    ]
    if "declared-ops-custom" not in patch.requires.patches:
        problems.append("an op boundary requires declared-ops-custom, which places its code")
    return problems


@cache
def boundary_rules() -> dict[str, tuple[str, ...]]:
    """The fakes of placed/op_boundary.py and the rules each knows (`_fi_patch_boundary_rules`),
    read from its text: fi-patch never imports what it places."""
    return dict(ast.literal_eval(_boundary_value("_fi_patch_boundary_rules")))


@cache
def boundary_types() -> tuple[str, ...]:
    """The names a patch may type a parameter with (`_fi_patch_named_types`' keys)."""
    value = _boundary_value("_fi_patch_named_types")
    assert isinstance(value, ast.Dict)
    return tuple(ast.literal_eval(k) for k in value.keys if k is not None)


def _boundary_value(name: str) -> ast.expr:
    text = resources.files("fi_patcher.placed").joinpath("op_boundary.py").read_text("utf-8")
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [name]:
            return node.value
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == name:
            assert node.value is not None
            return node.value
    raise RegistryError(f"placed/op_boundary.py has no {name}")


def _parse_requirements(data: dict[str, Any]) -> Requirements:
    torch = data.get("torch")
    return Requirements(
        torch=SpecifierSet(torch) if torch else None, patches=tuple(data.get("patches", ()))
    )


def _validate(name: str, patch: Patch) -> None:
    problems = [
        f"unknown pre-flight check {c!r}" for c in patch.preflight if c not in PREFLIGHT_CHECKS
    ]
    if isinstance(patch.operation, InsertFirst):
        problems += [
            f"shape {s.name} names no text of the operation"
            for s in patch.shapes
            if s.text not in patch.operation.texts
        ]
        definitions = patch.operation.definitions
        problems += [
            f"shape {s.name} names no definitions of the operation"
            for s in patch.shapes
            if definitions and s.text not in definitions
        ]
    if isinstance(patch.operation, Boundary):
        problems += _boundary_problems(patch, patch.operation)
        # Each shape's boundary with its own returns and check, where it names them.
        problems += [
            f"shape {s.name}: {problem}"
            for s in patch.shapes
            if s.returns is not None or s.check is not None
            for problem in _boundary_problems(patch, patch.operation.for_shape(s))
            if problem not in problems
        ]
    else:
        problems += [
            f"shape {s.name}: returns and check are an op boundary's"
            for s in patch.shapes
            if s.returns is not None or s.check is not None
        ]
    for exemption in patch.not_applicable:
        told = [exemption.absent, exemption.defines, exemption.function_sha256 or None]
        if sum(t is not None for t in told) != 1:
            problems.append(
                f"not_applicable {span(exemption.versions)} must say one of absent, defines or "
                "function_sha256: how the file itself tells it"
            )
    problems += _declaration_problems(patch.declarations)
    if patch.scope not in ("", "else") and not nested(patch.scope):
        problems.append(
            f"scope {patch.scope!r} is not top level (''), 'else' or a dotted path of functions "
            "and classes"
        )
    names = {s.name for s in patch.shapes}
    for case in patch.cases:
        if case.verdict not in {v.value for v in Verdict}:
            problems.append(f"case {case.version}: no verdict {case.verdict!r}")
        if (case.shape is not None) != (case.verdict == Verdict.KNOWN) or (
            case.shape is not None and case.shape not in names
        ):
            problems.append(f"case {case.version}: a known verdict names one of its shapes")
    if not patch.proof.script.endswith(".py"):
        problems.append(f"proof script {patch.proof.script!r} is not a .py file")
    if problems:
        raise RegistryError(f"patch file {name}: {'; '.join(problems)}")


def check_requirements(patches: Sequence[Patch]) -> None:
    """A patch requires only patches earlier in registry order, and never itself."""
    seen: set[str] = set()
    for patch in patches:
        missing = [r for r in patch.requires.patches if r not in seen]
        if missing:
            raise RegistryError(
                f"{patch.id} requires {', '.join(missing)}, which is not an earlier patch"
            )
        seen.add(patch.id)


def expected(patch: Patch, version: str) -> Fit:
    """What the ranges name for an exact version: a shape, nothing to patch, or neither. The
    files decide (`identify`); this is the cross-check, and what a broken install is judged by.

    Pre-releases are in no range (`prereleases=False`: packaging 26 would otherwise admit
    0.6.0rc1 into `>=0.4.0,<=0.7.4`), and a `.postN` release only where a range's bounds admit
    it (`<=0.7.4` does not admit 0.7.4.post1). Local labels (`0.7.4+cu130`) are ignored.
    """
    try:
        Version(version)
    except InvalidVersion:
        return Fit(Verdict.UNKNOWN, None, f"{version!r} is not a valid version")
    for exemption in patch.not_applicable:
        if holds(exemption.versions, version):
            return Fit(Verdict.NOT_APPLICABLE, None, exemption.reason)
    for shape in patch.shapes:
        if holds(shape.versions, version):
            return Fit(Verdict.KNOWN, shape, f"shape {shape.name} ({span(shape.versions)})")
    return Fit(Verdict.UNKNOWN, None, f"{version} is outside every known range: {known(patch)}")


def holds(versions: SpecifierSet, version: str) -> bool:
    """Whether a range holds an exact version: never a pre-release, nor an invalid version."""
    try:
        return versions.contains(Version(version), prereleases=False)
    except InvalidVersion:
        return False


def required(patch: Patch, applicable: Iterable[str]) -> tuple[str, ...]:
    """The patches `patch` requires that apply here (`applicable`: the ids that do, by the
    files): those must be in place with it."""
    present = set(applicable)
    return tuple(r for r in patch.requires.patches if r in present)


def known(patch: Patch) -> str:
    parts: Iterable[str] = (f"shape {s.name} {span(s.versions)}" for s in patch.shapes)
    nothing = (f"nothing to patch {span(e.versions)}" for e in patch.not_applicable)
    return "; ".join([*parts, *nothing])


def span(versions: SpecifierSet) -> str:
    """A range as people read it, lowest first: `0.2.14.post1 \u2013 0.3.1.post1` (an en dash)."""
    specifiers = sorted(versions, key=_specifier_order)
    low = [s.version for s in specifiers if s.operator == ">="]
    high = [s.version for s in specifiers if s.operator == "<="]
    if len(specifiers) == 2 and low and high:
        return f"{low[0]} \u2013 {high[0]}"
    if len(specifiers) == 1 and specifiers[0].operator == "==":
        return specifiers[0].version
    return ", ".join(str(s) for s in specifiers)


def _specifier_order(specifier: Specifier) -> tuple[int, str]:
    return (0 if specifier.operator.startswith(">") else 1, specifier.version)


def requirement_text(patch: Patch) -> str:
    parts = []
    if patch.requires.torch is not None:
        parts.append(f"torch {patch.requires.torch}")
    parts.extend(f"{p} where it applies" for p in patch.requires.patches)
    return ", ".join(parts) or "-"
