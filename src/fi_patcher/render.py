"""What a person sees: rich text for each command's results, errors and progress.

With `cli`, the only module that imports rich. Nothing here decides anything.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import textwrap
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from fi_patcher.errors import FiPatchError
from fi_patcher.model import Assessment, Patch, PatchState, State
from fi_patcher.options import Progress, Target, quiet
from fi_patcher.proofs import Preflight, ProofReport
from fi_patcher.registry import requirement_text, span
from fi_patcher.results import Checked, Failed, Outcome, PatchOutcome, Result, restored


@dataclass
class Verbosity:
    quiet: bool = False
    verbose: bool = False
    """Each patch's line and each proof's text (apply, revert, check --verify), and each step
    on stderr as it starts."""
    diff: bool = False
    """apply shows the diff of each file it writes (a dry run always does)."""
    full_diff: bool = False
    """The diff shows fi-patch's own code placed in a file line by line, not named in one."""
    started: float = field(default_factory=time.monotonic)
    """When the command started (`time.monotonic`): each step's time and the total count from
    it."""


def console(*, stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def error(err: Console, failure: FiPatchError) -> None:
    err.print(Text("error: ", style="bold red") + Text(failure.message))
    for line in failure.details:
        err.print(Text("  " + line, style="dim"))
    if failure.remedy:
        err.print(Text("fix: ", style="bold yellow") + Text(failure.remedy))


def usage(err: Console, line: str, command: str) -> None:
    """The usage line that heads a usage error, as click gives it for its own."""
    err.print(Text(line))
    err.print(Text(f"Try '{command} --help' for help."))
    err.print()


def environment(out: Console, target: Target, assessment: Assessment) -> None:
    """The environment and the release installed there, on one line."""
    interpreter = target.interpreter
    installed = assessment.installed
    release = f": {installed.name} {installed.version}" if installed is not None else ""
    out.print(
        f"environment {interpreter.prefix} (python {interpreter.python_version}, "
        f"chosen by {target.chosen_by}){release}"
    )


_STATE_STYLE = {
    "patched": "green",
    "not-applicable": "cyan",
    "pristine": "yellow",
    "wiped": "yellow",
    "hand-patched": "yellow",
    "unknown": "bold red",
    "not-installed": "red",
    "drifted": "bold red",
    "missing": "bold red",
    "left-out": "cyan",
}


def check(out: Console, checked: Checked, verbosity: Verbosity) -> None:
    target, assessment, reports = checked.target, checked.assessment, checked.reports
    for warning in assessment.warnings:
        console(stderr=True).print(Text("warning: " + warning, style="bold yellow"))
    if verbosity.quiet:
        for state in assessment.patches:
            report = reports.get(state.patch.id)
            proven = f"; {_verdict(report, state.state)}" if report else ""
            refused = _refused(checked, state)
            out.print(
                f"{target.interpreter.prefix}: {state.patch.id} {state.state.value}{refused}"
                f"{proven}"
            )
        _refusal(out, checked, verbosity)
        return
    environment(out, target, assessment)
    _nvcc(out, checked.preflight)
    grouped = _by_file(assessment.patches)
    table = Table(box=None, pad_edge=False)
    for column in ("patch", "state", "apply"):
        table.add_column(column, no_wrap=True)
    for file, states in grouped.items():
        table.add_row(Text(file, style="bold"), "", "")
        for state in states:
            table.add_row(
                "  " + state.patch.id,
                Text(state.state.value, style=_STATE_STYLE[state.state.value]),
                _would(checked, state),
            )
    _unbroken(out, table)
    for state in (state for states in grouped.values() for state in states):
        _paragraph(out, f"{state.patch.id}: {state.reason}", style="dim")
        if state.note:
            _paragraph(out, f"{state.patch.id}: note: {state.note}", style="cyan")
        report = reports.get(state.patch.id)
        if report is not None and verbosity.verbose:
            label = f"{state.patch.id} proof ({report.mode} the patch)"
            proof(out, label, report, details=True, notes=True)
    ordered = [s.patch.id for states in grouped.values() for s in states]
    _proofs(out, [(i, reports[i]) for i in ordered if i in reports], verbosity)
    _refusal(out, checked, verbosity)


def _by_file(states: Sequence[PatchState]) -> dict[str, list[PatchState]]:
    """The patches under the file each writes, files in the order their first patch comes."""
    grouped: dict[str, list[PatchState]] = {}
    for state in states:
        grouped.setdefault(state.patch.target, []).append(state)
    return grouped


def _nvcc(out: Console, facts: Preflight | None) -> None:
    """The nvcc the pre-flight judged, and where it came from, where it judged one."""
    judged = facts.nvcc_judged() if facts is not None else None
    if judged is not None:
        out.print(f"nvcc: {judged}")


_WOULD = {"write": "write", "nothing": "-", "left-out": "left out", "refuse": "refuse"}


def _would(checked: Checked, state: PatchState) -> Text:
    """What apply would do with the patch, in the check table."""
    verdict = checked.verdicts.get(state.patch.id)
    if verdict is None:
        return Text("-")
    text = _WOULD[verdict.would]
    if verdict.refusal is not None:
        return Text(f"{text} ({int(verdict.exit_code)})", style="bold red")
    if verdict.unknown is not None:
        return Text(f"{text} ({int(verdict.exit_code)})", style="bold yellow")
    return Text(text, style="yellow" if verdict.would == "write" else "")


def _refused(checked: Checked, state: PatchState) -> str:
    verdict = checked.verdicts.get(state.patch.id)
    if verdict is not None and verdict.unknown is not None:
        return f"; apply leaves it out ({int(verdict.exit_code)})"
    if verdict is None or verdict.refusal is None:
        return ""
    return f"; apply refuses it ({int(verdict.exit_code)})"


def _refusal(out: Console, checked: Checked, verbosity: Verbosity) -> None:
    """What apply would stop on, as apply would say it; before it, each patch apply would leave
    out for want of knowledge, with its evidence."""
    err = console(stderr=True)
    for verdict in checked.verdicts.values():
        if verdict.unknown is not None:
            _evidence(err, "apply would leave out", verdict.unknown, verbosity, "bold yellow")
    if checked.refusal is not None:
        _evidence(err, "apply would refuse", checked.refusal, verbosity, "bold red")


def _evidence(
    err: Console, head: str, said: FiPatchError, verbosity: Verbosity, style: str
) -> None:
    err.print(Text(f"{head} (exit {int(said.exit_code)}): ", style=style) + Text(said.message))
    if not verbosity.quiet:
        for line in said.details:
            err.print(Text("  " + line, style="dim"))
    if said.remedy:
        err.print(Text("fix: ", style="bold yellow") + Text(said.remedy))


def _verdict(report: ProofReport, state: State) -> str:
    """A proof's result in a few words. Before the patch, on the release's own text, a proof is
    meant to fail: that it does is what shows the patch is needed, not an alarm. On a drifted,
    unknown or wiped file nothing is expected."""
    if report.mode == "before":
        if report.passed:
            return "proof passes before the patch"
        if state is State.PRISTINE:
            return "red before the patch, as expected"
        return "proof fails before the patch"
    return f"proof {'passes' if report.passed else 'fails'}"


def proof(
    out: Console, label: str, report: ProofReport, *, details: bool = True, notes: bool = False
) -> None:
    """One proof: its summary, wrapped between words; a failure's own error text under it, as
    it is, when `details` (a proof expected to fail, before the patch, shows it only with -v),
    and a green proof's notes (the declarations left as they are, say) when `notes` (-v)."""
    style = "green" if report.passed else "bold red"
    if report.mode == "before" and not report.passed:
        style = "yellow"
    _paragraph(out, f"{label}: {report.summary}", style=style)
    if (not report.passed and details) or (report.passed and notes):
        for line in report.details:
            out.print(Text("  " + line, style="dim"))


def outcome(out: Console, result: Outcome, verbosity: Verbosity) -> None:
    """An apply or a revert on one target: what it did, even where it ended in an error. By
    default a summary: the header, a line for each file and the patches it holds, the proofs in
    one line, the outcome and where the backups are. The diff with --diff (and in a dry run),
    each patch's line and each proof's text with -v; with -q, each patch's outcome only."""
    err = console(stderr=True)
    dry = any(p.action in ("would-apply", "would-rewrite") for p in result.patches)
    if not verbosity.quiet:
        environment(out, result.target, result.assessment)
        if result.preflight is not None:
            out.print(f"pre-flight: {result.preflight.describe()}")
        _nvcc(out, result.preflight)
    for warning in result.warnings:
        err.print(Text("warning: " + warning, style="bold yellow"))
    if not verbosity.quiet and (verbosity.diff or verbosity.full_diff or dry):
        for file in result.files:
            if file.diff:
                diff(out, file.diff, full=verbosity.full_diff)
    if verbosity.verbose:
        for patch in result.patches:
            if patch.before is not None:
                _paragraph(out, f"{patch.state.patch.id} before: {patch.before.summary}")
            if patch.after is not None:
                label = f"{patch.state.patch.id} after"
                proof(out, label, patch.after, notes=verbosity.verbose)
    if dry:
        # -q shows no diff: only what would be applied, below.
        shown = "" if verbosity.quiet else "this diff would be applied; "
        out.print(Text(f"dry run: {shown}nothing was changed", style="yellow"))
    _patch_lines(out, result, verbosity)
    _not_applicable(out, result, verbosity)
    if not verbosity.quiet:
        reports = [(p.state.patch.id, (p.before, p.after)) for p in result.patches]
        _proofs(out, [(i, r) for i, pair in reports for r in pair if r is not None], verbosity)
        _done(out, result, verbosity)
    for file in result.files:
        if file.backup is not None and verbosity.verbose:
            out.print(f"{file.relpath}: original bytes kept in {file.backup}")
        if file.action == "stranded":
            out.print(Text(f"{file.path}: {file.message}", style="bold red"))
        if file.action == "tidied":
            out.print(Text(f"{file.relpath}: record tidied: {file.message}", style="cyan"))
    if not verbosity.quiet and not verbosity.verbose:
        _backups(out, result)
    _running(err, result)
    if result.failure is not None:
        error(err, result.failure)


def _running(err: Console, result: Outcome) -> None:
    """The processes that keep the old code until they are restarted."""
    if not result.running:
        return
    err.print(
        Text(
            f"note: {len(result.running)} process(es) of this environment started before "
            "the write with torch loaded: those that imported FlashInfer keep the old code "
            "until they are restarted (fi-patch signals nothing):",
            style="bold yellow",
        )
    )
    for running in result.running:
        err.print(Text(f"  pid {running.pid} (since {running.started}): {running.command}"))


_GROUPED = {
    "applied": "applied to {file}: {ids}",
    "would-apply": "would apply to {file}: {ids}",
    "already-applied": "already applied in {file}: {ids}",
    "reverted": "{message} ({ids})",
    "cleared-record": "{message} ({ids})",
}
"""The actions the summary says once for each file (and message), naming its patches."""


def _patch_lines(out: Console, result: Outcome, verbosity: Verbosity) -> None:
    """A line for each patch, with -q and -v; by default one for each file (and message) where
    the patches in it did the same (_GROUPED), and a line of its own for each other. Those with
    nothing to do are named together, after; under -v, a patch left out for want of knowledge
    shows its evidence."""
    said: set[str] = set()
    each = verbosity.quiet or verbosity.verbose
    for patch in result.patches:
        if patch.action == "not-applicable" and not verbosity.verbose:
            continue
        style, message = _line(patch)
        ident, group = patch.state.patch.id, _group(patch)
        if group is not None and not each:
            if group in said:
                continue
            said.add(group)
            template = _GROUPED[patch.action]
            target = patch.state.patch.target
            if patch.action == "reverted" and patch.message == restored(target):
                # As apply names a file: the closing line says they hold their original bytes.
                template = "reverted {file}: {ids}"
            said_with = template.format(file=target, ids="", message=patch.message)
            alike = _folded(
                [p.state.patch.id for p in result.patches if _group(p) == group],
                _room(out) - len(said_with),
            )
            _paragraph(
                out, template.format(file=target, ids=alike, message=patch.message), style=style
            )
            continue
        if patch.action == "nothing-to-revert":
            # One line per reason, naming its patches: not the same sentence once per patch.
            key = patch.message if each else _unapplied(patch)
            if key in said:
                continue
            said.add(key)
            if key == _UNAPPLIED:
                alike = ", ".join(p.state.patch.id for p in result.patches if _unapplied(p) == key)
                message = f"{_UNAPPLIED}: {alike}"
            elif ident not in patch.message:
                alike = ", ".join(
                    p.state.patch.id for p in result.patches if p.message == patch.message
                )
                message = f"{patch.message} ({alike})"
        if each:
            out.print(Text(message, style=style))
        else:
            _paragraph(out, message, style=style)
        if patch.unknown is not None and verbosity.verbose:
            for line in patch.unknown.details:
                out.print(Text("  " + line, style="dim"))


def _folded(ids: Sequence[str], room: int) -> str:
    """The patches a file's line names: each by its id where they fit in the `room` left on
    the line; otherwise three or more that share their first two words are named once, by the
    start they share and their count (`op-trtllm-* (12)`), where the first of them stood. -v
    names each on a line of its own."""
    whole = ", ".join(ids)
    if len(whole) <= room:
        return whole
    families: dict[str, list[str]] = {}
    for ident in ids:
        families.setdefault("-".join(ident.split("-")[:2]), []).append(ident)
    named: list[str] = []
    for members in families.values():
        if len(members) < 3:
            named.extend(members)
            continue
        words = zip(*(member.split("-") for member in members), strict=False)
        shared = [w[0] for w in itertools.takewhile(lambda w: len(set(w)) == 1, words)]
        # Kept on one line when the line wraps (_wrapped opens the join).
        named.append(f"{'-'.join(shared)}-*{_JOINED}({len(members)})")
    return ", ".join(named)


def _room(out: Console) -> int:
    """The characters of a summary's first line (_paragraph's width)."""
    return max(out.width - 2, 20)


def _group(patch: PatchOutcome) -> str | None:
    """The summary's line a patch is said in with others (those that did the same in the same
    file, for the same reason), or None for a line of its own (a fix made by hand, adopted)."""
    if patch.action not in _GROUPED or patch.state.state is State.HAND_PATCHED:
        return None
    return f"{patch.action} {patch.state.patch.target} {patch.message}"


_UNAPPLIED = "nothing to revert, not applied here"


def _unapplied(patch: PatchOutcome) -> str:
    """The summary's reason for a patch with nothing to revert: those not applied are said
    together."""
    plain = f"nothing to revert: {patch.state.patch.id} is not applied here"
    return _UNAPPLIED if patch.message == plain else patch.message


def _proofs(out: Console, proven: Sequence[tuple[str, ProofReport]], verbosity: Verbosity) -> None:
    """The proofs (patch, report) in one line: how many were red before the patch (as a
    release's own code should be) and how many pass after it, naming those that do not; under
    it, the summary of each that failed after."""
    before = [(ident, r) for ident, r in proven if r.mode == "before"]
    after = [(ident, r) for ident, r in proven if r.mode == "after"]
    if not proven:
        return
    parts = []
    if before:
        green = [ident for ident, r in before if r.passed]
        part = f"{len(before) - len(green)} of {len(before)} red before the patch"
        parts.append(f"{part} (passing already: {', '.join(green)})" if green else part)
    failed = [(ident, r) for ident, r in after if not r.passed]
    if after:
        when = "after it" if before else "on the patched code"
        part = f"{len(after) - len(failed)} of {len(after)} pass {when}"
        named = ", ".join(ident for ident, _ in failed)
        parts.append(f"{part}; failed: {named}" if failed else part)
    hint = "" if verbosity.verbose else " (-v shows each)"
    style = "bold red" if failed else "green" if after else ""
    _paragraph(out, f"proofs: {', '.join(parts)}{hint}", style=style)
    if verbosity.verbose:
        return
    for ident, report in failed:
        proof(out, f"{ident} proof (after the patch)", report, details=False)
    # Red before the patch each for its own reason, as it should be; one reason shared by
    # several (torch will not import, say) is the environment's, and said once.
    shared = Counter(r.summary for _, r in before if not r.passed)
    for said, count in shared.items():
        if count > 1:
            _paragraph(out, f"{count} proofs before the patch: {said}", style="yellow")


def _done(out: Console, result: Outcome, verbosity: Verbosity) -> None:
    """What the command changed, in a line, and where the details are."""
    written = [f for f in result.files if f.action == "written"]
    reverted = [f for f in result.files if f.action == "reverted"]
    shown = verbosity.diff or verbosity.full_diff
    hint = " (`revert` undoes them)" if shown else " (--diff shows them, `revert` undoes them)"
    if written:
        count = sum(p.action in ("applied", "rewritten") for p in result.patches)
        patches = "patch" if count == 1 else "patches"
        files = "file" if len(written) == 1 else "files"
        said = f"applied {count} {patches} in {len(written)} {files}{hint}"
        _paragraph(out, said, style="green")
    elif reverted:
        files = "file" if len(reverted) == 1 else "files"
        said = f"reverted {len(reverted)} {files}"
        if all(f.message == restored(f.relpath) for f in reverted):
            said = f"restored the original bytes of {len(reverted)} {files}"
        _paragraph(out, said, style="green")
    elif (
        result.failure is None
        and not result.files
        and result.patches
        and all(p.action in ("already-applied", "not-applicable") for p in result.patches)
    ):
        out.print(Text("nothing to write: every patch that applies here is in place", "green"))


def _backups(out: Console, result: Outcome) -> None:
    """Where the original bytes of the files written are kept, in a line: in the store of the
    environment named at the top of its block (its .fi-patch/backups), whatever its path's
    length."""
    kept = [f.backup for f in result.files if f.backup is not None]
    if kept:
        files = "file" if len(kept) == 1 else "files"
        held = f"{kept[0].parent.parent.name}/{kept[0].parent.name}"
        _paragraph(out, f"original bytes of {len(kept)} {files} kept in the environment's {held}")


def _not_applicable(out: Console, result: Outcome, verbosity: Verbosity) -> None:
    """The patches with nothing to do in this release, named together on one line: `check`
    gives each one's reason (so does -v here), and a reason said in every command is noise."""
    idle = [p.state.patch.id for p in result.patches if p.action == "not-applicable"]
    if not idle or verbosity.verbose:
        return
    # "here": the release is named at the top of the target's block.
    _paragraph(
        out, f"not applicable here (`fi-patch check` says why): {', '.join(idle)}", style="cyan"
    )


def _line(patch: PatchOutcome) -> tuple[str, str]:
    state, action, ident = patch.state, patch.action, patch.state.patch.id
    applied = f"applied {ident} to {state.patch.target}"
    if state.state is State.HAND_PATCHED:
        # The fix was there, made by hand: apply wrote fi-patch's own bytes over it and recorded
        # them, keeping FlashInfer's original as the backup.
        applied = f"adopted {ident} in {state.patch.target}: the fix made by hand is now fi-patch's"
    lines = {
        "applied": ("green", applied),
        "would-apply": ("yellow", f"would apply {ident} to {state.patch.target}"),
        "rewritten": ("green", f"rewrote {ident} in {state.patch.target}: {patch.message}"),
        "would-rewrite": (
            "yellow",
            f"would rewrite {ident} in {state.patch.target}: {patch.message}",
        ),
        "already-applied": ("green", f"{ident}: already applied ({state.reason})"),
        "not-applicable": ("cyan", f"{ident}: {patch.message or state.reason}"),
        "left-out": ("yellow", f"{ident}: left out: {patch.message}"),
        "finished": (
            "green",
            f"finished the interrupted {state.interrupted or 'run'} of {ident}: fi-patch's "
            "bytes are in place and recorded",
        ),
        "rolled-back": (
            "bold red",
            f"{ident}: rolled back" + (f" ({patch.message})" if patch.message else ""),
        ),
        "stranded": ("bold red", f"{ident}: {patch.message}"),
        "nothing-to-revert": ("cyan", patch.message),
    }
    return lines.get(
        action, ("green" if action == "reverted" else "cyan", f"{ident}: {patch.message}")
    )


def diff(out: Console, text: str, *, full: bool = False) -> None:
    """A unified diff, coloured; unless `full`, a long run of added lines (fi-patch's own code
    placed in the file) named in one line after its first."""
    for line in text.splitlines() if full else abridged(text):
        if line.startswith(("+++", "---")):
            style = "bold"
        elif line.startswith("+"):
            style = "green"
        elif line.startswith("-"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        else:
            style = ""
        out.print(Text(line, style=style))


LONGEST_RUN = 40
"""The most added lines in a row a diff shows: longer runs are fi-patch's op runtime, placed
whole from src/fi_patcher/placed/ (about 1,100 lines in flashinfer/utils.py)."""

_MARKER = re.compile(r"#\s*fi-patch:\s*(\S+)")


def abridged(text: str) -> list[str]:
    """The lines of a unified diff, each run of more than LONGEST_RUN added lines kept as its
    first line (fi-patch's marker, naming the patch) and one line that says what the rest is."""
    lines = text.splitlines()
    kept: list[str] = []
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and lines[end].startswith("+") and not lines[end].startswith("+++"):
            end += 1
        if end - start > LONGEST_RUN:
            # The run's head, to fi-patch's marker (naming the patch) where it comes first.
            head = next(
                (n + 1 for n in range(start, start + 3) if _MARKER.search(lines[n])), start + 1
            )
            marker = _MARKER.search(lines[head - 1])
            by = f" placed by {marker.group(1)}" if marker else ""
            last = lines[head - 1]
            indent = last[1 : len(last) - len(last[1:].lstrip())]
            kept += lines[start:head]
            kept.append(
                f"+{indent}# ... fi-patch's op runtime{by}: {end - head:,} more lines, from "
                "src/fi_patcher/placed/ (--full-diff shows them)"
            )
            start = end
        elif end > start:
            kept += lines[start:end]
            start = end
        else:
            kept.append(lines[start])
            start += 1
    return kept


def catalog(out: Console, patches: Sequence[Patch]) -> None:
    """Each patch as a block, one field a line, wrapped between words at the console's width:
    an id, a path or a version range is never cut, at 80 columns or fewer."""
    for patch in patches:
        moves = len(patch.targets) > 1
        out.print(Text(patch.id, style="bold"))
        _wrapped(out, patch.summary, "  ")
        fields = {
            "function": f"{patch.function}()",
            "file": "each shape's, below" if moves else patch.target,
            "requires": requirement_text(patch),
            "proof on a CPU": patch.proof.cpu,
        }
        if patch.proof.gpu:
            fields["proof on a GPU"] = patch.proof.gpu
        label = max(len(name) for name in fields) + 2
        for name, value in fields.items():
            _wrapped(out, value, f"  {name + ':':<{label}}")
        for shape in patch.shapes:
            out.print(f"  shape {shape.name} ({span(shape.versions)})")
            if moves:
                _wrapped(out, shape.target or patch.target, "    file: ")
            _wrapped(out, shape.note, "    ")
        for exemption in patch.not_applicable:
            out.print(f"  nothing to patch ({span(exemption.versions)})")
            _wrapped(out, exemption.reason, "    ")
        out.print("")


def _paragraph(out: Console, text: str, *, style: str = "") -> None:
    """`text` (a reason, a proof's summary) wrapped, each further line indented by two spaces."""
    _wrapped(out, text, "", hang="  ", style=style)


def _wrapped(
    out: Console, text: str, head: str, *, hang: str | None = None, style: str = ""
) -> None:
    """`head` then `text`, wrapped between words at the console's width, each further line
    indented by `hang` (under the first, by default). A word longer than a line (a path) stands
    whole on a line of its own, never cut or folded; no line ends in spaces."""
    hang = " " * len(head) if hang is None else hang
    width = max(out.width - max(len(head), len(hang)), 20)
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    for number, line in enumerate(lines or [""]):
        line = line.replace(_JOINED, " ")
        out.print(Text(head if number == 0 else hang) + Text(line, style=style))


_JOINED = "\u00a0"
"""A space _wrapped never breaks a line at (textwrap breaks at ASCII whitespace only), and prints
as a plain one."""


def result(out: Console, result: Result, verbosity: Verbosity) -> None:
    """One target's result, whatever the command."""
    if isinstance(result, Failed):
        error(console(stderr=True), result.error)
    elif isinstance(result, Checked):
        check(out, result, verbosity)
    else:
        outcome(out, result, verbosity)


def summary_line(result: Result) -> str:
    """One target's result in a few words, for the summary of several."""
    if isinstance(result, Failed):
        return f"error: {result.error.message}"
    if isinstance(result, Checked):
        return ", ".join(f"{s.patch.id} {s.state.value}" for s in result.assessment.patches)
    counts: dict[str, list[str]] = {}
    for patch in result.patches:
        counts.setdefault(patch.action, []).append(patch.state.patch.id)
    # The actions every run has many of, counted; the rest, named.
    return ", ".join(
        f"{len(ids)} {action}" if action in _COUNTED else f"{action}: {', '.join(ids)}"
        for action, ids in counts.items()
    )


_COUNTED = frozenset({"applied", "would-apply", "already-applied", "not-applicable", "reverted"})


def notes(err: Console, lines: Sequence[str]) -> None:
    for line in lines:
        err.print(Text("note: " + line, style="cyan"))


def heading(out: Console, text: str) -> None:
    out.print(Text(text, style="bold"))


def summary(out: Console, rows: Sequence[tuple[str, str, int]]) -> None:
    """The summary of several targets: each target whole on its line with its exit code, its
    result below it, wrapped between words (never inside a patch id or a path)."""
    out.print(Text("summary", style="bold"))
    for target, result, code in rows:
        style = "green" if code == 0 else "bold red"
        out.print(Text.assemble(target, "  exit ", (str(code), style)))
        _wrapped(out, result, "  ")


_Told = Literal["every", "long", "spinner", "nothing"]


def _told(as_json: bool, verbosity: Verbosity, err: Console) -> _Told:
    """Which steps stderr is told: every step with -v; in a terminal, a spinner; elsewhere (a CI
    log, `| tee`, Ansible), the long steps; with -q, or --json without -v, nothing."""
    if verbosity.verbose:
        return "every"
    if as_json or verbosity.quiet:
        return "nothing"
    return "spinner" if err.is_terminal else "long"


def _stamped(verbosity: Verbosity, message: str, told: _Told) -> Text:
    """A step's line: its time since the command started; in a log, which tool says it."""
    line = f"[{time.monotonic() - verbosity.started:5.1f}s] {message}"
    return Text(line if told == "every" else f"fi-patch: {line}")


@contextlib.contextmanager
def progress(as_json: bool, verbosity: Verbosity) -> Iterator[Progress]:
    """Each step as it starts, always on stderr (stdout holds the results, or --json's one
    document). With -v, every step as a line with its time. Where a person watches a terminal,
    a spinner with the step and the elapsed seconds (importing torch takes seconds). Elsewhere
    (a CI log, `| tee`, Ansible), one plain line as each long step starts, and no spinner
    codes. With -q, or --json without -v, nothing."""
    err = console(stderr=True)
    told = _told(as_json, verbosity, err)
    if told == "nothing":
        yield quiet
        return
    if told != "spinner":

        def line(message: str, *, long: bool = False) -> None:
            if long or told == "every":
                err.print(_stamped(verbosity, message, told))

        yield line
        return
    # Imported here: only a person watching a terminal sees it, and it costs every start.
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn())
    with RichProgress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("starting")

        def spin(message: str, *, long: bool = False) -> None:
            bar.update(task, description=message)

        yield spin


def total(as_json: bool, verbosity: Verbosity, code: int) -> None:
    """The command's last line on stderr, after its results, where its steps were told as
    lines (-v, or a log): how long it took, and its exit code (a log piped through `tee`
    loses it)."""
    err = console(stderr=True)
    told = _told(as_json, verbosity, err)
    if told in ("every", "long"):
        seconds = time.monotonic() - verbosity.started
        err.print(_stamped(verbosity, f"done in {seconds:.1f} s (exit {code})", told))


def _unbroken(out: Console, table: Table) -> None:
    """Print `table` no narrower than its content, so that no path is broken over two lines, in
    a terminal or in a log (which rich takes as 80 columns wide), and with no padding at the end
    of a row."""
    natural = Measurement.get(out, out.options.update(width=10_000), table).maximum
    laid_out = out.options.update(width=max(out.width, natural), no_wrap=True, overflow="ignore")
    # Line by line, so that the spaces rich pads a row's last cell with can go.
    for line in Segment.split_lines(out.render(table, laid_out)):
        row = Text.assemble(*((segment.text, segment.style or "") for segment in line))
        row.rstrip()
        out.print(row)
