"""Decisions of a command: resolving keys (new, existing, alias), dedup and contradictions.

A `Batch` sees the graph as it is under the log lock plus whatever earlier items of the same
command created, so a remember_batch decides exactly as if its items came one after another.
Every decision it makes ends up in the event; the fold only applies it.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from keytrail.events import KeyLink, NewMemory, Similar
from keytrail.events.types import Resolution
from keytrail.projections import GraphState, KeyNode, MemoryNode, scripts
from keytrail.projections.keygraph import caseless_form, name_form
from keytrail.projections.snapshot import MemoryText, peek_all, peek_holding, peek_text
from keytrail.projections.vectors import Matrix, text_hash

from . import validation as check
from .queries import preview
from .results import Flag, KeyOutcome

if TYPE_CHECKING:
    from .store import Store


_SPECIFIC = re.compile(
    r"\d+(?:[.,:]\d+)*|\b(?:not|no|never|none|nobody|nothing|n't|cannot"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    r"|january|february|march|april|may|june|july|august|september|october|november|december)\b"
)


#: At most this many stored memories are compared with a new one for dedup and contradiction.
#: They are taken from the new memory's rarest keys first and each key's newest links first,
#: so a remember costs the same at 100 or 100,000 memories under one key.
COMPARE_LIMIT = 200
#: Links looked at per key while filling the candidates: those of other namespaces and
#: replaced versions are skipped, but not without end.
COMPARE_SCAN_PER_KEY = 4 * COMPARE_LIMIT


#: Two candidates this near in similarity are equally near (float noise: the same text's rows
#: score apart by their places in the product); the first in the walk's order is the duplicate.
SAME_SIMILARITY = 1e-6


#: Labels a batch compares with every key of the graph in one product (`_closest_in_graph`):
#: the product holds this many scores per key.
LABEL_CHUNK = 256


_NEGATIONS = frozenset(("not", "no", "never", "none", "nobody", "nothing", "n't", "cannot"))

Specifics = tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def specifics(content: str) -> Specifics:
    """The numbers, weekdays, months and negations of a text: what a paraphrase must keep.

    Numbers, and days and months, each in the order the text gives them: "from 3 to 5" and
    "2 cats and 3 dogs" are other facts than "from 5 to 3" and "3 cats and 2 dogs". A number
    and a day may trade places ("on Monday at 10am", "at 10am on Monday"); negations count as
    how many of each, wherever they stand.
    """
    numbers: list[str] = []
    dates: list[str] = []
    negations: list[str] = []
    for found in _SPECIFIC.findall(content.casefold().replace("n't", " n't")):
        if found[0].isdigit():
            numbers.append(found)
        elif found in _NEGATIONS:
            negations.append(found)
        else:
            dates.append(found)
    return tuple(numbers), tuple(dates), tuple(sorted(negations))


def _stem(word: str) -> str:
    """A light stem, enough to see that `apples`, `hobbies`, `boxes` and `running` are variants."""
    if len(word) <= 3:
        return word
    if word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith("es") and word[:-2].endswith(("s", "x", "z", "ch", "sh")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            # running -> runn -> run
            return word[:-1] if len(word) > 2 and word[-1] == word[-2] else word
    return word


def stems(label: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in re.findall(r"\w+", label.casefold()))


def may_alias(label: str, other: str, similarity: float, merge: float, near_same: float) -> bool:
    """Whether a new concept label may become an alias of a key labelled `other`.

    Cosine alone cannot tell a variant from a sibling: with all-MiniLM-L6-v2, apple~apples is
    0.771 while husband~wife is 0.869 and Monday~Tuesday 0.874. A merge cannot be undone, and
    two separate keys still find each other through recall, so only lexical variants (the same
    stems) merge at the model's merge threshold; other labels must be near-identical in meaning
    (the dedup threshold), and never when their numbers, weekdays, months or negations differ.
    """
    if similarity < merge or specifics(label) != specifics(other):
        return False
    return stems(label) == stems(other) or similarity >= near_same


class LinksByNamespace:
    """The links of each key past the dedup scan bound, split by their memory's namespace.

    Kept between commands (one per store) and topped up with the links added since: a key's
    links only grow at the end until one is cut (`GraphState.links_cut`), which rebuilds it,
    as a memory told again under its id does (`GraphState.ids_retold`: it may have moved to
    another namespace with its link in place).
    """

    def __init__(self) -> None:
        self._state: GraphState | None = None
        #: key id -> (links indexed, (links_cut, ids_retold) then, namespace -> memory ids
        #: oldest first)
        self._keys: dict[str, tuple[int, tuple[int, int], dict[str, list[str]]]] = {}

    def of(self, state: GraphState, key: KeyNode, namespace: str) -> list[str]:
        """The ids `key` links to in `namespace`, oldest first (do not change the list)."""
        if self._state is not state:
            self._state, self._keys = state, {}
        count = len(key.links)
        kept = self._keys.get(key.id)
        epoch = (state.links_cut, state.ids_retold)
        if kept is None or kept[1] != epoch or kept[0] > count:
            split: dict[str, list[str]] = {}
            new: Iterable[str] = key.links
        else:
            split = kept[2]
            new = list(itertools.islice(reversed(key.links), count - kept[0]))[::-1]
        memories = state.memories
        for memory_id in new:
            split.setdefault(memories[memory_id].namespace, []).append(memory_id)
        self._keys[key.id] = (count, epoch, split)
        return split.get(namespace, [])


def same_text_form(content: str) -> str:
    """What makes a new memory's text the same as a stored one's, wherever it is keyed: composed,
    case-folded, whitespace collapsed ("Anna likes  green tea\n" is "anna likes green tea").

    Agents retell a fact with another capital or a trailing newline, which the bytes
    (`content_hash`) tell apart and an embedder reads as the same words. Only who is compared
    depends on it: whether the retelling is a duplicate is still the rule's (similarity above the
    dedup threshold, the same `specifics`), as for any candidate.
    """
    if content.isascii():  # most texts: composed already, and casefold is lower
        return " ".join(content.lower().split())
    return " ".join(caseless_form(content).split())


#: A run of ASCII characters of a `same_text_form` (none is whitespace but " "), and the next
#: character where that is not ASCII
_ASCII_RUN = re.compile(r"([\x00-\x1f\x21-\x7f]+)([^\x00-\x7f])?")
#: The shortest first of `text_anchors` looked for in a lazy load's columns: a shorter one (two
#: hex digits, a common pair of letters) is in most memories, whose bytes would all be read
ANCHOR_MIN = 3
#: Lookups a `SameTexts` answers by looking for the text's anchors in a lazy load's columns
#: (0.05-0.2 s at 100,000 memories) before it builds its index (0.3-0.8 s): what a one-shot
#: `keytrail remember` makes, and no more than a batch can repeat
SCANS_BEFORE_INDEX = 2


def text_anchors(form: str) -> list[bytes]:
    """Pieces of a `same_text_form` that every text of that form holds in its UTF-8 bytes, in
    some ASCII case, longest first (none where that is not known): the runs of ASCII
    characters, each with the next character ASCII too (an ASCII letter before another one
    may be the start of a character that is not ASCII: İ is i and a mark, ẚ is a and ʾ), cut
    at the characters a non-ASCII one may stand for (`scripts.ascii_stood_for`: ß for ss).
    Each character of such a piece was typed as itself, one to one, the piece unbroken."""
    stood_for = scripts.ascii_stood_for()
    if stood_for is None:
        return []
    cut = f"[{re.escape(stood_for)}]+"
    pieces = {
        piece.encode()
        for run, after in _ASCII_RUN.findall(form)
        for piece in re.split(cut, run[:-1] if after else run)
        if piece
    }
    return sorted(pieces, key=lambda piece: (-len(piece), piece))


def _text_slot(namespace: str, form: str) -> int:
    """Where `SameTexts` and a `Batch` hold a namespace's memories of one text (in-process:
    str hashes differ between processes). Two texts may share a slot: their holders' texts are
    compared again."""
    return hash((namespace, form))


class SameTexts:
    """The current memories (`MemoryNode.current`) of each namespace by text (`same_text_form`),
    so that a retelling under other keys, or past the scan bound, is compared with its first
    telling at one lookup per remember, not a scan of the store.

    Kept between commands (one per store), built on first use and topped up: memories only grow
    at the dict's end, and one that stops being current is noted in the state's retirements and
    never is again. A memory id told again (`GraphState.ids_retold`: replaced in place), or a
    journal that dropped what was noted since, rebuilds it. A forgotten memory's text is gone by
    the time its retirement is read, so its slot is unknown: its id stays until a lookup of its
    slot drops it, or until the forgets read since the last sweep outnumber half the texts held,
    when a sweep drops them all (a server that remembers and forgets as much held one more id
    per forget).

    Building it reads every memory (0.3-0.5 s at 100,000), which a one-shot `keytrail remember`
    paid for its one lookup. So the first lookups (`SCANS_BEFORE_INDEX`) of a state loaded
    lazily look for pieces of the text in the snapshot's bytes instead (`_scan`), and read only
    the memories that hold them: the same ids, in the same order.
    """

    def __init__(self) -> None:
        self._state: GraphState | None = None
        #: slot -> the ids there, oldest first (one id as a str: most texts are told once)
        self._ids: dict[int, str | list[str]] = {}
        self._seen = 0  # memories read, from the start of `GraphState.memories`
        self._journal = 0  # the end of the state's retirements when last caught up
        self._ids_retold = 0
        self._scans = 0  # lookups answered by `_scan`
        self._unswept = 0  # forgotten memories read in the journal since the last sweep

    def __len__(self) -> int:
        """How many memory ids it holds."""
        return sum(1 if isinstance(held, str) else len(held) for held in self._ids.values())

    def holders(self, state: GraphState, namespace: str, form: str) -> list[str]:
        """Ids of the current memories of `namespace` whose text has `form`, oldest first
        (expiry by time is the caller's to judge, at the command's time)."""
        if self._state is not state and self._scans < SCANS_BEFORE_INDEX:
            found = self._scan(state, namespace, form)
            if found is not None:
                return found
        self._catch_up(state)
        slot = _text_slot(namespace, form)
        held = self._ids.get(slot)
        if held is None:
            return []
        ids = [held] if isinstance(held, str) else held
        memories = state.memories
        current = [mid for mid in ids if memories[mid].current()]
        if len(current) != len(ids):  # forgotten since
            self._set(slot, current)
        return [
            mid
            for mid in current
            if memories[mid].namespace == namespace
            and same_text_form(memories[mid].content) == form
        ]

    def _scan(self, state: GraphState, namespace: str, form: str) -> list[str] | None:
        """`holders` read from the memories that hold the text's anchors (`text_anchors`,
        `peek_holding`), without the index; None where there is no anchor long enough to look
        for, no lazy load's columns to look in, or too many memories hold the first."""
        anchors = text_anchors(form)
        if not anchors or len(anchors[0]) < ANCHOR_MIN:
            return None
        nodes = peek_holding(state.memories, anchors, MemoryText)
        if nodes is None:
            return None
        self._scans += 1
        return [
            node.id
            for node in nodes
            if node.current()
            and node.namespace == namespace
            and same_text_form(node.content) == form
        ]

    def _catch_up(self, state: GraphState) -> None:
        journal = state.retirements()
        retired = journal.since(self._journal)
        memories = state.memories
        if self._state is not state or retired is None or state.ids_retold != self._ids_retold:
            self._state, self._ids, self._seen, self._unswept = state, {}, 0, 0
            self._ids_retold = state.ids_retold
            retired = []
        for memory_id in retired:
            gone = memories[memory_id]  # decoded: the fold changed it
            if not gone.content:  # forgotten: its slot is unknown (see `_sweep`)
                self._unswept += 1
            else:
                slot = _text_slot(gone.namespace, same_text_form(gone.content))
                held = self._ids.get(slot)
                if held == memory_id:
                    del self._ids[slot]
                elif isinstance(held, list) and memory_id in held:
                    self._set(slot, [mid for mid in held if mid != memory_id])
        fresh: Iterable[MemoryNode | MemoryText]
        if self._seen:  # only the new memories, from the dict's end
            new = list(itertools.islice(reversed(memories), len(memories) - self._seen))
            fresh = [peek_text(memories, memory_id) for memory_id in reversed(new)]
        else:
            # A lazy load's nodes stay undecoded: a server's warm-up decodes them all, sharing
            # the ids they repeat, and a one-shot remember needs none of them.
            fresh = peek_all(memories, MemoryText)
        ids = self._ids
        for node in fresh:
            if node.current():  # a retired one came with its retirement, read above
                slot = _text_slot(node.namespace, same_text_form(node.content))
                held = ids.get(slot)
                if held is None:
                    ids[slot] = node.id
                elif isinstance(held, str):
                    ids[slot] = [held, node.id]
                else:
                    held.append(node.id)
        self._seen, self._journal = len(memories), journal.end
        if self._unswept * 2 > len(self._ids):
            self._sweep(memories)

    def _sweep(self, memories: dict[str, MemoryNode]) -> None:
        """Drop the ids of memories no longer current: the forgotten ones, whose slots were
        unknown. A walk of the ids held, once per as many forgets as half the texts held."""
        for slot, held in list(self._ids.items()):
            ids = [held] if isinstance(held, str) else held
            current = [mid for mid in ids if peek_text(memories, mid).current()]
            if len(current) != len(ids):
                self._set(slot, current)
        self._unswept = 0

    def _set(self, slot: int, ids: list[str]) -> None:
        if not ids:
            del self._ids[slot]
        else:
            self._ids[slot] = ids[0] if len(ids) == 1 else ids


class Batch:
    """Decisions of one command, aware of what earlier items of the same batch created."""

    def __init__(self, store: Store, now: datetime) -> None:
        self.store = store
        self.state = store.state
        #: the command's time (its event's `at`): expiry is judged at it, as the event and
        #: `correct`'s own check judge it, not at this process's clock, which may be behind
        #: the log's last time (another process's clock runs ahead; the log's times never go
        #: back)
        self.now = now
        #: name_form of a label -> the link of a key this command made (or aliased) for it
        self.new_keys: dict[str, KeyLink] = {}
        #: key id -> the labels of `new_keys` that link to it, first told first
        self._new_labels: dict[str, list[str]] = {}
        #: the vectors of the concept labels of `new_keys` (rows of a matrix grown by doubling)
        #: and each row's key id: a new label is compared with all of them in one product. One
        #: by one in Python, a batch of 500 items of 24 new labels took minutes holding the lock.
        self._new_vectors: Matrix | None = None
        self._new_vector_ids: list[str] = []
        self._graph_best: dict[str, tuple[str, float]] = {}
        self._matched: set[str] = set()  # folded labels already looked up in _graph_best
        self.new_memories: dict[str, tuple[NewMemory, Matrix]] = {}
        #: key id -> the new memories linked to it, and (key id, namespace) -> those of the
        #: namespace, oldest first; and the memories new ones superseded: a later item walks
        #: them as a remember after the earlier items walks the graph (`_newest_links`)
        self._new_links: dict[str, list[str]] = {}
        self._new_links_in: dict[tuple[str, str], list[str]] = {}
        self._superseded: set[str] = set()
        #: new memory id -> its place in the command and its keys' ids
        self._made_at: dict[str, tuple[int, list[str]]] = {}
        #: memory id -> the text_hash of a new memory's content, and -> the `specifics` of a
        #: compared candidate's: each item of a batch compares with the earlier ones (and the
        #: same stored memories), so at 500 items of 20,000 characters, scanning each text
        #: again per item held the lock for minutes.
        self._new_digests: dict[str, str] = {}
        self._specifics: dict[str, Specifics] = {}
        #: `_text_slot` -> the new memories there, oldest first (see `SameTexts`)
        self._new_texts: dict[int, list[str]] = {}
        self.promoted: dict[str, str] = {}  # key id -> the type an earlier item promoted it to

    def new_memory_id(self) -> str:
        while True:
            ident = "m_" + secrets.token_hex(6)
            if ident not in self.state.memories and ident not in self.new_memories:
                return ident

    def _new_key_id(self) -> str:
        while True:
            ident = "k_" + secrets.token_hex(5)
            if ident not in self.state.keys and ident not in self._new_labels:
                return ident

    def _note_new_key(self, label: str, link: KeyLink, vector: Matrix | None) -> None:
        """`label` resolved to `link` (a key made or aliased by this command), and its vector
        if a concept: later labels of the command find it there."""
        self.new_keys[name_form(label)] = link
        self._new_labels.setdefault(link.key_id, []).append(label)
        if vector is None:
            return
        count = len(self._new_vector_ids)
        rows = self._new_vectors
        if rows is None or count == len(rows):
            grown = np.empty((max(16, 2 * count), vector.shape[0]), dtype=vector.dtype)
            if rows is not None:
                grown[:count] = rows
            rows = self._new_vectors = grown
        rows[count] = vector
        self._new_vector_ids.append(link.key_id)

    def check_related(self, field: str, memory_id: str, namespace: str) -> None:
        """Refuse a `related_to` target a memory of `namespace` may not name: one a read by id
        does not find (never made, forgotten, deleted; any version of a chain is found), or one
        of another namespace. Namespaces are isolated: `related` walks edges within one, so an
        edge across them would be kept and never shown. An expired one is hidden from every read
        too (its edge would never be shown). Each is refused saying why, as a read by id says it."""
        new = self.new_memories.get(memory_id)
        if new is not None:
            found = new[0].namespace
        else:
            found = self.store._visible_memory(field, memory_id, self.now).namespace
        check.related_namespace(field, memory_id, found, namespace)

    def match_labels(self, specs: Iterable[check.KeySpec]) -> None:
        """Find the closest concept key of the graph for every concept label that may become
        an alias, in matrix products over all key labels (read whole: ~8 ms at 20,000
        labels). A batch calls this with every item's labels before deciding any, so its
        decisions, made holding the appenders' lock, read the matrix once, not once per item.
        The graph does not change while a command decides, so the answers hold for all items.
        """
        labels: dict[str, str] = {}
        for spec in specs:
            folded = spec.label.casefold()
            if (
                spec.type == "concept"
                and folded not in self._matched
                and name_form(spec.label) not in self.new_keys
                and self.state.key_for_label(spec.label) is None
            ):
                labels.setdefault(folded, spec.label)
        self._matched.update(labels)
        self._graph_best.update(self._closest_in_graph(list(labels.values())))

    def resolve_keys(
        self, specs: list[check.KeySpec], promote: bool = True
    ) -> tuple[list[KeyLink], list[KeyOutcome]]:
        """Links for `specs`: to existing keys, new ones, or aliases. With `promote` (types the
        caller gave, not the extractor's guesses), an existing concept key named a name or a
        proper noun becomes one: it was told as a concept first ("paris"), and a caller who
        says it is a name wants it matched literally from now on. Never the other way: a
        label without a type is a concept by default, which says nothing about the key."""
        links: list[KeyLink] = []
        outcomes: list[KeyOutcome] = []
        initial = self.state.rules.link_initial
        seen: set[str] = set()
        self.match_labels(specs)  # nothing left to match when the batch matched them all first
        for spec in specs:
            known = self._known_key(spec.label)
            if known is not None:
                # A stored key, or one an earlier item of this command made: promoted as if it
                # were stored, and said with the key's label (the label given may be an alias).
                key_id, kind = known
                kind = self.promoted.get(key_id, kind)
                resolution: Resolution = "existing"
                if promote and kind == "concept" and spec.type != "concept":
                    kind = self.promoted[key_id] = spec.type
                    resolution = "promoted"
                link = KeyLink(
                    key_id=key_id,
                    label=spec.label,
                    type=kind,  # type: ignore[arg-type]
                    resolution=resolution,
                    weight=initial,
                )
                outcome = KeyOutcome(key_id, self._label_of(key_id), kind, resolution)
            else:
                link, outcome = self._new_or_alias(spec, initial)
            if link.key_id in seen:
                continue  # two labels resolved to the same key: one link
            seen.add(link.key_id)
            links.append(link)
            outcomes.append(outcome)
        return links, outcomes

    def _known_key(self, label: str) -> tuple[str, str] | None:
        """(id, type) of the key `label` names, stored or made earlier in this command (in
        any spelling `key_for_label` takes: case, the other apostrophe, İ as I)."""
        existing = self.state.key_for_label(label)
        if existing is not None:
            return existing.id, existing.type
        first = self.new_keys.get(name_form(label))
        return (first.key_id, first.type) if first is not None else None

    def _new_or_alias(self, spec: check.KeySpec, initial: float) -> tuple[KeyLink, KeyOutcome]:
        store = self.store
        vector: Matrix | None = None
        if spec.type == "concept":
            vector = store.embed([spec.label])[0]
            best_id, best_sim = self._closest_concept(spec.label, vector)
            thresholds = store.thresholds
            if best_id is not None and any(
                may_alias(spec.label, other, best_sim, thresholds.merge, thresholds.dedup)
                for other in self._labels_of(best_id)
            ):
                target_label = self._label_of(best_id)
                link = KeyLink(
                    key_id=best_id,
                    label=spec.label,
                    type="concept",
                    resolution="alias",
                    similarity=round(best_sim, 6),
                    fingerprint=store.embedder.fingerprint,
                    weight=initial,
                )
                self._note_new_key(spec.label, link, vector)
                return link, KeyOutcome(
                    best_id,
                    spec.label,
                    "concept",
                    "alias",
                    merged_into=target_label,
                    similarity=round(best_sim, 6),
                )
        link = KeyLink(
            key_id=self._new_key_id(),
            label=spec.label,
            type=spec.type,  # type: ignore[arg-type]
            resolution="new",
            weight=initial,
        )
        self._note_new_key(spec.label, link, vector)
        return link, KeyOutcome(link.key_id, spec.label, spec.type, "new")

    def _label_of(self, key_id: str) -> str:
        node = self.state.keys.get(key_id)
        if node is not None:
            return node.label
        return self._new_labels[key_id][0]

    def _labels_of(self, key_id: str) -> list[str]:
        node = self.state.keys.get(key_id)
        if node is not None:
            return [node.label, *node.aliases]
        return list(self._new_labels.get(key_id, ()))

    def _closest_in_graph(self, labels: list[str]) -> dict[str, tuple[str, float]]:
        """For each label, the closest concept key already in the graph and its cosine."""
        if not labels:
            return {}  # before key_vectors(), which may first embed every label it lacks
        rows = self.store.key_vectors()
        if not len(rows):
            return {}
        vectors = self.store.embed(labels)
        keys = self.state.keys
        found: dict[str, tuple[str, float]] = {}
        concept: np.ndarray[Any, np.dtype[np.bool_]] | None = None
        for j, label in enumerate(labels):
            if j % LABEL_CHUNK == 0:
                # A chunk of labels at a time, each label's scores a contiguous row: all of a
                # batch's at once (500 x 24 labels) made a matrix of gigabytes at 50,000 keys.
                scores = vectors[j : j + LABEL_CHUNK] @ rows.matrix.T
            column = scores[j % LABEL_CHUNK]
            for _ in range(16):  # the best row whose key is (still) a concept
                row = int(np.argmax(column))
                if keys[rows.ids[row]].type == "concept":
                    found[label.casefold()] = (rows.ids[row], float(column[row]))
                    break
                column[row] = -2.0
            else:
                # Names nearer than any concept (entities, extracted names): look past them
                # all, or the merge would depend on how many unrelated names the store holds.
                if concept is None:
                    concept = np.fromiter(
                        (keys[key_id].type == "concept" for key_id in rows.ids), bool, len(rows)
                    )
                if concept.any():
                    row = int(np.argmax(np.where(concept, column, -2.0)))
                    found[label.casefold()] = (rows.ids[row], float(column[row]))
        return found

    def _closest_concept(self, label: str, vector: Matrix) -> tuple[str | None, float]:
        best_id, best = self._graph_best.get(label.casefold(), (None, -1.0))
        count = len(self._new_vector_ids)
        if count and self._new_vectors is not None:  # keys made earlier in this command
            sims = self._new_vectors[:count] @ vector
            row = int(np.argmax(sims))  # the first of equals, as a strict > loop in order
            if float(sims[row]) > best:
                best_id, best = self._new_vector_ids[row], float(sims[row])
        return best_id, best

    def compare(
        self, namespace: str, content: str, vector: Matrix, key_ids: list[str]
    ) -> tuple[Similar | None, list[Similar]]:
        """Dedup and contradiction candidates: current memories of the namespace sharing a key.

        A near-identical text that differs in a number, a weekday or month, or a negation is a
        different fact ("meeting on Monday" / "on Tuesday" embed at 0.99): it is flagged as a
        possible contradiction, never silently deduplicated. Returns the duplicate, if any, and
        up to three others in the contradiction band.
        """
        store = self.store
        now = self.now
        memories, new_memories = self.state.memories, self.new_memories
        superseded = self._superseded
        place: dict[str, int] = {}  # key id -> its first place in `key_ids`
        for i, key_id in enumerate(key_ids):
            place.setdefault(key_id, i)
        alone = len(key_ids)
        candidates: dict[str, str] = {}  # memory id -> content
        walked: list[tuple[int, int, int]] = []  # where a walk of every key meets each (`_walked`)
        # The rarest keys first, each key's newest links first, and a bound on both: a hub key
        # ("user", on every memory) must not make each remember compare with the whole store.
        # Earlier items of this command count and come as they would stored, the newest links:
        # a batch decides as its items told one by one (and costs no more per item).
        scanned: set[str] = set()  # keys whose every link was looked at
        for key_id in sorted(key_ids, key=self._link_count):
            before, at_key = self._links_before(place, key_id, scanned), place[key_id]
            for memory_id in itertools.islice(
                self._newest_links(key_id, namespace), COMPARE_SCAN_PER_KEY
            ):
                if len(candidates) >= COMPARE_LIMIT:
                    break
                if memory_id in superseded or memory_id in candidates:
                    continue
                made = new_memories.get(memory_id) if new_memories else None
                if made is None:
                    node = memories[memory_id]
                    if (
                        node.namespace == namespace
                        and node.current()
                        and (node.expires_at is None or node.expires_at > now)
                    ):
                        candidates[memory_id] = node.content
                        if before is None:
                            walked.append(self._walked(memory_id, place, alone))
                            continue
                        # Met first through `key_id`, which links it: only the keys named
                        # before that one can come first.
                        first = at_key
                        for at, links in before:
                            if memory_id in links:
                                first = at
                                break
                        walked.append((first, 0, node.created_seq))
                else:
                    new = made[0]
                    if new.namespace == namespace and (
                        new.expires_at is None or new.expires_at > now
                    ):
                        candidates[memory_id] = new.content
                        walked.append(self._walked(memory_id, place, alone))
            else:
                if self._link_count(key_id) <= COMPARE_SCAN_PER_KEY:  # none past the slice
                    scanned.add(key_id)
        # The same text is a candidate wherever it is keyed, past the bound too: an agent
        # retells a fact under the keys it thinks of then.
        for memory_id in itertools.islice(self._same_text(namespace, content), COMPARE_LIMIT):
            if memory_id not in candidates:
                made = new_memories.get(memory_id)
                candidates[memory_id] = (made[0] if made else memories[memory_id]).content
                walked.append(self._walked(memory_id, place, alone))
        if not candidates:
            return None, []
        candidates = self._walk_order(candidates, walked)
        ids = list(candidates)
        sims = store.embed_contents(candidates, self._new_digests) @ vector
        order = np.argsort(-sims)
        fingerprint = store.embedder.fingerprint
        # The duplicate is the nearest candidate above the line that keeps the specifics: a
        # nearer one differing in a number or weekday must not hide it. Of equally near ones
        # (the same text told twice), the first in the walk's order: one sharing a key before
        # one found by its text alone.
        wanted: Specifics | None = None  # read only when a candidate is above the line
        best: int | None = None
        line = store.thresholds.dedup  # then the nearest duplicate's similarity, less the noise
        for i in order:
            if sims[i] < line:
                break
            if wanted is None:
                wanted = specifics(content)
            if (best is None or i < best) and self._specifics_of(
                ids[i], candidates[ids[i]]
            ) == wanted:
                if best is None:
                    line = max(line, float(sims[i]) - SAME_SIMILARITY)
                best = int(i)
        duplicate = (
            None
            if best is None
            else Similar(
                memory_id=ids[best], similarity=round(float(sims[best]), 6), fingerprint=fingerprint
            )
        )
        # A fact told again is still flagged against the others in the band: a retold "from
        # 3pm to 5pm" beside a standing "from 5pm to 3pm" is as much for the agent to check.
        flagged: list[Similar] = []
        for i in order:  # nearest first: stop at the first below the band, or at three
            if sims[i] < store.thresholds.contradiction or len(flagged) == 3:
                break
            if duplicate is None or ids[i] != duplicate.memory_id:
                flagged.append(
                    Similar(
                        memory_id=ids[i],
                        similarity=round(float(sims[i]), 6),
                        fingerprint=fingerprint,
                    )
                )
        return duplicate, flagged

    def _same_text(self, namespace: str, content: str) -> Iterable[str]:
        """The current memories of `namespace` whose text is `content`'s (`same_text_form`),
        stored ones oldest first, then this command's."""
        form = same_text_form(content)
        now, memories = self.now, self.state.memories
        for memory_id in self.store.same_texts.holders(self.state, namespace, form):
            expires_at = memories[memory_id].expires_at
            if memory_id not in self._superseded and (expires_at is None or expires_at > now):
                yield memory_id
        for memory_id in self._new_texts.get(_text_slot(namespace, form), ()):
            new = self.new_memories[memory_id][0]
            if (
                memory_id not in self._superseded
                and new.namespace == namespace
                and same_text_form(new.content) == form
                and (new.expires_at is None or new.expires_at > now)
            ):
                yield memory_id

    def _link_count(self, key_id: str) -> int:
        """How many links `key_id` has, counting those of this command's new memories."""
        key = self.state.keys.get(key_id)
        return (0 if key is None else len(key.links)) + len(self._new_links.get(key_id, ()))

    def _newest_links(self, key_id: str, namespace: str) -> Iterable[str]:
        """The memories linked to `key_id`, newest first: this command's, then the graph's.

        A key past the scan bound is read through its links in this namespace alone: a big
        namespace's newest links must not hide a small one's memories.
        """
        key = self.state.keys.get(key_id)
        if self._link_count(key_id) <= COMPARE_SCAN_PER_KEY:
            new = self._new_links.get(key_id, [])
            stored: Iterable[str] = () if key is None else reversed(key.links)
        else:
            new = self._new_links_in.get((key_id, namespace), [])
            stored = (
                ()
                if key is None
                else reversed(self.store.links_by_namespace.of(self.state, key, namespace))
            )
        return itertools.chain(reversed(new), stored)

    def _specifics_of(self, memory_id: str, content: str) -> Specifics:
        """`specifics` of a candidate's content, read once per command (the graph and this
        command's new memories do not change while it decides)."""
        found = self._specifics.get(memory_id)
        if found is None:
            found = self._specifics[memory_id] = specifics(content)
        return found

    def _walk_order(
        self, found: dict[str, str], walked: list[tuple[int, int, int]]
    ) -> dict[str, str]:
        """`found` in the order a walk of every key (as named, links oldest first) meets them;
        `walked` holds, for each in `found`'s order, where that walk meets it (`_walked`).

        Identical texts embed to equal vectors whose products with the new one differ only in
        float noise that depends on each row's place, so this order picks which of them a fact
        told again deduplicates into: it must not change with the bounded scan's order.
        """
        ids = list(found)
        # Reversed first: links of one seq (a batch) were scanned newest first.
        ids.reverse()
        walked.reverse()
        ordered = sorted(range(len(ids)), key=walked.__getitem__)
        return {ids[i]: found[ids[i]] for i in ordered}

    def _walked(self, memory_id: str, place: dict[str, int], alone: int) -> tuple[int, int, int]:
        """Where a walk of every key (`place`: each key id's first place as named) meets
        `memory_id`: at its first key, a stored memory at its seq, then this command's in order.
        One found by its text alone comes after those sharing a key (at `alone`, past them)."""
        made = self._made_at.get(memory_id)
        if made is not None:  # after every stored memory, in order, as if told one by one
            return min((place[k] for k in made[1] if k in place), default=alone), 1, made[0]
        node = self.state.memories[memory_id]
        first = min((place[k] for k in node.keys if k in place), default=alone)
        # A key's links are appended as memories are created: created_seq is their order.
        return first, 0, node.created_seq

    def _links_before(
        self, place: dict[str, int], key_id: str, scanned: set[str]
    ) -> list[tuple[int, dict[str, float]]] | None:
        """(place, links) of the stored keys named before `key_id`, in order: a stored memory
        met through `key_id`'s links comes first at the first of these that links it too
        (dict lookups in links just walked, where its own key list is scattered memory).
        Keys `scanned` whole are left out: a candidate they link was met there, so one met
        now is not among their links. None when a key may link a memory that does not list
        it (`GraphState.ids_retold`): its keys are read then."""
        if self.state.ids_retold:
            return None
        keys, at = self.state.keys, place[key_id]
        return [
            (p, keys[k].links)
            for k, p in place.items()
            if p < at and k in keys and k not in scanned
        ]

    def related_of(self, memory_id: str) -> list[str]:
        """The `related_to` of a stored memory or of one made earlier in this command."""
        if memory_id in self.new_memories:
            return list(self.new_memories[memory_id][0].related_to)
        return list(self.state.memories[memory_id].related_to)

    def flag(self, similar: Similar) -> Flag:
        """What the caller is told of a memory found near-identical or close: with the start
        of its text, a stored memory's or one made earlier in this command."""
        new = self.new_memories.get(similar.memory_id)
        content = new[0].content if new else self.state.memories[similar.memory_id].content
        return Flag(similar.memory_id, similar.similarity, preview(content))

    def source_of(self, memory_id: str) -> str | None:
        """The `source` of a stored memory or of one made earlier in this command."""
        if memory_id in self.new_memories:
            return self.new_memories[memory_id][0].source
        return self.state.memories[memory_id].source

    def inherited_links(self, memory_id: str, present: list[KeyLink]) -> list[KeyLink]:
        """The links of `memory_id` not already in `present`, with their current weights."""
        have = {lk.key_id for lk in present}
        if memory_id in self.new_memories:
            return [lk for lk in self.new_memories[memory_id][0].keys if lk.key_id not in have]
        node = self.state.memories[memory_id]
        out: list[KeyLink] = []
        for key_id in node.keys:
            if key_id in have:
                continue
            key = self.state.keys[key_id]
            out.append(
                KeyLink(
                    key_id=key_id,
                    label=key.label,
                    type=key.type,  # type: ignore[arg-type]
                    resolution="existing",
                    weight=key.links[memory_id],
                )
            )
        return out

    def add_memory(self, new: NewMemory, vector: Matrix) -> None:
        self._made_at[new.memory_id] = (len(self.new_memories), [lk.key_id for lk in new.keys])
        self.new_memories[new.memory_id] = (new, vector)
        for link in new.keys:
            self._new_links.setdefault(link.key_id, []).append(new.memory_id)
            self._new_links_in.setdefault((link.key_id, new.namespace), []).append(new.memory_id)
        if new.supersedes is not None:
            self._superseded.add(new.supersedes)
        self._new_digests[new.memory_id] = text_hash(new.content)
        slot = _text_slot(new.namespace, same_text_form(new.content))
        self._new_texts.setdefault(slot, []).append(new.memory_id)
