"""What fi-patch starts in the target: each script run by its file's path, never as `-c` text,
so that `ps` or a crash report shows a short command, with `-I` where the script is isolated.

Real: the commands are recorded by a wrapper that the target's python is reached through, as
`ps` would show them, during a real `apply` with its proofs.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import zipfile
from importlib import resources
from itertools import takewhile
from pathlib import Path

import pytest
from typer.testing import CliRunner

import fi_patcher
from fi_patcher.environment import compile_check, run_script, script_text
from fi_patcher.errors import EnvironmentProblem, ExitCode
from tests.conftest import MakeVenv
from tests.support.cli import fi_patch
from tests.support.venvs import python_of

PACKAGE = Path(fi_patcher.__file__).parent
SCRIPTS = {"probe.py", "imports.py", "preflight.py", "compiles.py", "prove.py"}
NOT_ISOLATED = {"imports.py"}
"""A normal start, on purpose: PYTHONPATH and the user's site-packages count there."""


def recording(python: Path, folder: Path) -> Path:
    """A python that writes each command it is started with to a file of its own in `folder`,
    then runs `python` with it."""
    folder.mkdir()
    wrapper = folder.parent / "python"
    wrapper.write_text(
        f"#!/bin/sh\nprintf '%s\\0' \"$@\" > '{folder}'/$$\nexec '{python}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return wrapper


def commands(folder: Path) -> list[list[str]]:
    return [f.read_text().split("\0")[:-1] for f in sorted(folder.iterdir())]


def test_a_real_apply_starts_each_script_by_its_file_with_a_short_command(
    runner: CliRunner, venv_with: MakeVenv, tmp_path: Path
) -> None:
    venv = venv_with("0.5.0")
    log = tmp_path / "commands"
    run = fi_patch(runner, "apply", "--python", recording(python_of(venv), log))
    assert run.code == ExitCode.OK, run.text
    seen: set[str] = set()
    for command in commands(log):
        assert "-c" not in command, command
        assert len(" ".join(command)) < 400, command  # the proof runner as text was ~5 KB
        flags = list(takewhile(lambda argument: argument.startswith("-"), command))
        script = Path(command[len(flags)])
        assert script.parent == PACKAGE / "in_target", command
        assert script.name in SCRIPTS, command
        assert script.read_text(encoding="utf-8") == script_text(script.name)
        assert ("-I" in flags) is (script.name not in NOT_ISOLATED), command
        assert "-B" in flags or "-S" in flags, command
        assert "-Xutf8" in flags, command  # -I ignores PYTHONUTF8
        seen.add(script.name)
    assert seen == SCRIPTS


def test_the_normal_start_finds_nothing_of_what_lies_beside_its_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without -I, Python puts the script's folder first on sys.path: fi-patch's in_target/
    must not answer for the target's modules. The current folder stands there, as for `-c`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here_only").mkdir()
    (tmp_path / "here_only" / "__init__.py").write_text("")
    answer = run_script(
        Path(sys.executable),
        "imports.py",
        ["probe", "prove", "proofs", "here_only", "json"],
        timeout=60,
        what="import check",
        isolated=False,
    )
    assert answer["probe"] is answer["prove"] is answer["proofs"] is None
    assert answer["here_only"]["path"] == str(tmp_path / "here_only")
    assert answer["json"]["via"] == "sys.path"


# Imported from a zip, fi-patch has no file of its scripts to hand to the target.
FROM_ZIP = """
import json, stat, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import fi_patcher.environment as environment
assert environment.__file__.startswith(sys.argv[1]), environment.__file__
with environment.script_file("probe.py") as path:
    folder = path.parent
    facts = {
        "path": str(path),
        "text": path.read_text(encoding="utf-8"),
        "beside": sorted(p.name for p in folder.iterdir()),
        "mode": stat.S_IMODE(folder.stat().st_mode),
    }
facts["left"] = folder.exists()
facts["prefix"] = str(environment.probe(Path(sys.executable)).prefix)
environment.compile_check(Path(sys.executable), b"x = 1", "x.py", 60)
print(json.dumps(facts))
"""


def test_from_a_zip_a_script_runs_from_a_private_copy_removed_afterwards(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "fi_patch.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in PACKAGE.rglob("*.py"):
            zipped.write(path, path.relative_to(PACKAGE.parent).as_posix())
        for entry in resources.files("fi_patcher.patches").iterdir():
            if entry.name.endswith((".toml", ".py")):
                zipped.writestr(f"fi_patcher/patches/{entry.name}", entry.read_bytes())
    done = subprocess.run(
        [sys.executable, "-I", "-c", FROM_ZIP, str(archive)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert Path(facts["path"]).name == "probe.py"
    assert not facts["path"].startswith(str(archive))
    assert facts["text"] == script_text("probe.py")
    assert facts["beside"] == ["probe.py"]
    assert facts["mode"] == stat.S_IRWXU
    assert facts["left"] is False
    assert facts["prefix"] == sys.prefix


def test_the_compile_check_refuses_a_text_that_does_not_compile_naming_its_file() -> None:
    compile_check(Path(sys.executable), b"x = 1\n", "/site/flashinfer/ok.py", 60)
    with pytest.raises(EnvironmentProblem) as refused:
        compile_check(Path(sys.executable), b"x = (\n", "/site/flashinfer/jit/cpp_ext.py", 60)
    assert refused.value.message == (
        f"the patched text of /site/flashinfer/jit/cpp_ext.py does not compile in {sys.executable}"
    )
    assert any(
        'File "/site/flashinfer/jit/cpp_ext.py", line 1' in line for line in refused.value.details
    )
    assert "SyntaxError" in refused.value.details[-1]
