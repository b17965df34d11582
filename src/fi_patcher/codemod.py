"""The pure codemod engine: source text in, a result value out. The only module importing libcst.

A file's patched text is its original with each patch applied in registry order (`compose`). Each
patch is recognised first (`recognise`: the hash of the released function text, or of its
`ast.unparse` form), then only that function's lines go through libcst and are spliced back, so
every byte outside them, line endings included, stays as it was, and a 2,800-line module costs
no more than its one function.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from fi_patcher.model import Boundary, InsertFirst, KeywordArguments, Patch, Shape
from fi_patcher.recognise import (
    Match,
    Unrecognised,
    following,
    locate,
    parse,
    parse_module,
    recognise,
)

__all__ = ["Composed", "Unrecognised", "compose", "take_out"]


@dataclass(frozen=True)
class Composed:
    """The original with every patch applied: `text`, and the shape each patch matched."""

    text: str
    shapes: Mapping[str, Shape]


_Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement
_Rewrite = Callable[[cst.FunctionDef, Patch, Shape, str], Sequence[_Statement] | str]


def compose(
    original: str,
    steps: Sequence[tuple[Patch, Sequence[Shape]]],
    tool_version: str,
    *,
    structural: bool = False,
) -> Composed | Unrecognised:
    """Apply each (patch, candidate shapes) in order to `original`, or say why one cannot be.

    With `structural`, a function whose `ast.unparse` form matches a shape counts as that shape
    even if its formatting differs; otherwise only the exact released text does.
    """
    text = original
    shapes: dict[str, Shape] = {}
    for patch, candidates in steps:
        matched = recognise(text, patch, candidates, structural=structural)
        if isinstance(matched, Unrecognised):
            return Unrecognised(f"{patch.id}: {matched.reason}", matched.found)
        rewritten = _rewrite(text, patch, matched, tool_version)
        if isinstance(rewritten, Unrecognised):
            return rewritten
        text, shapes[patch.id] = rewritten, matched.shape
    return Composed(text, shapes)


def take_out(text: str, patch: Patch, shape: Shape) -> str | None:
    """`text` with `patch`'s change to its function taken out, or None where the function does
    not carry exactly that change. fi-patch's marker comment goes with it, and any other comment
    above the change stays; whether the result is FlashInfer's original is for its hash to say.
    This is how the usual fix, made by hand, is recognised."""
    tree = parse(text)
    if isinstance(tree, Unrecognised):
        return None
    located = locate(tree, text, patch.function, patch.scope)
    if isinstance(located, Unrecognised):
        return None
    node, found = located
    # The statements the patch adds after the function go with it.
    definitions = _definitions(patch, shape)
    after_node = following(tree, node)[: len(definitions)]
    if len(after_node) != len(definitions):
        return None
    end = after_node[-1].end_lineno if after_node else found.end
    assert end is not None
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    indent = _indent(lines[found.start - 1])
    snippet = _dedented("".join(lines[found.start - 1 : end]), indent)
    if snippet is None or not _same_statements(snippet, [node, *after_node], indent):
        return None
    module = cst.parse_module(snippet)
    definition, *after = module.body
    assert isinstance(definition, cst.FunctionDef)
    if [_code(s) for s in after] != [_code(s) for s in definitions]:
        return None
    undone = _TAKE_OUT[type(patch.operation)](definition, patch, shape)
    if undone is None:
        return None
    spliced = _indented(module.with_changes(body=[undone]).code, indent)
    return "".join(lines[: found.start - 1]) + spliced + "".join(lines[end:])


def _indent(line: str) -> str:
    """The whitespace a line starts with: a function in an `else` branch is indented."""
    return line[: len(line) - len(line.lstrip(" \t"))]


def _dedented(snippet: str, indent: str) -> str | None:
    """`snippet` without `indent` at the start of each line that is not blank (a blank line
    stays as it is), or None where a line is indented less, so that putting it back would not
    give the same bytes."""
    if not indent:
        return snippet
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", snippet)
    if any(line.strip() and not line.startswith(indent) for line in lines):
        return None
    local = "".join(line[len(indent) :] if line.strip() else line for line in lines)
    return local if _indented(local, indent) == snippet else None


def _indented(code: str, indent: str) -> str:
    """`code` with `indent` before every line that is not blank."""
    if not indent:
        return code
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", code)
    return "".join(indent + line if line.strip() else line for line in lines)


def _definitions(patch: Patch, shape: Shape) -> list[_Statement]:
    """The module-level statements `patch` places after the function in `shape`."""
    operation = patch.operation
    if shape.text is None:
        return []
    if isinstance(operation, Boundary):
        placed = operation.for_shape(shape).statements(patch.function, shape.text)
        return list(cst.parse_module(placed).body)
    if not isinstance(operation, InsertFirst):
        return []
    text = operation.definitions.get(shape.text)
    return list(cst.parse_module(text).body) if text else []


def _rewrite(text: str, patch: Patch, matched: Match, tool_version: str) -> str | Unrecognised:
    """Rewrite the function's own lines with libcst and splice them back into `text`."""
    lines = re.findall(r"[^\n]*\n|[^\n]+\Z", text)
    start, end = matched.found.start - 1, matched.found.end
    indent = _indent(lines[start])
    snippet = _dedented("".join(lines[start:end]), indent)
    if snippet is None or not _same_statements(snippet, [matched.node], indent):
        return Unrecognised(f"{patch.id}: cannot cut {patch.function} out of its lines")
    module = cst.parse_module(snippet)
    (definition,) = module.body
    assert isinstance(definition, cst.FunctionDef)
    rewrite: _Rewrite = _REWRITES[type(patch.operation)]
    changed = rewrite(definition, patch, matched.shape, tool_version)
    if isinstance(changed, str):
        return Unrecognised(f"{patch.id}: {changed}", matched.found)
    spliced = _indented(module.with_changes(body=list(changed)).code, indent)
    return "".join(lines[:start]) + spliced + "".join(lines[end:])


def _same_statements(snippet: str, nodes: Sequence[ast.stmt], indent: str = "") -> bool:
    """The lines cut out hold exactly the statements `ast` found (a lone CR, say, would shift
    them). Lines cut out of a block are read indented as they were, under an `if` of their own:
    a method's docstring keeps its indentation in its value."""
    text = "if True:\n" + _indented(snippet, indent) if indent else snippet
    try:
        cut = parse_module(text).body
    except SyntaxError:
        return False
    if indent:
        cut = cut[0].body  # type: ignore[attr-defined]
    return [ast.dump(n) for n in cut] == [ast.dump(n) for n in nodes]


def _marker(patch: Patch, tool_version: str) -> cst.EmptyLine:
    return cst.EmptyLine(indent=True, comment=cst.Comment(patch.marker(tool_version)))


def _block(definition: cst.FunctionDef) -> cst.IndentedBlock | str:
    if not isinstance(definition.body, cst.IndentedBlock):
        return f"{definition.name.value} has its body on the def line"
    return definition.body


# --- operations ---------------------------------------------------------------------------------


def _insert_first(
    definition: cst.FunctionDef, patch: Patch, shape: Shape, tool_version: str
) -> Sequence[_Statement] | str:
    """The shape's statements first in the body, after the docstring, under a marker comment;
    then its definitions, if any, after the function, two blank lines and a marker above them."""
    operation = patch.operation
    assert isinstance(operation, InsertFirst) and shape.text is not None
    block = _block(definition)
    if isinstance(block, str):
        return block
    own: list[_Statement] = list(cst.parse_module(operation.texts[shape.text]).body)
    own[0] = own[0].with_changes(leading_lines=[_marker(patch, tool_version)])
    at = 1 if definition.get_docstring(clean=False) is not None else 0
    body = [*block.body[:at], *own, *block.body[at:]]
    after = _definitions(patch, shape)
    if after:
        blank = [cst.EmptyLine(), cst.EmptyLine()]
        after[0] = after[0].with_changes(leading_lines=[*blank, _marker(patch, tool_version)])
    return [definition.with_changes(body=block.with_changes(body=body)), *after]


def _boundary(
    definition: cst.FunctionDef, patch: Patch, shape: Shape, tool_version: str
) -> Sequence[_Statement] | str:
    """The function as it is; after it, two blank lines, a marker and the call of fi-patch's op
    boundary."""
    after = _definitions(patch, shape)
    blank = [cst.EmptyLine(), cst.EmptyLine()]
    after[0] = after[0].with_changes(leading_lines=[*blank, _marker(patch, tool_version)])
    return [definition, *after]


def _keyword_arguments(
    definition: cst.FunctionDef, patch: Patch, shape: Shape, tool_version: str
) -> Sequence[_Statement] | str:
    """The one call of `operation.call` passes its later arguments by keyword, under a marker
    comment on the statement that makes the call."""
    operation = patch.operation
    assert isinstance(operation, KeywordArguments)
    block = _block(definition)
    if isinstance(block, str):
        return block
    wanted = m.Call(func=m.Name(operation.call))
    holders = [s for s in block.body if m.findall(s, wanted)]
    calls = [c for s in holders for c in m.findall(s, wanted)]
    if len(calls) != 1:
        return f"{definition.name.value} calls {operation.call} {len(calls)} times, not once"
    (call,) = calls
    assert isinstance(call, cst.Call)
    arguments = list(call.args)
    later = arguments[operation.positional :]
    if not later or any(a.keyword or a.star or not isinstance(a.value, cst.Name) for a in later):
        return (
            f"the call of {operation.call} does not pass plain names after its first "
            f"{operation.positional} arguments"
        )
    keywords = [
        a.with_changes(
            keyword=cst.Name(a.value.value),  # type: ignore[attr-defined]
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        for a in later
    ]
    new_call = call.with_changes(args=[*arguments[: operation.positional], *keywords])
    (holder,) = holders
    marked = holder.deep_replace(call, new_call)
    assert isinstance(marked, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    marked = marked.with_changes(
        leading_lines=[*marked.leading_lines, _marker(patch, tool_version)]
    )
    body = [marked if s is holder else s for s in block.body]
    return [definition.with_changes(body=block.with_changes(body=body))]


# --- taking a change out ------------------------------------------------------------------------


def _code(statement: cst.CSTNode) -> str:
    """A statement's code without the comments and blank lines above it."""
    if isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement):
        statement = statement.with_changes(leading_lines=())
    return cst.Module(body=[statement]).code  # type: ignore[list-item]


def _not_ours(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    return [
        line
        for line in lines
        if line.comment is None or not line.comment.value.startswith("# fi-patch: ")
    ]


def _take_out_first(
    definition: cst.FunctionDef, patch: Patch, shape: Shape
) -> cst.FunctionDef | None:
    """The body without the shape's statements where it starts with them (after the docstring);
    a comment above them that is not fi-patch's marker moves to the statement after."""
    operation = patch.operation
    assert isinstance(operation, InsertFirst) and shape.text is not None
    block = definition.body
    if not isinstance(block, cst.IndentedBlock):
        return None
    own = list(cst.parse_module(operation.texts[shape.text]).body)
    at = 1 if definition.get_docstring(clean=False) is not None else 0
    statements = [s for s in block.body if isinstance(s, _Statement)]
    if len(statements) != len(block.body):
        return None
    head, rest = statements[at : at + len(own)], statements[at + len(own) :]
    if len(head) < len(own) or not rest:
        return None
    if [_code(s) for s in head] != [_code(s) for s in own]:
        return None
    kept = _not_ours(head[0].leading_lines)
    rest[0] = rest[0].with_changes(leading_lines=[*kept, *rest[0].leading_lines])
    return definition.with_changes(body=block.with_changes(body=[*statements[:at], *rest]))


def _take_out_keywords(
    definition: cst.FunctionDef, patch: Patch, shape: Shape
) -> cst.FunctionDef | None:
    """The one call of `operation.call` with its `x=x` arguments after the first `positional`
    passed positionally again, and fi-patch's marker above it gone."""
    operation = patch.operation
    assert isinstance(operation, KeywordArguments)
    block = definition.body
    if not isinstance(block, cst.IndentedBlock):
        return None
    wanted = m.Call(func=m.Name(operation.call))
    holders = [s for s in block.body if m.findall(s, wanted)]
    calls = [c for s in holders for c in m.findall(s, wanted)]
    if len(calls) != 1:
        return None
    (call,) = calls
    assert isinstance(call, cst.Call)
    later = list(call.args)[operation.positional :]
    named = [
        a.keyword is not None and isinstance(a.value, cst.Name) and a.keyword.value == a.value.value
        for a in later
    ]
    if not later or not all(named):
        return None
    positional = [a.with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT) for a in later]
    new_call = call.with_changes(args=[*list(call.args)[: operation.positional], *positional])
    (holder,) = holders
    undone = holder.deep_replace(call, new_call)
    assert isinstance(undone, cst.SimpleStatementLine | cst.BaseCompoundStatement)
    undone = undone.with_changes(leading_lines=_not_ours(undone.leading_lines))
    body = [undone if s is holder else s for s in block.body]
    return definition.with_changes(body=block.with_changes(body=body))


def _take_out_nothing(
    definition: cst.FunctionDef, patch: Patch, shape: Shape
) -> cst.FunctionDef | None:
    """An op boundary leaves the function as it is: what it placed after it goes (`take_out`)."""
    return definition


_TAKE_OUT: dict[type, Callable[[cst.FunctionDef, Patch, Shape], cst.FunctionDef | None]] = {
    InsertFirst: _take_out_first,
    KeywordArguments: _take_out_keywords,
    Boundary: _take_out_nothing,
}

_REWRITES: dict[type, _Rewrite] = {
    InsertFirst: _insert_first,
    KeywordArguments: _keyword_arguments,
    Boundary: _boundary,
}
