"""Looking after a store: verify it line by line, rebuild its derived state from the log."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import msgspec

from keytrail.events import CorruptLog, EventLog, KeytrailError, MemoryForgotten
from keytrail.events.codec import has_checksum
from keytrail.events.redact import blank_label_keys, redacted_ids
from keytrail.projections import GraphState, MemoryNode, apply, text_hash
from keytrail.projections import snapshot as snapshots
from keytrail.projections.keygraph import erase_labels
from keytrail.projections.text import TextIndex
from keytrail.projections.vectors import VECTORS_DIR, CacheCheck, check_cache

from . import forgetting, tempfiles
from .reembed import BUILDING_DIR
from .validation import counted

Progress = Callable[[int, int], None]
#: Where the derived files live, relative to a store's directory.
SNAPSHOT_DIR = Path("cache") / "snapshot"
SNAPSHOT_FILE = "keygraph.msgpack"
TEXT_INDEX_DIR = Path("index") / "text"
REBUILD_HINT = "keytrail rebuild drops every cache at fault and makes it anew from the log"


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    events: int
    segments: int
    problems: list[str] = field(default_factory=list)
    torn_files: list[str] = field(default_factory=list)
    #: Memories whose content was removed from the log by forget (each must be forgotten).
    redacted: list[str] = field(default_factory=list)
    #: Keys whose labels a forget removed from the log (each named by its memory.forgotten).
    labels_erased: list[str] = field(default_factory=list)
    #: Derived files (snapshots, text index, vector caches) that disagree with the log: the
    #: store would answer from them. Nothing is lost; `keytrail rebuild` makes them anew.
    cache_problems: list[str] = field(default_factory=list)
    #: Derived files found to agree with the log, with the seq each reflects.
    caches_checked: list[str] = field(default_factory=list)
    #: Derived files the store ignores (unreadable, damaged, another format): they cost a replay.
    caches_ignored: list[str] = field(default_factory=list)
    #: Forgotten memories whose purge was interrupted: their content may still be in a cache
    #: (that is not counted as a problem); the next open of the store finishes the purge.
    purges_pending: list[str] = field(default_factory=list)
    #: Lines without the checksum keytrail writes on every line (by hand, or damaged where the
    #: checksum was): they decode, but a change to them cannot be detected. Not a problem.
    unchecked_lines: list[str] = field(default_factory=list)
    #: Temp files (and folders, named with a final /) a writer killed mid-write left
    #: (core/tempfiles.py): nothing reads them, and the next open of the store removes them.
    #: Not a problem.
    temp_files: list[str] = field(default_factory=list)


def verify(home: Path | str, progress: Progress | None = None) -> VerifyReport:
    """Decode every line (checksum, gap-free seq, ordered time), and fold every event; then
    check each derived file against the state folded up to the seq it claims to reflect.

    A fold that fails means an event refers to something that never existed: the log is
    inconsistent even though each line is well formed. Nothing is written.
    """
    home = Path(home)
    log = EventLog(home)
    derived = _Derived(home)
    segments = log.segments()
    total = sum((log.dir / s).stat().st_size for s in segments) or 1
    problems: list[str] = []
    state = GraphState()
    derived.reached(state)  # files of an empty store (seq 0)
    count = 0
    redacted: list[str] = []
    forgotten: dict[str, int] = {}  # memory id -> seq of its (last) memory.forgotten
    blank_labels: list[tuple[str, str]] = []  # (memory, key) of each label blank in a line
    erased_keys: set[str] = set()  # named by a forget as erased
    try:
        # A second pass picks up what other processes appended meanwhile, so a cache written
        # after this verify began is not mistaken for one ahead of the log.
        for _ in range(2 if derived.beyond(state.seq) else 1):
            for event in log.iter_new():
                redacted += redacted_ids(event)
                blank_labels += blank_label_keys(event)
                if type(event) is MemoryForgotten:
                    forgotten[event.memory_id] = event.seq
                    erased_keys.update(event.erased_keys)
                try:
                    apply(state, event)
                except (KeyError, IndexError, TypeError) as exc:
                    problems.append(
                        f"seq {event.seq} ({type(event).__name__}) cannot be applied: "
                        f"refers to missing {exc}"
                    )
                    raise _Stop from None
                derived.reached(state)
                count += 1
                if progress is not None and count % 10_000 == 0:
                    progress(_consumed(log), total)
            if not derived.beyond(state.seq):
                break
    except CorruptLog as exc:
        problems.append(exc.message)
    except _Stop:
        pass
    if not problems and count and state.store_id == "":
        problems.append("the log does not start with store.created")
    if not problems:
        # Only forget redacts, and it appends memory.forgotten first: a redacted memory that is
        # not forgotten means the log was edited by something else.
        problems += [
            f"memory {m}: content redacted but the memory was never forgotten"
            for m in redacted
            if state.memories[m].status != "forgotten"
        ]
        # A blank label is a label a forget erased (remember refuses one), in the line of a
        # forgotten memory, its key named by that forget.
        problems += [
            f"key {k}: label blank in the line of {m}, but no forget erased it"
            for m, k in blank_labels
            if k not in erased_keys or state.memories[m].status != "forgotten"
        ]
        problems += _unerased(log, state, forgotten, set(redacted), home)
    # Bytes after the last newline of the last segment: a torn tail the next appender will cut.
    if segments and not problems:
        last = log.dir / segments[-1]
        if last.stat().st_size != log.position.offset and log.position.segment == segments[-1]:
            torn_tail = _torn_tail(log)
            if torn_tail is not None:
                name, size = torn_tail
                problems.append(
                    f"{name}: torn last line ({counted(size, 'byte')} after the last complete "
                    "line; the next write cuts it)"
                )
    torn_dir = log.dir / "torn"
    torn = sorted(p.name for p in torn_dir.iterdir()) if torn_dir.exists() else []
    unchecked = _unchecked_lines(log, segments) if not problems else []
    temp_files = tempfiles.leftovers(home)

    def look_again() -> bool:
        # While no appender holds the lock: none found then is a write under way.
        temp_files[:] = tempfiles.leftovers(home)
        return True

    if temp_files:
        _between_writes(home, look_again)
    if progress is not None:
        progress(total, total)
    if not problems:
        derived.finish(state)
        # After the caches: a fork is the state's, not the log's, so they are still checked.
        problems += _forks(state)
    return VerifyReport(
        ok=not problems and not derived.problems,
        events=count,
        segments=len(segments),
        problems=problems,
        torn_files=torn,
        redacted=redacted,
        labels_erased=sorted({k for _, k in blank_labels}),
        cache_problems=derived.problems,
        caches_checked=derived.checked,
        caches_ignored=derived.ignored,
        purges_pending=sorted(derived.pending),
        unchecked_lines=unchecked,
        temp_files=[str(p.relative_to(home)) + ("/" if p.is_dir() else "") for p in temp_files],
    )


#: How many lines without a checksum verify names; past that it counts them.
UNCHECKED_NAMED = 5


def _unchecked_lines(log: EventLog, segments: list[str]) -> list[str]:
    """`segment line N` of each whole line without a checksum (the first UNCHECKED_NAMED,
    then a count of the rest)."""
    named: list[str] = []
    more = 0
    for name in segments:
        data = (log.dir / name).read_bytes()
        whole = data[: data.rfind(b"\n") + 1]  # a torn tail is reported as such
        for number, line in enumerate(whole.split(b"\n")[:-1], start=1):
            if not has_checksum(line):
                if len(named) < UNCHECKED_NAMED:
                    named.append(f"{name} line {number}")
                else:
                    more += 1
    if more:
        named.append(f"and {more} more")
    return named


def _torn_tail(log: EventLog) -> tuple[str, int] | None:
    """The last segment and the bytes after its last newline, if any, seen while no appender
    is mid-way: verify reads without the lock, so bytes past what it folded may be lines
    another process appended since (or is appending right now), not a torn line."""

    def tail() -> tuple[str, int] | None:
        segments = log.segments(fresh=True)
        if not segments:
            return None
        # Only the bytes past what the fold read: lines before them are whole.
        start = log.position.offset if log.position.segment == segments[-1] else 0
        with open(log.dir / segments[-1], "rb") as f:
            f.seek(start)
            data = f.read()
        size = len(data) - (data.rfind(b"\n") + 1)
        return (segments[-1], size) if size else None

    # Waiting takes the lock file, which a store always has: never create one (verify writes
    # nothing); without it no appender can be under way either.
    if not log.lock_path.exists():
        return tail()
    found: tuple[str, int] | None = None

    def look() -> bool:
        nonlocal found
        found = tail()
        return True

    log.wait_for_lock(look)
    return found


def _unerased(
    log: EventLog, state: GraphState, forgotten: dict[str, int], redacted: set[str], home: Path
) -> list[str]:
    """Forgotten memories whose creating line still holds their content.

    A forget redacts that line before it is acknowledged (or leaves a pending purge that the
    next open finishes), so content there means a redaction undone, e.g. a log segment put back
    from a backup. What verify read may be a moment old: a forget under way in another process
    is let be, and the line is read again before anything is reported.
    """
    suspects = [m for m in forgotten if m not in redacted]
    if not suspects:
        return []
    pending = {p.memory_id for p in forgetting.read_pending(home)}
    return [
        f"memory {m}: forgotten at seq {forgotten[m]}, but the line that created it still "
        f"holds its content; `keytrail forget {m}` erases it again"
        for m in suspects
        if m not in pending
        and forgetting.content_in_log(log, m, state.memories[m].created_seq) is not None
    ]


def _forks(state: GraphState) -> list[str]:
    """Memories more than one version names as the one it replaces (only a hand-made log, or
    a keymem import before it refused them, wrote such a version). The fold makes the last
    one the successor; each earlier one is current beside it, yet missing from the chain that
    history and forget --all-versions walk from the memory replaced or its successor. One walk
    of the folded memories."""
    memories = state.memories
    strays: dict[tuple[str, str], list[MemoryNode]] = {}  # (old, its successor) -> strays
    for node in memories.values():
        old_id = node.supersedes
        if old_id is None or node.status in ("forgotten", "deleted"):
            continue  # one forgotten (or deleted) is read by nothing: the fork is mended
        successor = memories[old_id].superseded_by
        if successor is not None and successor != node.id:
            strays.setdefault((old_id, successor), []).append(node)
    problems = []
    for (old_id, successor), nodes in strays.items():
        nodes.sort(key=lambda n: n.created_seq)
        told = [f"{n.id} (seq {n.created_seq})" for n in (*nodes, memories[successor])]
        if len(nodes) == 1:
            mend = f"`keytrail forget {nodes[0].id}` leaves one chain (to keep its text"
        else:
            forgets = _and([f"`keytrail forget {n.id}`" for n in nodes])
            mend = f"{forgets} leave one chain (to keep the text of one"
        problems.append(
            f"memory {old_id}: {counted(len(told), 'version')} replace it, {_and(told)}; its "
            f"next version is {successor}, so history and forget --all-versions of either miss "
            f"{_and([n.id for n in nodes])}: {mend}, correct {successor} with it first)"
        )
    return problems


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


class _Stop(Exception):
    """The fold cannot go on (an event refers to something missing)."""


Check = Callable[[GraphState], None]


class _Derived:
    """The store's derived files, each checked when the fold reaches the seq it reflects.

    Snapshots must equal the fold byte for byte; the text index must hold exactly the memories
    that existed and were not forgotten; a vector cache's rows must be well formed and, where its
    manifest says so, cover every label and content up to its seq.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.problems: list[str] = []
        self.checked: list[str] = []
        self.ignored: list[str] = []
        # An interrupted forget may have left these memories' content in any cache; the next
        # open finishes the purge, so their traces are not problems.
        pending = forgetting.read_pending(home)
        self.pending = {p.memory_id for p in pending}
        self.pending_keys = {k for p in pending for k in p.keys}  # their labels, likewise
        self._due: dict[int, list[tuple[str, Check]]] = {}
        self._later: list[Check] = []  # run on the final state
        self._snapshots(home)
        self._text_index(home)
        self._vector_caches(home)

    def beyond(self, seq: int) -> bool:
        """Whether some file claims a seq after `seq`."""
        return any(due > seq for due in self._due)

    def reached(self, state: GraphState) -> None:
        for _, check in self._due.pop(state.seq, ()):
            check(state)

    def finish(self, state: GraphState) -> None:
        for seq, checks in sorted(self._due.items()):
            for name, _ in checks:
                self.problems.append(f"{name}: {_beyond(seq, state.seq)}")
        self._due.clear()
        for check in self._later:
            check(state)
        if self.problems:
            self.problems.append(REBUILD_HINT)

    def _at(self, seq: int, name: str, check: Check) -> None:
        self._due.setdefault(seq, []).append((name, check))

    # -- snapshots ---------------------------------------------------------------------------

    def _snapshots(self, home: Path) -> None:
        try:
            names = sorted(os.listdir(home / SNAPSHOT_DIR))
        except FileNotFoundError:
            return
        for file in names:
            if file != SNAPSHOT_FILE and snapshots.archived_seq(file) is None:
                continue
            path, name = home / SNAPSHOT_DIR / file, f"{SNAPSHOT_DIR}/{file}"
            header = snapshots.read_header(path)
            if header is None:
                self.ignored.append(f"{name}: unreadable or of another format")
                continue
            self._at(header.seq, name, partial(self._snapshot, path, name))

    def _snapshot(self, path: Path, name: str, state: GraphState) -> None:
        loaded = snapshots.load(path)
        if loaded is None and not path.exists():
            return  # deleted since verify listed it (thinned by a live server): nothing to judge
        if loaded is not None and loaded.seq != state.seq:
            # Replaced since verify listed it: a live server saved a newer one (every
            # snapshot_every events, and at close). Judge it at the seq it reflects now.
            if loaded.seq > state.seq:
                self._at(loaded.seq, name, partial(self._snapshot, path, name))
            else:
                self.ignored.append(f"{name}: replaced while verify ran; not checked")
            return
        if loaded is None and snapshots.damaged(path):
            # Every load checks the body's checksum: a store never answers from it.
            self.ignored.append(f"{name}: damaged (its checksum does not match)")
        elif loaded is None:
            self.ignored.append(f"{name}: unreadable")
        elif loaded.store_id != state.store_id:
            self.problems.append(f"{name}: a snapshot of another store ({loaded.store_id})")
        else:
            snapshot = self._purged(snapshots.materialize(loaded.state), state)
            # A forget by another process after the fold read the memory's line blanks its
            # content in every snapshot: as the log has it, if the final state forgets it.
            blanked = self._blanked_since(snapshot, state)
            # One under way when the fold read the line (redacted) has yet to blank this file.
            unpurged = self._unpurged_yet(snapshot, state)
            # The same for the labels a forget erases (see `_labels_since`).
            labels_blanked, labels_unpurged = self._labels_since(snapshot, state)
            folded = state
            if labels_blanked:  # rare (a forget while verify ran): compare with a copy
                folded = msgspec.msgpack.decode(msgspec.msgpack.encode(state), type=GraphState)
                erase_labels(folded, labels_blanked)
            if msgspec.msgpack.encode(snapshot) != msgspec.msgpack.encode(folded):
                self.problems.append(f"{name}: differs from the log folded to seq {state.seq}")
            elif blanked or unpurged or labels_blanked or labels_unpurged:
                self._later.append(
                    partial(
                        self._forgotten_by_now,
                        path,
                        name,
                        state.seq,
                        blanked,
                        unpurged,
                        labels_blanked,
                        labels_unpurged,
                    )
                )
            else:
                self.checked.append(f"{name} (seq {state.seq})")

    @staticmethod
    def _blanked_since(snapshot: GraphState, state: GraphState) -> set[str]:
        """Memories whose content `snapshot` has blank and `state` holds; in `snapshot`, their
        content is put back as `state` has it."""
        blanked = set()
        for memory_id, node in snapshot.memories.items():
            folded = state.memories.get(memory_id)
            if not node.content and folded is not None and folded.content:
                node.content = folded.content
                blanked.add(memory_id)
        return blanked

    @staticmethod
    def _unpurged_yet(snapshot: GraphState, state: GraphState) -> set[str]:
        """Memories whose content `snapshot` holds and `state` has blank though not forgotten by
        then (its line redacted by a later forget); in `snapshot`, their content is blanked."""
        unpurged = set()
        for memory_id, node in snapshot.memories.items():
            folded = state.memories.get(memory_id)
            if (
                node.content
                and folded is not None
                and not folded.content
                and folded.status != "forgotten"
            ):
                node.content = ""
                unpurged.add(memory_id)
        return unpurged

    def _labels_since(self, snapshot: GraphState, state: GraphState) -> tuple[set[str], set[str]]:
        """Keys whose labels a forget erased in `snapshot` or in the log but not (yet) in the
        other: (blank in `snapshot` only, blank in `state` only). Those blank in `state` only
        (its lines redacted, this file not yet purged: a purge under way or pending) are
        erased in `snapshot` here; the caller compares the others with `state` erased."""
        in_snapshot: set[str] = set()
        in_log: set[str] = set()
        for key_id, key in snapshot.keys.items():
            folded = state.keys.get(key_id)
            if folded is None or bool(key.label) == bool(folded.label):
                continue
            (in_log if key.label else in_snapshot).add(key_id)
        erase_labels(snapshot, in_log)
        return in_snapshot, in_log - self.pending_keys

    def _forgotten_by_now(
        self,
        path: Path,
        name: str,
        seq: int,
        blanked: set[str],
        unpurged: set[str],
        labels_blanked: set[str],
        labels_unpurged: set[str],
        final: GraphState,
    ) -> None:
        # (A line redacted for a memory never forgotten is a problem of the log, reported as
        # such: the fold's state cannot have `unpurged` memories that are not forgotten.)
        kept = sorted(m for m in blanked if final.memories[m].status != "forgotten")
        kept += sorted(k for k in labels_blanked if final.keys[k].label)
        left = self._held_now(path, seq, unpurged) if unpurged and not kept else []
        if labels_unpurged and not kept:
            left += self._labels_held_now(path, seq, labels_unpurged)
        if kept:
            self.problems.append(
                f"{name}: differs from the log folded to seq {seq} (content or labels blank "
                f"for memories or keys never forgotten: {_some(kept)})"
            )
        elif left:
            self.problems.append(
                f"{name}: differs from the log folded to seq {seq} (still holds the content of "
                f"forgotten memories: {_some(left)})"
            )
        else:
            self.checked.append(f"{name} (seq {seq})")

    def _held_now(self, path: Path, seq: int, memory_ids: set[str]) -> list[str]:
        """Which of `memory_ids` the snapshot at `path` still holds content for, read while no
        appender is mid-way (a forget blanks every snapshot holding the lock, before it is
        acknowledged), leaving out those whose purge is pending (the next open finishes it)."""

        def judge(state: GraphState, pending: list[forgetting.PendingPurge]) -> list[str]:
            purging = {p.memory_id for p in pending}
            return sorted(
                m
                for m in memory_ids - purging
                if (node := state.memories.get(m)) is not None and node.content
            )

        return self._read_now(path, seq, judge)

    def _labels_held_now(self, path: Path, seq: int, key_ids: set[str]) -> list[str]:
        """Which of `key_ids` the snapshot at `path` still holds a label for, read while no
        appender is mid-way, leaving out those whose purge is pending (as `_held_now`)."""

        def judge(state: GraphState, pending: list[forgetting.PendingPurge]) -> list[str]:
            purging = {k for p in pending for k in p.keys}
            return sorted(
                k for k in key_ids - purging if (key := state.keys.get(k)) is not None and key.label
            )

        return self._read_now(path, seq, judge)

    def _read_now(
        self,
        path: Path,
        seq: int,
        judge: Callable[[GraphState, list[forgetting.PendingPurge]], list[str]],
    ) -> list[str]:
        """`judge` of the snapshot at `path` and the pending purges, read while no appender is
        mid-way; nothing if the snapshot was deleted or replaced since (nothing of it to judge)."""
        held: list[str] = []

        def read() -> bool:
            loaded = snapshots.load(path)
            if loaded is not None and loaded.seq == seq:
                held.extend(judge(loaded.state, forgetting.read_pending(self.home)))
            return True

        _between_writes(self.home, read)
        return held

    def _purged(self, snapshot: GraphState, state: GraphState) -> GraphState:
        """`snapshot` with the content of memories whose purge is pending as the log has it."""
        for memory_id in self.pending:
            node, folded = snapshot.memories.get(memory_id), state.memories.get(memory_id)
            if node is not None and folded is not None:
                node.content = folded.content
        return snapshot

    # -- the text index ----------------------------------------------------------------------

    def _text_index(self, home: Path) -> None:
        name = str(TEXT_INDEX_DIR)
        if not (home / TEXT_INDEX_DIR).exists():
            return
        index = TextIndex(home / TEXT_INDEX_DIR)
        try:
            # Not while another process swaps or rewrites it: read then, a sound index showed
            # as unreadable (a purge or catch-up replaces its files under the lock).
            with index.settled():
                seq, ids = index.committed()
        except (ValueError, OSError) as exc:
            self.ignored.append(f"{name}: unreadable ({exc}); it is rebuilt on the next search")
            return
        finally:
            index.close()
        self._at(seq, name, lambda state: self._text_ids(name, ids, state, home))

    @staticmethod
    def _indexed_now(home: Path) -> set[str]:
        """The memories in the committed text index, read while no appender is mid-way (a
        forget purges the index holding the appenders' lock, before it is acknowledged)."""
        found: set[str] = set()

        def read() -> bool:
            index = TextIndex(home / TEXT_INDEX_DIR)
            try:
                found.update(index.committed()[1])
            except (ValueError, OSError):
                pass  # gone or unreadable now: it holds nothing a store would answer from
            finally:
                index.close()
            return True

        _between_writes(home, read)
        return found

    def _text_ids(self, name: str, ids: set[str], state: GraphState, home: Path) -> None:
        seq = state.seq
        existed = {m.id for m in state.memories.values() if m.status != "forgotten"}

        def compare(final: GraphState) -> None:
            # A memory forgotten after `seq` is purged from the index at once, so it is judged
            # by the final state: its text must be gone whatever seq the index records.
            forgotten = {m.id for m in final.memories.values() if m.status == "forgotten"}
            left = ids & forgotten - self.pending
            if left:
                # `ids` were read when verify began: a forget since then (another process's)
                # has purged the index, or is purging it now. Judge what the index holds now.
                left &= self._indexed_now(home)
            found = [
                (
                    sorted(existed - forgotten - ids),
                    "memory of the log missing",
                    "memories of the log missing",
                ),
                (
                    sorted(left),
                    "forgotten memory whose text is still indexed",
                    "forgotten memories whose text is still indexed",
                ),
                (
                    sorted(ids - existed - forgotten),
                    "memory the log does not have by then",
                    "memories the log does not have by then",
                ),
            ]
            wrong = [f"{counted(len(m), one, many)} ({_some(m)})" for m, one, many in found if m]
            if wrong:
                self.problems.append(f"{name} (seq {seq}): " + "; ".join(wrong))
            else:
                self.checked.append(
                    f"{name} (seq {seq}, {counted(len(ids), 'memory', 'memories')})"
                )

        self._later.append(compare)

    # -- vector caches -----------------------------------------------------------------------

    def _vector_caches(self, home: Path) -> None:
        folder = home / VECTORS_DIR
        if not folder.is_dir():
            return
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            name = f"{VECTORS_DIR}/{sub.name}"
            found, pending = check_cache(sub), self.pending
            if found is not None and found.unzeroed and not pending:
                # Or a forget under way in another process (it dashes the hash lines, then
                # zeroes the rows, holding the lock): look again with no appender mid-way.
                found, pending = self._vector_cache_now(sub)
            if found is None:
                self.ignored.append(f"{name}: no manifest and no dimension in its name")
                continue
            # Rows a killed purge erased but had not zeroed: expected while its forget is
            # pending (the next open finishes it, zeroing every erased row).
            problems = found.problems + ([] if pending else found.unzeroed)
            self.problems += [f"{name}: {problem}" for problem in problems]
            if found.manifest is None:
                if not problems:
                    self.checked.append(
                        f"{name} ({counted(found.rows, 'row')}, no coverage recorded)"
                    )
                continue
            self._at(found.manifest.seq, name, partial(self._coverage, name, found))

    def _vector_cache_now(self, folder: Path) -> tuple[CacheCheck | None, set[str]]:
        """`check_cache(folder)` and the pending purges, read while no appender is mid-way."""
        found: list[tuple[CacheCheck | None, set[str]]] = []

        def read() -> bool:
            pending = {p.memory_id for p in forgetting.read_pending(self.home)}
            found.append((check_cache(folder), pending))
            return True

        _between_writes(self.home, read)
        return found[0]

    def _coverage(self, name: str, found: CacheCheck, state: GraphState) -> None:
        assert found.manifest is not None
        if found.manifest.store_id != state.store_id:
            self.problems.append(f"{name}: a cache of another store ({found.manifest.store_id})")
            return
        # Empty content is the redaction mark: forgotten later, its row was erased then.
        texts = [
            m.content
            for m in state.memories.values()
            if m.status != "forgotten" and m.content and m.id not in self.pending
        ]
        labels = {
            label: key_id
            for label, key_id in state.labels.items()
            if key_id not in self.pending_keys
        }
        missing = _without_row(found, {*texts, *labels})
        seq = state.seq

        def judge(final: GraphState) -> None:
            # A label a forget erased since the fold read it (a forget under way in another
            # process) had its rows erased then.
            gaps = [t for t in missing if t not in labels or final.keys[labels[t]].label]
            if gaps:
                self.problems.append(f"{name}: {_gap(gaps, seq)}")
            elif not found.problems and not (found.unzeroed and not self.pending):
                self.checked.append(f"{name} ({counted(found.rows, 'row')}, covers seq {seq})")

        if any(t in labels for t in missing):
            self._later.append(judge)
        else:
            judge(state)


def _beyond(seq: int, end: int) -> str:
    return (
        f"reflects seq {seq}, but the log ends at seq {end} "
        "(a log restored from an older copy, or a cache of another store)"
    )


def _without_row(found: CacheCheck, texts: set[str]) -> list[str]:
    """Those of `texts` the cache holds no row for, sorted."""
    return sorted(text for text in texts if text_hash(text) not in found.digests)


def _gap(missing: list[str], seq: int) -> str:
    return (
        f"{counted(len(missing), 'label or content', 'labels or contents')} up to seq {seq} "
        f"{'has' if len(missing) == 1 else 'have'} no row, though its manifest says they all "
        f"do ({_some(missing)})"
    )


def _between_writes(home: Path, read: Callable[[], bool]) -> None:
    """Run `read` while no appender holds the lock (none is mid-way through a write)."""
    log = EventLog(home)
    try:
        # Never create the lock file (verify writes nothing): without it, no appender is.
        log.wait_for_lock(read) if log.lock_path.exists() else read()
    finally:
        log.close()


def _some(items: list[str], shown: int = 3) -> str:
    head = ", ".join(repr(i) if " " in i else i for i in items[:shown])
    return head + (", ..." if len(items) > shown else "")


def _consumed(log: EventLog) -> int:
    pos = log.position
    done = 0
    for name in log.segments():
        if name == pos.segment:
            return done + pos.offset
        done += (log.dir / name).stat().st_size
    return done


class OtherModels:
    """The vector caches of models other than the one a rebuild runs with, which it keeps
    when they pass the checks `verify` makes on a vector cache (well-formed rows; where a
    manifest records a seq, a row for every label and content up to it).

    A row is a pure function of (model, text), not of the log's history: dropping another
    model's cache only made that model's clients embed the whole store again (paid per token,
    for an API's model). With `keep` false every cache is dropped, as `--all-models` asks.

    `check_replay` shows it the state at the seq each manifest records; `drop_cache` has it
    decide, holding the appenders' lock, after folding what was appended since.
    """

    def __init__(self, home: Path | str, current: str, *, keep: bool = True) -> None:
        self.home = Path(home)
        #: the folder (under VECTORS_DIR) of the model the rebuild runs with: always dropped
        self.current = current
        self.keep = keep
        #: what was kept and what was dropped (`name (rows, coverage)`, `name: why`)
        self.kept: list[str] = []
        self.dropped: list[str] = []
        self._due: dict[int, list[str]] = {}  # seq a manifest records -> folder names
        #: (folder name, seq) -> the labels up to that seq, and memory id -> its content
        self._texts: dict[tuple[str, int], tuple[dict[str, str], dict[str, str]]] = {}
        self._log: EventLog | None = None
        self._state = GraphState()
        if keep:
            for sub in self._folders():
                seq = _recorded_seq(sub)
                if seq is not None:
                    self._due.setdefault(seq, []).append(sub.name)

    def _folders(self) -> list[Path]:
        folder = self.home / VECTORS_DIR
        if not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_dir() and p.name != self.current)

    def reached(self, state: GraphState) -> None:
        for name in self._due.pop(state.seq, ()):
            # As verify's coverage check reads them at that seq (empty content: redacted).
            self._texts[name, state.seq] = (
                dict(state.labels),
                {m.id: m.content for m in state.memories.values() if m.status != "forgotten"},
            )

    def folded(self, log: EventLog, state: GraphState) -> None:
        """The whole log was folded into `state`, read through `log` (for `decide` to go on)."""
        self._log, self._state = log, state

    def decide(self) -> set[Path]:
        """The caches to keep. Call holding the appenders' lock: no process appends, writes a
        row or purges meanwhile, so what is judged here is what stays."""
        folders = self._folders()
        if not self.keep:
            self.dropped += [f"{VECTORS_DIR}/{sub.name} (--all-models)" for sub in folders]
            return set()
        state = self._state
        try:
            if self._log is not None:
                for event in self._log.iter_new():  # appended since check_replay's fold
                    apply(state, event)
                    self.reached(state)
        except (KeytrailError, KeyError, IndexError, TypeError, AttributeError) as exc:
            # The open after the drop meets it, and says what it is.
            why = f"the log appended since rebuild checked it does not fold ({exc})"
            self.dropped += [f"{VECTORS_DIR}/{sub.name}: {why}" for sub in folders]
            return set()
        pending = {p.memory_id for p in forgetting.read_pending(self.home)}
        keep: set[Path] = set()
        for sub in folders:
            name = f"{VECTORS_DIR}/{sub.name}"
            found = check_cache(sub)
            kept, why = self._judge(sub.name, found, state, pending)
            if kept is not None:
                self.kept.append(f"{name} ({kept})")
                keep.add(sub)
            else:
                self.dropped.append(f"{name}: {why}")
        return keep

    def _judge(
        self, folder: str, found: CacheCheck | None, state: GraphState, pending: set[str]
    ) -> tuple[str | None, str]:
        """(what a kept cache holds, None) or (None, why it is dropped), judged as verify
        judges it."""
        if found is None:
            return None, "no manifest and no dimension in its name"
        # Rows a killed purge erased but had not zeroed: the open after the drop finishes it.
        problems = found.problems + ([] if pending else found.unzeroed)
        if problems:
            return None, "; ".join(problems)
        manifest = found.manifest
        if manifest is None:
            return f"{counted(found.rows, 'row')}, no coverage recorded", ""
        if manifest.seq > state.seq:
            return None, _beyond(manifest.seq, state.seq)
        if manifest.store_id != state.store_id:
            return None, f"a cache of another store ({manifest.store_id})"
        texts = self._texts.get((folder, manifest.seq))
        if texts is None:
            # Recorded by another process's build while this rebuild read the log: the state
            # at that seq is gone, so its coverage cannot be checked.
            return None, f"its coverage (seq {manifest.seq}) was recorded while rebuild ran"
        labels, contents = texts
        # A memory forgotten since had its row erased (its line redacted since, too).
        memories = state.memories
        held = {
            content
            for memory_id, content in contents.items()
            if content and memory_id not in pending and memories[memory_id].status != "forgotten"
        }
        # A key whose label a forget erased since had its label's rows erased.
        held |= {label for label, key_id in labels.items() if state.keys[key_id].label}
        missing = _without_row(found, held)
        if missing:
            return None, _gap(missing, manifest.seq)
        return f"{counted(found.rows, 'row')}, covers seq {manifest.seq}", ""


def _recorded_seq(folder: Path) -> int | None:
    """The seq a vector cache's manifest records, if it can be read."""
    try:
        seq = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["seq"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return seq if isinstance(seq, int) else None


def check_replay(
    home: Path | str, progress: Progress | None = None, others: OtherModels | None = None
) -> None:
    """Fold the whole log from its first line, writing nothing; raise CorruptLog at the first
    line that cannot be read or applied (as an open with no snapshot would).

    What `rebuild` runs before it drops a cache: an open from a snapshot reads only the lines
    after it, so a store whose older log is damaged still answers, and dropping its caches
    first would leave it answering nothing, its snapshot's state past the damage lost.
    `others` sees every state of the fold (see `OtherModels`).
    """
    log = EventLog(Path(home))
    try:
        total = sum((log.dir / s).stat().st_size for s in log.segments()) or 1
        state = GraphState()
        if others is not None:
            others.reached(state)  # a cache of an empty store
        for count, event in enumerate(log.iter_new(), 1):
            try:
                apply(state, event)
            except (KeyError, IndexError, TypeError, AttributeError) as exc:
                at = log.position
                with open(log.dir / (at.segment or ""), "rb") as f:
                    line = f.read(at.offset).count(b"\n")
                reason = f"seq {at.seq} cannot be applied: it refers to missing {exc}"
                raise CorruptLog(at.segment or "", line, reason) from None
            if others is not None:
                others.reached(state)
            if progress is not None and count % 10_000 == 0:
                progress(_consumed(log), total)
        if progress is not None:
            progress(total, total)
    finally:
        log.close()  # its files for appending: it reads on
    if others is not None:
        others.folded(log, state)


def drop_cache(home: Path | str, others: OtherModels | None = None) -> None:
    """Delete everything derived (snapshots, vectors, the text index) but the vector caches
    `others` decides to keep. The log alone is the store; each is made anew from it when next
    needed.

    Holding the appenders' lock, while `others` decides too: live servers write into cache/
    (vector rows, snapshots, a forget's purges) only under it, so none writes into a folder
    being removed (which made the removal fail, "Directory not empty"), nor into a cache being
    judged. Each notices the files gone at its next look.

    The build locks stay (empty files, nothing derived): a builder under way holds its flock on
    its file, and with the file gone the next builder of that model made a new one, took it at
    once and embedded the same texts beside it.
    """

    def drop() -> bool:
        cache = Path(home) / "cache"
        keep = others.decide() if others is not None else set()
        if cache.exists():
            _remove_all_but(cache, keep | {Path(home) / BUILDING_DIR})
        index = TextIndex(Path(home) / TEXT_INDEX_DIR)
        try:
            index.remove()  # under its writers' lock: nobody is mid-commit into it
        finally:
            index.close()
        return True

    # wait_for_lock, not lock(): the lock is all this needs, and lock() would first read the
    # whole log into this fresh EventLog, holding every writer up for a full replay.
    log = EventLog(Path(home))
    try:
        log.wait_for_lock(drop)
    finally:
        log.close()


def _remove_all_but(folder: Path, keep: set[Path]) -> None:
    """Delete everything under `folder` except the paths in `keep` (and folders above them)."""
    for entry in folder.iterdir():
        if entry in keep:
            continue
        if any(entry in kept.parents for kept in keep):
            _remove_all_but(entry, keep)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
