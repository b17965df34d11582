"""fi-patch's records in the target environment, and every write fi-patch makes.

The store is `<prefix>/.fi-patch/`: `manifest.json` (one record per file fi-patch changed),
`backups/<sha256>.py` (original bytes, and the bytes a running write replaces, named by their
hash) and `lock`. It lies outside site-packages, so a reinstall of FlashInfer leaves it alone.

Every write of a target file is a `Transaction`: it records the steps `undo` must reverse (the
journal entry, the replace) and the backups it created.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import pwd
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fi_patcher.errors import StoreProblem, StoreUnreadable, WriteFailed
from fi_patcher.interrupts import checkpoint
from fi_patcher.model import Bytecode, Command, FileRecord, Holder, PatchRecord, Pending
from fi_patcher.recognise import sha256_bytes

SCHEMA = 2
STORE_DIR = ".fi-patch"
LOCK_TIMEOUT = 120.0
TEMPORARY_SUFFIX = ".fi-patch-tmp"
BACKUP_NAME = re.compile(r"[0-9a-f]{64}\.py")


def backup_name(sha256: str) -> str:
    return f"{sha256}.py"


class Store:
    def __init__(self, prefix: Path) -> None:
        self.root = prefix / STORE_DIR
        self.manifest_path = self.root / "manifest.json"
        self.backups = self.root / "backups"

    # --- manifest ---

    def load(self) -> dict[str, FileRecord]:
        """Records by file (relpath); empty when fi-patch never wrote here. A manifest of schema
        1 (fi-patch 0.1.0) is read and migrated; it is written as schema 2 on the next write."""
        try:
            raw = self.manifest_path.read_bytes()
        except FileNotFoundError:
            return {}
        except PermissionError as exc:
            raise StoreUnreadable(
                f"cannot read {self.manifest_path}: {exc.strerror}",
                remedy=f"run fi-patch as {self.owner()}, who owns the environment's records",
            ) from exc
        except OSError as exc:
            raise StoreProblem(f"cannot read {self.manifest_path}: {exc.strerror}") from exc
        try:
            data = json.loads(raw)
            schema = data["schema"]
            if not isinstance(schema, int):
                raise TypeError("schema is not an integer")
            if schema > SCHEMA:
                raise StoreProblem(
                    f"{self.manifest_path} was written by a newer fi-patch (schema {schema}; "
                    f"this fi-patch reads {SCHEMA})",
                    remedy="upgrade fi-patch (pipx upgrade fi-patch) before touching this "
                    "environment",
                )
            records = [_migrate(e) for e in data["entries"]] if schema == 1 else data["files"]
            loaded = [r if isinstance(r, FileRecord) else _file_record(r) for r in records]
            return {r.relpath: r for r in loaded}
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreProblem(
                f"{self.manifest_path} is corrupt: {exc!r}",
                remedy="inspect it by hand; the original bytes are still in "
                f"{self.backups}, named by their sha256",
            ) from exc

    def save(self, records: Mapping[str, FileRecord]) -> None:
        data = {
            "schema": SCHEMA,
            "files": [dataclasses.asdict(records[k]) for k in sorted(records)],
        }
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        self._make_root()
        atomic_write(self.manifest_path, text.encode("utf-8"), mode=0o600)

    # --- backups ---

    def put_backup(self, data: bytes) -> tuple[str, bool]:
        """Keep `data` under its own hash; return the backup's name and whether it is new."""
        name = backup_name(sha256_bytes(data))
        path = self.backups / name
        if path.exists() and sha256_bytes(path.read_bytes()) == sha256_bytes(data):
            return name, False
        self._make_root()
        self.backups.mkdir(mode=0o700, exist_ok=True)
        atomic_write(path, data, mode=0o600)
        return name, True

    def read_backup(self, record: FileRecord, sha256: str | None = None) -> bytes:
        """The bytes a backup holds (the original by default), after checking their hash."""
        wanted = sha256 or record.original
        name = record.backup if sha256 is None else backup_name(sha256)
        reinstall = (
            "reinstall FlashInfer to get the original back: "
            f"pip install --force-reinstall --no-deps {record.dist}=={record.version}"
        )
        if not BACKUP_NAME.fullmatch(name):
            raise StoreProblem(
                f"the manifest names the backup {name!r}, which fi-patch never writes; "
                "refusing to read it"
            )
        path = self.backups / name
        try:
            data = path.read_bytes()
        except FileNotFoundError as exc:
            raise StoreProblem(f"the backup {path} is missing", remedy=reinstall) from exc
        if sha256_bytes(data) != wanted:
            raise StoreProblem(
                f"the backup {path} does not match the manifest (sha256 "
                f"{sha256_bytes(data)[:12]}…, expected {wanted[:12]}…); refusing to restore it",
                remedy=reinstall,
            )
        return data

    def drop_unreferenced(self, records: Mapping[str, FileRecord]) -> None:
        """Delete backups no record names: left by a run killed between backup and manifest, or
        no longer needed once a write is committed."""
        if not self.backups.is_dir():
            return
        kept = referenced(records)
        for path in self.backups.iterdir():
            if BACKUP_NAME.fullmatch(path.name) and path.name not in kept:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    # --- lock ---

    @contextlib.contextmanager
    def lock(
        self,
        command: Command,
        timeout: float = LOCK_TIMEOUT,
        waiting: Callable[[Holder | None], None] | None = None,
    ) -> Iterator[None]:
        """Hold the environment's lock, saying in it who holds it (`command`, this pid, since
        when); wait for another fi-patch up to `timeout` seconds, telling `waiting` whom."""
        self._make_root()
        path = self.root / "lock"
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise WriteFailed(
                f"cannot open fi-patch's lock {path}: {exc.strerror}",
                remedy=f"run fi-patch as {self.owner()}, who owns the environment's records "
                "(fi-patch writes only as the owner)",
            ) from exc
        try:
            deadline = time.monotonic() + timeout
            told = False
            while True:
                try:
                    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError as exc:
                    holder = _read_holder(descriptor)
                    if time.monotonic() >= deadline:
                        raise WriteFailed(
                            f"{_holding(holder)} has held {path} for more than {timeout:g} s",
                            remedy="wait for it to finish (fi-patch waits as long as two "
                            "proofs may take), then run this command again",
                        ) from exc
                    if waiting is not None and not told:
                        waiting(holder)
                        told = True
                    time.sleep(0.1)
                    checkpoint()
            since = datetime.now(UTC).isoformat(timespec="seconds")
            mine = {"pid": os.getpid(), "command": command, "since": since}
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, json.dumps(mine).encode(), 0)
            yield
        finally:
            os.close(descriptor)

    def holder(self) -> Holder | None:
        """Who holds the lock now, if anyone. Reads only: a shared lock that cannot be had means
        an exclusive one is held."""
        try:
            descriptor = os.open(self.root / "lock", os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(descriptor) or Holder(0, "fi-patch", "")
                return None if holder.pid == os.getpid() else holder
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            return None
        finally:
            os.close(descriptor)

    def owner(self) -> str:
        """Who owns the store (or the environment, before there is one), for messages."""
        for path in (self.root, self.root.parent):
            try:
                return _user(path.stat().st_uid)
            except OSError:
                continue
        return "the user who owns the environment"

    def _make_root(self) -> None:
        try:
            self.root.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise WriteFailed(
                f"cannot create fi-patch's folder {self.root}: {exc.strerror}",
                remedy="run fi-patch as the user who owns the environment",
            ) from exc


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name}"
    except KeyError:
        return f"uid {uid}"


def _read_holder(descriptor: int) -> Holder | None:
    try:
        data = json.loads(os.pread(descriptor, 4096, 0) or b"null")
        return Holder(int(data["pid"]), str(data["command"]), str(data["since"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _holding(holder: Holder | None) -> str:
    return holder.describe() if holder is not None else "another fi-patch"


def referenced(records: Mapping[str, FileRecord]) -> set[str]:
    """The backups the records need: each original, and the bytes any running write replaces."""
    names = {r.backup for r in records.values()}
    names.update(backup_name(r.pending.previous) for r in records.values() if r.pending)
    return names


class Journal:
    """The manifest, held in memory under the lock: every change is saved at once."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.records = store.load()

    def settle(self, relpath: str, record: FileRecord | None) -> None:
        """A write's final record (None: the file is the original again), and the backups no
        record needs any more deleted."""
        self.put(relpath, record)
        self.store.drop_unreferenced(self.records)

    def put(self, relpath: str, record: FileRecord | None) -> None:
        """Save the manifest with `relpath`'s record replaced (None: removed); memory follows
        only once the manifest is on disk."""
        records = {k: v for k, v in self.records.items() if k != relpath}
        if record is not None:
            records[relpath] = record
        self.store.save(records)
        self.records = records


@dataclasses.dataclass(frozen=True)
class Change:
    """One write of one target file, in plain values."""

    path: Path
    relpath: str
    before: bytes
    """The bytes on disk now; a backup keeps them until the write is committed."""
    after: bytes
    """The bytes to write."""
    staged: FileRecord
    """The record while the write is under way (its `pending` says what is being written)."""
    committed: FileRecord | None
    """The record once the write is proven; None when the file is FlashInfer's original again."""
    original: bytes | None = None
    """FlashInfer's original bytes, where they are neither on disk nor backed up yet (a fix
    made by hand, adopted): they are backed up too."""
    absent: bool = False
    """The file is gone (`before` is then empty): undoing the write removes it again."""


class Transaction:
    """One file's write: backup, journal entry, replace, bytecode. The steps `undo` reverses are
    recorded as they are taken; an error after the replace keeps the backups."""

    def __init__(self, journal: Journal, change: Change, bytecode: Bytecode | None = None) -> None:
        self.journal = journal
        self.change = change
        self.bytecode = bytecode
        """The new text's bytecode, written where the file had bytecode of its own."""
        self.previous = journal.records.get(change.relpath)
        self.steps: list[str] = []
        self.created: list[str] = []
        self.cached: Cached | None = None

    def write(self) -> None:
        change = self.change
        mode = stat.S_IMODE(os.stat(change.path).st_mode) if change.path.exists() else 0o644
        for data in (None if change.absent else change.before, change.original):
            if data is not None:
                name, new = self.journal.store.put_backup(data)
                if new:
                    self.created.append(name)
        self.journal.put(change.relpath, change.staged)
        self.steps.append("journal")
        self.cached = None if change.absent else Cached.of(change.path)
        atomic_write(change.path, change.after, mode=mode, replaced=self._replaced)
        clear_bytecode(change.path)
        if self.cached is not None and self.bytecode is not None:
            self.cached.replace_with(self.bytecode)

    def _replaced(self) -> None:
        self.steps.append("replace")

    def commit(self) -> None:
        self.journal.settle(self.change.relpath, self.change.committed)

    def undo(self) -> None:
        """Reverse the steps taken, last first. If the file cannot be put back, the journal
        entry and every backup stay, so that the next command can finish the job."""
        change = self.change
        if "replace" in self.steps and change.absent:
            self._remove()
        if "replace" in self.steps:
            with contextlib.suppress(WriteFailed):  # the new text's, before the old text is back
                clear_bytecode(change.path)
            mode = stat.S_IMODE(os.stat(change.path).st_mode)
            put_back: list[bool] = []
            try:
                atomic_write(
                    change.path, change.before, mode=mode, replaced=lambda: put_back.append(True)
                )
            except WriteFailed as exc:
                if not put_back:
                    raise self._stranded(exc) from exc
                # The old bytes are back; only the folder's sync failed, as it did before.
            self.steps.remove("replace")
            if self.cached is not None:
                self.cached.put_back(change.path)
        if "journal" in self.steps:
            self.journal.put(change.relpath, self.previous)
        kept = referenced(self.journal.records)
        for name in self.created:
            if name not in kept:
                with contextlib.suppress(FileNotFoundError):
                    (self.journal.store.backups / name).unlink()
        self.steps.clear()

    def _remove(self) -> None:
        """Undo the write of a file that was gone: it is gone again."""
        try:
            self.change.path.unlink(missing_ok=True)
            _fsync_folder(self.change.path.parent)
        except OSError as exc:
            failed = WriteFailed(f"cannot remove {self.change.path}: {exc.strerror or exc}")
            raise self._stranded(failed) from exc
        self.steps.remove("replace")
        clear_bytecode(self.change.path)

    def _stranded(self, exc: WriteFailed) -> WriteFailed:
        """The new bytes stay, and cannot be taken back now: say where everything is."""
        store = self.journal.store
        return WriteFailed(
            f"{self.change.path} holds fi-patch's new bytes, and putting the old ones back "
            f"failed too: {exc.message}",
            remedy=f"fix the cause, then run `fi-patch revert` (the original is kept in "
            f"{store.backups / self.change.staged.backup}, and {store.manifest_path} records "
            "the unfinished write) or `fi-patch apply` to finish it",
        )


def _migrate(entry: dict[str, Any]) -> FileRecord:
    """A schema-1 entry (one patch, one file) as a schema-2 file record."""
    patch = PatchRecord(**_known(PatchRecord, {**entry, "id": entry["patch_id"]}))
    common = {
        "relpath": entry["relpath"],
        "site_packages": entry["site_packages"],
        "dist": entry["dist"],
        "version": entry["version"],
        "record_sha256": entry["record_sha256"],
        "original": entry["sha256_before"],
        "backup": entry["backup"],
    }
    before, after = entry["sha256_before"], entry["sha256_after"]
    status = entry.get("status", "applied")
    if status == "applying":
        pending = Pending("apply", (patch,), after, before)
        return FileRecord(**common, sha256=before, pending=pending)
    if status == "reverting":
        return FileRecord(
            **common, sha256=after, patches=(patch,), pending=Pending("revert", (), before, after)
        )
    return FileRecord(**common, sha256=after, patches=(patch,))


def _file_record(data: dict[str, Any]) -> FileRecord:
    fields = _known(FileRecord, data)
    fields["patches"] = tuple(_patch_record(p) for p in data.get("patches", ()))
    pending = data.get("pending")
    if pending is not None:
        patches = tuple(_patch_record(p) for p in pending.get("patches", ()))
        fields["pending"] = Pending(**{**_known(Pending, pending), "patches": patches})
    return FileRecord(**fields)


def _patch_record(data: dict[str, Any]) -> PatchRecord:
    return PatchRecord(**_known(PatchRecord, data))


def _known(kind: type, data: dict[str, Any]) -> dict[str, Any]:
    """The fields `kind` has: a newer fi-patch of the same schema may add others."""
    names = {f.name for f in dataclasses.fields(kind)}
    return {k: v for k, v in data.items() if k in names}


def atomic_write(
    path: Path,
    data: bytes,
    *,
    mode: int | None = None,
    replaced: Callable[[], None] | None = None,
    owner: tuple[int, int] | None = None,
) -> None:
    """Write `data` to `path` through a new file in the same folder and `os.replace`.

    The result is a new inode: a hardlinked twin (uv links site-packages to its cache) keeps its
    bytes, and a reader sees either the old file or the new one, never half of either.
    `replaced` is called as soon as the new file is in place, before the folder is synced, so
    that a caller can tell a failure that left the old file from one that did not. The new
    file gets the old one's owner and group, or `owner` where there is no old one.
    """
    descriptor = -1
    temporary = ""
    try:
        descriptor, temporary = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX
        )
        with os.fdopen(descriptor, "wb") as handle:
            descriptor = -1
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(temporary, mode)
        _same_owner(temporary, path, owner)
        os.replace(temporary, path)
        temporary = ""
        if replaced is not None:
            replaced()
        _fsync_folder(path.parent)
    except OSError as exc:
        raise WriteFailed(
            f"cannot write {path}: {exc.strerror or exc}",
            remedy=_remedy(exc),
        ) from exc
    finally:
        if descriptor >= 0:
            os.close(descriptor)
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _same_owner(temporary: str, path: Path, owner: tuple[int, int] | None) -> None:
    """The new file gets the owner and group of the one it replaces (root writing another
    user's environment must not leave files that user cannot replace later)."""
    try:
        old = path.stat()
        wanted = (old.st_uid, old.st_gid)
    except FileNotFoundError:  # a file put back where it was gone: `owner`, or its folder's
        folder = path.parent.stat()
        wanted = owner or (folder.st_uid, folder.st_gid)
    new = os.stat(temporary)
    if (new.st_uid, new.st_gid) != wanted:
        os.chown(temporary, *wanted)


def clear_temporaries(path: Path) -> list[Path]:
    """Delete temporary files that a killed fi-patch left beside `path` and beside its bytecode
    (see `atomic_write`)."""
    removed = []
    left = [
        *path.parent.glob(f".{path.name}.*{TEMPORARY_SUFFIX}"),
        *(path.parent / "__pycache__").glob(f".{path.stem}.*.pyc.*{TEMPORARY_SUFFIX}"),
    ]
    for temporary in sorted(left):
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
            removed.append(temporary)
    return removed


@dataclasses.dataclass(frozen=True)
class Cached:
    """A file's times and cached bytecode before a write, so that undoing the write leaves the
    bytecode as valid as it was (a timestamp .pyc holds the source's mtime and size), and the
    write puts the new text's bytecode where the old text had its own.

    Bytecode is a cache: what cannot be written or put back is left for the interpreter to
    compile from the source, which is always there. An undo deletes the new text's .pyc before
    the old text is back."""

    times: tuple[int, int]
    bytecode: Mapping[Path, tuple[os.stat_result, bytes]]
    """Each .pyc: its owner and mode (in its stat), and its bytes."""

    @classmethod
    def of(cls, source: Path) -> Cached:
        found = os.stat(source)
        bytecode = {}
        for cached in _bytecode_of(source):
            with contextlib.suppress(OSError):  # unreadable or gone: the interpreter recompiles
                bytecode[cached] = (os.stat(cached), cached.read_bytes())
        return cls((found.st_atime_ns, found.st_mtime_ns), bytecode)

    def replace_with(self, new: Bytecode) -> None:
        """Write the new text's bytecode, where the old text had a .pyc for that interpreter."""
        if new.path in self.bytecode:
            self._write(new.path, new.data)

    def put_back(self, source: Path) -> None:
        """After `source`'s old bytes are back: its times, then its old bytecode."""
        try:
            os.utime(source, ns=self.times)
        except OSError:
            return  # a timestamp .pyc would not match it: the interpreter compiles it
        for cached, (_, data) in self.bytecode.items():
            self._write(cached, data)

    def _write(self, cached: Path, data: bytes) -> None:
        found, _ = self.bytecode[cached]
        owner = (found.st_uid, found.st_gid)
        with contextlib.suppress(WriteFailed):  # nothing replaced: the interpreter compiles
            atomic_write(cached, data, mode=stat.S_IMODE(found.st_mode), owner=owner)


def _bytecode_of(source: Path) -> list[Path]:
    return sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"))


def clear_bytecode(source: Path) -> list[Path]:
    """Delete the cached bytecode of `source`, whatever its tag, optimisation level or mode.

    An unchecked-hash .pyc is never compared with its source, so without this an interpreter
    would keep running the old function.
    """
    removed = []
    for cached in _bytecode_of(source):
        try:
            cached.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise WriteFailed(
                f"cannot delete stale bytecode {cached}: {exc.strerror}", remedy=_remedy(exc)
            ) from exc
        removed.append(cached)
    return removed


def _fsync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remedy(exc: OSError) -> str:
    if exc.errno == errno.ENOSPC:
        return "free some disk space, then run the command again"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "run fi-patch as the user who owns the environment (or make it writable)"
    return "fix the cause above, then run the command again"
