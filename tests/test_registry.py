"""The registry: version fits at the edges, its hashes against the real releases, and every
final release of FlashInfer known to every patch."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from importlib import resources

import pytest
from packaging.version import Version

from fi_patcher.errors import UsageError
from fi_patcher.identify import identify, looked_into, read
from fi_patcher.model import Case, Verdict
from fi_patcher.registry import (
    RegistryError,
    check_requirements,
    choose,
    expected,
    load_patches,
    parse_patch,
    span,
)
from tests.support.catalog import found_in, newest_named
from tests.support.expected import PATCHES, files_of, target_of
from tests.support.expected import expected as written
from tests.support.hashes import function_hashes
from tests.support.releases import (
    BOUNDARIES,
    CUDA,
    DECLARED,
    DECLARED_FAKE,
    FORWARDING,
    FP4,
    LOGGING,
    OP_BOUNDARY,
    RELEASES,
    TARGET,
    UNDER_COMPILE,
    final_versions,
    released_text,
)

CASES = [(p.id, case) for p in load_patches() for case in p.cases]


@pytest.mark.parametrize(("patch", "case"), CASES, ids=[f"{p}-{c.version}" for p, c in CASES])
def test_every_case_is_what_the_release_holds(patch: str, case: Case) -> None:
    """Each `[[cases]]` row of a patch's TOML, against the real release from the index: what
    the patch finds in its files, and where the version's ranges agree (final releases) or the
    files decide with a note (pre-releases)."""
    found = found_in(case.version)[patch].fit
    assert (found.verdict.value, found.shape.name if found.shape else None) == (
        case.verdict,
        case.shape,
    ), found.reason
    assert found.reason
    by_version = expected(PATCHES[patch], case.version)
    agrees = by_version.verdict is found.verdict and by_version.shape == found.shape
    if Version(case.version).is_prerelease:
        assert (found.note is not None) == (found.verdict is Verdict.KNOWN)
    elif found.verdict is not Verdict.UNKNOWN:
        assert agrees and found.note is None, by_version.reason


@pytest.mark.parametrize(
    ("version", "verdict", "shape", "reason"),
    [
        pytest.param("0.7.4", Verdict.KNOWN, "B", "shape B", id="final"),
        pytest.param("0.7.4+cu130", Verdict.KNOWN, "B", "shape B", id="local-label"),
        pytest.param("0.6.0rc1", Verdict.UNKNOWN, None, "outside every", id="pre-release"),
        pytest.param("0.7.4.post1", Verdict.UNKNOWN, None, "outside every", id="post-past-last"),
        pytest.param("0.3.1.post2", Verdict.UNKNOWN, None, "outside every", id="post-past-A"),
        pytest.param("0.7.5", Verdict.UNKNOWN, None, "outside every", id="newer"),
        pytest.param("0.2.14", Verdict.NOT_APPLICABLE, None, "no public", id="exempt"),
        pytest.param("not a version", Verdict.UNKNOWN, None, "not a valid", id="invalid"),
    ],
)
def test_the_version_cross_check(
    version: str, verdict: Verdict, shape: str | None, reason: str
) -> None:
    """What the ranges name for a version string: only a cross-check, since the files decide,
    but it is what a broken install is judged by and what the notes compare with."""
    by_version = expected(PATCHES[CUDA], version)
    assert by_version.verdict is verdict
    assert (by_version.shape.name if by_version.shape else None) == shape
    assert reason in by_version.reason


@pytest.mark.parametrize("version", ["0.2.14.post1", "0.6.8", "0.7.0", "0.7.4"])
def test_what_check_keeps_of_a_patched_file_finds_what_the_whole_file_holds(version: str) -> None:
    """The same, in the files as fi-patch writes them (every patch the registry applies there):
    what each patch places after its function is still read (an op boundary that follows it
    already)."""
    patches = load_patches()
    keep = looked_into(patches)
    fits = []
    for relpath in files_of(version):
        data = written(version, relpath).encode()
        pruned, whole = read(relpath, data, keep[relpath]), read(relpath, data)
        for patch in (replace(p, target=relpath) for p in patches if relpath in p.targets):
            fits.append(identify(patch, pruned, version))
            assert fits[-1] == identify(patch, whole, version), patch.id
    assert any("op boundary follows it already" in f.reason for f in fits)


HASHED = [(v, p) for v, r in RELEASES.items() for p in r.shapes]


@pytest.mark.parametrize("version", sorted(RELEASES, key=Version))
def test_what_check_keeps_of_a_file_finds_what_the_whole_file_holds(version: str) -> None:
    """check keeps, of each file it parses, only the bodies of the functions patches read (its
    memory: 0.7.4's gemm_base.py and fused_moe/core.py are 850 KB); every patch finds the same
    in that as in the whole file, in every release the tests install: the same verdict, shape,
    reason, note, span and hashes."""
    pruned = found_in(version)
    whole = found_in(version, whole=True)
    assert {i: f.fit for i, f in pruned.items()} == {i: f.fit for i, f in whole.items()}
    assert {i: f.patch.target for i, f in pruned.items()} == {
        i: f.patch.target for i, f in whole.items()
    }


@pytest.mark.parametrize(("version", "patch"), HASHED, ids=[f"{v}-{p}" for v, p in HASHED])
def test_registry_hashes_match_the_released_function(version: str, patch: str) -> None:
    release, registered = RELEASES[version], PATCHES[patch]
    relpath = target_of(patch, version)
    text = released_text(release, relpath)
    assert hashlib.sha256(text).hexdigest()[:12] == release.sha256_prefixes[relpath]
    hashes = function_hashes(text.decode("utf-8"), registered.function, registered.scope)
    assert hashes is not None
    raw, structure = hashes
    shape = registered.shape_named(release.shapes[patch])
    assert shape is not None and raw in shape.function_sha256
    assert structure == shape.structure_sha256
    found = found_in(version)[patch]
    assert (found.fit.shape, found.patch.target) == (shape, relpath)


@pytest.mark.parametrize("version", ["0.2.13", "0.2.14"])
def test_not_applicable_releases_have_no_public_function(version: str) -> None:
    text = released_text(RELEASES[version]).decode("utf-8")
    prefix = RELEASES[version].sha256_prefixes[TARGET]
    assert hashlib.sha256(text.encode()).hexdigest()[:12] == prefix
    assert function_hashes(text, PATCHES[CUDA].function) is None


def test_forwarding_is_not_applicable_where_upstream_forwards_by_keyword() -> None:
    """0.7.1's op is a different function: its text matches no shape of the forwarding patch,
    and is the already-fixed text its TOML keeps."""
    text = released_text(RELEASES["0.7.1"], FP4).decode("utf-8")
    hashes = function_hashes(text, PATCHES[FORWARDING].function)
    assert hashes is not None
    assert all(hashes[0] not in s.function_sha256 for s in PATCHES[FORWARDING].shapes)
    fixed = [e for e in PATCHES[FORWARDING].not_applicable if e.function_sha256]
    assert [hashes[0] in e.function_sha256 for e in fixed] == [True]
    assert "is_sf_swizzled_layout=is_sf_swizzled_layout" in text


def test_every_final_release_is_known_to_every_patch() -> None:
    """Each final release on the package index, from 0.2.0.post1 to the newest the catalog
    names, is in a range or not applicable for every patch: none falls into a gap."""
    newest = newest_named()
    versions = [v for v in final_versions() if Version("0.2.0.post1") <= Version(v) <= newest]
    assert Version("0.7.4") in map(Version, versions)
    for patch in load_patches():
        unknown = [v for v in versions if expected(patch, v).verdict is Verdict.UNKNOWN]
        assert unknown == [], patch.id


ALL = (LOGGING, CUDA, DECLARED, DECLARED_FAKE, FORWARDING, OP_BOUNDARY, UNDER_COMPILE, *BOUNDARIES)


def test_registry_order_and_requirements() -> None:
    patches = load_patches()
    assert [p.id for p in patches] == list(ALL)
    assert PATCHES[OP_BOUNDARY].requires.patches == (DECLARED,)
    # fi-patch's own ops carry tags (the stride contract, cudagraph_unsafe): custom_op takes
    # them from torch 2.8. fp4_quantize's own op is FlashInfer's.
    assert {str(PATCHES[p].requires.torch) for p in (OP_BOUNDARY, DECLARED, *BOUNDARIES)} == {
        ">=2.8"
    }
    assert PATCHES[UNDER_COMPILE].requires.patches == (FORWARDING,)
    assert str(PATCHES[UNDER_COMPILE].requires.torch) == ">=2.4"
    with pytest.raises(RegistryError, match="requires fp4-op-keyword-forwarding, which is not"):
        check_requirements([p for p in reversed(patches) if p.id not in (*BOUNDARIES, OP_BOUNDARY)])


def test_choose_by_id_keeps_registry_order() -> None:
    chosen = choose([UNDER_COMPILE, CUDA])
    assert chosen.ids == (CUDA, UNDER_COMPILE) and chosen.explicit
    assert choose(None).ids == ALL
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
        ('absent = "get_cuda_version"\n', "", "must say one of absent, defines or function_sha"),
        ('verdict = "known"', 'verdict = "maybe"', "case 0.2.14.post1: no verdict 'maybe'"),
        ('shape = "A"\nwhy', 'shape = "C"\nwhy', "a known verdict names one of its shapes"),
    ],
)
def test_a_malformed_patch_is_refused(old: str, new: str, message: str) -> None:
    text = (resources.files("fi_patcher.patches") / f"{CUDA}.toml").read_text()
    assert old in text
    with pytest.raises(RegistryError, match=message):
        parse_patch("edited.toml", text.replace(old, new, 1))


def test_a_fake_named_replaced_needs_fi_patch_s_own() -> None:
    """A [[declarations]] row that says FlashInfer's fake is wrong (fake_why) names an op whose
    fake fi-patch's placed code holds; packbits' fake is right, and fi-patch has none for it."""
    text = (resources.files("fi_patcher.patches") / f"{DECLARED}.toml").read_text()
    row = 'op = "flashinfer::packbits"\n'
    assert row in text
    said = row + 'fake_why = "wrong"\n'
    with pytest.raises(RegistryError, match="flashinfer::packbits: fake_why says its fake is"):
        parse_patch("edited.toml", text.replace(row, said, 1))
