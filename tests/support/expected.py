"""The bytes each patch must produce, built from the released text with line edits only.

Independent of the libcst engine: `ast` finds the lines, and the edits are plain string work, so
a test comparing the engine's output with these bytes checks every byte the engine keeps.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import replace

from fi_patcher import __version__
from fi_patcher.model import Boundary, InsertFirst, KeywordArguments, Shape
from fi_patcher.registry import expected as by_version
from fi_patcher.registry import load_patches
from tests.support.releases import CUDA, RELEASES, TARGET, released_text

PATCHES = {p.id: p for p in load_patches()}

_Edit = tuple[int, int, list[str]]
"""(0-based line, lines replaced, new lines)."""


def shape_of(patch: str, version: str) -> Shape | None:
    """The shape `patch` has in `version`: the release's own, as `RELEASES` names it."""
    return PATCHES[patch].shape_named(RELEASES[version].shapes.get(patch, ""))


def target_of(patch: str, version: str) -> str:
    """The file `patch` writes in `version` (fp4_quantize moved in 0.6.7)."""
    registered = PATCHES[patch]
    shape = shape_of(patch, version) or by_version(registered, version).shape
    return shape.target or registered.target if shape is not None else registered.target


def files_of(version: str) -> list[str]:
    """Every file the registry writes in `version`."""
    return sorted({target_of(p, version) for p in RELEASES[version].shapes})


def named_in_summary(said: str, relpath: str, held: Iterable[str]) -> list[str]:
    """The patches the summary's line for `relpath` names (`said` with its wrapping undone),
    each by its id or, three or more, by the start they share and their count
    (`op-trtllm-* (12)`), opened against `held`: a count that `held` does not give is kept as
    said, so the caller's comparison fails on it."""
    line = re.search(
        rf"applied to {re.escape(relpath)}: (.+?)(?= applied | not applicable |"
        r" proofs: |$)",
        said,
    )
    assert line is not None, f"no line for {relpath} in {said!r}"
    named: list[str] = []
    for word in line.group(1).split(", "):
        folded = re.fullmatch(r"(\S+)\* \((\d+)\)", word)
        if folded is None:
            named.append(word)
            continue
        members = [p for p in held if p.startswith(folded.group(1))]
        named.extend(members if len(members) == int(folded.group(2)) else [word])
    return named


def marker(patch: str, indent: str = "    ") -> str:
    return f"{indent}# fi-patch: {patch} (fi-patch {__version__})\n"


# fi-patch's own lines in get_cuda_version, written out by hand: `expected` derives them from
# the TOML, and the tests compare the two.
OWN_LINES = [
    marker(CUDA),
    "    if torch.version.cuda is not None:\n",
    "        return Version(torch.version.cuda)\n",
]


def original(version: str, relpath: str = TARGET) -> str:
    return released_text(RELEASES[version], relpath).decode("utf-8")


def def_line(version: str, patch: str = CUDA) -> int:
    """The line (1-based) of `def` of the function `patch` rewrites, in the released file."""
    return _function(original(version, target_of(patch, version)), PATCHES[patch].function).lineno


def expected(
    version: str,
    relpath: str = TARGET,
    patches: Iterable[str] | None = None,
    newline: str = "\n",
) -> str:
    """The release's file with `patches` (default: every patch the registry applies to it)."""
    release = RELEASES[version]
    wanted = set(patches) if patches is not None else set(release.shapes)
    wanted = {p for p in wanted if target_of(p, version) == relpath}
    lines = original(version, relpath).splitlines(keepends=True)
    # Bottom-up, so that each edit's line numbers still hold.
    edits = sorted((_edit(version, relpath, p) for p in wanted), key=lambda e: -e[0])
    for at, drop, added in edits:
        lines[at : at + drop] = added
    return "".join(lines).replace("\n", newline)


def _edit(version: str, relpath: str, patch: str) -> _Edit:
    """(0-based line, lines replaced, new lines) for one patch, by the kind of its operation."""
    text = original(version, relpath)
    lines = text.splitlines(keepends=True)
    node = _function(text, PATCHES[patch].function, PATCHES[patch].scope)
    operation = PATCHES[patch].operation
    if isinstance(operation, KeywordArguments):
        return _keywords(lines, node, patch, operation)
    shape = PATCHES[patch].shape_named(RELEASES[version].shapes[patch])
    assert shape is not None and shape.text is not None
    if isinstance(operation, Boundary):
        # A shape's own returns and check (cutlass_fused_moe's before 0.3.0) are the call's.
        returns = operation.returns if shape.returns is None else shape.returns
        check = operation.check if shape.check is None else shape.check
        return _boundary(node, patch, replace(operation, returns=returns, check=check), shape.text)
    return _insert_first(lines, node, patch, operation, shape.text)


def _boundary(node: ast.FunctionDef, patch: str, operation: Boundary, rule: str) -> _Edit:
    """The function as it is; right after it, two blank lines, a marker and the call of the op
    boundary, written out here from the operation's fields."""
    assert node.end_lineno is not None
    checked = f',\n        check="{operation.check}"' if operation.check else ""
    if operation.types:
        named = ", ".join(f'"{name}": "{kind}"' for name, kind in operation.types)
        checked += f",\n        types={{{named}}}"
    if operation.returns_when:
        checked += f',\n        returns_when="{operation.returns_when}"'
    if operation.only or operation.only_none:
        # A bool (do_finalize) is written as Python writes it, a name in quotes, and each
        # parameter the op carries as None only after them.
        values = ", ".join(
            [
                f'"{name}": {value}' if isinstance(value, bool) else f'"{name}": "{value}"'
                for name, value in operation.only
            ]
            + [f'"{name}": None' for name in operation.only_none]
        )
        checked += f",\n        only={{{values}}}"
    if operation.uncapturable:
        values = ", ".join(f'"{name}": "{value}"' for name, value in operation.uncapturable)
        checked += f",\n        uncapturable={{{values}}}"
    if operation.writes:
        names = "".join(f'"{name}", ' for name in operation.writes).rstrip()
        checked += f",\n        writes=({names})"
    if operation.listed:
        checked += ",\n        listed=True"
    if operation.given:
        checked += ",\n        given=True"
    if operation.method:
        # In the class body: the method and the constructor rebound, the module's name let go.
        names = [node.name, "__init__"]
        if operation.aliases:
            held = ", ".join(f'("{alias}", {n})' for alias, n in operation.aliases)
            checked += f",\n        aliases=({held},)"
        call = (
            "from flashinfer import utils as _fi_patch_utils\n"
            "\n"
            'if hasattr(_fi_patch_utils, "_fi_patch_boundary_method"):\n'
            f"    {', '.join(names)} = _fi_patch_utils._fi_patch_boundary_method(\n"
            f'        {node.name}, __init__, "{operation.op}", fake="{operation.fake}", '
            f'rule="{rule}", out="{operation.out}", returns={operation.returns}{checked}\n'
            "    )\n"
            "del _fi_patch_utils\n"
        )
        outer = " " * node.col_offset
        placed = [outer + line if line.strip() else line for line in call.splitlines(True)]
        return node.end_lineno, 0, ["\n", "\n", marker(patch, outer), *placed]
    call = (
        "from flashinfer import utils as _fi_patch_utils\n"
        "\n"
        'if hasattr(_fi_patch_utils, "_fi_patch_boundary"):\n'
        "    _fi_patch_utils._fi_patch_boundary(\n"
        f'        {node.name}, "{operation.op}", fake="{operation.fake}", rule="{rule}", '
        f'out="{operation.out}", returns={operation.returns}{checked}\n'
        "    )\n"
    )
    return node.end_lineno, 0, ["\n", "\n", marker(patch, ""), *call.splitlines(True)]


def _insert_first(
    lines: list[str], node: ast.FunctionDef, patch: str, operation: InsertFirst, key: str
) -> _Edit:
    """The shape's statements first in the body, under a marker; then its definitions, if any,
    right after the function, two blank lines and a marker above them."""
    at = _body_start(lines, node)
    indent = _indent(lines, node.body[0])
    statements = operation.texts[key].splitlines(keepends=True)
    own = [marker(patch, indent), *(indent + line for line in statements)]
    if key not in operation.definitions:
        return at, 0, own
    assert node.end_lineno is not None
    body = lines[at : node.end_lineno]
    # The definitions are where the function is: at module level, or indented in a branch.
    outer = " " * node.col_offset
    placed = [
        outer + line if line.strip() else line
        for line in operation.definitions[key].splitlines(True)
    ]
    after = ["\n", "\n", marker(patch, outer), *placed]
    return at, len(body), [*own, *body, *after]


def _body_start(lines: list[str], node: ast.FunctionDef) -> int:
    """The 0-based line where statements inserted first go: after the docstring, or else right
    after the `def` line(s), above any blank or comment lines that open the body (libcst keeps
    those with the statement after them)."""
    first = node.body[0]
    if ast.get_docstring(node, clean=False) is not None:
        assert first.end_lineno is not None
        return first.end_lineno
    at = first.lineno - 1
    while not lines[at - 1].strip() or lines[at - 1].lstrip().startswith("#"):
        at -= 1
    return at


def _keywords(
    lines: list[str], node: ast.FunctionDef, patch: str, operation: KeywordArguments
) -> _Edit:
    """The function's one call of `operation.call` with each argument after the first
    `positional` passed as `x=x`, under a marker above the statement that makes the call."""
    (statement,) = [s for s in node.body if _calls(s, operation.call)]
    (call,) = _calls(statement, operation.call)
    later = call.args[operation.positional :]
    assert later and not call.keywords
    assert statement.end_lineno is not None
    at = statement.lineno - 1
    edited = lines[at : statement.end_lineno]
    # Right to left, so that each argument's offsets still hold when it is edited.
    for argument in reversed(later):
        assert isinstance(argument, ast.Name) and argument.end_col_offset is not None
        row = argument.lineno - 1 - at
        keyword = f"{argument.id}={argument.id}"
        edited[row] = _splice(edited[row], argument.col_offset, argument.end_col_offset, keyword)
    return at, len(edited), [marker(patch, _indent(lines, statement)), *edited]


def _calls(node: ast.AST, name: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def _splice(line: str, start: int, end: int, new: str) -> str:
    """`line` with `new` in place of its UTF-8 bytes `start:end` (ast's offsets count bytes)."""
    data = line.encode("utf-8")
    return (data[:start] + new.encode("utf-8") + data[end:]).decode("utf-8")


def _indent(lines: list[str], statement: ast.stmt) -> str:
    return lines[statement.lineno - 1][: statement.col_offset]


def _function(text: str, name: str, scope: str = "") -> ast.FunctionDef:
    """The one `name` at top level, in the else branch of a top-level `if` (`scope` "else"), or
    in the function or class the dotted `scope` names (`flashinfer_api.decorator`,
    `BatchDecodeWithPagedKVCacheWrapper`)."""
    tree = ast.parse(text)
    block = tree.body
    if scope == "else":
        block = [s for n in tree.body if isinstance(n, ast.If) for s in n.orelse]
    elif scope:
        for outer in scope.split("."):
            holders = (ast.FunctionDef, ast.ClassDef)
            (holder,) = [n for n in block if isinstance(n, holders) and n.name == outer]
            block = holder.body
    # The @overload stubs above a function only annotate it (single_decode_with_kv_cache's).
    (node,) = [
        n
        for n in block
        if isinstance(n, ast.FunctionDef)
        and n.name == name
        and "overload" not in {ast.unparse(d).split(".")[-1] for d in n.decorator_list}
    ]
    return node
