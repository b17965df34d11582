"""Helpers for the fault scenarios: outcomes, real mounts, and killing fi-patch mid-step."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fi_patcher.errors import ExitCode
from tests.support.cli import Run
from tests.support.venvs import written_files


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def records(venv: Path) -> list[dict[str, Any]]:
    """fi-patch's records in `venv`'s manifest."""
    manifest = venv / ".fi-patch" / "manifest.json"
    if not manifest.exists():
        return []
    found = json.loads(manifest.read_text())["files"]
    assert isinstance(found, list)
    return found


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
# Target files are counted in the order they are replaced: `after-replace` is after the first,
# `after-replace-2` after the second.
KILLER = r"""
import os, signal, sys
from fi_patcher import store
point, arguments = sys.argv[1], sys.argv[2:]
targets = ("cpp_ext.py", "fp4_quantization.py")
saves = [0]
replaces = [0]

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
    mine = os.fspath(destination).endswith(targets)
    if mine and point == "after-temp-write":
        kill()
    replace(source, destination)
    if mine:
        replaces[0] += 1
        if point in ("after-replace-%d" % replaces[0], "after-replace" if replaces[0] == 1 else ""):
            kill()
os.replace = hooked_replace

"""

# Runs fi-patch's real CLI in a child process whose writes fail where a sick disk fails them:
# the sync of a target's folder after its file was replaced (`fsync-once`: the first time only;
# `fsync-always`: every time), and with `fsync-then-full`, also every temporary file created
# beside a target after that (ENOSPC), so that putting the old bytes back fails too.
FAULTY = r"""
import errno, os, sys, tempfile
from pathlib import Path
from fi_patcher import store
fault, arguments = sys.argv[1], sys.argv[2:]
targets = ("jit", "quantization", "flashinfer")
failed = [0]

fsync_folder = store._fsync_folder
def sick_fsync(folder):
    if Path(folder).name in targets and (fault != "fsync-once" or not failed[0]):
        failed[0] += 1
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    fsync_folder(folder)
store._fsync_folder = sick_fsync

mkstemp = tempfile.mkstemp
def full_mkstemp(*args, **kwargs):
    folder = Path(kwargs.get("dir") or "")
    if fault == "fsync-then-full" and failed[0] and folder.name in targets:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return mkstemp(*args, **kwargs)
tempfile.mkstemp = full_mkstemp

"""


# Runs fi-patch's real CLI in a child process where working on one target (the prefix given
# first) raises an exception fi-patch does not expect: a bug, as a person would meet one.
BUGGY = r"""
import sys
from fi_patcher import api
broken, arguments = sys.argv[1], sys.argv[2:]
revert = api.revert
def buggy(target, chosen, options=None):
    if str(target.interpreter.prefix) == broken:
        raise RuntimeError("a bug fi-patch did not expect")
    return revert(target, chosen, options)
api.revert = buggy
"""


def buggy(broken: Path, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return _child(BUGGY, broken, *arguments)


def faulty(fault: str, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return _child(FAULTY, fault, *arguments)


def killed(point: str, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return _child(KILLER, point, *arguments)


def signalled(point: str, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    """As `killed`, but the process sends itself SIGTERM at `point`, and goes on."""
    return _child(KILLER.replace("signal.SIGKILL", "signal.SIGTERM"), point, *arguments)


# Every script above ends here, with `arguments` as fi-patch's command line.
MAIN = 'sys.argv = ["fi-patch", *arguments]\nfrom fi_patcher.cli import main\nmain()\n'


def _child(script: str, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    """fi-patch's real CLI in a child process, under one of the scripts above."""
    return subprocess.run(
        [sys.executable, "-c", script + MAIN, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
    )


def stale_temporaries(venv: Path) -> list[Path]:
    """Temporary files fi-patch left beside any file it writes, or beside its bytecode."""
    return sorted(
        t
        for p in written_files(venv)
        for t in (
            *p.parent.glob(f".{p.name}.*.fi-patch-tmp"),
            *(p.parent / "__pycache__").glob(f".{p.stem}.*.pyc.*.fi-patch-tmp"),
        )
    )


# Runs fi-patch's real CLI in a child process that, once it holds the lock and has made its
# plan, waits for the file `go` to exist before it writes: another fi-patch at work.
PAUSED = r"""
import sys, time
from pathlib import Path
from fi_patcher import protocol
go, arguments = Path(sys.argv[1]), sys.argv[2:]
run = protocol.Protocol.run
def paused(self, *args, **kwargs):
    while not go.exists():
        time.sleep(0.05)
    return run(self, *args, **kwargs)
protocol.Protocol.run = paused
"""

# Runs fi-patch's real CLI in a child process whose targets start their proofs after the write
# together (a barrier of as many threads as there are targets), and which says so on stderr.
MET = r"""
import sys, threading
from fi_patcher import protocol
count, arguments = int(sys.argv[1]), sys.argv[2:]
met = threading.Barrier(count, timeout=300)
prove = protocol.prove
def together(python, requests, timeout, processes=1):
    if requests and requests[0].mode == "after" and met.wait() == 0:
        print("every target is proving", file=sys.stderr, flush=True)
    return prove(python, requests, timeout, processes)
protocol.prove = together
"""

# Runs fi-patch's real CLI in a child process whose proofs after the write never finish, and
# which, before it says so, bind-mounts `folder` read-only (the real mount of a sick disk):
# putting back the file there fails, and every other file must still be put back.
STUCK = r"""
import subprocess, sys
from fi_patcher import protocol
from fi_patcher.errors import EnvironmentProblem
folder, arguments = sys.argv[1], sys.argv[2:]
prove = protocol.prove
def stuck(python, requests, timeout, processes=1):
    if requests and requests[0].mode == "before":
        return prove(python, requests, timeout, processes)
    subprocess.run(["mount", "--bind", folder, folder], check=True)
    subprocess.run(["mount", "-o", "remount,bind,ro", folder, folder], check=True)
    raise EnvironmentProblem("the proofs did not finish within 1 s")
protocol.prove = stuck
"""


def paused(go: Path, *arguments: str | Path) -> Started:
    return _started(PAUSED, go, *arguments)


def met(count: int, *arguments: str | Path) -> Started:
    """As `started`, with `count` targets that start their proofs after the write together."""
    return _started(FOREGROUND + MET, str(count), *arguments)


def stuck(folder: Path, *arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return _child(STUCK, folder, *arguments)


FOREGROUND = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_DFL)\n"


def started(*arguments: str | Path) -> Started:
    """fi-patch's real CLI, started and left running, as a terminal starts a command: with
    SIGINT's default action, even where the tests themselves run as a background job of a shell
    without job control (which starts them ignoring SIGINT, as it would fi-patch)."""
    return _started(FOREGROUND + "import sys\narguments = sys.argv[1:]\n", *arguments)


class Started(subprocess.Popen[str]):
    """fi-patch started and left running. A wait that runs out of time is a failure that shows
    where each of fi-patch's threads stood (faulthandler, on SIGABRT), and leaving the block
    kills a fi-patch still running: a hang fails its test instead of stopping the suite."""

    def communicate(
        self, input: str | None = None, timeout: float | None = None
    ) -> tuple[str, str]:
        try:
            return super().communicate(input, timeout)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGABRT)
            _, err = super().communicate(timeout=60)
            raise AssertionError(
                f"fi-patch still ran after {timeout} s; it stood at:\n{err}"
            ) from None

    def __exit__(self, *exc: object) -> None:
        if self.poll() is None:
            self.kill()
        super().__exit__(*exc)


def _started(script: str, *arguments: str | Path) -> Started:
    return Started(
        [sys.executable, "-c", script + MAIN, *map(str, arguments)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
    )
