"""Helpers for the fault scenarios: outcomes, real mounts, and killing fi-patch mid-step."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from fi_patcher.errors import ExitCode
from tests.support.cli import Run
from tests.support.venvs import target_file


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expect(run: Run, code: ExitCode, *phrases: str) -> None:
    """The exit code, and every phrase of the message a person sees (stdout and stderr)."""
    assert run.code == code, f"exit {run.code}, expected {code.value}: {run.text}"
    for phrase in phrases:
        assert phrase in run.text, f"{phrase!r} not in {run.text!r}"


@contextlib.contextmanager
def mounted(folder: Path, *, size: int | None = None, read_only: bool = False) -> Iterator[None]:
    """Put `folder` on a real tmpfs of `size` bytes, or bind it read-only, keeping its files.

    Needs root (CI and the developers' machines run as root); the tests say which fault is real.
    """
    aside = folder.with_name(folder.name + ".aside")
    shutil.copytree(folder, aside, symlinks=True)
    if read_only:
        _mount("--bind", folder, folder)
        _mount("-o", "remount,bind,ro", folder, folder)
    else:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", folder)
        shutil.copytree(aside, folder, symlinks=True, dirs_exist_ok=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)
        shutil.rmtree(aside)


def fill(folder: Path) -> None:
    """Use up every free byte of the file system holding `folder`."""
    descriptor = os.open(folder / ".filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(descriptor, b"\0" * size)
    finally:
        os.close(descriptor)


def _mount(*arguments: str | Path) -> None:
    subprocess.run(["mount", *map(str, arguments)], check=True, capture_output=True)


# Runs fi-patch's real CLI in a child process that SIGKILLs itself at one step of the write
# protocol. The hooks wrap fi-patch's own functions; nothing in fi-patch knows about them.
KILLER = r"""
import os, signal, sys
from fi_patcher import store
point, arguments = sys.argv[1], sys.argv[2:]
target = "cpp_ext.py"
saves = [0]

def kill():
    os.kill(os.getpid(), signal.SIGKILL)

put_backup = store.Store.put_backup
def hooked_put_backup(self, data):
    if point == "before-backup":
        kill()
    name = put_backup(self, data)
    if point == "after-backup":
        kill()
    return name
store.Store.put_backup = hooked_put_backup

save = store.Store.save
def hooked_save(self, entries):
    if point == "before-manifest-%d" % (saves[0] + 1):
        kill()
    save(self, entries)
    saves[0] += 1
    if point == "after-manifest-%d" % saves[0]:
        kill()
store.Store.save = hooked_save

replace = os.replace
def hooked_replace(source, destination):
    mine = os.fspath(destination).endswith(target)
    if mine and point == "after-temp-write":
        kill()
    replace(source, destination)
    if mine and point == "after-replace":
        kill()
os.replace = hooked_replace

sys.argv = ["fi-patch", *arguments]
from fi_patcher.cli import main
main()
"""


def killed(point: str, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", KILLER, point, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
    )


def stale_temporaries(venv: Path) -> list[Path]:
    path = target_file(venv)
    return sorted(path.parent.glob(f".{path.name}.*.fi-patch-tmp"))
