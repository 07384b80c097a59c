"""The key graph: keys, memories and weighted links, folded purely from events.

`apply(state, event)` is the whole fold. It never reads the clock, the environment or a model:
everything it needs is in the event or in the fold rules the log itself carries.
"""

from __future__ import annotations

import gc
import itertools
import math
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

import msgspec

from keytrail.events import (
    AnyEvent,
    EntitiesCreated,
    EntitiesDeleted,
    FoldRules,
    GraphImported,
    KeyAliased,
    KeyMemory,
    KeyRetyped,
    KeyUnaliased,
    LinksAdjusted,
    MemoriesExpired,
    MemoryCorrected,
    MemoryForgotten,
    MemoryRead,
    MemoryRemembered,
    MemoryReplaced,
    NewMemory,
    ObservationsDeleted,
    RelationsAdded,
    RelationSpec,
    RelationsRemoved,
    RulesChanged,
    StoreCreated,
    TurnRecorded,
)
from keytrail.events.types import EPOCH

from .scripts import pattern

#: "deleted": removed from the knowledge graph (delete_observations, delete_entities). Hidden
#: from the present like a forgotten memory, but its content stays, as it stays in the log line
#: that created it, so reads as of a point before the delete show it. "forgotten": erased by
#: `forget`; its content is blank here and in every file.
Status = Literal["active", "expired", "forgotten", "deleted"]


# Nodes and events hold no reference cycles, so they opt out of the cyclic GC: folding a large
# log or loading a snapshot otherwise spends a third of its time in collections. Nodes encode as
# arrays (array_like): a snapshot then carries no field names and decodes positionally, which
# makes loading one much faster. Add new fields at the end, with defaults (snapshot.SCHEMA
# notices any change and drops stale snapshots).
class KeyNode(msgspec.Struct, kw_only=True, gc=False, array_like=True):
    id: str
    label: str
    type: str = "concept"
    aliases: list[str] = []
    #: memory id -> link weight (Hebbian). Links of superseded/expired memories stay, for history.
    links: dict[str, float] = {}
    created_seq: int = 0
    extracted: bool = False
    #: set while the key is a knowledge-graph entity (create_entities), its entityType
    entity_type: str | None = None

    #: reads of a memory through this key (the clock learned aliases age by)
    reads: int = 0
    #: alias form of a read's query -> reads through this key that carried it
    query_reads: dict[str, int] = {}
    #: alias form of a learned alias -> `reads` when it was learned or last used
    learned: dict[str, int] = {}


class MemoryNode(msgspec.Struct, kw_only=True, gc=False, array_like=True):
    id: str
    namespace: str
    content: str
    content_hash: str
    created_at: datetime
    created_seq: int
    keys: list[str] = []
    depth: float = 0.0
    access_count: int = 0
    last_read_at: datetime | None = None
    expires_at: datetime | None = None
    session_id: str | None = None
    source: str | None = None
    related_to: list[str] = []
    related_from: list[str] = []
    supersedes: str | None = None
    superseded_by: str | None = None
    supersede_reason: str | None = None
    status: Status = "active"
    updated_seq: int = 0
    #: when the fact became true in the world; None means when it was told (`created_at`)
    valid_from: datetime | None = None

    def current(self) -> bool:
        """Active and not replaced by a newer version (expiry by time is checked by queries)."""
        return self.status == "active" and self.superseded_by is None

    def valid_since(self) -> datetime:
        return self.valid_from if self.valid_from is not None else self.created_at


class Turn(msgspec.Struct, kw_only=True, gc=False, array_like=True):
    turn: int
    role: str
    content: str
    at: datetime
    seq: int


#: Link weights (and depths) by value, each value one float object: a store's 400,000 links
#: otherwise hold 400,000 floats (24 bytes each) of a handful of values. Bounded: past it, a
#: new value stays unshared.
_SHARED_FLOATS: dict[float, float] = {}
SHARED_FLOATS_KEPT = 4096


def shared_float(value: float) -> float:
    """`value`, or an identical float object already held for it.

    Only positive floats are shared: -0.0 equals 0.0 and NaN equals nothing, so a dict keyed by
    value could give back another bit pattern; two equal positive floats have the same bits.
    """
    if type(value) is not float:  # an int weight a caller made stays an int
        return value
    found = _SHARED_FLOATS.get(value)
    if found is not None:
        return found
    if value > 0.0 and len(_SHARED_FLOATS) < SHARED_FLOATS_KEPT:
        _SHARED_FLOATS[value] = value
    return value


_ZERO = 0.0


def share_memory(node: MemoryNode) -> MemoryNode:
    """`node` (decoded from a snapshot, on its own) holding shared objects where it repeats
    other nodes' values: interned ids and names, and the common depth 0.0. A snapshot's 100,000
    memories otherwise hold their own copy of every key id they list (61 bytes each, four per
    memory)."""
    intern = sys.intern
    node.id = intern(node.id)
    node.namespace = intern(node.namespace)
    keys = node.keys
    if keys:
        keys[:] = map(intern, keys)
    if node.session_id is not None:
        node.session_id = intern(node.session_id)
    if node.source is not None:
        node.source = intern(node.source)
    if node.depth == 0.0 and math.copysign(1.0, node.depth) > 0.0:
        node.depth = _ZERO
    return node


def share_key(node: KeyNode) -> KeyNode:
    """`node` (decoded from a snapshot, on its own) holding shared objects: interned ids (its
    links' memory ids are then the memories' own, 63 bytes each otherwise) and shared link
    weights."""
    intern = sys.intern
    node.id = intern(node.id)
    node.type = intern(node.type)
    links = node.links
    if links:
        for weight in set(links.values()):  # a few distinct values, however many links
            shared_float(weight)
        # Only values shared_float holds come back other objects (see there), in C.
        weights = links.values()
        node.links = dict(
            zip(map(intern, links), map(_SHARED_FLOATS.get, weights, weights), strict=True)
        )
    return node


class Relation(msgspec.Struct, kw_only=True, gc=False):
    """A knowledge-graph relation: entity key `from_key` --relation_type--> `to_key`."""

    from_key: str
    to_key: str
    relation_type: str
    created_seq: int = 0


def relation_id(from_key: str, to_key: str, relation_type: str) -> str:
    """The identity of a relation (key ids hold no tab, so the split is unambiguous)."""
    return f"{from_key}\t{to_key}\t{relation_type}"


class Changes:
    """Memories whose ranking inputs (depth, last read, a link weight, status, version) the fold
    changed, in fold order, each noted once per event that changed it.

    A reader that keeps per-memory values beside the state (read_key's columns of a big key)
    remembers `end` and later rereads only the memories noted since. New memories are not
    noted: their links are appended to their keys, which a reader sees by length. The journal
    keeps its newest entries only; a reader whose position fell off the front (`since` answers
    None) starts over.
    """

    __slots__ = ("ids", "start")

    #: entries kept; past this the older half is dropped
    KEPT = 1 << 16

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.start = 0  # the position of ids[0] since the journal began

    @property
    def end(self) -> int:
        return self.start + len(self.ids)

    def note(self, memory_id: str) -> None:
        ids = self.ids
        ids.append(memory_id)
        if len(ids) > self.KEPT:
            dropped = len(ids) // 2
            del ids[:dropped]
            self.start += dropped

    def since(self, position: int) -> list[str] | None:
        """The memories noted from `position` on, or None if some have been dropped."""
        if position < self.start:
            return None
        return self.ids[position - self.start :]


def caseless_form(text: str) -> str:
    """Unicode's canonical caseless form (D145), composed: one string for a name in any case and
    any mix of composed and decomposed characters ("Zoë Ångström" with Å as A + U+030A)."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", text).casefold())


def dotless_form(text: str) -> str:
    """`caseless_form` with the Turkish capital İ as an i: casefold makes it i + U+0307, which
    no "Istanbul" or "istanbul" typed on another keyboard is."""
    return caseless_form(text).replace("i\u0307", "i")


def _labels_since(
    index: UnnormalisedLabels | LooseLabels, labels: dict[str, str], dropped: int
) -> Iterable[tuple[str, str]]:
    """The (label, key id) pairs of `labels` an index of them has not read yet, oldest first:
    `GraphState.labels` only grows at its end unless `labels_dropped` moves, which makes the
    index start over (it is emptied here; a forget's erasure drops the index, see
    `erase_labels`). Marks them read."""
    if dropped != index.dropped:
        index.forms.clear()
        index.seen, index.dropped = 0, dropped
    if index.seen >= len(labels):
        return ()
    fresh: Iterable[tuple[str, str]] = labels.items()
    if index.seen:  # only the new labels, from the dict's end
        fresh = list(itertools.islice(reversed(labels.items()), len(labels) - index.seen))
        fresh.reverse()
    index.seen = len(labels)
    return fresh


class UnnormalisedLabels:
    """The labels a plain lookup of the case-folded label misses, by their `dotless_form` -> key
    id: those a log wrote before labels were NFC-normalised that are not NFC (decomposed, or
    half composed as a paste can leave them), and those holding a Turkish İ.

    Most stores hold none, so this is usually empty. It is built on the first lookup
    that needs it and brought up to date on each use: `GraphState.labels` only grows at its end
    (new labels are added with setdefault) unless `labels_dropped` moves, which rebuilds it.
    Where several such labels share a form, the first one folded wins, as `setdefault` does for
    `labels` itself.
    """

    __slots__ = ("dropped", "forms", "seen")

    def __init__(self) -> None:
        self.forms: dict[str, str] = {}
        self.seen = 0  # labels read, from the start of `GraphState.labels`
        self.dropped = 0  # `GraphState.labels_dropped` when they were read

    def key_id(self, labels: dict[str, str], dropped: int, label: str) -> str | None:
        is_nfc = unicodedata.is_normalized
        for text, key_id in _labels_since(self, labels, dropped):
            if not text.isascii() and ("\u0307" in text or not is_nfc("NFC", text)):
                self.forms.setdefault(dotless_form(text), key_id)
        return self.forms.get(dotless_form(label)) if self.forms else None


# dict=True: the change journal and the index of unnormalised labels ride on the state object as
# undeclared attributes, so they are neither encoded (snapshots, equality) nor part of the
# state's value: readers' aids, rebuilt empty for every new state object (whose readers start
# over anyway).
class GraphState(msgspec.Struct, kw_only=True, dict=True):
    store_id: str = ""
    rules: FoldRules = FoldRules()
    seq: int = 0
    at: datetime = EPOCH
    keys: dict[str, KeyNode] = {}
    memories: dict[str, MemoryNode] = {}
    #: case-folded label or alias -> key id
    labels: dict[str, str] = {}
    conversations: dict[str, list[Turn]] = {}
    #: relation_id(...) -> relation, in creation order
    relations: dict[str, Relation] = {}

    #: labels ever removed from `labels` (by key.unaliased): otherwise labels only grow (a
    #: forget's erasures are not counted: see `_forgotten`)
    labels_dropped: int = 0
    #: key-memory links ever cut (by an unlink): otherwise a key's links only grow at the end
    links_cut: int = 0
    #: the seq of the last event that made a linked memory stop counting (replaced, forgotten,
    #: deleted, expired) or cut a link. Until it moves, every key's links only grow at the end,
    #: so a reader may keep per-key counts and count only the new links.
    retired_seq: int = 0
    #: memories told again under an id already held (only a hand-made log): a key may then
    #: link a memory that does not list it, so a memory's keys are not all that lead to it
    ids_retold: int = 0

    def changes(self) -> Changes:
        """This state object's change journal (see `Changes`)."""
        journal: Changes | None = self.__dict__.get("_changes")
        if journal is None:
            journal = self.__dict__["_changes"] = Changes()
        return journal

    def retirements(self) -> Changes:
        """Memories that stopped being current (`MemoryNode.current`: replaced, forgotten,
        deleted, expired), each noted once, when it did: a reader that keeps counts of current
        memories takes these off rather than counting again (see `Changes`)."""
        journal: Changes | None = self.__dict__.get("_retired")
        if journal is None:
            journal = self.__dict__["_retired"] = Changes()
        return journal

    def key_for_label(self, label: str) -> KeyNode | None:
        labels = self.labels
        folded = label.casefold()
        key_id = labels.get(folded)
        if key_id is None and not label.isascii():
            # A log written before labels were NFC-normalised holds them as typed, most often
            # decomposed (macOS), sometimes half composed (a paste): the NFC label asked for
            # must still reach that key. The fold is unchanged (old logs replay to the same
            # state); only this lookup looks further.
            key_id = labels.get(unicodedata.normalize("NFD", label).casefold())
            if key_id is None:
                key_id = labels.get(unicodedata.normalize("NFC", label).casefold())
            if key_id is None and "\u0307" in folded:  # "İstanbul" asked, "Istanbul" stored
                key_id = labels.get(dotless_form(label))
        if key_id is None and (not label.isascii() or "i" in folded):
            # ... or the other way round ("istanbul" asked), or an old unnormalised label
            forms: UnnormalisedLabels | None = self.__dict__.get("_unnormalised")
            if forms is None:
                forms = self.__dict__["_unnormalised"] = UnnormalisedLabels()
            key_id = forms.key_id(labels, self.labels_dropped, label)
        if key_id is None:
            key_id = next(filter(None, map(labels.get, other_apostrophes(folded))), None)
        return self.keys[key_id] if key_id is not None else None

    def loose_keys(self, texts: Iterable[str]) -> list[KeyNode]:
        """The keys with a label or alias whose `loose_form` is that of one of `texts`: a
        name's key however its accents or hyphens were typed. Only a query's way to keys:
        `key_for_label` still tells which key a label is."""
        index: LooseLabels | None = self.__dict__.get("_loose")
        if index is None:
            index = self.__dict__["_loose"] = LooseLabels()
        forms = index.update(self.labels, self.labels_dropped)
        labels = self.labels
        found: dict[str, None] = {}
        for text in texts:
            form = loose_form(text)
            if (plain := labels.get(form)) is not None:
                found[plain] = None
            if forms and (ids := forms.get(form)):
                found.update(dict.fromkeys(ids))
        return [self.keys[key_id] for key_id in found]


def other_apostrophes(folded: str) -> list[str]:
    """`folded` with its apostrophes typed the other way: O'Brien typed on a keyboard is
    O’Brien typed with a phone's smart punctuation."""
    if "'" not in folded and "\u2019" not in folded:
        return []
    forms = (folded.replace("\u2019", "'"), folded.replace("'", "\u2019"))
    return [form for form in forms if form != folded]


def name_form(text: str) -> str:
    """One string for every spelling `key_for_label` takes for one name: any case, composed or
    decomposed, İ as I, either apostrophe."""
    return dotless_form(text).replace("\u2019", "'")


def same_name(label: str, name: str) -> bool:
    """Whether `name` spells `label` (the key `key_for_label(name)` found) rather than one of
    its aliases."""
    return name_form(label) == name_form(name)


#: Letters NFD leaves whole that a keyboard without them types plainly (ß is "ss" already, by
#: casefold), and the hyphens that join a compound name ("Anna-Lena" typed "Anna Lena")
_PLAIN_LETTERS = str.maketrans(
    {
        "æ": "ae",
        "œ": "oe",
        "ø": "o",
        "ł": "l",
        "đ": "d",
        "ð": "d",
        "þ": "th",
        "ı": "i",
        "ħ": "h",
        "-": " ",
        "\u2010": " ",
        "\u2011": " ",
    }
)


#: The accents on a Latin or Greek letter, after NFD (every one such a letter decomposes into
#: is a combining diacritical mark), which a loose form drops (a `scripts.pattern`, compiled on
#: first use: its lookbehind's class cost every command's start)
_ACCENTS = "(?<=[\x00-\u024f\u0370-\u03ff])[\u0300-\u036f]+"


#: What a label's `loose_form` may change beyond ASCII: Latin and Greek letters and their
#: accents (precomposed or not), hyphens, ’. A label of other scripts is its own loose form.
#: (A `scripts.pattern`, as _ACCENTS is.)
_FOLDS = "[\u00c0-\u03ff\u1e00-\u1fff\u2010\u2011\u2019-]"


def loose_form(text: str) -> str:
    """How recall compares a name with a query's words, never which key a label is: its
    `name_form` without the accents of Latin and Greek letters ("Léa" as "Lea", "Ørsted" as
    "Orsted", "Dæhlie" as "Daehlie") and with a hyphen as a space. Other scripts keep their
    marks: a Devanagari vowel sign or the breve of й makes another word."""
    if text.isascii():
        form = text.lower()  # casefold, for ASCII
        return " ".join(form.translate(_PLAIN_LETTERS).split()) if "-" in form else form
    # casefold may compose what it rewrites, so NFD again; the Turkish İ's dot goes with the
    # other marks, as in dotless_form
    form = unicodedata.normalize("NFD", unicodedata.normalize("NFD", text).casefold())
    form = unicodedata.normalize("NFC", pattern(_ACCENTS).sub("", form))
    return " ".join(form.replace("\u2019", "'").translate(_PLAIN_LETTERS).split())


class LooseLabels:
    """The labels whose `loose_form` is not the label itself, by that form -> their key ids
    (several: "Lea" and "Léa" may be two keys). Built on the first recall of a state object
    and brought up to date on each use, as `UnnormalisedLabels` is; ASCII labels without a
    hyphen, most of any store, and those of other scripts are their own loose form, skipped."""

    __slots__ = ("dropped", "forms", "seen")

    def __init__(self) -> None:
        self.forms: dict[str, list[str]] = {}
        self.seen = 0
        self.dropped = 0

    def update(self, labels: dict[str, str], dropped: int) -> dict[str, list[str]]:
        """The index, with the labels added since the last use."""
        for text, key_id in _labels_since(self, labels, dropped):
            if "-" not in text if text.isascii() else pattern(_FOLDS).search(text) is None:
                continue
            loose = loose_form(text)
            if loose != text:
                ids = self.forms.setdefault(loose, [])
                if key_id not in ids:
                    ids.append(key_id)
        return self.forms


def alias_form(text: str) -> str:
    """How a query and a learned alias are compared: case-folded, whitespace collapsed."""
    return " ".join(text.split()).casefold()


def _clamp(rules: FoldRules, weight: float) -> float:
    return min(rules.weight_max, max(rules.weight_min, weight))


def _retire(state: GraphState, node: MemoryNode) -> None:
    """Before `node` stops being current: note it in the state's retirements."""
    if node.current():
        state.retirements().note(node.id)


def _supersede(
    state: GraphState, old: MemoryNode, node: MemoryNode, seq: int, reason: str | None
) -> None:
    """`node` becomes the next version of `old`: a retelling, a correction or a replacement."""
    _retire(state, old)
    old.superseded_by = node.id
    old.updated_seq = seq
    state.retired_seq = seq
    state.changes().note(old.id)
    node.supersedes = old.id
    node.supersede_reason = reason


def _add_memory(state: GraphState, new: NewMemory, seq: int, at: datetime) -> MemoryNode:
    # The hottest code of a replay (one call per memory): locals, no defaults to fill twice.
    memory_id = new.memory_id
    key_ids: list[str] = []
    node = MemoryNode(
        id=memory_id,
        namespace=sys.intern(new.namespace),  # one string for a namespace's memories
        content=new.content,
        content_hash=new.content_hash,
        created_at=at,
        created_seq=seq,
        keys=key_ids,
        expires_at=new.expires_at,
        session_id=new.session_id,
        source=new.source,
        related_to=list(new.related_to) if new.related_to else [],
        updated_seq=seq,
        valid_from=new.valid_from,
    )
    memories = state.memories
    if memory_id in memories:  # the same id again: its links keep their places, new values
        state.changes().note(memory_id)
        # Only a hand-made log does this: the memory may count anew, or count no more through
        # a key it no longer lists (whose link stays). Whoever keeps counts counts again.
        state.ids_retold += 1
        state.retired_seq = seq
    memories[memory_id] = node
    keys = state.keys
    for link in new.keys:
        key_id = link.key_id
        key = keys.get(key_id)
        if key is None:
            key = KeyNode(
                id=key_id,
                label=link.label,
                type=link.type,
                created_seq=seq,
                extracted=link.extracted,
            )
            keys[key_id] = key
            if link.label:  # blank: erased by a forget (see `erase_labels`)
                state.labels.setdefault(link.label.casefold(), key_id)
        elif link.resolution != "existing":  # one comparison on the common path
            if link.resolution == "alias":
                if link.label:
                    key.aliases.append(link.label)
                    state.labels.setdefault(link.label.casefold(), key_id)
            elif link.resolution == "promoted":
                key.type = link.type
        key.links[memory_id] = link.weight
        key_ids.append(key.id)  # the key's own string, not a copy per memory (the event's)
    if new.related_to:
        for target_id in new.related_to:
            target = memories.get(target_id)
            if target is not None:
                target.related_from.append(memory_id)
    if new.supersedes is not None:
        old = memories.get(new.supersedes)
        if old is not None:
            _supersede(state, old, node, seq, new.supersede_reason)
            if new.supersede_reason == "duplicate":
                # The same fact told again keeps what reading it had built up.
                node.depth, node.access_count = old.depth, old.access_count
    return node


def _remembered(state: GraphState, event: MemoryRemembered) -> None:
    seq, at = event.seq, event.at
    for new in event.memories:
        _add_memory(state, new, seq, at)


def _corrected(state: GraphState, event: MemoryCorrected) -> None:
    old = state.memories[event.old_id]
    old.depth *= event.weaken_factor
    node = _add_memory(state, event.memory, event.seq, event.at)
    _supersede(state, old, node, event.seq, "correction")


def _replaced(state: GraphState, event: MemoryReplaced) -> None:
    """A memory told on its own becomes the next version of another, as `_corrected` makes
    a correction one."""
    old, node = state.memories[event.old_id], state.memories[event.new_id]
    old.depth *= event.weaken_factor
    for target_id in event.related_to:
        node.related_to.append(target_id)
        target = state.memories.get(target_id)
        if target is not None:
            target.related_from.append(node.id)
    node.updated_seq = event.seq
    state.changes().note(node.id)  # a memory already told changes too (a new node is new)
    _supersede(state, old, node, event.seq, "correction")


def _read(state: GraphState, event: MemoryRead) -> None:
    rules = state.rules
    node = state.memories[event.memory_id]
    node.depth = min(rules.depth_max, node.depth + rules.depth_step)
    node.access_count += 1
    node.last_read_at = event.at
    node.updated_seq = event.seq
    state.changes().note(node.id)
    if event.via_key_id is not None:
        key = state.keys[event.via_key_id]
        key.links[node.id] = _clamp(rules, key.links[node.id] + rules.hebbian_step)
        key.reads += 1
        if event.query is not None:
            form = alias_form(event.query)
            key.query_reads[form] = key.query_reads.get(form, 0) + 1
            if form in key.learned:
                key.learned[form] = key.reads


def _links_adjusted(state: GraphState, event: LinksAdjusted) -> None:
    note = state.changes().note
    for adj in event.adjustments:
        links = state.keys[adj.key_id].links
        links[adj.memory_id] = _clamp(state.rules, links[adj.memory_id] + adj.delta)
        note(adj.memory_id)


def _aliased(state: GraphState, event: KeyAliased) -> None:
    key = state.keys[event.key_id]
    key.aliases.append(event.alias)
    state.labels.setdefault(event.alias.casefold(), event.key_id)
    if event.learned:
        key.learned[alias_form(event.alias)] = key.reads


def _unaliased(state: GraphState, event: KeyUnaliased) -> None:
    key = state.keys[event.key_id]
    form = alias_form(event.alias)
    key.aliases = [a for a in key.aliases if alias_form(a) != form]
    key.learned.pop(form, None)
    label = event.alias.casefold()
    if state.labels.get(label) == key.id:
        del state.labels[label]
        state.labels_dropped += 1


def _retyped(state: GraphState, event: KeyRetyped) -> None:
    state.keys[event.key_id].type = event.key_type


def _forgotten(state: GraphState, event: MemoryForgotten) -> None:
    node = state.memories[event.memory_id]
    _retire(state, node)
    node.status = "forgotten"
    node.content = ""  # nothing derived from the log serves forgotten content
    node.updated_seq = event.seq
    state.retired_seq = event.seq
    state.changes().note(node.id)
    # Not counted in `labels_dropped`: the labels left keep their order, so a past state's
    # labels (folded from the redacted lines, which never add them) are still the first of
    # ours, and readers that keep rows by label drop the erased keys' own (see Store).
    erase_labels(state, event.erased_keys)


def erase_labels(state: GraphState, key_ids: Iterable[str]) -> bool:
    """Blank the label and aliases of `key_ids` (a forget erased them), as a fold of the
    redacted lines that named them leaves them. Whether anything changed."""
    changed = False
    labels = state.labels
    for key_id in key_ids:
        key = state.keys.get(key_id)
        if key is None or not (key.label or key.aliases):
            continue
        for text in (key.label, *key.aliases):
            if labels.get(text.casefold()) == key_id:
                del labels[text.casefold()]
        key.label = ""
        key.aliases = []
        changed = True
    if changed:  # the label lookups riding on the state read the labels before: start over
        state.__dict__.pop("_unnormalised", None)
        state.__dict__.pop("_loose", None)
    return changed


def _expired(state: GraphState, event: MemoriesExpired) -> None:
    for memory_id in event.memory_ids:
        node = state.memories[memory_id]
        _retire(state, node)
        node.status = "expired"
        node.updated_seq = event.seq
        state.retired_seq = event.seq
        state.changes().note(memory_id)


def _turn(state: GraphState, event: TurnRecorded) -> None:
    state.conversations.setdefault(event.session_id, []).append(
        Turn(turn=event.turn, role=event.role, content=event.content, at=event.at, seq=event.seq)
    )


def _created(state: GraphState, event: StoreCreated) -> None:
    state.store_id = event.store_id
    state.rules = event.rules


def _rules_changed(state: GraphState, event: RulesChanged) -> None:
    state.rules = event.rules


def _entities_created(state: GraphState, event: EntitiesCreated) -> None:
    for spec in event.entities:
        key = state.keys.get(spec.key_id)
        if key is None:
            key = KeyNode(id=spec.key_id, label=spec.name, type="name", created_seq=event.seq)
            state.keys[key.id] = key
            state.labels.setdefault(spec.name.casefold(), key.id)
        key.entity_type = spec.entity_type
    for new in event.observations:
        _add_memory(state, new, event.seq, event.at)


def _add_relations(state: GraphState, specs: list[RelationSpec], seq: int) -> None:
    for r in specs:
        state.relations.setdefault(
            relation_id(r.from_key, r.to_key, r.relation_type),
            Relation(
                from_key=r.from_key, to_key=r.to_key, relation_type=r.relation_type, created_seq=seq
            ),
        )


def _remove_relations(state: GraphState, specs: list[RelationSpec]) -> None:
    for r in specs:
        state.relations.pop(relation_id(r.from_key, r.to_key, r.relation_type), None)


def _relations_added(state: GraphState, event: RelationsAdded) -> None:
    _add_relations(state, event.relations, event.seq)


def _relations_removed(state: GraphState, event: RelationsRemoved) -> None:
    _remove_relations(state, event.relations)


def _delete_node(state: GraphState, memory_id: str, seq: int) -> None:
    """A knowledge-graph delete: hidden from now on, its content kept (the past shows it)."""
    node = state.memories[memory_id]
    if node.status == "forgotten":
        return  # erased already (a delete is decided under the lock, so only a hand-made log)
    _retire(state, node)
    node.status = "deleted"
    node.updated_seq = seq
    state.retired_seq = seq
    state.changes().note(memory_id)


def _unlink(state: GraphState, links: list[KeyMemory], seq: int) -> None:
    """Cut key-memory links; the memory, its content and its other links stay."""
    for link in links:
        if state.keys[link.key_id].links.pop(link.memory_id, None) is not None:
            state.links_cut += 1
        node = state.memories[link.memory_id]
        node.keys = [k for k in node.keys if k != link.key_id]
        node.updated_seq = seq
        state.retired_seq = seq
        state.changes().note(link.memory_id)


def _observations_deleted(state: GraphState, event: ObservationsDeleted) -> None:
    for memory_id in event.memory_ids:
        _delete_node(state, memory_id, event.seq)
    _unlink(state, event.unlinked, event.seq)


def _entities_deleted(state: GraphState, event: EntitiesDeleted) -> None:
    _remove_relations(state, event.relations)
    for memory_id in event.forgotten:  # named so in the log: deleted, not forgotten
        _delete_node(state, memory_id, event.seq)
    _unlink(state, event.unlinked, event.seq)
    for key_id in event.key_ids:
        state.keys[key_id].entity_type = None


def _graph_imported(state: GraphState, event: GraphImported) -> None:
    for spec in event.keys:
        key = state.keys.get(spec.key_id)
        if key is None:
            key = KeyNode(id=spec.key_id, label=spec.label, type=spec.type, created_seq=event.seq)
            state.keys[key.id] = key
            state.labels.setdefault(spec.label.casefold(), key.id)
        for alias in spec.aliases:
            if alias not in key.aliases:
                key.aliases.append(alias)
            state.labels.setdefault(alias.casefold(), key.id)
        if spec.entity_type is not None:
            key.entity_type = spec.entity_type
    for item in event.memories:
        node = _add_memory(state, item.memory, event.seq, event.at)
        node.created_at = item.created_at
        node.depth = item.depth
        node.access_count = item.access_count
        node.last_read_at = item.last_read_at
    # A memory may be related to one imported after it: complete the back edges.
    for item in event.memories:
        for target_id in item.memory.related_to:
            target = state.memories.get(target_id)
            if target is not None and item.memory.memory_id not in target.related_from:
                target.related_from.append(item.memory.memory_id)
    _add_relations(state, event.relations, event.seq)


_FOLD: dict[type[Any], Callable[[GraphState, Any], None]] = {
    StoreCreated: _created,
    RulesChanged: _rules_changed,
    MemoryRemembered: _remembered,
    MemoryCorrected: _corrected,
    MemoryReplaced: _replaced,
    MemoryRead: _read,
    LinksAdjusted: _links_adjusted,
    KeyAliased: _aliased,
    KeyRetyped: _retyped,
    MemoryForgotten: _forgotten,
    MemoriesExpired: _expired,
    TurnRecorded: _turn,
    EntitiesCreated: _entities_created,
    RelationsAdded: _relations_added,
    RelationsRemoved: _relations_removed,
    ObservationsDeleted: _observations_deleted,
    EntitiesDeleted: _entities_deleted,
    GraphImported: _graph_imported,
    KeyUnaliased: _unaliased,
}


def apply(state: GraphState, event: AnyEvent) -> GraphState:
    """Fold one event into the state (in place) and return it."""
    _FOLD[type(event)](state, event)
    state.seq = event.seq
    state.at = event.at
    return state


def fold(events: Iterable[AnyEvent], state: GraphState | None = None) -> GraphState:
    """Fold a sequence of events, from nothing or onto `state`."""
    state = state if state is not None else GraphState()
    fold_map = _FOLD
    last: AnyEvent | None = None
    with paused_gc():
        try:
            for event in events:
                fold_map[type(event)](state, event)
                last = event
        finally:
            # Stamped once rather than per event; after an error, at the last whole event.
            if last is not None:
                state.seq, state.at = last.seq, last.at
    return state


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic collector for bulk work that creates many acyclic objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
