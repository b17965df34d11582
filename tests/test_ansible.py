"""examples/ansible/playbook.yml, run by ansible-core against localhost on a real venv."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fi_patcher import __version__
from tests.conftest import MakeVenv
from tests.support.expected import expected
from tests.support.releases import FP4, RELEASES, released_text
from tests.support.tiers import SLOW
from tests.support.tool import ROOT
from tests.support.venvs import fp4_file, replace_bytes, target_file

PLAYBOOK = ROOT / "examples" / "ansible" / "playbook.yml"


@pytest.fixture(scope="module")
def dist() -> Path:
    """The wheel a real `make dist` builds in the clone, as the playbook's header says to."""
    subprocess.run(["make", "-C", ROOT, "dist"], check=True, capture_output=True)
    (wheel,) = (ROOT / "dist").glob("fi_patch-*.whl")
    return wheel


def playbook(
    venv: Path, tool: Path, wheel: Path | None, *flags: str, book: Path = PLAYBOOK
) -> tuple[int, str]:
    """ansible-playbook against localhost; `wheel` None names none (the playbook finds it)."""
    named = ["-e", f"fi_patch_wheel={wheel}"] if wheel is not None else []
    completed = subprocess.run(
        [
            Path(sys.executable).parent / "ansible-playbook",
            "-i",
            "localhost,",
            "-c",
            "local",
            book,
            *flags,
            "-e",
            f"target_venv={venv}",
            "-e",
            f"fi_patch_home={tool}",
            *named,
            "-e",
            f"fi_patch_python={sys.executable}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(tool.parent)},
        check=False,
    )
    return completed.returncode, completed.stdout + completed.stderr


def recap(output: str) -> dict[str, int]:
    line = next(x for x in output.splitlines() if x.startswith("localhost") and "ok=" in x)
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


def untouched(venv: Path) -> bool:
    return target_file(venv).read_bytes() == released_text(RELEASES["0.7.4"]) and (
        fp4_file(venv).read_bytes() == released_text(RELEASES["0.7.4"], FP4)
    )


@SLOW
def test_five_runs_the_way_operators_run_them(
    venv_with: MakeVenv, dist: Path, tmp_path: Path
) -> None:
    """As the playbook's header says: `make dist`, then the playbook naming no wheel. --check on
    a pristine host, --check --diff, a real run, the same again, --check on the patched host:
    each reports what it would do or did, and only the real run writes."""
    venv = venv_with("0.7.4")
    tool = tmp_path / "fi-patch-home"
    wheel = None

    code, output = playbook(venv, tool, wheel, "--check")
    assert code == 0, output
    assert recap(output)["changed"] >= 1 and recap(output)["failed"] == 0
    assert "cuda-version-torch-first would-apply, " in output
    assert untouched(venv) and not tool.exists()

    code, output = playbook(venv, tool, wheel, "--check", "--diff")
    assert code == 0, output
    assert "+++ b/flashinfer/jit/cpp_ext.py" in output
    assert "+    # fi-patch: cuda-version-torch-first" in output
    assert "+    # fi-patch: fp4-quantize-under-compile" in output
    assert untouched(venv) and not tool.exists()

    code, output = playbook(venv, tool, wheel)
    assert code == 0, output
    assert recap(output)["changed"] >= 2  # fi-patch installed, FlashInfer patched
    installed = subprocess.run([tool / "bin" / "fi-patch", "--version"], capture_output=True)
    assert installed.stdout.decode().strip() == f"fi-patch {__version__}"
    assert "cuda-version-torch-first applied, " in output
    assert "fp4-quantize-under-compile applied, " in output
    assert "op-silu-and-mul applied, " in output
    assert "op-silu-and-mul-scaled-nvfp4-experts-quantize applied, " in output
    assert "op-top-p-sampling-from-probs applied, " in output
    assert "op-trtllm-fp4-block-scale-moe applied, " in output
    assert f" applied ({venv})" in output  # the summary names the venv after its last patch
    assert target_file(venv).read_bytes() == expected("0.7.4").encode()
    assert fp4_file(venv).read_bytes() == expected("0.7.4", FP4).encode()

    code, output = playbook(venv, tool, wheel)
    assert code == 0, output
    assert (recap(output)["changed"], recap(output)["failed"]) == (0, 0)
    assert "cuda-version-torch-first already-applied, " in output

    code, output = playbook(venv, tool, wheel, "--check")
    assert code == 0, output
    assert (recap(output)["changed"], recap(output)["failed"]) == (0, 0)


@SLOW
def test_a_drifted_host_fails_with_fi_patch_s_own_message(
    venv_with: MakeVenv, dist: Path, tmp_path: Path
) -> None:
    """With the wheel named (-e fi_patch_wheel)."""
    venv = venv_with("0.7.4")
    tool = tmp_path / "fi-patch-home"
    wheel = dist
    assert playbook(venv, tool, wheel)[0] == 0
    replace_bytes(target_file(venv), target_file(venv).read_bytes() + b"# edited by hand\n")
    for flags in ((), ("--check",)):
        code, output = playbook(venv, tool, wheel, *flags)
        assert code != 0
        assert recap(output)["failed"] == 1
        said = " ".join(output.split())
        assert "fi-patch exit 7: refusing to patch" in said
        assert "changed since fi-patch wrote it" in said


@SLOW
def test_a_host_with_a_text_fi_patch_does_not_know_gets_every_other_patch(
    venv_with: MakeVenv, dist: Path, tmp_path: Path
) -> None:
    """0.7.1rc1, whose mm_fp4 fi-patch has never seen (fi-patch exits 16): the host is changed,
    not failed, and the left-out patch is in the task's output and among its warnings."""
    venv = venv_with("0.7.1rc1")
    tool = tmp_path / "fi-patch-home"
    code, output = playbook(venv, tool, dist)
    assert code == 0, output
    assert recap(output)["failed"] == 0 and recap(output)["changed"] >= 2
    said = " ".join(output.split())
    assert "cuda-version-torch-first applied, " in said
    assert "op-mm-fp4 left-out, " in said
    assert "[WARNING]: op-mm-fp4 left out: the text of mm_fp4 is not one fi-patch knows" in said
    code, output = playbook(venv, tool, dist)
    assert code == 0, output
    assert (recap(output)["changed"], recap(output)["failed"]) == (0, 0)


@pytest.mark.parametrize("wheels", [0, 2], ids=["no-wheel", "two-wheels"])
def test_a_dist_without_one_wheel_stops_before_any_host(
    venv_with: MakeVenv, tmp_path: Path, wheels: int
) -> None:
    """The playbook in a clone whose dist/ holds no wheel, or two: it says so and what to run."""
    clone = tmp_path / "clone"
    shutil.copytree(PLAYBOOK.parent, clone / "examples" / "ansible")
    (clone / "dist").mkdir()
    for version in ("0.5.0", "0.6.0")[:wheels]:
        (clone / "dist" / f"fi_patch-{version}-py3-none-any.whl").write_bytes(b"")
    venv = venv_with("0.7.4")
    tool = tmp_path / "fi-patch-home"
    book = clone / "examples" / "ansible" / "playbook.yml"
    code, output = playbook(venv, tool, None, "--check", book=book)
    assert code != 0
    said = " ".join(output.split())
    assert ("no wheel" if wheels == 0 else "several wheels") + f" in {clone / 'dist'}" in said
    assert "run `make dist` in the clone of fi-patch" in said
    assert untouched(venv) and not tool.exists()
