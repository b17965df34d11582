"""The registry: version fits at the edges, its hashes against the real releases, and every
final release of FlashInfer known to every patch."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest
from packaging.version import Version

from fi_patcher.errors import UsageError
from fi_patcher.model import Verdict
from fi_patcher.registry import (
    RegistryError,
    check_requirements,
    choose,
    fit,
    load_patches,
    parse_patch,
    span,
)
from tests.support.expected import PATCHES, target_of
from tests.support.hashes import function_hashes
from tests.support.releases import (
    CUDA,
    FORWARDING,
    FP4,
    OP_BOUNDARY,
    RELEASES,
    TARGET,
    UNDER_COMPILE,
    final_versions,
    released_text,
)

EDGES = {
    CUDA: [
        ("0.2.0.post1", Verdict.NOT_APPLICABLE, None, "first-release"),
        ("0.2.13", Verdict.NOT_APPLICABLE, None, "0.2.13-no-function"),
        ("0.2.14", Verdict.NOT_APPLICABLE, None, "0.2.14-private-function"),
        ("0.2.14.post1", Verdict.IN_RANGE, "A", "A-first"),
        ("0.3.1.post1", Verdict.IN_RANGE, "A", "A-last"),
        ("0.3.1.post2", Verdict.UNKNOWN, None, "just-past-A"),
        ("0.4.0", Verdict.IN_RANGE, "B", "B-first"),
        ("0.7.2.post1", Verdict.IN_RANGE, "B", "B-postN"),
        ("0.7.4", Verdict.IN_RANGE, "B", "B-last"),
        ("0.7.4.post1", Verdict.UNKNOWN, None, "postN-past-B"),
        ("0.7.5", Verdict.UNKNOWN, None, "newer"),
        ("0.6.0rc1", Verdict.UNKNOWN, None, "pre-release-inside-B"),
        ("0.2.8rc1", Verdict.UNKNOWN, None, "pre-release-inside-N"),
        ("0.1.6", Verdict.UNKNOWN, None, "older"),
        ("not a version", Verdict.UNKNOWN, None, "invalid"),
    ],
    FORWARDING: [
        ("0.6.11.post3", Verdict.NOT_APPLICABLE, None, "last-without-op"),
        ("0.6.12", Verdict.IN_RANGE, "positional", "first-op"),
        ("0.7.0.post1", Verdict.IN_RANGE, "positional", "last-positional"),
        ("0.7.0.post2", Verdict.UNKNOWN, None, "postN-past-positional"),
        ("0.7.1", Verdict.NOT_APPLICABLE, None, "fixed-upstream"),
        ("0.7.4", Verdict.NOT_APPLICABLE, None, "fixed-upstream-last"),
        ("0.6.12rc1", Verdict.UNKNOWN, None, "pre-release"),
    ],
    UNDER_COMPILE: [
        ("0.2.9", Verdict.NOT_APPLICABLE, None, "fp4-without-op"),
        ("0.6.11.post3", Verdict.NOT_APPLICABLE, None, "last-without-op"),
        ("0.6.12", Verdict.IN_RANGE, "0.6.12", "first-op"),
        ("0.6.12.post1", Verdict.UNKNOWN, None, "postN-of-single-release"),
        ("0.6.13", Verdict.IN_RANGE, "0.6.13", "0.6.13-first"),
        ("0.7.0.post1", Verdict.IN_RANGE, "0.6.13", "0.6.13-last"),
        ("0.7.1", Verdict.IN_RANGE, "0.7.1", "recipe-first"),
        ("0.7.2.post1", Verdict.IN_RANGE, "0.7.1", "recipe-last"),
        ("0.7.3", Verdict.UNKNOWN, None, "never-released"),
        ("0.7.4", Verdict.IN_RANGE, "0.7.4", "auto-backend"),
        ("0.7.5", Verdict.UNKNOWN, None, "newer"),
    ],
    OP_BOUNDARY: [
        ("0.2.8", Verdict.NOT_APPLICABLE, None, "before-fp4"),
        ("0.2.9", Verdict.IN_RANGE, "0.2.9", "first-fp4"),
        ("0.2.11.post1", Verdict.IN_RANGE, "0.2.9", "last-without-pdl"),
        ("0.2.11.post2", Verdict.IN_RANGE, "0.2.11.post2", "first-pdl"),
        ("0.5.3", Verdict.IN_RANGE, "0.3.1", "0.3.1-last"),
        ("0.6.6", Verdict.IN_RANGE, "0.6.0", "last-in-old-file"),
        ("0.6.7", Verdict.IN_RANGE, "0.6.7", "first-in-new-file"),
        ("0.6.9", Verdict.IN_RANGE, "0.6.8", "backend-last"),
        ("0.6.11.post3", Verdict.IN_RANGE, "0.6.11", "last-without-op"),
        ("0.6.11.post4", Verdict.UNKNOWN, None, "postN-past-range"),
        ("0.6.12", Verdict.NOT_APPLICABLE, None, "upstream-op"),
        ("0.7.4", Verdict.NOT_APPLICABLE, None, "upstream-op-last"),
        ("0.7.5", Verdict.UNKNOWN, None, "newer"),
    ],
}
FITS = [(p, *case) for p, cases in EDGES.items() for case in cases]


@pytest.mark.parametrize(
    ("patch", "version", "verdict", "shape"),
    [pytest.param(p, v, d, s, id=f"{p}-{name}") for p, v, d, s, name in FITS],
)
def test_fit(patch: str, version: str, verdict: Verdict, shape: str | None) -> None:
    found = fit(PATCHES[patch], version)
    assert found.verdict is verdict
    assert (found.shape.name if found.shape else None) == shape
    assert found.reason


CASES = [(v, p) for v, r in RELEASES.items() for p in r.shapes]


@pytest.mark.parametrize(("version", "patch"), CASES, ids=[f"{v}-{p}" for v, p in CASES])
def test_registry_hashes_match_the_released_function(version: str, patch: str) -> None:
    release, registered = RELEASES[version], PATCHES[patch]
    relpath = target_of(patch, version)
    text = released_text(release, relpath)
    assert hashlib.sha256(text).hexdigest()[:12] == release.sha256_prefixes[relpath]
    hashes = function_hashes(text.decode("utf-8"), registered.function)
    assert hashes is not None
    raw, structure = hashes
    shape = fit(registered, version).shape
    assert shape is not None and shape.name == release.shapes[patch]
    assert raw in shape.function_sha256
    assert structure == shape.structure_sha256


@pytest.mark.parametrize("version", ["0.2.13", "0.2.14"])
def test_not_applicable_releases_have_no_public_function(version: str) -> None:
    text = released_text(RELEASES[version]).decode("utf-8")
    prefix = RELEASES[version].sha256_prefixes[TARGET]
    assert hashlib.sha256(text.encode()).hexdigest()[:12] == prefix
    assert function_hashes(text, PATCHES[CUDA].function) is None


def test_forwarding_is_not_applicable_where_upstream_forwards_by_keyword() -> None:
    """0.7.1's op is a different function: its text matches no shape of the forwarding patch."""
    text = released_text(RELEASES["0.7.1"], FP4).decode("utf-8")
    hashes = function_hashes(text, PATCHES[FORWARDING].function)
    assert hashes is not None
    assert all(hashes[0] not in s.function_sha256 for s in PATCHES[FORWARDING].shapes)
    assert "is_sf_swizzled_layout=is_sf_swizzled_layout" in text


def test_every_final_release_is_known_to_every_patch() -> None:
    """Each final release up to 0.7.4 on the package index is in a range or not applicable,
    for every patch: none falls into a gap."""
    versions = [
        v for v in final_versions() if Version("0.2.0.post1") <= Version(v) <= Version("0.7.4")
    ]
    assert len(versions) == 74
    for patch in load_patches():
        unknown = [v for v in versions if fit(patch, v).verdict is Verdict.UNKNOWN]
        assert unknown == [], patch.id


def test_pre_release_carries_shape_b_but_is_not_selected() -> None:
    text = released_text(RELEASES["0.6.0rc1"]).decode("utf-8")
    hashes = function_hashes(text, PATCHES[CUDA].function)
    assert hashes is not None
    assert hashes[0] in PATCHES[CUDA].shapes[1].function_sha256


def test_registry_order_and_requirements() -> None:
    patches = load_patches()
    assert [p.id for p in patches] == [CUDA, FORWARDING, OP_BOUNDARY, UNDER_COMPILE]
    assert PATCHES[OP_BOUNDARY].requires.patches == ()
    assert str(PATCHES[OP_BOUNDARY].requires.torch) == ">=2.4"
    assert PATCHES[UNDER_COMPILE].requires.patches == (FORWARDING,)
    assert str(PATCHES[UNDER_COMPILE].requires.torch) == ">=2.4"
    with pytest.raises(RegistryError, match="requires fp4-op-keyword-forwarding, which is not"):
        check_requirements(list(reversed(patches)))


def test_choose_by_id_keeps_registry_order() -> None:
    chosen = choose([UNDER_COMPILE, CUDA])
    assert chosen.ids == (CUDA, UNDER_COMPILE) and chosen.explicit
    assert choose(None).ids == (CUDA, FORWARDING, OP_BOUNDARY, UNDER_COMPILE)
    assert not choose(None).explicit
    with pytest.raises(UsageError, match="no patch named 'nope'"):
        choose(["nope"])


@pytest.mark.parametrize(
    ("versions", "shown"),
    [
        (">=0.2.14.post1,<=0.3.1.post1", "0.2.14.post1 \u2013 0.3.1.post1"),
        ("==0.7.4", "0.7.4"),
        (">=2.4", ">=2.4"),
    ],
)
def test_span_reads_lowest_first(versions: str, shown: str) -> None:
    from packaging.specifiers import SpecifierSet

    assert span(SpecifierSet(versions)) == shown


def test_malformed_patch_file_is_reported_with_its_name() -> None:
    with pytest.raises(RegistryError, match=r"broken\.toml"):
        parse_patch("broken.toml", 'id = "x"\n')


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('text = "torch-first"', 'text = "nothing"', "shape A names no text"),
        ('preflight = ["cuda-toolkit"]', 'preflight = ["gpu"]', "unknown pre-flight check"),
        ('kind = "insert-first"', 'kind = "rewrite-all"', "operation kind 'rewrite-all'"),
    ],
)
def test_a_malformed_patch_is_refused(old: str, new: str, message: str) -> None:
    text = (resources.files("fi_patcher.patches") / f"{CUDA}.toml").read_text()
    assert old in text
    with pytest.raises(RegistryError, match=message):
        parse_patch("edited.toml", text.replace(old, new, 1))
