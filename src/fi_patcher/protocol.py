"""The one write protocol, for apply and revert alike: compile-check what will be written (the
target's interpreter gives its bytecode too), prove before (a report), write every file, prove
after (the gate), then settle each file: commit it, or undo it. Every write is a store
`Transaction`. A failed write, or proofs that cannot run, undo every file; a failed proof undoes
the files it covers. An undo that fails never stops the others, and the error names what each
file holds afterwards. Runs under the environment's lock, after every refusal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from fi_patcher.environment import compile_check
from fi_patcher.errors import FiPatchError, VerificationFailed, WriteFailed, stopped_by
from fi_patcher.interrupts import checkpoint, shielded, stop_of
from fi_patcher.model import Command, Interpreter, Patch
from fi_patcher.options import Options, counted
from fi_patcher.proofs import ProofReport, ProofRequest, prove
from fi_patcher.shares import proven_in
from fi_patcher.store import Change, Journal, Transaction

Settlement = Literal["committed", "rolled-back", "restored", "stranded"]
"""committed: the new bytes stay, proven (or unproven under --no-verify); rolled-back: the bytes
before the command are back; restored: an interrupted run's unproven bytes failed their proof
and FlashInfer's original replaced them; stranded: fi-patch's new bytes stay, unproven, and
could not be undone (the journal and the backup say so, for the next command)."""


@dataclass(frozen=True)
class Write:
    """One file for the protocol: its change, the patches whose proofs gate it, and, for bytes
    an interrupted run left (nothing to write, only to prove), the original to put back if
    they fail."""

    change: Change
    proven: tuple[Patch, ...]
    restore: Change | None = None

    @property
    def writes(self) -> bool:
        # An adopted file may already hold fi-patch's bytes: its original must still be kept.
        change = self.change
        return change.before != change.after or change.original is not None


@dataclass(frozen=True)
class Done:
    """What the protocol did: each file's settlement, the proofs, and what stopped it."""

    settled: Mapping[str, Settlement] = field(default_factory=dict)
    before: Mapping[str, ProofReport] = field(default_factory=dict)
    after: Mapping[str, ProofReport] = field(default_factory=dict)
    failure: FiPatchError | None = None


@dataclass(frozen=True)
class Protocol:
    interpreter: Interpreter
    journal: Journal
    options: Options
    command: Command

    def run(
        self,
        writes: Sequence[Write],
        before: Sequence[ProofRequest] = (),
        failed: str = "",
        *,
        clear: Sequence[str] = (),
    ) -> Done:
        """Write and prove `writes`, reporting `before` first; `clear` names the records to
        remove (files that are already FlashInfer's original). `failed` opens the message of a
        failed proof (`after taking out …, `)."""
        # A signal before the first change propagates: nothing was changed (`interrupts`).
        python, progress = self.interpreter.python, self.options.progress
        written = [w.change for w in writes if w.writes]
        if written:
            progress(
                f"compile-checking the new text of {counted(len(written), 'file')} in {python}"
            )
        bytecode = {
            change.relpath: compile_check(
                python, change.after, str(change.path), self.options.timeout
            )
            for change in written
        }
        if clear:
            progress(f"clearing the records of {counted(len(clear), 'file')} already original")
        for relpath in clear:
            self.journal.put(relpath, None)
        if clear:
            self.journal.store.drop_unreferenced(self.journal.records)
        transactions: dict[str, Transaction] = {}
        try:
            reports = self._before(before)
        except BaseException as interrupt:
            return self._interrupted(transactions, interrupt, "proving the unpatched code", {})
        try:
            if written:
                named = ", ".join(c.relpath for c in written)
                progress(f"writing {counted(len(written), 'file')}: {named}", long=True)
            for write in writes:
                if write.writes:
                    checkpoint()
                    relpath = write.change.relpath
                    transaction = Transaction(self.journal, write.change, bytecode[relpath])
                    transactions[relpath] = transaction
                    transaction.write()
            checkpoint()
        except FiPatchError as error:
            return self._undone(transactions, error, "", reports)
        except BaseException as interrupt:
            return self._interrupted(transactions, interrupt, "writing", reports)
        after = self._after(writes, transactions, reports)
        if isinstance(after, Done):
            return after
        return self._settle(writes, transactions, after, reports, failed)

    def _before(self, requests: Sequence[ProofRequest]) -> dict[str, ProofReport]:
        """The proofs before writing are a report, not a gate: what proves the patch is after."""
        if not (self.options.verify and requests):
            return {}
        self._proving("the unpatched code", requests, fresh=False)
        try:
            return prove(
                self.interpreter.python,
                requests,
                self.options.verify_timeout,
                self.options.proof_processes,
            )
        except FiPatchError as error:
            return {
                r.patch.id: ProofReport(
                    r.patch.id, "before", False, f"did not finish: {error.message}", error.details
                )
                for r in requests
            }

    def _proving(self, what: str, requests: Sequence[ProofRequest], fresh: bool) -> None:
        count = counted(len(requests), "patch")
        processes = self.options.proof_processes
        where = proven_in(self.interpreter.python, len(requests), processes, fresh=fresh)
        self.options.progress(f"proving {what} of {count} {where}", long=True)

    def _after(
        self,
        writes: Sequence[Write],
        transactions: Mapping[str, Transaction],
        before: Mapping[str, ProofReport],
    ) -> dict[str, ProofReport] | Done:
        """Every patch of every file, in fresh processes; a proof that cannot run at all puts every
        file back."""
        requests = [ProofRequest(p, "after", w.change.path) for w in writes for p in w.proven]
        if not (self.options.verify and requests):
            return {}
        self._proving("the patched code", requests, fresh=True)
        try:
            checkpoint()
            reports = prove(
                self.interpreter.python,
                requests,
                self.options.verify_timeout,
                self.options.proof_processes,
            )
            checkpoint()
        except FiPatchError as error:
            cause = VerificationFailed(
                f"the proofs did not finish: {error.message}",
                remedy=error.remedy,
                details=error.details,
            )
            return self._undone(transactions, cause, "rolled back: ", before)
        except BaseException as interrupt:  # never leave an unproven patch
            return self._interrupted(transactions, interrupt, "proving the written files", before)
        silent = ProofReport("", "after", False, "fails: the proof process gave no answer for it")
        return {
            r.patch.id: reports.get(r.patch.id, replace(silent, patch=r.patch.id)) for r in requests
        }

    @shielded()
    def _settle(
        self,
        writes: Sequence[Write],
        transactions: Mapping[str, Transaction],
        after: Mapping[str, ProofReport],
        before: Mapping[str, ProofReport],
        failed: str,
    ) -> Done:
        """Commit each file whose proofs passed, put back each other one."""
        settled: dict[str, Settlement] = {}
        problems: list[str] = []
        self._settling(writes, transactions, after)
        for write in writes:
            relpath = write.change.relpath
            green = _green(write, after)
            transaction = transactions.get(relpath)
            try:
                settled[relpath] = self._one(write, transaction, green)
            except FiPatchError as error:
                settled[relpath], line = self._unsettled(write, transaction, green, error)
                problems.append(line)
        red = [r for r in after.values() if not r.passed]
        failure: FiPatchError | None = self._red(writes, settled, red, failed) if red else None
        if problems:
            failure = _with_problems(failure, problems, self.journal)
        return Done(settled, before, after, failure)

    def _settling(
        self,
        writes: Sequence[Write],
        transactions: Mapping[str, Transaction],
        after: Mapping[str, ProofReport],
    ) -> None:
        """Say what settling does: put back the files whose proofs failed, record the others."""
        red = [w for w in writes if not _green(w, after)]
        back = [
            w.change.relpath
            for w in red
            if w.change.relpath in transactions or w.restore is not None
        ]
        if back:
            self.options.progress(
                f"putting back {counted(len(back), 'file')} whose proofs failed: {', '.join(back)}",
                long=True,
            )
        if len(red) < len(writes):
            kept = counted(len(writes) - len(red), "file")
            manifest = self.journal.store.manifest_path
            self.options.progress(f"committing {kept} to fi-patch's records in {manifest}")

    def _one(self, write: Write, transaction: Transaction | None, green: bool) -> Settlement:
        change = write.change
        if green and transaction is not None:
            transaction.commit()
            return "committed"
        if green:
            self.journal.settle(change.relpath, change.committed)
            return "committed"
        if transaction is not None:
            transaction.undo()
            return "rolled-back"
        if write.restore is None:  # nothing was written, so nothing to put back
            return "rolled-back"
        restoring = Transaction(self.journal, write.restore)
        try:
            restoring.write()
        except FiPatchError:
            restoring.undo()
            raise
        restoring.commit()
        return "restored"

    def _unsettled(
        self, write: Write, transaction: Transaction | None, green: bool, error: FiPatchError
    ) -> tuple[Settlement, str]:
        """What a file holds when committing or undoing it failed, and a line that says so."""
        path = write.change.path
        if green:
            return "committed", (
                f"{path}: proven, but its record could not be written ({error.message}); the "
                "next `fi-patch apply` records it"
            )
        return self._not_undone(write.change, transaction, error)

    def _not_undone(
        self, change: Change, transaction: Transaction | None, error: FiPatchError
    ) -> tuple[Settlement, str]:
        """What a file holds when undoing it failed: its old bytes, if the undo got as far as
        putting them back (only the journal entry stays), or fi-patch's new bytes."""
        if transaction is not None and "replace" not in transaction.steps:
            return "rolled-back", (
                f"{change.path}: put back as it was, but its journal entry stays "
                f"({error.message}); the next command clears it"
            )
        backup = self.journal.store.backups / change.staged.backup
        return "stranded", f"{error.message}; the original is kept at {backup}"

    def _red(
        self,
        writes: Sequence[Write],
        settled: Mapping[str, Settlement],
        red: Sequence[ProofReport],
        failed: str,
    ) -> VerificationFailed:
        back = [w for w in writes if settled.get(w.change.relpath) in ("rolled-back", "restored")]
        rolled = "; ".join(f"{w.change.path} ({', '.join(p.id for p in w.proven)})" for w in back)
        verb = "are as they were" if len(back) > 1 else "is as it was"
        remedy = {
            "apply": "read the target's own error below; `fi-patch apply --no-verify` writes "
            "the patches without this proof",
            "revert": "read the target's own error below; `fi-patch revert` without --patch "
            "restores the original bytes",
        }[self.command]
        return VerificationFailed(
            f"{failed}the proof of {', '.join(r.patch for r in red)} in "
            f"{self.interpreter.python} {red[0].summary}; rolled back: {rolled} {verb} before "
            f"this {self.command}",
            remedy=remedy,
            details=tuple(line for r in red for line in (f"{r.patch}: {r.summary}", *r.details)),
        )

    @shielded()
    def _undone(
        self,
        transactions: Mapping[str, Transaction],
        cause: FiPatchError,
        said: str,
        before: Mapping[str, ProofReport],
    ) -> Done:
        """Undo every file after `cause`, and say what each one holds now. `said` opens the
        list of the files put back, where the cause's message asks for it."""
        # The files put back go in the details; those that could not be, in the message.
        settled, lines, stranded = _told(self._undo(transactions))
        if stranded:
            remedy = (
                f"fix the cause, then run `fi-patch revert` ({self.journal.store.manifest_path} "
                f"records the unfinished writes) or `fi-patch {self.command}` to finish them"
            )
        else:
            remedy = cause.remedy or "fix the cause above, then run the command again"
            remedy += "; every file is as it was before this command" if settled else ""
        back = [str(transactions[r].change.path) for r, s in settled.items() if s != "stranded"]
        message = cause.message
        if said and back:
            verb = "are as they were" if len(back) > 1 else "is as it was"
            message += f"; {said}{', '.join(back)} {verb} before"
        failure = type(cause)(
            "; ".join([message, *stranded]), remedy=remedy, details=(*cause.details, *lines)
        )
        return Done(settled, before, {}, failure)

    @shielded()
    def _interrupted(
        self,
        transactions: Mapping[str, Transaction],
        interrupt: BaseException,
        doing: str,
        before: Mapping[str, ProofReport],
    ) -> Done:
        """A signal while files are written or proven: undo every file, and say what each
        holds now. Anything else that is not an error of fi-patch's goes on once the files are
        back."""
        settled, lines, stranded = _told(self._undo(transactions))
        stop = stop_of(interrupt)
        if stop is None:
            raise interrupt
        message = f"interrupted by {stop.name} while {doing}"
        if stranded:
            message += ", and not every file could be put back: " + "; ".join(stranded)
            remedy = (
                f"run `fi-patch revert` or `fi-patch {self.command}` to finish the unfinished "
                f"writes {self.journal.store.manifest_path} records"
            )
        else:
            message += (
                ": every file fi-patch wrote is as it was before"
                if settled
                else ": nothing was written"
            )
            remedy = f"run `fi-patch {self.command}` again when you are ready"
        failure = stopped_by(stop.signum)(message, remedy=remedy, details=lines)
        return Done(settled, before, {}, failure)

    def _undo(self, transactions: Mapping[str, Transaction]) -> dict[str, tuple[Settlement, str]]:
        """Undo every transaction, last first, whatever fails: each file's settlement, and a
        line saying what it holds now."""
        undone: dict[str, tuple[Settlement, str]] = {}
        if transactions:
            count = counted(len(transactions), "file")
            self.options.progress(
                f"putting back what this {self.command} wrote: {count}", long=True
            )
        for relpath, transaction in reversed(list(transactions.items())):
            path = transaction.change.path
            try:
                transaction.undo()
                undone[relpath] = ("rolled-back", f"{path}: put back as it was")
            except FiPatchError as error:
                undone[relpath] = self._not_undone(transaction.change, transaction, error)
        return undone


def _green(write: Write, after: Mapping[str, ProofReport]) -> bool:
    """Whether every proof of `write` passed (or none ran: --no-verify)."""
    return all(after[p.id].passed for p in write.proven if p.id in after)


def _told(
    undone: Mapping[str, tuple[Settlement, str]],
) -> tuple[dict[str, Settlement], tuple[str, ...], list[str]]:
    """Undone files as a report tells them: each file's settlement, the lines of those put
    back, and the lines of those that could not be."""
    settled = {relpath: settlement for relpath, (settlement, _) in undone.items()}
    lines = tuple(line for settlement, line in undone.values() if settlement != "stranded")
    stranded = [line for settlement, line in undone.values() if settlement == "stranded"]
    return settled, lines, stranded


def _with_problems(
    failure: FiPatchError | None, problems: Sequence[str], journal: Journal
) -> FiPatchError:
    """The failure of a settle whose commits or undos failed too: a failed proof stays the
    headline (exit 13); the problems follow it."""
    message = "; ".join(problems)
    remedy = (
        "fix the cause, then run the command again: fi-patch's journal and backups in "
        f"{journal.store.root} let it finish or undo the writes"
    )
    if failure is None:
        return WriteFailed(message, remedy=remedy)
    return type(failure)(f"{failure.message}; {message}", remedy=remedy, details=failure.details)
