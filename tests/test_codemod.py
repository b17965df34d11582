"""The pure engine on the real released texts: exact bytes in, exact bytes out."""

from __future__ import annotations

import pytest

from fi_patcher import __version__
from fi_patcher.codemod import AlreadyApplied, Transformed, Unrecognised, transform
from fi_patcher.recognise import render_diff
from fi_patcher.registry import load_patches, select
from tests.support.releases import RELEASES, released_text

PATCH = load_patches()[0]
PATCHABLE = [v for v, r in RELEASES.items() if r.shape]

# fi-patch's own lines: the only lines apply may add.
OWN_LINES = [
    f"    # fi-patch: cuda-version-torch-first (fi-patch {__version__})\n",
    "    if torch.version.cuda is not None:\n",
    "        return Version(torch.version.cuda)\n",
]


def original(version: str) -> str:
    return released_text(RELEASES[version]).decode("utf-8")


def expected(version: str, newline: str = "\n") -> str:
    """The release's text with fi-patch's lines right after `def get_cuda_version`."""
    lines = original(version).splitlines(keepends=True)
    at = RELEASES[version].def_line
    assert at is not None and lines[at - 1].startswith("def get_cuda_version() -> Version:")
    return "".join(lines[:at] + OWN_LINES + lines[at:]).replace("\n", newline)


def run(text: str, version: str, *, structural: bool = False) -> object:
    shape = select(PATCH, version).shape
    shapes = (shape,) if shape else PATCH.shapes
    return transform(text, PATCH, shapes, __version__, structural=structural)


@pytest.mark.parametrize("version", PATCHABLE)
def test_fixes_exact_bytes(version: str) -> None:
    result = run(original(version), version)
    assert isinstance(result, Transformed)
    assert result.text == expected(version)
    assert result.shape.name == RELEASES[version].shape


@pytest.mark.parametrize("version", PATCHABLE)
def test_diff_adds_only_our_lines(version: str) -> None:
    diff = render_diff(original(version), expected(version), PATCH.target)
    at = RELEASES[version].def_line
    assert at is not None
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


@pytest.mark.parametrize("version", PATCHABLE)
def test_noop_on_patched_text_and_original_recovered(version: str) -> None:
    result = run(expected(version), version)
    assert isinstance(result, AlreadyApplied)
    assert result.original == original(version)


def test_noop_when_patched_by_another_fi_patch_version() -> None:
    text = expected("0.7.4").replace(f"(fi-patch {__version__})", "(fi-patch 0.0.1)")
    result = run(text, "0.7.4")
    assert isinstance(result, AlreadyApplied)
    assert result.original == original("0.7.4")


@pytest.mark.parametrize("version", ["0.2.14.post1", "0.7.4"])
def test_crlf_line_endings_are_kept(version: str) -> None:
    crlf = original(version).replace("\n", "\r\n")
    result = run(crlf, version)
    assert isinstance(result, Transformed)
    assert result.text == expected(version, "\r\n")


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


def test_reformatted_function_matches_only_structurally() -> None:
    text = original("0.7.4").replace(
        "    # Try to query nvcc for CUDA version; if nvcc is unavailable, fall back to "
        "torch.version.cuda\n",
        "",
    )
    assert isinstance(run(text, "0.7.4"), Unrecognised)
    result = run(text, "0.7.4", structural=True)
    assert isinstance(result, Transformed)
    assert result.shape.name == "B"


def test_edit_elsewhere_in_the_file_keeps_the_function_patchable() -> None:
    text = original("0.7.4") + "\n# a local note\n"
    result = run(text, "0.7.4")
    assert isinstance(result, Transformed)
    assert result.text == expected("0.7.4") + "\n# a local note\n"


def test_patched_statements_edited_are_not_already_applied() -> None:
    text = expected("0.7.4").replace(
        "return Version(torch.version.cuda)", 'return Version("12.8")', 1
    )
    result = run(text, "0.7.4")
    assert isinstance(result, Unrecognised)
    assert result.found is not None and 'Version("12.8")' in result.found.text


def test_missing_import_is_refused() -> None:
    text = original("0.7.4").replace("from packaging.version import Version\n", "", 1)
    result = run(text, "0.7.4")
    assert isinstance(result, Unrecognised)
    assert "Version" in result.reason


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
