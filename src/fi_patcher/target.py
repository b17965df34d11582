"""Reading the target: its interpreter, its installed FlashInfer, the files the patches work on,
fi-patch's records of them, and the copies of FlashInfer it does not work on. Reads only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fi_patcher.assess import assess, install_problem
from fi_patcher.environment import PROBE_TIMEOUT, choose_python, probe
from fi_patcher.errors import LayoutProblem, NotInstalled, StoreProblem, StoreUnreadable
from fi_patcher.installed import find_installed
from fi_patcher.model import (
    Assessment,
    Command,
    FileRecord,
    FileState,
    Imported,
    Installed,
    Interpreter,
    Patch,
)
from fi_patcher.options import Target
from fi_patcher.recognise import sha256_bytes
from fi_patcher.registry import load_patches
from fi_patcher.store import Store


@dataclass(frozen=True)
class Inspection:
    """One reading of the target: the assessment, the bytes it was made from, and the store."""

    assessment: Assessment
    sources: Mapping[str, bytes | None]
    store: Store
    unreadable: StoreUnreadable | None = None
    """Why fi-patch's records could not be read (another user's): states come from hashes, and
    any write is refused with this."""

    @property
    def installed(self) -> Installed:
        assert self.assessment.installed is not None
        return self.assessment.installed


def open_target(
    venv: Path | None,
    python: Path | None,
    environ: Mapping[str, str],
    timeout: float = PROBE_TIMEOUT,
) -> Target:
    interpreter_path, chosen_by = choose_python(venv, python, environ)
    packages = sorted({p.target.split("/")[0] for p in load_patches()})
    return Target(probe(interpreter_path, timeout, packages), chosen_by)


def environment_key(interpreter: Interpreter) -> tuple[str, ...]:
    """What makes two targets one environment: the prefix and site-packages its interpreter
    reports, links resolved. A venv's folder, its bin/python, its bin/python3 and a link to it
    share them; two Pythons of one prefix (/usr's 3.11 and 3.12) do not."""
    return tuple(os.path.realpath(p) for p in (interpreter.prefix, *interpreter.site_packages))


def inspect(
    interpreter: Interpreter, patches: Sequence[Patch], *, reading: bool = False
) -> Inspection:
    """The target's state for `patches`. With `reading` (check), records fi-patch may not read
    (another user's) do not stop it: the files' hashes still answer."""
    distribution = patches[0].distribution
    registry = load_patches()
    relpaths = {t for p in [*registry, *patches] for t in p.targets}
    installed = find_installed(interpreter, distribution, relpaths)
    # The records live with the files: a venv's shared base copy has its own, in the base.
    owner = interpreter.prefix
    if installed is not None and not interpreter.owns(installed.dist_info):
        owner = interpreter.base_prefix
    store = Store(owner)
    unreadable = None
    try:
        records = store.load()
    except StoreUnreadable as exc:
        if not reading:
            raise
        records, unreadable = {}, exc
    # Every file a patch may work on: which holds what is for the files to say (`identify`).
    sources: dict[str, bytes | None] = {}
    if installed is not None:
        sources = {r: _read(installed.files[r].path) for r in sorted(relpaths)}
    assessment = assess(
        patches,
        installed,
        sources,
        records,
        busy=store.holder(),
        unreadable=unreadable.message if unreadable else None,
        registry=registry,
    )
    return Inspection(assessment, sources, store, unreadable)


def usable(inspection: Inspection, interpreter: Interpreter) -> Installed:
    """The installed distribution, or the error that stops every command that writes."""
    assessment = inspection.assessment
    if assessment.installed is None:
        raise not_installed(assessment, interpreter)
    problem = install_problem(assessment)
    if problem is not None:
        raise problem
    return assessment.installed


def not_installed(assessment: Assessment, interpreter: Interpreter) -> NotInstalled:
    """The distribution is not installed here: said the same way by every command, naming the
    copy a normal start imports instead, if there is one (`pip install --target` on PYTHONPATH)."""
    patch = assessment.patches[0].patch
    message = f"{patch.distribution} is not installed in {interpreter.prefix}"
    remedy = "check that --venv names the environment your server runs in"
    found = interpreter.imports.get(patch.target.split("/")[0])
    if found is not None:
        message += (
            f"; a normal start of {interpreter.python} imports a copy from {found.path} (found "
            f"through {found.via}), which no installer recorded in this environment, so "
            "fi-patch does not patch it"
        )
        remedy = (
            f"install {patch.distribution} into the environment (pip install --python "
            f"{interpreter.python} {patch.distribution}) and drop that path, or point --venv at "
            "the environment that copy belongs to"
        )
    return NotInstalled(message, remedy=remedy)


def _read(path: Path) -> bytes | None:
    if path.is_symlink():
        raise LayoutProblem(
            f"{path} is a symlink to {os.readlink(path)}; fi-patch does not write through links",
            remedy="reinstall FlashInfer so that the file is a regular file",
        )
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LayoutProblem(f"cannot read {path}: {exc.strerror}") from exc


def record_path(interpreter: Interpreter, record: FileRecord) -> Path:
    """The file a manifest record names, refusing any path that leaves the environment."""
    for part in (record.site_packages, record.relpath):
        pure = PurePosixPath(part)
        if pure.is_absolute() or ".." in pure.parts:
            raise StoreProblem(f"the manifest names an unsafe path {part!r}; refusing to use it")
    path = interpreter.prefix / record.site_packages / record.relpath
    if not any(path.parent.is_relative_to(site) for site in interpreter.site_packages):
        raise StoreProblem(f"the manifest names {path}, outside this environment's site-packages")
    return path


def from_backup(store: Store, record: FileRecord, installed: Installed) -> bytes:
    """The original bytes fi-patch kept, checked against the manifest and against RECORD."""
    original = store.read_backup(record)
    expected = installed.files[record.relpath].record_sha256
    if expected is not None and expected != sha256_bytes(original):
        raise StoreProblem(
            f"the backup {record.backup} does not match RECORD ({expected[:12]}…); "
            "refusing to restore it",
            remedy="reinstall FlashInfer to get the original back: pip install "
            f"--force-reinstall --no-deps {installed.name}=={installed.version}",
        )
    return original


# --- copies fi-patch does not work on -----------------------------------------------------------


def foreign(
    installed: Installed | None, interpreter: Interpreter, command: Command
) -> LayoutProblem | None:
    """The copy this interpreter imports lives outside its environment (a venv made with
    --system-site-packages, its base's copy): fi-patch never writes there from here."""
    if installed is None or interpreter.owns(installed.dist_info):
        return None
    base = interpreter.base_python or interpreter.base_prefix / "bin" / "python3"
    return LayoutProblem(
        f"{installed.name} {installed.version} is installed in {installed.dist_info.parent}, "
        f"which belongs to the interpreter {base}, not to {interpreter.prefix}; fi-patch "
        "writes only inside the environment it was given",
        remedy=f"{_WHERE[command]} where it lives: fi-patch {command} --python {base} (every "
        "environment that shares it is changed with it), or install FlashInfer into this "
        "environment",
    )


_WHERE = {"apply": "patch it", "revert": "take the patches out"}


def imported_instead(installed: Installed | None, interpreter: Interpreter) -> Imported | None:
    """The copy a normal start of the interpreter imports, where it is not the one fi-patch
    works on (found through PYTHONPATH or the user's site-packages, which -I leaves out)."""
    if installed is None or not installed.files:
        return None
    file = next(iter(installed.files.values()))
    package = file.relpath.split("/")[0]
    found = interpreter.imports.get(package)
    own = os.path.realpath(file.site_packages / package)
    if found is None or os.path.realpath(found.path) == own:
        return None
    return found


def copies(
    installed: Installed | None, interpreter: Interpreter, instead: Imported | None
) -> tuple[str, ...]:
    """What fi-patch knows of copies other than the one it works on: later on the path (not
    imported), or imported instead by a normal start (`instead`)."""
    if installed is None:
        return ()
    notes = [
        f"another copy of {installed.name} ({info.name}) comes later on this interpreter's path: "
        "it is not imported, and fi-patch leaves it alone"
        for info in installed.shadowed
    ]
    if interpreter.normal_start is not None:
        notes.append(
            "a normal start of this interpreter fails in fi-patch's environment "
            f"({interpreter.normal_start}): whether a server imports the copy fi-patch works "
            "on could not be checked"
        )
    if instead is not None:
        notes.append(
            f"a normal start of {interpreter.python} imports {instead.path} (found through "
            f"{instead.via}), not the copy fi-patch works on in {interpreter.prefix}: a server "
            "started like fi-patch was does not run fi-patch's patches; remove that copy or "
            "that path, and run fi-patch with the server's environment"
        )
    return tuple(notes)


def original_of(inspection: Inspection, state: FileState) -> bytes:
    """FlashInfer's original bytes of a file: on disk, rebuilt from a fix made by hand, or in
    fi-patch's backup."""
    current = inspection.sources[state.relpath]
    assert current is not None
    if state.rebuilt is not None:
        return state.rebuilt
    if state.condition == "original" or state.record is None:
        return current
    return from_backup(inspection.store, state.record, inspection.installed)
