"""Random mutations of the real released texts never give a corrupted or half-patched file.

Hypothesis mutates FlashInfer's real cpp_ext.py (downloaded at test time): renamed names,
inserted statements, comments, blank lines, extra decorators, changed strings. Whatever it makes,
the engine either patches it correctly (only fi-patch's lines added, the result compiles,
removing them gives back the input exactly, and the patched text is never patched again) or
refuses it; and it never refuses a file whose function is byte-identical to the release's and
that still parses.
"""

from __future__ import annotations

import ast
import os
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fi_patcher import __version__
from fi_patcher.codemod import Composed, Unrecognised, compose
from fi_patcher.registry import load_patches
from tests.support.expected import OWN_LINES, shape_of
from tests.support.hashes import function_hashes
from tests.support.releases import CUDA, RELEASES, released_text

(PATCH,) = (p for p in load_patches() if p.id == CUDA)
# 600 for each of two releases: 1200 examples in CI.
EXAMPLES = int(os.environ.get("FI_PATCH_PROPERTY_EXAMPLES", "600"))

identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
printable = st.text(
    st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\'), max_size=12
)
mutation = st.one_of(
    st.tuples(st.just("rename"), st.integers(0, 10_000), identifiers),
    st.tuples(st.just("statement"), st.integers(0, 10_000), identifiers),
    st.tuples(st.just("comment"), st.integers(0, 10_000), printable),
    st.tuples(st.just("blank"), st.integers(0, 10_000), st.just("")),
    st.tuples(st.just("decorator"), st.integers(0, 10_000), identifiers),
    st.tuples(st.just("string"), st.integers(0, 10_000), printable),
)


def _function_lines(text: str) -> tuple[int, int]:
    """0-based index of the function's first decorator line, and one past its last line."""
    node = next(
        n
        for n in ast.parse(text).body
        if isinstance(n, ast.FunctionDef) and n.name == PATCH.function
    )
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
    return start, node.end_lineno or node.lineno


def mutate(text: str, kind: str, where: int, payload: str) -> str:
    try:
        start, end = _function_lines(text)
    except (StopIteration, SyntaxError):
        return text  # an earlier mutation already broke the function: leave it broken
    lines = text.splitlines(keepends=True)
    body = lines[start:end]
    if kind == "rename":
        names = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", "".join(body))))
        old = names[where % len(names)]
        body = [re.sub(rf"\b{old}\b", payload, line) for line in body]
        return "".join(lines[:start] + body + lines[end:])
    if kind == "statement":
        at = start + 2 + where % max(1, end - start - 2)
        indent = re.match(r"\s*", lines[at] if at < len(lines) else "")
        prefix = indent.group(0).rstrip("\n") if indent else ""
        return "".join([*lines[:at], f"{prefix or '    '}{payload} = 1\n", *lines[at:]])
    if kind in ("comment", "blank"):
        at = where % (len(lines) + 1)
        new = f"# {payload}\n" if kind == "comment" else "\n"
        return "".join([*lines[:at], new, *lines[at:]])
    if kind == "decorator":
        at = start + where % 2
        return "".join([*lines[:at], f"@{payload}\n", *lines[at:]])
    strings = [(i, m) for i, line in enumerate(body) for m in re.finditer(r'"[^"\n]*"', line)]
    if not strings:
        return text
    index, match = strings[where % len(strings)]
    line = body[index]
    body[index] = line[: match.start()] + f'"{payload}"' + line[match.end() :]
    return "".join(lines[:start] + body + lines[end:])


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


@pytest.mark.parametrize("version", ["0.2.14.post1", "0.7.4"])
def test_mutations_are_patched_correctly_or_refused(version: str) -> None:
    original = released_text(RELEASES[version]).decode("utf-8")
    shape = shape_of(PATCH.id, version)
    assert shape is not None

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        database=None,
    )
    @given(st.lists(mutation, min_size=1, max_size=3))
    def check(mutations: list[tuple[str, int, str]]) -> None:
        text = original
        for kind, where, payload in mutations:
            text = mutate(text, kind, where, payload)
        result = compose(text, [(PATCH, (shape,))], __version__)
        hashes = function_hashes(text, PATCH.function)
        identical = hashes is not None and hashes[0] in shape.function_sha256
        if isinstance(result, Unrecognised):
            assert not (identical and parses(text)), result.reason
            return
        assert isinstance(result, Composed)
        assert identical
        assert result.text.count("".join(OWN_LINES)) == 1
        assert result.text.replace("".join(OWN_LINES), "", 1) == text
        compile(result.text, "cpp_ext.py", "exec", dont_inherit=True)
        again = compose(result.text, [(PATCH, (shape,))], __version__)
        assert isinstance(again, Unrecognised)

    check()
