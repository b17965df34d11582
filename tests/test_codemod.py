"""The pure engine on the real released texts: exact bytes in, exact bytes out.

For every patch and every shape it keys (each on a real release downloaded at test time): the
patched text, byte for byte, alone and composed with the other patches of its file; its own
lines and nothing else in the diff; line endings kept; and a patched text is never patched twice.
"""

from __future__ import annotations

import ast
import hashlib

import libcst
import pytest
from packaging.specifiers import SpecifierSet

from fi_patcher import __version__
from fi_patcher.codemod import Composed, Unrecognised, compose, take_out
from fi_patcher.model import KeywordArguments, Patch, Proof, Shape
from fi_patcher.recognise import render_diff
from fi_patcher.registry import load_patches
from tests.support.expected import (
    OWN_LINES,
    PATCHES,
    def_line,
    expected,
    marker,
    original,
    shape_of,
    target_of,
)
from tests.support.releases import (
    CUDA,
    FORWARDING,
    FP4,
    FP4_OLD,
    OP_BOUNDARY,
    RELEASES,
    TARGET,
    UNDER_COMPILE,
)

# Every (release, patch) the registry applies, and every (release, file) it changes.
CASES = [(v, p) for v, r in RELEASES.items() for p in r.shapes]
FILES = sorted({(v, target_of(p, v)) for v, p in CASES})


def steps(
    version: str, relpath: str, only: tuple[str, ...] | None = None
) -> list[tuple[Patch, tuple[Shape, ...]]]:
    chosen = []
    for patch in load_patches():
        shape = shape_of(patch.id, version)
        mine = target_of(patch.id, version) == relpath
        if mine and shape is not None and (only is None or patch.id in only):
            chosen.append((patch, (shape,)))
    return chosen


def run(
    text: str,
    version: str,
    relpath: str = TARGET,
    *,
    only: tuple[str, ...] | None = None,
    structural: bool = False,
) -> Composed | Unrecognised:
    return compose(text, steps(version, relpath, only), __version__, structural=structural)


@pytest.mark.parametrize(("version", "patch"), CASES, ids=[f"{v}-{p}" for v, p in CASES])
def test_each_patch_alone_gives_exact_bytes(version: str, patch: str) -> None:
    relpath = target_of(patch, version)
    result = run(original(version, relpath), version, relpath, only=(patch,))
    assert isinstance(result, Composed), result
    assert result.text == expected(version, relpath, [patch])
    assert result.shapes[patch].name == RELEASES[version].shapes[patch]


@pytest.mark.parametrize(("version", "relpath"), FILES, ids=[f"{v}-{f}" for v, f in FILES])
def test_every_patch_of_a_file_composed_gives_exact_bytes(version: str, relpath: str) -> None:
    result = run(original(version, relpath), version, relpath)
    assert isinstance(result, Composed), result
    assert result.text == expected(version, relpath)
    # Registry order is the only order: each patch touches its own function.
    reverse = compose(
        original(version, relpath),
        list(reversed(steps(version, relpath))),
        __version__,
    )
    assert isinstance(reverse, Composed) and reverse.text == result.text


@pytest.mark.parametrize(("version", "relpath"), FILES, ids=[f"{v}-{f}" for v, f in FILES])
def test_patched_text_is_never_patched_twice(version: str, relpath: str) -> None:
    result = run(expected(version, relpath), version, relpath)
    assert isinstance(result, Unrecognised)
    assert "is not one fi-patch knows" in result.reason


@pytest.mark.parametrize("version", [v for v, r in RELEASES.items() if CUDA in r.shapes])
def test_diff_adds_only_our_lines(version: str) -> None:
    diff = render_diff(original(version), expected(version), TARGET)
    at = def_line(version)
    lines = diff.splitlines(keepends=True)
    assert lines[:3] == [
        "--- a/flashinfer/jit/cpp_ext.py\n",
        "+++ b/flashinfer/jit/cpp_ext.py\n",
        f"@@ -{at - 2},6 +{at - 2},9 @@\n",
    ]
    assert [line[1:] for line in lines if line.startswith("+") and not line.startswith("+++")] == (
        OWN_LINES
    )
    assert not [line for line in lines if line.startswith("-") and not line.startswith("---")]


@pytest.mark.parametrize("version", ["0.6.12", "0.7.0"])
def test_forwarding_diff_turns_three_arguments_into_keywords(version: str) -> None:
    diff = render_diff(original(version, FP4), expected(version, FP4, [FORWARDING]), FP4)
    removed = [
        line[1:] for line in diff.splitlines() if line.startswith("-") and line[1:4] != "-- "
    ]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and line[1:4] != "++ "]
    assert removed == [
        "        is_sf_swizzled_layout,",
        "        is_sf_8x4_layout,",
        "        enable_pdl,",
    ]
    assert added == [
        marker(FORWARDING).rstrip("\n"),
        "        is_sf_swizzled_layout=is_sf_swizzled_layout,",
        "        is_sf_8x4_layout=is_sf_8x4_layout,",
        "        enable_pdl=enable_pdl,",
    ]


@pytest.mark.parametrize("version", ["0.6.12", "0.7.0", "0.7.1", "0.7.4"])
def test_under_compile_branch_follows_the_docstring(version: str) -> None:
    """The docstring stays the function's first statement, so `help()` still shows it."""
    patched = expected(version, FP4, [UNDER_COMPILE])
    tree = ast.parse(patched)
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"]
    assert ast.get_docstring(node) == ast.get_docstring(
        next(
            n
            for n in ast.parse(original(version, FP4)).body
            if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"
        )
    )
    branch = node.body[1]
    assert isinstance(branch, ast.If)
    assert "torch.compiler.is_compiling()" in ast.unparse(branch.test)
    # A column-major input goes to the op transposed, as fp4_quantize itself transposes it.
    assert ast.unparse(branch.body[0]) == "transposed = input.stride(-2) == 1"
    assert "torch.ops.flashinfer.fp4_quantize" in ast.unparse(branch.body[1])


@pytest.mark.parametrize(
    ("version", "relpath"),
    [
        ("0.2.14.post1", TARGET),
        ("0.7.4", TARGET),
        ("0.7.0", FP4),
        ("0.2.9", FP4_OLD),
        ("0.6.11.post3", FP4),
    ],
)
def test_crlf_line_endings_are_kept(version: str, relpath: str) -> None:
    crlf = original(version, relpath).replace("\n", "\r\n")
    result = run(crlf, version, relpath)
    assert isinstance(result, Composed)
    assert result.text == expected(version, relpath, newline="\r\n")


OP_BOUNDARY_CASES = [v for v, r in RELEASES.items() if OP_BOUNDARY in r.shapes]


@pytest.mark.parametrize("version", OP_BOUNDARY_CASES)
def test_op_boundary_leaves_fp4_quantize_and_places_one_call_after_it(version: str) -> None:
    """fp4_quantize stays the release's; right after it one call of fi-patch's op boundary makes
    fi_patch::flashinfer_fp4_quantize (fi-patch's namespace, never flashinfer's) with the fake
    fp4_quantize under the shape's rule, two outputs, for the cuda backend only. Taking that
    call (with its import and marker) out gives the release, byte for byte."""
    relpath = target_of(OP_BOUNDARY, version)
    before = original(version, relpath)
    after = expected(version, relpath, [OP_BOUNDARY])
    tree = ast.parse(after)
    (public,) = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"
    ]
    (released,) = [
        n
        for n in ast.parse(before).body
        if isinstance(n, ast.FunctionDef) and n.name == "fp4_quantize"
    ]
    assert ast.dump(public) == ast.dump(released)
    at = tree.body.index(public)
    imported, placed = tree.body[at + 1 : at + 3]
    assert ast.unparse(imported) == "from flashinfer import utils as _fi_patch_utils"
    assert isinstance(placed, ast.If)
    (statement,) = placed.body
    assert isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call)
    call = statement.value
    assert ast.unparse(call.func) == "_fi_patch_utils._fi_patch_boundary"
    assert [ast.unparse(a) for a in call.args] == ["fp4_quantize", "'flashinfer_fp4_quantize'"]
    shape = shape_of(OP_BOUNDARY, version)
    assert shape is not None
    assert {k.arg: ast.literal_eval(k.value) for k in call.keywords} == {
        "fake": "fp4_quantize",
        "rule": shape.text,
        "out": "",
        "returns": 2,
        "only": {"backend": "cuda"},
    }
    lines = after.splitlines(keepends=True)
    assert public.end_lineno is not None and placed.end_lineno is not None
    cut = lines[: public.end_lineno] + lines[placed.end_lineno :]
    assert "".join(cut) == before


MUTATIONS = {
    "string-changed": ('"bin/nvcc"', '"bin/nvcc2"'),
    "statement-inserted": (
        "def get_cuda_version() -> Version:\n",
        "def get_cuda_version() -> Version:\n    x = 1\n",
    ),
    "decorator-removed": ("@functools.cache\ndef get_cuda_version", "def get_cuda_version"),
    "renamed": ("def get_cuda_version()", "def get_cuda_version_v2()"),
}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=list(MUTATIONS))
@pytest.mark.parametrize("version", ["0.2.14.post1", "0.7.4"])
def test_changed_function_is_refused(version: str, mutation: str) -> None:
    old, new = MUTATIONS[mutation]
    text = original(version)
    assert old in text
    result = run(text.replace(old, new, 1), version)
    assert isinstance(result, Unrecognised)
    assert result.reason


FP4_MUTATIONS = {
    "op-argument-reordered": (
        "        sf_vec_size,\n        sf_use_ue8m0,\n",
        "        sf_use_ue8m0,\n        sf_vec_size,\n",
    ),
    "branch-already-added-by-hand": (
        "    if sf_vec_size != 16 and sf_vec_size != 32:\n",
        "    if torch.compiler.is_compiling():\n        pass\n"
        "    if sf_vec_size != 16 and sf_vec_size != 32:\n",
    ),
}


@pytest.mark.parametrize("mutation", FP4_MUTATIONS, ids=list(FP4_MUTATIONS))
def test_changed_fp4_function_is_refused(mutation: str) -> None:
    old, new = FP4_MUTATIONS[mutation]
    text = original("0.7.0", FP4)
    assert old in text
    result = run(text.replace(old, new, 1), "0.7.0", FP4)
    assert isinstance(result, Unrecognised)


def test_reformatted_function_matches_only_structurally() -> None:
    text = original("0.7.4").replace(
        "    # Try to query nvcc for CUDA version; if nvcc is unavailable, fall back to "
        "torch.version.cuda\n",
        "",
    )
    assert isinstance(run(text, "0.7.4"), Unrecognised)
    result = run(text, "0.7.4", structural=True)
    assert isinstance(result, Composed)
    assert result.shapes[CUDA].name == "B"


def test_edit_elsewhere_in_the_file_keeps_the_function_patchable() -> None:
    text = original("0.7.4") + "\n# a local note\n"
    result = run(text, "0.7.4")
    assert isinstance(result, Composed)
    assert result.text == expected("0.7.4") + "\n# a local note\n"


def test_missing_import_is_refused() -> None:
    text = original("0.7.4").replace("from packaging.version import Version\n", "", 1)
    result = run(text, "0.7.4")
    assert isinstance(result, Unrecognised)
    assert "does not import Version, which cuda-version-torch-first uses" in result.reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param("def f(:\n", "not valid Python", id="syntax-error"),
        pytest.param("x = 1\n", "no top-level function", id="absent"),
        pytest.param(
            "def get_cuda_version(): pass\ndef get_cuda_version(): pass\n",
            "defined 2 times",
            id="twice",
        ),
    ],
)
def test_unrecognisable_texts(text: str, reason: str) -> None:
    result = run(text, "0.7.4")
    assert isinstance(result, Unrecognised)
    assert reason in result.reason


# --- the keyword-arguments operation on texts of its own ---------------------------------------


def keyword_patch(text: str, function: str = "op") -> Patch:
    """A patch whose one shape is exactly `text`'s function: the engine's own cases."""
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef))
    digest = hashlib.sha256(text.encode()).hexdigest()
    structure = hashlib.sha256(ast.unparse(node).encode()).hexdigest()
    shape = Shape("S", SpecifierSet("==1.0"), frozenset({digest}), structure, "a test shape")
    return Patch(
        id="keywords",
        summary="s",
        distribution="d",
        target="m.py",
        function=function,
        operation=KeywordArguments("quantize", 1),
        shapes=(shape,),
        not_applicable=(),
        proof=Proof("p.py", "c"),
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param(
            "def op(a, b):\n    quantize(a, b)\n    return quantize(a, b)\n",
            "calls quantize 2 times, not once",
            id="called-twice",
        ),
        pytest.param("def op(a, b):\n    return a\n", "calls quantize 0 times", id="not-called"),
        pytest.param(
            "def op(a, b):\n    return quantize(a, b + 1)\n",
            "does not pass plain names after its first 1 arguments",
            id="expression-argument",
        ),
        pytest.param(
            "def op(a, b): return quantize(a, b)\n", "body on the def line", id="one-line"
        ),
    ],
)
def test_keyword_arguments_refuses_what_it_cannot_rewrite(text: str, reason: str) -> None:
    patch = keyword_patch(text)
    result = compose(text, [(patch, patch.shapes)], __version__)
    assert isinstance(result, Unrecognised)
    assert reason in result.reason


def test_keyword_arguments_keeps_comments_and_layout() -> None:
    text = (
        "def op(a, b, c):\n    # why\n    y = quantize(a, b,  # note\n                 c)\n"
        "    return y\n"
    )
    patch = keyword_patch(text)
    result = compose(text, [(patch, patch.shapes)], __version__)
    assert isinstance(result, Composed)
    assert result.text == (
        "def op(a, b, c):\n    # why\n"
        f"    # fi-patch: keywords (fi-patch {__version__})\n"
        "    y = quantize(a, b=b,  # note\n                 c=c)\n    return y\n"
    )
    libcst.parse_module(result.text)


@pytest.mark.parametrize(("version", "patch"), CASES, ids=[f"{v}-{p}" for v, p in CASES])
def test_taking_a_patch_out_gives_the_original_back(version: str, patch: str) -> None:
    """What recognises a fix made by hand: fi-patch's own text, taken out, is the release's."""
    relpath = target_of(patch, version)
    shape = shape_of(patch, version)
    assert shape is not None
    patched = expected(version, relpath, [patch])
    assert take_out(patched, PATCHES[patch], shape) == original(version, relpath)
    assert take_out(original(version, relpath), PATCHES[patch], shape) is None
