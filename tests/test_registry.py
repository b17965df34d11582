"""The registry: version selection at the edges, and its hashes against the real releases."""

from __future__ import annotations

import hashlib

import pytest

from fi_patcher.model import Verdict
from fi_patcher.recognise import function_hashes
from fi_patcher.registry import RegistryError, load_patches, parse_patch, select
from tests.support.releases import RELEASES, released_text

PATCH = load_patches()[0]


@pytest.mark.parametrize(
    ("version", "verdict", "shape"),
    [
        pytest.param("0.2.0.post1", Verdict.NOT_APPLICABLE, None, id="first-release"),
        pytest.param("0.2.13", Verdict.NOT_APPLICABLE, None, id="0.2.13-no-function"),
        pytest.param("0.2.14", Verdict.NOT_APPLICABLE, None, id="0.2.14-private-function"),
        pytest.param("0.2.14.post1", Verdict.IN_RANGE, "A", id="A-first"),
        pytest.param("0.3.1.post1", Verdict.IN_RANGE, "A", id="A-last"),
        pytest.param("0.3.1.post2", Verdict.UNKNOWN, None, id="just-past-A"),
        pytest.param("0.4.0", Verdict.IN_RANGE, "B", id="B-first"),
        pytest.param("0.7.2.post1", Verdict.IN_RANGE, "B", id="B-postN"),
        pytest.param("0.7.4", Verdict.IN_RANGE, "B", id="B-last"),
        pytest.param("0.7.4.post1", Verdict.UNKNOWN, None, id="postN-past-B"),
        pytest.param("0.7.5", Verdict.UNKNOWN, None, id="newer"),
        pytest.param("0.6.0rc1", Verdict.UNKNOWN, None, id="pre-release-inside-B"),
        pytest.param("0.2.8rc1", Verdict.UNKNOWN, None, id="pre-release-inside-N"),
        pytest.param("0.1.6", Verdict.UNKNOWN, None, id="older"),
        pytest.param("not a version", Verdict.UNKNOWN, None, id="invalid"),
    ],
)
def test_select(version: str, verdict: Verdict, shape: str | None) -> None:
    selection = select(PATCH, version)
    assert selection.verdict is verdict
    assert (selection.shape.name if selection.shape else None) == shape
    assert selection.reason


@pytest.mark.parametrize("version", [v for v, r in RELEASES.items() if r.shape])
def test_registry_hashes_match_the_released_function(version: str) -> None:
    release = RELEASES[version]
    text = released_text(release)
    assert hashlib.sha256(text).hexdigest()[:12] == release.file_sha256_prefix
    hashes = function_hashes(text.decode("utf-8"), PATCH.function)
    assert hashes is not None
    raw, structure = hashes
    shape = select(PATCH, version).shape
    assert shape is not None and shape.name == release.shape
    assert raw in shape.function_sha256
    assert structure == shape.structure_sha256


@pytest.mark.parametrize("version", ["0.2.13", "0.2.14"])
def test_not_applicable_releases_have_no_public_function(version: str) -> None:
    text = released_text(RELEASES[version]).decode("utf-8")
    assert hashlib.sha256(text.encode()).hexdigest()[:12] == RELEASES[version].file_sha256_prefix
    assert function_hashes(text, PATCH.function) is None


def test_pre_release_carries_shape_b_but_is_not_selected() -> None:
    text = released_text(RELEASES["0.6.0rc1"]).decode("utf-8")
    hashes = function_hashes(text, PATCH.function)
    assert hashes is not None
    assert hashes[0] in PATCH.shapes[1].function_sha256


def test_malformed_patch_file_is_reported_with_its_name() -> None:
    with pytest.raises(RegistryError, match=r"broken\.toml"):
        parse_patch("broken.toml", 'id = "x"\n')
