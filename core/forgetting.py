"""Forgetting for good: remove a forgotten memory's content from every file of the store.

What "every file" covers, for each forgotten memory (the content of that memory only; other
memories of the same `remember_batch` line keep theirs):

- log/: the `memory.remembered` or `memory.corrected` line that created it is redacted in place
  (events/redact.py: same byte length, fresh checksum); torn tails kept in log/torn/ have the
  content blanked too. The `memory.forgotten` line stays as the audit record (id, content hash,
  time, reason). Earlier versions of a corrected memory are memories of their own: forget them
  separately. Queries quoted in `memory.read`/`links.adjusted` and conversation turns are what
  the user typed, not the memory, and are kept.
- cache/snapshot/: every snapshot this code can read gets the memory's content blanked (exactly
  what a replay of the redacted log gives); any other file there is deleted (it is derived).
- cache/vectors/: the content's row is erased in every model's matrix (VectorCache.purge).
- index/: the text index is derived from the log; see `purge_text_index`.

Crash safety: the memory's id and vector digest are written to `forget.pending` before the
`memory.forgotten` event is appended, and removed only after every file is done. Each step is
atomic (temp file + rename, or an idempotent in-place overwrite) and safe to repeat, so an
interrupted purge is finished by the next open of the store or the next write of any process
that has it open, whichever comes first. All of it runs holding the appenders' lock.
"""

from __future__ import annotations

import functools
import re
import shutil
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path

import msgspec

from keytrail.events import (
    AnyEvent,
    EventLog,
    KeyUnaliased,
    LinksAdjusted,
    MemoryCorrected,
    MemoryRead,
    MemoryRemembered,
    PinnedLog,
)
from keytrail.events.codec import DecodeError, decode_line, event_tag
from keytrail.events.durable import sync_dir
from keytrail.events.errors import CorruptLog
from keytrail.events.redact import (
    TEMP_SUFFIX,
    SegmentRedaction,
    apply_redaction,
    plan_redaction,
)
from keytrail.projections import snapshot as snapshots
from keytrail.projections.keygraph import GraphState, MemoryNode, erase_labels
from keytrail.projections.text import TextIndex
from keytrail.projections.vectors import VectorCache, text_hash

from .results import KeptLabel

PENDING_FILE = "forget.pending"


class PendingPurge(msgspec.Struct, frozen=True, kw_only=True):
    """A forgotten memory whose content may still be in some file."""

    memory_id: str
    created_seq: int
    #: text_hash of the content: the vector cache's row key (the content itself is never kept).
    #: Empty for a memory forgotten before, whose line only has labels left to erase.
    vector_digest: str
    #: Keys whose labels the forget erases (`MemoryForgotten.erased_keys`) that the memory's
    #: line names: blanked there as its content is.
    keys: list[str] = []
    #: text_hash of each erased label and alias (as typed and case-folded): their vector rows.
    label_digests: list[str] = []


_pending_decoder = msgspec.json.Decoder(list[PendingPurge])


def snapshot_seq(path: Path) -> int | None:
    """The seq a snapshot file reflects, or None if it is missing or not a readable snapshot."""
    header = snapshots.read_header(path)
    return None if header is None else header.seq


def pending_path(home: Path) -> Path:
    return home / PENDING_FILE


def read_pending(home: Path) -> list[PendingPurge]:
    try:
        return _pending_decoder.decode(pending_path(home).read_bytes())
    except FileNotFoundError:
        return []
    except (msgspec.DecodeError, msgspec.ValidationError):
        # Written atomically, so only a hand edit breaks it; nothing can be resumed from it.
        return []


def write_pending(home: Path, entries: list[PendingPurge]) -> None:
    """Record (atomically) the purges under way; an empty list removes the file."""
    path = pending_path(home)
    if entries:
        snapshots.write_atomic(path, msgspec.json.encode(entries))
    elif path.exists():
        path.unlink()
        sync_dir(home)


def settled_log(home: Path) -> tuple[PinnedLog, list[PendingPurge]]:
    """The log pinned for a reader that opens no store (export, log): every forget in it has
    erased its content from it, and forgets appended later do not change it (`PinnedLog`).

    Why this closes the window: a forget records `forget.pending`, appends its event, redacts,
    and removes the record last, all holding the appenders' lock. Pinned files checked with no
    record present and no segment replaced since the pin were pinned after every purge of a
    forget they hold had finished; otherwise wait for that lock (the purge under way ends) and
    pin again. A reader of plain files would read the creating line before its redaction and the
    forget after it: an export holding both, which an import turns into a store whose log keeps
    the content.

    Also returns the purges a process that died mid-way left unfinished (the record is there
    while nobody holds the lock): those files still hold their content until a store is opened.
    """
    while True:
        pinned = PinnedLog(home)
        if not pending_path(home).exists() and not pinned.replaced():
            return pinned, []
        pinned.close()
        if pinned.wait_for_lock(pending_path(home).exists):
            return PinnedLog(home), read_pending(home)


def purge(
    home: Path,
    log: EventLog,
    entries: Iterable[PendingPurge],
    vectors: VectorCache | None,
    *,
    keep_vectors: Collection[str] = (),
    plans: Mapping[str, SegmentRedaction] | None = None,
) -> list[str]:
    """Remove the content of `entries` (already forgotten in the log) from every file.

    Call holding the log lock. Safe to call again on the same entries.
    `keep_vectors`: text hashes whose vector rows stay (texts other memories still hold).
    `plans`: what `check_redactable` planned under this same hold of the lock (the lines it
    found are as they were: only appends came since), by segment; the others are planned here.
    Returns the files changed or deleted, relative to `home`.
    """
    entries = list(entries)
    if not entries:
        return []
    ids = {e.memory_id for e in entries}
    touched: list[str] = []
    for stale in log.dir.glob(f".*{TEMP_SUFFIX}"):
        stale.unlink()  # a crashed redaction's copy; the segment itself is old or new, whole
    planned = plans or {}
    labels = _labels(entries)
    for name, segment_ids in sorted(_by_segment(log, entries).items()):
        plan = planned.get(name)
        if plan is None or plan.memory_ids != segment_ids or plan.labels != labels:
            plan = plan_redaction(log.dir / name, segment_ids, labels)
        # The torn tails first: once the log line is redacted the content is nowhere to be read
        # back, and a resumed purge could not find them.
        touched += _scrub_torn(log.dir / "torn", [*plan.contents.values(), *plan.removed_labels])
        if apply_redaction(plan):
            log.segment_replaced(name)
            touched.append(str(log.dir / name))  # under `home`, as every path here
    first = min(e.created_seq for e in entries)
    erased_keys = {k for e in entries for k in e.keys}
    touched += purge_snapshots(home / "cache" / "snapshot", ids, first, erased_keys)
    digests = {e.vector_digest for e in entries} | {d for e in entries for d in e.label_digests}
    touched += purge_vectors(
        home / "cache" / "vectors", digests - set(keep_vectors) - {""}, vectors
    )
    touched += purge_text_index(home, ids)
    return [_relative(home, p) for p in touched]


class ErasableLabels(msgspec.Struct, kw_only=True):
    """What a forget does with the labels of the keys of the memories it forgets."""

    #: key id -> the forgotten memories whose creating lines name it (all its links)
    erased: dict[str, list[str]] = {}
    kept: list[KeptLabel] = []
    #: `label_digests` of every erased label and alias
    digests: list[str] = []


def erasable_labels(
    log: EventLog,
    state: GraphState,
    memory_ids: Collection[str],
    scan: MemoryScan | None = None,
) -> ErasableLabels:
    """Which labels of the keys of `memory_ids` (about to be forgotten) go with them.

    A key's label (and its aliases) is erased when every link of the key goes to a memory
    forgotten now or before, and it is written nowhere but in the lines that created those
    memories: no other event names the key (an alias learned or dropped, a retype, an entity,
    an import, ...; reads name it by id only, with the query the user typed, which is kept),
    and no other key has, or had, the same label or alias. Everything else is kept, with why.
    Call holding the appenders' lock, caught up (the log is scanned from the key's creation).
    `scan`: `scan_memories(state, ...)`, where the caller has it already.
    """
    memories = state.memories
    scan = scan_memories(state, ()) if scan is None else scan
    gone = set(memory_ids) | scan.forgotten
    result = ErasableLabels()
    candidates: dict[str, set[str]] = {}  # key id -> its texts, case-folded
    seen: set[str] = set()
    for memory_id in memory_ids:
        for key_id in memories[memory_id].keys:
            key = state.keys[key_id]
            if key_id in seen or not key.label:
                continue
            seen.add(key_id)
            newest = _live_link(key.links, gone)
            if newest is not None:
                namespace = memories[memory_id].namespace
                if scan.namespaces <= {namespace}:  # one namespace: no link's is read
                    reason = _kept_for_one_namespace(newest, key.links, gone)
                else:
                    reason = _kept_for(memories, key.links, gone, namespace)
                result.kept.append(KeptLabel(key_id=key_id, label=key.label, reason=reason))
            else:
                candidates[key_id] = {t.casefold() for t in (key.label, *key.aliases)}
    if candidates:
        # Another key with the same text: the labels map would differ between the live state
        # and a replay of the redacted log (the first key folded claims a label).
        owners = {t: k for k, ts in candidates.items() for t in ts}
        for other in snapshots.peek_all(state.keys, snapshots.KeyLabels):
            if other.id in candidates:
                continue
            for text in (other.label, *other.aliases):
                owner = owners.get(text.casefold())
                if owner is not None and owner in candidates:
                    why = f"{other.id} has the same label or alias"
                    _keep(result, state, candidates, owner, why)
    if candidates:
        for key_id, why in _named_elsewhere(log, state, candidates, gone).items():
            _keep(result, state, candidates, key_id, why)
    for key_id in candidates:
        result.erased[key_id] = sorted(state.keys[key_id].links)
    texts = [t for k in result.erased for t in (state.keys[k].label, *state.keys[k].aliases)]
    result.digests = label_digests(state, gone, texts)
    return result


class MemoryScan(msgspec.Struct, kw_only=True):
    """What a forget reads of every memory, in one walk (`scan_memories`)."""

    forgotten: set[str]
    #: content hash -> the memories not forgotten with that hash, oldest first
    holding: dict[str, list[str]]
    #: the namespaces of the memories not forgotten
    namespaces: set[str]


def scan_memories(state: GraphState, hashes: Collection[str]) -> MemoryScan:
    """The memories forgotten so far, and those not forgotten whose content hash is one of
    `hashes`: one walk, no node decoded nor any text (`MemoryHash`)."""
    scan = MemoryScan(forgotten=set(), holding={h: [] for h in hashes}, namespaces=set())
    forgotten, holding, namespaces = scan.forgotten, scan.holding, scan.namespaces
    for m in snapshots.peek_all(state.memories, snapshots.MemoryHash):
        if m.status == "forgotten":
            forgotten.add(m.id)
            continue
        namespaces.add(m.namespace)
        if (held := holding.get(m.content_hash)) is not None:
            held.append(m.id)
    return scan


def _live_link(links: dict[str, float], gone: Collection[str]) -> str | None:
    """The newest of `links` not in `gone` (None if all are): a key under a forgotten memory
    is most often a hub whose newest link is live, so this stops at once."""
    return next((m for m in reversed(links) if m not in gone), None)


def _kept_for_one_namespace(newest: str, links: dict[str, float], gone: Collection[str]) -> str:
    """`_kept_for` where every memory not forgotten is in the caller's namespace (`newest`:
    `_live_link`): counted from the smaller side, so a hub's links are not walked (`gone` is
    small)."""
    if len(gone) < len(links):
        live = len(links) - sum(1 for m in gone if m in links)
    else:
        live = sum(1 for m in links if m not in gone)
    more = f" and {live - 1} more" if live > 1 else ""
    return f"also a key of {newest}{more}"


def _kept_for(
    memories: dict[str, MemoryNode], links: dict[str, float], gone: Collection[str], namespace: str
) -> str:
    """Why a key that leads to memories not in `gone` keeps its label: the newest of them in
    `namespace` by id, and how many more there are. Keys are shared across namespaces, but the
    answer goes to a caller in `namespace`: of the others it says only that some exist."""
    newest: str | None = None
    mine = elsewhere = 0
    # Every live link's namespace is read, undecoded (0.1 s for a key of 100,000 links).
    for m in reversed(links):
        if m in gone:
            continue
        if snapshots.peek_namespace(memories, m) != namespace:
            elsewhere += 1
        elif newest is None:
            newest, mine = m, 1
        else:
            mine += 1
    others = "memories in other namespaces"
    if newest is None:
        return f"also a key of {others}"
    more = f" and {mine - 1} more" if mine > 1 else ""
    return f"also a key of {newest}{more}" + (f" and of {others}" if elsewhere else "")


def label_digests(state: GraphState, gone: Collection[str], texts: Iterable[str]) -> list[str]:
    """The vector rows (text hashes) of erased label texts, as written and case-folded, but
    those a memory not in `gone` has as its content (the row is theirs)."""
    forms = {form for text in texts for form in (text, text.casefold())}
    if not forms:  # most forgets erase no label: no walk of every memory
        return []
    held = {
        m.content
        for m in snapshots.peek_all(state.memories, snapshots.MemoryText)
        if m.id not in gone and m.content in forms
    }
    return sorted(text_hash(t) for t in forms - held)


def _keep(
    result: ErasableLabels,
    state: GraphState,
    candidates: dict[str, set[str]],
    key_id: str,
    why: str,
) -> None:
    if candidates.pop(key_id, None) is not None:
        result.kept.append(KeptLabel(key_id=key_id, label=state.keys[key_id].label, reason=why))


#: Events that name a key by id only, about the memories linked to it: a read through the key
#: and the weights a recall adjusted (their queries are what the user typed, kept by design).
_NAMING_BY_ID = (MemoryRead, LinksAdjusted)


def _named_elsewhere(
    log: EventLog, state: GraphState, candidates: dict[str, set[str]], gone: set[str]
) -> dict[str, str]:
    """Candidates named by an event other than the lines that created forgotten memories (and
    reads of them), or whose text was an alias another key dropped: key id -> why."""
    found: dict[str, str] = {}
    first = min(state.keys[k].created_seq for k in candidates)
    start = _segment_of(log, first)
    names = [n for n in log.segments(fresh=True) if start is not None and n >= start]
    needles = {k: b'"' + k.encode() + b'"' for k in candidates}
    for name in names:
        data = (log.dir / name).read_bytes()
        lines: dict[int, AnyEvent | None] = {}
        event_at = functools.partial(_event_at, name, data, lines)
        for key_id, needle in needles.items():
            for at in _lines_with(data, needle):
                if key_id in found:
                    break
                event = event_at(at)
                if event is not None and not _names_only_gone(event, key_id, gone):
                    found[key_id] = f"named by {event_tag(event)} at seq {event.seq}"
        for at in _lines_with(data, b'"key.unaliased"'):
            event = event_at(at)
            if isinstance(event, KeyUnaliased):
                for key_id, texts in candidates.items():
                    if event.key_id != key_id and event.alias.casefold() in texts:
                        found.setdefault(
                            key_id,
                            f"{event.key_id} had the same text as an alias (seq {event.seq})",
                        )
    return found


def _lines_with(data: bytes, needle: bytes) -> Iterator[int]:
    """Where `needle` first stands in each line of `data` holding it."""
    at = data.find(needle)
    while at >= 0:
        yield at
        end = data.find(b"\n", at)
        at = -1 if end < 0 else data.find(needle, end + 1)


def _event_at(
    name: str, data: bytes, lines: dict[int, AnyEvent | None], at: int
) -> AnyEvent | None:
    """The event of the line of segment `name` (`data`) holding byte `at` (decoded once, kept
    in `lines`); None for a partial last line."""
    start = data.rfind(b"\n", 0, at) + 1
    if start not in lines:
        stop = data.find(b"\n", start)
        try:
            lines[start] = None if stop < 0 else decode_line(data[start:stop])
        except DecodeError as exc:  # a damaged line: say where, as the log's own reader does
            raise CorruptLog(name, data.count(b"\n", 0, start) + 1, exc.message) from None
    return lines[start]


def _names_only_gone(event: AnyEvent, key_id: str, gone: set[str]) -> bool:
    """Whether `event` names `key_id` only as a key of forgotten memories it created, or by id
    in a read of a memory."""
    if isinstance(event, _NAMING_BY_ID):
        return True
    if isinstance(event, MemoryRemembered | MemoryCorrected):
        created = event.memories if isinstance(event, MemoryRemembered) else [event.memory]
        return all(m.memory_id in gone for m in created if any(k.key_id == key_id for k in m.keys))
    return False


def check_redactable(log: EventLog, entries: Iterable[PendingPurge]) -> dict[str, SegmentRedaction]:
    """Raise CorruptLog if a line that created one of `entries` is damaged, so its redaction
    could not be planned. A forget checks this before it writes: written first, its purge could
    never finish, and a purge left pending stops every open.

    Returns the plans by segment, for `purge` under the same hold of the lock: planning again
    decoded each line once more (a batch line is megabytes) while every writer waited."""
    entries = list(entries)
    labels = _labels(entries)
    return {
        name: plan_redaction(log.dir / name, ids, labels)
        for name, ids in sorted(_by_segment(log, entries).items())
    }


def _labels(entries: Iterable[PendingPurge]) -> dict[str, frozenset[str]]:
    """The keys whose labels are erased in each memory's line, by memory id."""
    return {e.memory_id: frozenset(e.keys) for e in entries if e.keys}


def _by_segment(log: EventLog, entries: Iterable[PendingPurge]) -> dict[str, frozenset[str]]:
    """The ids of `entries` by the segment holding the line that created them (only that line
    holds a memory's content)."""
    by_segment: dict[str, set[str]] = {}
    for e in entries:
        name = _segment_of(log, e.created_seq)
        if name is not None:
            by_segment.setdefault(name, set()).add(e.memory_id)
    return {name: frozenset(ids) for name, ids in by_segment.items()}


def content_in_log(log: EventLog, memory_id: str, created_seq: int) -> str | None:
    """The content the log line that created a memory still holds (None once redacted).

    A forget redacts that line, so text there for a forgotten memory means a redaction undone
    (a segment put back from a backup): verify reports it, and a forget erases it again.
    """
    name = _segment_of(log, created_seq)
    if name is None:
        return None
    return plan_redaction(log.dir / name, {memory_id}).contents.get(memory_id) or None


def _relative(home: Path, path: str) -> str:
    """`path` (under `home`, as `home` was given: absolute or not) relative to `home`."""
    p = Path(path)
    return str(p.relative_to(home)) if p.is_relative_to(home) else path


def _segment_of(log: EventLog, seq: int) -> str | None:
    """The segment holding `seq`: the last one whose first seq is at or before it."""
    found = None
    for name in log.segments(fresh=True):
        if int(name.split(".")[0]) > seq:
            break
        found = name
    return found


def _scrub_torn(torn_dir: Path, contents: Iterable[str]) -> list[str]:
    """Blank `contents` in the torn tails kept for inspection (whole or cut off at the end)."""
    contents = [c for c in contents if c]
    if not contents or not torn_dir.is_dir():
        return []
    forms = {f for c in contents for f in (c.encode(), msgspec.json.encode(c)[1:-1])}
    touched = []
    for path in sorted(torn_dir.iterdir()):
        data = path.read_bytes()
        scrubbed = data
        for form in forms:
            scrubbed = scrubbed.replace(form, b" " * len(form))
            # A torn line may stop inside the content: blank a cut-off start of it at the end.
            tail = scrubbed.rfind(b'"content":"')
            if tail >= 0:
                rest = scrubbed[tail + len(b'"content":"') :]
                if rest and form.startswith(rest):
                    scrubbed = scrubbed[: len(scrubbed) - len(rest)] + b" " * len(rest)
        if scrubbed != data:
            snapshots.write_atomic(path, scrubbed)
            touched.append(str(path))
    return touched


def purge_snapshots(
    directory: Path,
    memory_ids: Collection[str],
    first_seq: int = 0,
    erased_keys: Collection[str] = (),
) -> list[str]:
    """Blank the content of `memory_ids` (and the labels of `erased_keys`) in every readable
    snapshot; delete any other file.

    A snapshot with the content blanked is exactly the fold of the redacted log up to its seq.
    One older than `first_seq` (the earliest creation among them) cannot hold their content.
    """
    if not directory.is_dir():
        return []
    touched = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        seq = None if path.name.startswith(".") else snapshot_seq(path)
        if seq is not None and seq < first_seq:
            continue
        # Loaded lazily: only the nodes blanked here are decoded and encoded again, the rest
        # copied as they were (an eager load and save took 2-3 s at 100,000 memories, every
        # other writer waiting on the lock).
        snap = None if seq is None else snapshots.load(path, lazy=True)
        if snap is None:
            path.unlink()  # a temp file, or a format this code cannot read: derived anyway
            touched.append(str(path))
            continue
        changed = False
        for memory_id in memory_ids:
            node = snap.state.memories.get(memory_id)
            if node is not None and node.content:
                node.content = ""
                changed = True
        # Before the forget only the labels go, as the fold of the redacted lines never added
        # them.
        changed = erase_labels(snap.state, erased_keys) or changed
        if changed:
            snapshots.save(path, snap)
            touched.append(str(path))
    return touched


_DIM = re.compile(r"_(\d+)$")


def purge_vectors(directory: Path, digests: set[str], current: VectorCache | None) -> list[str]:
    """Erase the rows of `digests` in the vector cache of every model fingerprint."""
    if not directory.is_dir():
        return []
    touched = []
    for sub in sorted(p for p in directory.iterdir() if p.is_dir()):
        if current is not None and current.dir == sub:
            cache = current
        else:
            # Fingerprints end with the dimension (backend:model:dim); the directory name keeps it.
            match = _DIM.search(sub.name)
            if match is None:
                shutil.rmtree(sub)
                touched.append(str(sub))
                continue
            cache = VectorCache(directory, sub.name, int(match.group(1)))
        if cache.purge(digests):
            touched.append(str(sub))
    return touched


def purge_text_index(home: Path, memory_ids: Collection[str]) -> list[str]:
    """Remove `memory_ids`' content from the text index under `home/index/`.

    The whole index is deleted (under its writers' lock, so no other process is writing into
    it): it is derived from the (now redacted) log and is rebuilt when missing.
    """
    index = TextIndex(home / "index" / "text")
    try:
        return index.remove()
    finally:
        index.close()
