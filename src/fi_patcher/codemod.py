"""The pure codemod engine: source text in, a result value out. The only module importing libcst.

Recognition uses hashes of the released function text (exact) or of its `ast.unparse` form
(structural); the rewrite uses libcst so that every byte outside the inserted lines, line endings
included, stays as it was.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from fi_patcher.model import FunctionSpan, Patch, Shape


@dataclass(frozen=True)
class Transformed:
    """The function is a known original: `text` is the patched source."""

    text: str
    shape: Shape
    found: FunctionSpan


@dataclass(frozen=True)
class AlreadyApplied:
    """The function carries exactly this patch over a known original, which `original` restores."""

    original: str
    shape: Shape
    found: FunctionSpan


@dataclass(frozen=True)
class Unrecognised:
    """Neither a known original nor a known original with this patch: refuse, showing why."""

    reason: str
    found: FunctionSpan | None = None


Result = Transformed | AlreadyApplied | Unrecognised
_Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def transform(
    text: str,
    patch: Patch,
    shapes: Sequence[Shape],
    tool_version: str,
    *,
    structural: bool = False,
) -> Result:
    """Patch `text` if its function is one of `shapes`, or say it already is, or say why not.

    With `structural`, a function whose `ast.unparse` form matches a shape counts as that shape even
    if its formatting differs; otherwise only the exact released text does.
    """
    try:
        module = cst.parse_module(text)
        tree = ast.parse(text)
    except (cst.ParserSyntaxError, SyntaxError, ValueError) as exc:
        return Unrecognised(f"not valid Python: {_first_line(exc)}")
    located = _locate(tree, text, patch.function)
    if isinstance(located, Unrecognised):
        return located
    node, found = located
    definition = _only_definition(module, patch.function)
    own = _own_statements(patch, tool_version)

    if _starts_with_patch(definition, patch, own):
        original = _remove_patch(module, definition, len(own))
        shape = _match(original, patch, shapes, structural)
        if shape is None:
            return Unrecognised(
                f"{patch.function} carries fi-patch's {patch.id} statements, but the rest of it "
                "is not a known original",
                found,
            )
        return AlreadyApplied(original, shape, found)

    shape = _match_node(node, found, shapes, structural)
    if shape is None:
        kind = "structure" if structural else "text"
        return Unrecognised(
            f"the {kind} of {patch.function} is not one fi-patch knows ({_shape_names(shapes)})",
            found,
        )
    missing = [name for name in patch.requires_names if name not in _module_names(tree)]
    if missing:
        return Unrecognised(
            f"the module does not import {', '.join(missing)}, which the patch uses", found
        )
    return Transformed(_insert(module, definition, own), shape, found)


def render_diff(before: str, after: str, path: str) -> str:
    """A unified diff with three lines of context, as `git diff` shows it."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
    )


def function_hashes(text: str, function: str) -> tuple[str, str] | None:
    """(raw, structural) sha256 of the one top-level `function` in `text`, if there is one."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    located = _locate(tree, text, function)
    if isinstance(located, Unrecognised):
        return None
    node, found = located
    return sha256_text(found.text), sha256_text(ast.unparse(node))


# --- recognition (ast) --------------------------------------------------------------------------


def _locate(
    tree: ast.Module, text: str, function: str
) -> tuple[ast.FunctionDef, FunctionSpan] | Unrecognised:
    nodes = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    if not nodes:
        return Unrecognised(f"no top-level function {function}")
    if len(nodes) > 1:
        return Unrecognised(f"{function} is defined {len(nodes)} times at top level")
    node = nodes[0]
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    # Released files use LF; hashing LF-normalised lines lets a CRLF copy match its original.
    lines = text.replace("\r\n", "\n").split("\n")
    span_text = "".join(line + "\n" for line in lines[start - 1 : end])
    return node, FunctionSpan(start, end, span_text)


def _match_node(
    node: ast.FunctionDef, found: FunctionSpan, shapes: Sequence[Shape], structural: bool
) -> Shape | None:
    raw = sha256_text(found.text)
    for shape in shapes:
        if raw in shape.function_sha256:
            return shape
    if structural:
        normalized = sha256_text(ast.unparse(node))
        for shape in shapes:
            if normalized == shape.structure_sha256:
                return shape
    return None


def _match(text: str, patch: Patch, shapes: Sequence[Shape], structural: bool) -> Shape | None:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    located = _locate(tree, text, patch.function)
    if isinstance(located, Unrecognised):
        return None
    return _match_node(*located, shapes, structural)


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _shape_names(shapes: Sequence[Shape]) -> str:
    return ", ".join(f"shape {s.name}" for s in shapes) or "no shape selected"


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# --- rewriting (libcst) -------------------------------------------------------------------------


def _only_definition(module: cst.Module, function: str) -> cst.FunctionDef:
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == function:
            return statement
    raise AssertionError(f"ast found {function} but libcst did not")  # pragma: no cover


def _own_statements(patch: Patch, tool_version: str) -> list[_Statement]:
    statements = list(cst.parse_module(patch.insert).body)
    marker = cst.EmptyLine(indent=True, comment=cst.Comment(patch.marker(tool_version)))
    statements[0] = statements[0].with_changes(leading_lines=[marker])
    return statements


def _body(definition: cst.FunctionDef) -> Sequence[_Statement]:
    body = definition.body
    if not isinstance(body, cst.IndentedBlock):
        return ()
    return [s for s in body.body if isinstance(s, _Statement)]


def _starts_with_patch(
    definition: cst.FunctionDef, patch: Patch, own: Sequence[_Statement]
) -> bool:
    head = _body(definition)[: len(own)]
    if len(head) < len(own):
        return False
    comments = [line.comment for line in head[0].leading_lines]
    if len(comments) != 1 or comments[0] is None:
        return False
    if not comments[0].value.startswith(patch.marker_prefix):
        return False
    return all(_code(a) == _code(b) for a, b in zip(head, own, strict=True))


def _code(statement: _Statement) -> str:
    return cst.Module(body=[statement.with_changes(leading_lines=())]).code


def _replace_body(
    module: cst.Module, definition: cst.FunctionDef, statements: Sequence[_Statement]
) -> str:
    block = definition.body
    assert isinstance(block, cst.IndentedBlock)
    updated = definition.with_changes(body=block.with_changes(body=list(statements)))
    return module.with_changes(body=[updated if s is definition else s for s in module.body]).code


def _insert(module: cst.Module, definition: cst.FunctionDef, own: Sequence[_Statement]) -> str:
    return _replace_body(module, definition, [*own, *_body(definition)])


def _remove_patch(module: cst.Module, definition: cst.FunctionDef, count: int) -> str:
    return _replace_body(module, definition, _body(definition)[count:])
