"""Read-side queries over the key graph: recall, read_key, related, list_memories, stats.

Queries never append. Each first folds what other processes appended (`refresh`), so answers
are never older than the log was when the question was asked.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar, overload

import numpy as np

from keytrail.events import InvalidInput, NotFound
from keytrail.projections import GraphState, KeyNode, MemoryNode, VectorSet
from keytrail.projections.scripts import UNSPACED, pattern
from keytrail.projections.snapshot import KeyLinks, MemoryStatus, peek_all

from . import keyrank
from . import validation as check
from .config import CONVERSATION_PAGE, DEFAULT_PAGE, KEY_PAGE, RELATED_PAGE
from .embedders import name_of
from .results import (
    Conversation,
    KeyBrowse,
    KeyListing,
    KeyMatch,
    KeyPage,
    KeyRef,
    MemoryPage,
    MemoryRef,
    MemorySummary,
    MemoryView,
    ProjectionState,
    Recall,
    Related,
    RelatedMemory,
    SessionList,
    SessionSummary,
    Stats,
    TurnView,
)

if TYPE_CHECKING:
    from keytrail.events import EventLog
    from keytrail.events.log import Clock
    from keytrail.projections.vectors import Matrix

    from .config import Settings
    from .embedders import Embedder
    from .profiles import Thresholds
    from .reembed import Need

#: A word with the combining marks of its letters (\w leaves them out, and a Devanagari
#: name fell apart into letters, or lost a final vowel sign as if it were punctuation), and
#: its inner apostrophes (O'Brien) and hyphens (Anna-Lena is one name, see `_parts`)
_WORD = r"[\w{marks}]+(?:['’\-\u2010\u2011][\w{marks}]+)*"
#: A hyphen, kept by `re.split` (the group) so that `_parts` can join the pieces again
_HYPHEN = re.compile("([-\u2010\u2011])")
_POSSESSIVE = re.compile(r"['’]s$")
_MAX_NGRAM = 6
#: Runs of scripts written without spaces between words (Thai, kana, CJK ideographs, Hangul)
#: (a `scripts.pattern`, compiled on first use: its large class cost every command's start)
_UNSPACED = f"[{UNSPACED}]+"
#: The longest name looked for inside such a run, in characters
_UNSPACED_GRAM = 8
#: Most punctuation characters cut from each end of a whitespace n-gram ("?!", "'s?").
_EDGE_TRIM = 3
_LEADING_PUNCT = r"^[^\w\s{marks}]+"
_TRAILING_PUNCT = r"[^\w\s{marks}]+$"
PREVIEW_CHARS = 120
#: Why a read by id finds no memory deleted from the knowledge graph (as of then, if past).
DELETED = "it was deleted from the knowledge graph"
#: ... and one forgotten (its content erased).
FORGOTTEN = "it was forgotten"


T = TypeVar("T")


def newest(items: Sequence[T], limit: int, offset: int = 0) -> list[T]:
    """The `limit` items just before the newest `offset`, of `items` listed oldest first; in
    that same order: how a list that grows at its end (a conversation, an entity's
    observations) answers a page, latest first, with older pages behind `offset`.

    Why the newest are the ones kept when an entity is cut: an entity grows past the cut when an
    agent keeps writing to it (its user), and its latest facts are the ones most likely still
    true and most often wanted. The older ones stay one read_entity call away, and search_nodes
    still matches every one. Every knowledge-graph read cuts with this, so they all show the
    same ones.
    """
    end = max(0, len(items) - offset)
    return list(items[max(0, end - limit) : end])


def next_offset(offset: int, limit: int, *totals: int) -> int | None:
    """The `next_offset` of every paged answer: where its next page starts (`offset` +
    `limit`), or None on its last page, once no list of it (each holding `totals` items in
    all) goes past this page. Computed here only, so it means the same in every answer."""
    end = offset + limit
    return end if any(total > end for total in totals) else None


def visible(node: MemoryNode, now: datetime) -> bool:
    """Current (not superseded, forgotten, deleted or expired) at `now`."""
    return node.current() and (node.expires_at is None or node.expires_at > now)


def valid_at_time(
    node: MemoryNode, memories: dict[str, MemoryNode], now: datetime, valid_at: datetime
) -> bool:
    """The version of a fact that was true in the world at `valid_at`.

    A version holds from its valid_from until the earliest valid_from of the versions that
    replaced it, so a superseded version is shown for the time before its successor became
    true, and a correction backdated before the version it replaced ends the earlier ones
    too: one version of a chain is true at any time.
    """
    if node.status != "active" or (node.expires_at is not None and node.expires_at <= now):
        return False
    if node.valid_since() > valid_at:
        return False
    later = node.superseded_by
    seen = {node.id}
    while later is not None and later not in seen:
        successor = memories.get(later)
        if successor is None:
            break
        if successor.valid_since() <= valid_at:
            return False
        seen.add(later)
        later = successor.superseded_by
    return True


#: Most versions of one fact followed to find the one a related_to edge ends at
MAX_VERSIONS = 256


def versions(memories: dict[str, MemoryNode], memory_id: str, most: int | None = None) -> list[str]:
    """The versions of the fact `memory_id` is one version of, oldest first: the chain of
    corrections and retellings through it (each version replaces at most one, and is replaced
    by at most one). With `most`, no more than that many (a walk that must stay short); [] for
    an unknown id. A chain that loops (only a hand-made log) is walked once round. Where two
    versions replace one (a fork, which verify reports) the chain is the one through
    `memory_id`: forgetting every version of it never leaves it out."""
    node = memories.get(memory_id)
    if node is None:
        return []
    cap = len(memories) if most is None else most
    earlier: list[str] = []
    seen = {node.id}
    back = node
    while (
        back.supersedes is not None
        and back.supersedes in memories
        and back.supersedes not in seen
        and len(seen) < cap
    ):
        back = memories[back.supersedes]
        seen.add(back.id)
        earlier.append(back.id)
    chain = [*reversed(earlier), node.id]
    walked = set(seen)  # beside the list: a chain may be thousands of versions long
    while (
        node.superseded_by is not None
        and node.superseded_by in memories
        and node.superseded_by not in walked
        and len(chain) < cap
    ):
        node = memories[node.superseded_by]
        chain.append(node.id)
        walked.add(node.id)
    return chain


def related_edges(
    memories: dict[str, MemoryNode], node: MemoryNode, shown: Callable[[str], bool]
) -> list[str]:
    """The memories `node` is joined to by related_to, either way, each as the version of its
    fact that is `shown`: an edge joins two facts, so it holds while either is corrected or
    told again. Those `node` names, and those naming any version of `node`'s fact (a version
    keeps its predecessor's related_to, unless a correction names others: that ends the edge).
    """
    if not (node.related_to or node.related_from or node.supersedes or node.superseded_by):
        return []  # most memories: no edge, one version
    mine = versions(memories, node.id, MAX_VERSIONS) or [node.id]

    def shown_version(memory_id: str) -> str | None:
        return next((v for v in versions(memories, memory_id, MAX_VERSIONS) if shown(v)), None)

    out: dict[str, None] = {}
    for target in node.related_to:
        found = shown_version(target)
        if found is not None and found not in mine:
            out[found] = None
    for version in mine:
        for source in memories[version].related_from:
            found = shown_version(source)
            if (
                found is not None
                and found not in mine
                and found not in out
                and any(t in mine for t in memories[found].related_to)
            ):
                out[found] = None
    return list(out)


def literal_candidates(text: str) -> list[str]:
    """Whole-word n-grams of `text`, case-folded: what a name key may literally match.

    A possessive is the same word ("Anna's" matches Anna), so n-grams of the words without
    a trailing 's are candidates too. A hyphenated name is one word ("Anna-Lena" is not Anna),
    but a name with an affix is the name ("Berlin-based" is Berlin).
    """
    # As key labels are (core/validation.py): a name pasted with a zero-width space in it is
    # stored as the name, and must be found when a query is pasted the same way.
    text = unicodedata.normalize("NFC", check.visible(text))
    word = pattern(_WORD)
    found = word.findall(text)
    words = [w.casefold() for w in found]
    parts = words
    if _HYPHEN.search(text):
        parts = []
        for w, f in zip(found, words, strict=True):
            parts.extend(_parts(w) if _HYPHEN.search(w) else [f])
    # A name with an affix is a word too ("Berlin-based", see `_parts`), and a possessive the
    # same word ("Anna's"): their n-grams are candidates as well.
    sequences = [words] if parts == words else [words, parts]
    sequences += [bare for s in sequences if (bare := [_POSSESSIVE.sub("", w) for w in s]) != s]
    grams = _ngrams(words)
    if len(sequences) > 1:
        grams = list(dict.fromkeys(g for s in sequences for g in _ngrams(s)))
    # The whole query as a learned alias holds it (punctuation kept, any length): without it a
    # name key's alias learned from a question could never match again.
    folded = text.casefold()
    whole = " ".join(folded.split())
    if whole not in grams:
        grams.append(whole)
    # A label with punctuation in it or at its edges ("Jean-Luc", "St. Louis", "C++", "AT&T")
    # is a run of whitespace-separated tokens, less what punctuation the sentence put around
    # it ("Jean-Luc?", "(AT&T)"): without these it matched only a query that was nothing else.
    tokens = folded.split()
    seen = set(grams)
    if any(word.fullmatch(t) is None for t in tokens):
        for gram in _ngrams(tokens):
            for form in _trimmed(gram):
                if form not in seen:
                    seen.add(form)
                    grams.append(form)
    # Chinese, Japanese, Korean (its particles attach to the noun) and Thai put no space
    # between words, so "東京に住んでいる" is one \w+ word and the name 東京 never matched in
    # a sentence. There a name is found anywhere in a run of such characters (up to
    # _UNSPACED_GRAM long), at the cost word breaks would spare: 京都 also matches in 東京都.
    for run in pattern(_UNSPACED).findall(folded):
        for start in range(len(run)):
            for end in range(start + 1, min(start + _UNSPACED_GRAM, len(run)) + 1):
                gram = run[start:end]
                if gram not in seen:
                    seen.add(gram)
                    grams.append(gram)
    return grams


def _parts(word: str) -> list[str]:
    """`word`, case-folded, cut at each hyphen that joins a lowercase word or a number to one
    that is not: that is a name with an affix ("Berlin-based", "pre-Google", "COVID-19"),
    where the name is a word. Between two capitalised words, or two lowercase ones, a hyphen
    makes one compound ("Anna-Lena", "Coca-Cola", "e-mail"), of which no part is a word by
    itself."""
    pieces = _HYPHEN.split(word)
    parts = [pieces[0]]
    for i in range(2, len(pieces), 2):
        before, after = pieces[i - 2], pieces[i]
        if before.islower() != after.islower() or before.isdigit() or after.isdigit():
            parts.append(after)
        else:
            parts[-1] += pieces[i - 1] + after
    return [part.casefold() for part in parts]


#: The score of a name matched only by its `loose_form` ("Lea" by "Léa", "Anna-Lena" by
#: "Anna Lena"): below the spelling itself, so where both are keys the one typed comes first.
LOOSE_LITERAL = 0.95
#: The score of a name that is one part of a hyphenated word of the query ("Anna" in
#: "Anna-Lena called", "Paris" in "the Paris-London train"): a joined name may be another
#: person's, or two places, and the query says which no more than a key can. Found, as a
#: missed key costs an agent the memories behind it, but below the whole word and loose matches.
PART_LITERAL = 0.9


def hyphen_part_candidates(text: str, whole: Iterable[str]) -> list[str]:
    """The whole-word n-grams of `text` with every hyphenated word cut into its parts, less
    `whole` (its `literal_candidates`): what a name matches at PART_LITERAL."""
    if not _HYPHEN.search(text):
        return []
    text = unicodedata.normalize("NFC", check.visible(text)).casefold()
    words = [p for w in pattern(_WORD).findall(text) for p in _HYPHEN.split(w)[::2] if p]
    bare = [_POSSESSIVE.sub("", w) for w in words]
    whole = set(whole)
    grams = _ngrams(words) + (_ngrams(bare) if bare != words else [])
    return [g for g in dict.fromkeys(grams) if g not in whole]


def literal_keys(state: GraphState, query: str) -> dict[str, float]:
    """The keys `query` names, by id: 1.0 for a key one of its `literal_candidates` is a label
    or alias of, LOOSE_LITERAL for a name (not a concept: in a word an accent may tell two
    meanings apart, año and ano) that one spells with other accents or a hyphen for a space,
    and PART_LITERAL for a key one part of a hyphenated word names.
    """
    found: dict[str, float] = {}
    grams = literal_candidates(query)
    for gram in grams:
        if (key := state.key_for_label(gram)) is not None:
            found[key.id] = 1.0
    for key in state.loose_keys(grams):
        if key.type != "concept":
            found.setdefault(key.id, LOOSE_LITERAL)
    for gram in hyphen_part_candidates(query, grams):
        if (key := state.key_for_label(gram)) is not None:
            found.setdefault(key.id, PART_LITERAL)
    return found


def _trimmed(gram: str) -> Iterable[str]:
    """`gram` with up to _EDGE_TRIM non-word characters cut from either end, and without a
    possessive 's: "jean-luc's?" gives "jean-luc's?", "jean-luc's", "jean-luc", ..."""
    lead = len(gram) - len(pattern(_LEADING_PUNCT).sub("", gram, count=1))
    trail = len(gram) - len(pattern(_TRAILING_PUNCT).sub("", gram, count=1))
    for a in range(min(lead, _EDGE_TRIM) + 1):
        for b in range(min(trail, _EDGE_TRIM) + 1):
            form = gram[a : len(gram) - b]
            if form.strip() and _emoji_edge(gram, a) and _emoji_edge(gram, len(gram) - b):
                yield form
                bare = _POSSESSIVE.sub("", form)
                if bare != form and bare:
                    yield bare


def _emoji_edge(text: str, at: int) -> bool:
    """Whether cutting `text` at `at` leaves its emoji whole: not beside a zero-width joiner
    (👩 + ZWJ + 💻 is one emoji), nor between the two regional indicators of a flag."""
    if at in (0, len(text)):
        return True
    if "\u200d" in (text[at - 1], text[at]):
        return False
    indicators = 0  # regional indicators just before the cut: an odd count splits a flag
    while at - indicators > 0 and "\U0001f1e6" <= text[at - indicators - 1] <= "\U0001f1ff":
        indicators += 1
    return indicators % 2 == 0 or not "\U0001f1e6" <= text[at] <= "\U0001f1ff"


def _ngrams(words: list[str]) -> list[str]:
    return [
        " ".join(words[i : i + n])
        for n in range(1, _MAX_NGRAM + 1)
        for i in range(len(words) - n + 1)
    ]


#: Concept keys a query is compared with by similarity, the best first (recall and hybrid).
SIMILAR_KEYS = 200
_NEVER = datetime.max.replace(tzinfo=UTC)
_DAWN = datetime.min.replace(tzinfo=UTC)
#: A key with more links than this is a walk no read should take whole: `related` and hybrid
#: recall's key signal and hops look only at its newest this many links (their scores through
#: such a key are a near-zero 1/count, so the rest would only add ties).
HUB_LINKS = 1000


def newest_links(key: KeyNode) -> Iterable[str]:
    """The ids a read walks through `key`: all its links, or a hub's newest HUB_LINKS."""
    links = key.links
    return itertools.islice(reversed(links), HUB_LINKS) if len(links) > HUB_LINKS else links


@dataclass(frozen=True)
class _StatsCache:
    """The last `memory_stats` answer, good for `state` at `seq` from `since` until `until`
    (the next expiry of a counted memory)."""

    state: GraphState
    seq: int
    since: datetime
    until: datetime
    stats: Stats


@dataclass(frozen=True, slots=True)
class _KeyCount:
    """A key's shown memories in a namespace, counted at `since` over its first `links` links
    (those of the memories made by `seq`); good until `until`, the next expiry of a counted
    memory, less the counted memories that stopped being current since (see `_KeyCounts`)."""

    links: int
    seq: int
    since: datetime
    until: datetime
    count: int


class _KeyCounts:
    """Key id -> namespace -> its last `_KeyCount`, for one state object.

    While the state's `retired_seq` holds, links are only appended, so a kept count only needs
    its new links counted. When it moves, each memory the state's retirements noted since is
    taken off the counts of its keys that counted it: a forget must not send a hub, or every
    key of the store (memory_stats and browse_keys count them all), to a full recount. A cut
    link, a journal that dropped what was noted since, or a memory id told again (a key may
    then lead to a memory that does not list it) drops them all.
    """

    __slots__ = ("counts", "journal", "links_cut", "retired_seq", "state")

    def __init__(self, state: GraphState) -> None:
        self.state = state
        self.counts: dict[str, dict[str | None, _KeyCount]] = {}
        self.journal = state.retirements().end
        self.retired_seq = state.retired_seq
        self.links_cut = state.links_cut

    def catch_up(self) -> None:
        state = self.state
        if state.retired_seq == self.retired_seq:
            return
        journal = state.retirements()
        retired = journal.since(self.journal)
        if retired is None or state.links_cut != self.links_cut or state.ids_retold:
            self.counts.clear()
        else:
            memories, counts = state.memories, self.counts
            for mid in retired:
                node = memories[mid]
                for key_id in node.keys:
                    for namespace, kept in counts.get(key_id, {}).items():
                        if (
                            # its link was among those counted, and it was shown then
                            node.created_seq <= kept.seq
                            and namespace in (None, node.namespace)
                            and (node.expires_at is None or node.expires_at > kept.since)
                        ):
                            counts[key_id][namespace] = replace(kept, count=kept.count - 1)
        self.journal = journal.end
        self.retired_seq, self.links_cut = state.retired_seq, state.links_cut


#: What `memory_stats` counts a memory as that it does not count as shown (a shown one is
#: counted by its namespace, a str)
_FORGOTTEN, _DELETED, _EXPIRED, _SUPERSEDED = range(4)
_Class = str | int


def _stats_class(node: MemoryNode | MemoryStatus, now: datetime) -> _Class:
    """What `memory_stats` counts `node` as at `now` (on the present: a view of the past has
    its own rules for forgotten and shown)."""
    if node.status == "forgotten":
        return _FORGOTTEN
    if node.status == "deleted":
        return _DELETED
    if node.status == "expired" or (node.expires_at is not None and node.expires_at <= now):
        return _EXPIRED
    if node.superseded_by is not None:
        return _SUPERSEDED
    return node.namespace


class _Counts:
    """What `memory_stats` counts, kept for one state object: every memory by its class, the
    total of each class, each key's count of the memories it leads to that are shown (for each
    key leading to any, in all namespaces and in each) and which keys are hubs, good from
    `since` until `until` (the next expiry of a memory counted). `_Tally` keeps them for the
    present, `_PastTally` for a time view's state; each brings them up to date from what
    changed, classing only those memories again and counting only their keys again."""

    __slots__ = (
        "after",
        "by_namespace",
        "classes",
        "counts",
        "hubs",
        "key_counts",
        "since",
        "state",
        "until",
    )

    def __init__(self, state: GraphState, now: datetime) -> None:
        self.state = state
        self.since, self.until = now, _NEVER
        #: the latest expiry at or before a time a memory was classed at: no count changes
        #: from `after` to `until`
        self.after = _DAWN
        self.classes: dict[str, _Class] = {}
        self.counts: dict[_Class, int] = {}
        self.key_counts: dict[str, int] = {}
        #: namespace -> key id -> the memories of that namespace the key leads to that are
        #: shown (browse_keys of one namespace)
        self.by_namespace: dict[str, dict[str, int]] = {}
        self.hubs: set[str] = set()

    def _class(self, node: MemoryNode | MemoryStatus, kind: _Class, now: datetime) -> None:
        """Count `node` as `kind` (taken off its class before, if it had one)."""
        old = self.classes.get(node.id)
        if old is not None:
            self.counts[old] -= 1
        self.classes[node.id] = kind
        self.counts[kind] = self.counts.get(kind, 0) + 1
        expires = node.expires_at
        if expires is not None:
            if now < expires < self.until:
                self.until = expires
            elif expires <= now and expires > self.after:
                self.after = expires

    def _shift(self, node: MemoryNode, old: str | None, new: str | None) -> None:
        """Move `node` from being shown in namespace `old` to namespace `new` (None: not shown)
        in its keys' per-namespace counts. Its keys are all that lead to it while no memory id
        was told again (a key listed twice links once)."""
        if old == new:
            return
        for key_id in dict.fromkeys(node.keys):
            if old is not None:
                counts = self.by_namespace[old]
                if counts[key_id] == 1:
                    del counts[key_id]
                else:
                    counts[key_id] -= 1
            if new is not None:
                counts = self.by_namespace.setdefault(new, {})
                counts[key_id] = counts.get(key_id, 0) + 1

    def _count_key(self, key_id: str, count: int, hub_min: int) -> None:
        if count:
            self.key_counts[key_id] = count
        else:
            self.key_counts.pop(key_id, None)
        if count >= hub_min:
            self.hubs.add(key_id)
        else:
            self.hubs.discard(key_id)

    def keys_in(self, namespace: str) -> dict[str, int] | None:
        """Each key's shown memories in `namespace` (those leading to any), or None where
        they are not kept exactly."""
        return self.by_namespace.get(namespace, {})

    def shown(self, namespace: str | None) -> int:
        """The memories shown (in `namespace`): those counted by their namespace."""
        return sum(
            c for ns, c in self.counts.items() if type(ns) is str and namespace in (None, ns)
        )

    def totals(self) -> tuple[dict[str, int], int, int, int, int]:
        """The memories shown per namespace, then superseded, expired, forgotten, deleted."""
        counts = self.counts
        return (
            {ns: c for ns, c in counts.items() if type(ns) is str and c},
            counts.get(_SUPERSEDED, 0),
            counts.get(_EXPIRED, 0),
            counts.get(_FORGOTTEN, 0),
            counts.get(_DELETED, 0),
        )


class _Tally(_Counts):
    """`_Counts` of the present state.

    A memory changes class only when the change journal notes it, when it is new (memories
    only grow at the dict's end), or when its expiry passes (`until`: the tally is then counted
    again, as it is when the clock goes back past `since`, a link is cut or the journal dropped
    what was noted since). A key's count changes only with those memories' links, so only
    their keys are counted again.
    """

    __slots__ = ("ids_retold", "journal", "keyed", "links", "links_cut", "seen")

    def __init__(self, queries: Queries, state: GraphState, now: datetime) -> None:
        super().__init__(state, now)
        #: whether `by_namespace` is kept: only from the first browse of one namespace on (it
        #: costs a fifth more to count the present afresh)
        self.keyed = False
        self.journal = state.changes().end
        self.links_cut, self.ids_retold = state.links_cut, state.ids_retold
        self.seen = len(state.memories)
        # Read undecoded where a lazy load left them (only the fields counted), and each key
        # counted by its links to the memories shown (those classed by their namespace, as
        # `_count` counts): decoding every node of a snapshot to count them took 2 s of a
        # one-shot `keytrail stats` at 100,000 memories.
        for node in peek_all(state.memories, MemoryStatus):
            self._class(node, _stats_class(node, now), now)
        shown = {mid for mid, kind in self.classes.items() if type(kind) is str}
        hub_min, links = queries.settings.hub_min, 0
        for key in peek_all(state.keys, KeyLinks):
            links += len(key.links)
            self._count_key(key.id, sum(map(shown.__contains__, key.links)), hub_min)
        #: every key's links (those of a memory made since only add to it: a link cut or an id
        #: told again counts afresh)
        self.links = links

    def _class(self, node: MemoryNode | MemoryStatus, kind: _Class, now: datetime) -> None:
        # On the present a memory is shown exactly when it is counted by its namespace.
        old = self.classes.get(node.id)
        super()._class(node, kind, now)
        if self.keyed:
            assert isinstance(node, MemoryNode)  # only the first count reads them undecoded
            self._shift(
                node, old if type(old) is str else None, kind if type(kind) is str else None
            )

    def keys_in(self, namespace: str) -> dict[str, int] | None:
        if self.state.ids_retold:
            return None  # a memory id told again may be led to by a key it does not list
        if not self.keyed:
            memories = self.state.memories
            for memory_id, kind in self.classes.items():
                if type(kind) is str:
                    self._shift(memories[memory_id], None, kind)
            self.keyed = True
        return super().keys_in(namespace)

    def _recount(self, queries: Queries, key: KeyNode, now: datetime) -> None:
        self._count_key(key.id, queries._count(key, None, now), queries.settings.hub_min)

    def caught_up(self, queries: Queries, now: datetime) -> bool:
        """Brought up to `now`; False where only counting again will do."""
        state = self.state
        journal = state.changes()
        noted = journal.since(self.journal)
        if (
            noted is None
            or state.ids_retold != self.ids_retold
            or not self.since <= now < self.until
            or state.links_cut != self.links_cut
        ):
            return False
        memories, classes = state.memories, self.classes
        fresh = len(memories) - self.seen
        # Those noted that were counted before (the others are new since: taken below), then
        # the new ones, in the order they were made.
        changed = [memories[mid] for mid in dict.fromkeys(noted) if mid in classes]
        if fresh:
            changed += [
                memories[mid] for mid in reversed(list(itertools.islice(reversed(memories), fresh)))
            ]
        for node in changed:
            self._class(node, _stats_class(node, now), now)
        for key_id in {k for node in changed for k in node.keys}:
            self._recount(queries, state.keys[key_id], now)
        if fresh:
            self.links += sum(len(dict.fromkeys(node.keys)) for node in changed[-fresh:])
        self.journal, self.seen, self.since = journal.end, len(memories), now
        return True


class _PastTally(_Counts):
    """`_Counts` of a time view's state (a kept past state, or the present's read at another
    time), as the view shows it (hidden also where forgotten since; with a valid time, the
    version true then), with the namespace of each shown memory, kept with the state
    (core/timetravel.py `PastStates`) so that repeated time-view reads count nothing anew.

    A past state never changes (`PastStates` only blanks forgotten content, which no count
    reads), so its counts change only when a memory is forgotten since (or a memory id told
    again since unforgets one), which the present's change journal notes, or when an expiry
    passes (`until`, or before `after`): those memories are classed again and only their keys'
    counts moved. The present's state also grows at its end (new memories, classed as they
    come) and notes what else changes in its own journal. With a valid time a memory is shown
    by its successors too (one told later may have become true before `valid_at`), so each
    memory classed again takes the versions before it along. A journal that dropped what was
    noted since, another present state, a link cut, or a state holding ids told again (its
    memories' keys are then not all that lead to them) means counting again.
    """

    __slots__ = (
        "journal",
        "links",
        "links_cut",
        "namespace_of",
        "present",
        "seen",
        "shown_counts",
        "valid_at",
    )

    def __init__(
        self,
        state: GraphState,
        present: GraphState,
        forgotten: Callable[[MemoryNode], bool],
        shown: Callable[[MemoryNode, datetime], bool],
        valid_at: datetime | None,
        hub_min: int,
        now: datetime,
    ) -> None:
        super().__init__(state, now)
        self.present, self.valid_at = present, valid_at
        self.journal = present.changes().end
        self.links_cut, self.seen = state.links_cut, len(state.memories)
        #: memory id -> namespace, for each memory shown at `since`
        self.namespace_of: dict[str, str] = {}
        #: namespace -> its memories shown
        self.shown_counts: dict[str, int] = {}
        namespace_of, shown_counts = self.namespace_of, self.shown_counts
        for node in state.memories.values():
            self._class(node, _FORGOTTEN if forgotten(node) else _stats_class(node, now), now)
            if shown(node, now):
                namespace_of[node.id] = node.namespace
                shown_counts[node.namespace] = shown_counts.get(node.namespace, 0) + 1
        # Counted by link, not by each memory's keys: exact even where ids were told again.
        by_namespace, links = self.by_namespace, 0
        for key in state.keys.values():
            links += len(key.links)
            total = 0
            for mid in key.links:
                namespace = namespace_of.get(mid)
                if namespace is not None:
                    counts = by_namespace.setdefault(namespace, {})
                    counts[key.id] = counts.get(key.id, 0) + 1
                    total += 1
            self._count_key(key.id, total, hub_min)
        self.links = links

    def _reclass(
        self,
        node: MemoryNode,
        forgotten: Callable[[MemoryNode], bool],
        shown: Callable[[MemoryNode, datetime], bool],
        hub_min: int,
        now: datetime,
    ) -> None:
        self._class(node, _FORGOTTEN if forgotten(node) else _stats_class(node, now), now)
        old = self.namespace_of.get(node.id)
        new = node.namespace if shown(node, now) else None
        if old == new:
            return
        counts = self.shown_counts
        if old is not None:
            del self.namespace_of[node.id]
            counts[old] -= 1
        if new is not None:
            self.namespace_of[node.id] = new
            counts[new] = counts.get(new, 0) + 1
        self._shift(node, old, new)
        if (old is None) != (new is None):
            step = 1 if new is not None else -1
            for key_id in dict.fromkeys(node.keys):
                self._count_key(key_id, self.key_counts.get(key_id, 0) + step, hub_min)

    def shown(self, namespace: str | None) -> int:
        counts = self.shown_counts
        return sum(counts.values()) if namespace is None else counts.get(namespace, 0)

    def count(self, key: KeyNode, namespace: str | None) -> int:
        """The memories `key` led to that are shown (in `namespace`)."""
        if namespace is None:
            return self.key_counts.get(key.id, 0)
        return self.by_namespace.get(namespace, {}).get(key.id, 0)

    def caught_up(
        self,
        present: GraphState,
        forgotten: Callable[[MemoryNode], bool],
        shown: Callable[[MemoryNode, datetime], bool],
        hub_min: int,
        now: datetime,
    ) -> bool:
        """Brought up to `now` and to what `present` noted since; False where only counting
        again will do."""
        journal = present.changes()
        noted = journal.since(self.journal)
        state = self.state
        if (
            noted is None
            or present is not self.present
            or not self.after <= now < self.until
            or state.ids_retold
            or state.links_cut != self.links_cut
        ):
            return False
        memories = state.memories
        fresh = len(memories) - self.seen
        changed = list(dict.fromkeys(noted))
        if fresh:  # the present's new memories, in the order they were made
            made = list(itertools.islice(reversed(memories), fresh))
            made.reverse()
            changed += made
            self.links += sum(len(dict.fromkeys(memories[mid].keys)) for mid in made)
        done: set[str] = set()
        for first in changed:
            # With a valid time, the versions before a changed one too (see above).
            mid: str | None = first
            while mid is not None and mid not in done and (node := memories.get(mid)) is not None:
                done.add(mid)
                self._reclass(node, forgotten, shown, hub_min, now)
                mid = node.supersedes if self.valid_at is not None else None
        self.journal, self.seen, self.since = journal.end, len(memories), now
        return True


def _count_shown(
    memories: dict[str, MemoryNode], ids: Iterable[str], namespace: str | None, now: datetime
) -> tuple[int, datetime]:
    """How many of `ids` are `visible` at `now` (in `namespace`), and their earliest expiry."""
    count, until = 0, _NEVER
    for mid in ids:
        node = memories[mid]
        if node.current() and (namespace is None or node.namespace == namespace):
            expires = node.expires_at
            if expires is None:
                count += 1
            elif expires > now:
                count += 1
                until = min(until, expires)
    return count, until


class Queries:
    """The read side of `Store` (a mixin: it reads the store's state, settings and vectors)."""

    state: GraphState
    settings: Settings
    clock: Clock
    log: EventLog
    embedder: Embedder
    thresholds: Thresholds
    _mutex: threading.RLock
    #: Whether a memory is shown at `now`. Time views with a valid time replace it; the
    #: ordinary path calls `visible` itself, so it pays nothing for time travel.
    _visible: Callable[[MemoryNode, datetime], bool] = staticmethod(visible)
    _stats_cache: _StatsCache | None = None
    #: what `memory_stats` counts on the present, kept between calls (see `_Tally`)
    _tally: _Tally | None = None
    #: each key's last counts, for `_count` on the present (see `_KeyCounts`)
    _key_counts: _KeyCounts | None = None
    #: key id -> its links by column, for `read_key` of a big key on the present (keyrank.py)
    _key_columns: dict[str, keyrank.KeyColumns] | None = None
    _key_columns_state: GraphState | None = None
    #: The caches above, kept between calls and topped up: a reload after a cut-back drops
    #: them (`Store._forget_derived`). A cache added here belongs in this list too.
    _KEPT_BETWEEN_CALLS: tuple[str, ...] = (
        "_stats_cache",
        "_tally",
        "_key_counts",
        "_key_columns",
        "_key_columns_state",
    )

    def refresh(self) -> GraphState:
        raise NotImplementedError

    def _past_tally(self, now: datetime, build: bool = True) -> _PastTally | None:
        """A time view's counts kept with its past state (core/timetravel.py), brought up to
        `now`, or built if `build`; None on the present and where a view keeps none."""
        return None

    def _missing(self, field: str, kind: str, ident: str) -> NotFound:
        """The error for an id this state does not hold (a past view says why)."""
        return NotFound(field, kind, ident, self._mistaken(kind, ident))

    def _mistaken(self, kind: str, ident: str) -> str:
        """What an id that names no `kind` names instead, if anything: agents pass a key id
        where a memory id goes, a memory id to read_key, or a key's label as its id; a bare
        "no key 'Dana'" leaves them guessing."""
        state = self.state
        if kind == "memory" and (key := state.keys.get(ident)) is not None:
            if not key.label:  # blank: a forget erased it
                return "that is the id of a key whose label a forget erased, not of a memory"
            return f"that is the id of the key {key.label!r}, not of a memory"
        if kind == "key":
            if ident in state.memories:
                return "that is a memory id, not a key id"
            if (key := state.key_for_label(ident)) is not None:
                return f"key ids look like 'k_…'; the key labelled {ident!r} is {key.id!r}"
        return ""

    def embed(self, texts: Sequence[str], digests: list[str] | None = None) -> Matrix:
        raise NotImplementedError

    def key_vectors(self) -> VectorSet:
        raise NotImplementedError

    def memory_vectors(self) -> VectorSet:
        raise NotImplementedError

    def wait_for_vectors(
        self, need: Need = "all", progress: Callable[[int, int], None] | None = None
    ) -> None:
        raise NotImplementedError

    def projection_state(self) -> ProjectionState:
        raise NotImplementedError

    def _page(
        self,
        limit: object | None,
        offset: object,
        namespace: object | None,
        default: int = DEFAULT_PAGE,
    ) -> tuple[int, int, str | None]:
        """Checked paging arguments shared by every paginated query; no `limit` is `default`
        items, or the page limit if that is lower."""
        limits = self.settings.limits
        return (
            check.count(
                "limit", limits.default_page(default) if limit is None else limit, 1, limits.page
            ),
            check.count("offset", offset, 0, 10**9),
            check.optional_namespace(namespace),
        )

    # -- scoring ---------------------------------------------------------------------------

    def time_factor(self, node: MemoryNode, now: datetime) -> float:
        """0.5 + 0.5·exp(−age·(1−0.7·depth)/decay): deep memories fade slower."""
        last = node.last_read_at or node.created_at
        age_days = max(0.0, (now - last).total_seconds() / 86400.0)
        return 0.5 + 0.5 * math.exp(
            -age_days * (1 - 0.7 * node.depth) / self.settings.time_decay_days
        )

    def _count(self, key: KeyNode, namespace: str | None, now: datetime) -> int:
        """The memories `key` leads to that are shown at `now` (in `namespace`).

        On the present the count is kept per key and, while none of its memories stopped
        counting, only links added since are counted: a hub key ("user", on most memories)
        would otherwise cost a walk over its every link on each recall that shows it.
        """
        state = self.state
        memories = state.memories
        shown = self._visible
        if shown is not visible:  # a time view: its own rules, and its own counts if kept
            if (past := self._past_tally(now, build=False)) is not None:
                return past.count(key, namespace)
            return sum(
                1
                for mid in key.links
                if shown(node := memories[mid], now)
                and (namespace is None or node.namespace == namespace)
            )
        kept_counts = self._key_counts
        if kept_counts is None or kept_counts.state is not state:
            kept_counts = self._key_counts = _KeyCounts(state)
        kept_counts.catch_up()
        by_namespace = kept_counts.counts.setdefault(key.id, {})
        links = len(key.links)
        kept = by_namespace.get(namespace)
        if kept is not None and kept.since <= now < kept.until and kept.links <= links:
            if kept.links == links:
                return kept.count
            # Links are only appended while no link is cut: the new ones are the tail.
            tail = itertools.islice(reversed(key.links), links - kept.links)
            added, until = _count_shown(memories, tail, namespace, now)
            count, until = kept.count + added, min(kept.until, until)
        else:
            count, until = _count_shown(memories, key.links, namespace, now)
        by_namespace[namespace] = _KeyCount(links, state.seq, now, until, count)
        return count

    def _key_ref(self, key_id: str, memory_id: str | None = None) -> KeyRef:
        key = self.state.keys[key_id]
        weight = None if memory_id is None else round(key.links[memory_id], 6)
        return KeyRef(key_id=key.id, label=key.label, type=key.type, weight=weight)

    def _match(self, key: KeyNode, match: str, score: float, count: int) -> KeyMatch:
        return KeyMatch(
            key_id=key.id,
            label=key.label,
            type=key.type,
            match=match,
            score=round(score, 6),
            memory_count=count,
            hub=count >= self.settings.hub_min,
            specificity=round(1.0 / count, 6) if count else 0.0,
            aliases=list(key.aliases),
        )

    # -- recall ----------------------------------------------------------------------------

    def recall(
        self,
        query: str,
        top_k: int | None = None,
        namespace: str | None = None,
        context: str | None = None,
    ) -> Recall:
        """Keys for a query, never content. Names match literally, concepts by similarity."""
        limits = self.settings.limits
        query = check.text("query", query, limits.query_chars)
        if top_k is None:
            top_k = limits.default_top_k()
        top_k = check.count("top_k", top_k, 1, limits.top_k)
        namespace = check.optional_namespace(namespace)
        if context is not None:
            context = check.text("context", context, limits.query_chars, allow_empty=True)
        self.wait_for_vectors("keys")  # concept matching reads every key label's vector
        with self._mutex:
            self.refresh()
            now = self.clock()
            scores = {
                key_id: ("literal", score)
                for key_id, score in literal_keys(self.state, query).items()
            }
            similar = self._similar_keys(query, context)
            counts: dict[str, int] = {}

            def count(key_id: str) -> int:
                if key_id not in counts:
                    counts[key_id] = self._count(self.state.keys[key_id], namespace, now)
                return counts[key_id]

            for key_id, sim in similar:
                if sim < self.thresholds.key_recall:
                    break
                if key_id not in scores:
                    scores[key_id] = ("similar", sim)
            # Count memories (a walk over each key's links) only until top_k keys with any are
            # found: on a large graph most keys above the threshold are never shown.
            found: list[tuple[str, str, float]] = []
            for kid, (m, s) in sorted(scores.items(), key=lambda kv: -kv[1][1]):
                if len(found) >= top_k and s < found[-1][2]:
                    break
                if count(kid) > 0:
                    found.append((kid, m, s))
            ranked = sorted(found, key=lambda t: (-t[2], -count(t[0])))[:top_k]
            keys = self.state.keys
            matches = [self._match(keys[kid], m, s, count(kid)) for kid, m, s in ranked]
            nearest: list[KeyMatch] = []
            if not matches:
                for kid, s in similar:
                    if len(nearest) == min(5, top_k):  # top_k bounds every key answered
                        break
                    if count(kid) > 0:
                        nearest.append(self._match(keys[kid], "similar", s, count(kid)))
            return Recall(query=query, keys=matches, nearest=nearest)

    def _similar_keys(self, query: str, context: str | None) -> list[tuple[str, float]]:
        """Concept keys by cosine to the query (context, when given, weighs a quarter)."""
        rows = self.key_vectors()
        if not len(rows):
            return []
        texts = [query] if not context else [query, context]
        vectors = self.embedder.embed(texts)  # queries are not cached: they are not content
        scores = rows.scores(vectors[0])
        if context:
            scores = 0.75 * scores + 0.25 * rows.scores(vectors[1])
        best: dict[str, float] = {}
        keys = self.state.keys
        top = min(SIMILAR_KEYS, len(scores))
        while True:
            candidates = np.argpartition(-scores, top - 1)[:top]
            for row in candidates[np.argsort(-scores[candidates])]:
                key_id = rows.ids[row]
                if keys[key_id].type == "concept" and key_id not in best:
                    best[key_id] = float(scores[row])
            # Names never match by similarity: where their rows (entities, extracted names)
            # fill the window, look further, until it holds every row above the threshold or
            # the best SIMILAR_KEYS concepts.
            if (
                top == len(scores)
                or len(best) >= SIMILAR_KEYS
                or float(scores[candidates].min()) < self.thresholds.key_recall
            ):
                break
            top = min(4 * top, len(scores))
        return sorted(best.items(), key=lambda kv: -kv[1])

    # -- read_key --------------------------------------------------------------------------

    def read_key(
        self,
        key_id: str,
        query: str | None = None,
        namespace: str | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> KeyPage:
        """The memories a key leads to, best first: ids and metadata, never content."""
        limits = self.settings.limits
        limit, offset, namespace = self._page(limit, offset, namespace, KEY_PAGE)
        if query is not None:
            query = check.text("query", query, limits.query_chars)
            # Ranking by the query reads the content vector of each of the key's memories.
            self.wait_for_vectors("all")
        with self._mutex:
            self.refresh()
            key = self.state.keys.get(check.ident("key_id", key_id))
            if key is None:
                raise self._missing("key_id", "key", key_id)
            now = self.clock()
            memories = self.state.memories
            shown = self._visible
            if (
                shown is visible
                and len(key.links) >= keyrank.COLUMNS_MIN_LINKS
                and (found := self._rank_by_columns(key, namespace, now, offset, limit, query))
                is not None
            ):
                total, page = found
                return KeyPage(
                    key_id=key.id,
                    label=key.label,
                    label_erased=not key.label,
                    type=key.type,
                    aliases=list(key.aliases),
                    total=total,
                    offset=offset,
                    memories=[
                        self._memory_ref(memories[mid], score, key.id) for mid, score in page
                    ],
                    next_offset=next_offset(offset, limit, total),
                )
            time_factor = self.time_factor
            nodes: list[MemoryNode] = []
            ranked: list[float] = []
            for mid, weight in key.links.items():
                n = memories[mid]
                if shown(n, now) and (namespace is None or n.namespace == namespace):
                    nodes.append(n)
                    ranked.append(weight * (0.9 + 0.1 * n.depth) * time_factor(n, now))
            if query is not None and nodes:
                scores = np.array(ranked, dtype=np.float64)
                sims = self.embed([n.content for n in nodes]) @ self.embedder.embed([query])[0]
                scores *= query_factor(sims)
                ranked = scores.tolist()
            # A stable sort of the negated scores: ties keep link order, as argsort did.
            order = sorted(range(len(ranked)), key=lambda i: -ranked[i])[offset : offset + limit]
            refs = [self._memory_ref(nodes[i], ranked[i], key.id) for i in order]
            return KeyPage(
                key_id=key.id,
                label=key.label,
                label_erased=not key.label,  # blank only so: remember refuses a blank label
                type=key.type,
                aliases=list(key.aliases),
                total=len(nodes),
                offset=offset,
                memories=refs,
                next_offset=next_offset(offset, limit, len(nodes)),
            )

    def _rank_by_columns(
        self,
        key: KeyNode,
        namespace: str | None,
        now: datetime,
        offset: int,
        limit: int,
        query: str | None = None,
    ) -> tuple[int, list[tuple[str, float]]] | None:
        """read_key's total and page of a big key on the present, from its kept columns
        (None: rank it the plain way)."""
        columns = self._columns_of(key)
        time_factor = self.time_factor

        def exact(node: MemoryNode, weight: float) -> float:
            # The plain loop's score, operation for operation.
            return weight * (0.9 + 0.1 * node.depth) * time_factor(node, now)

        similarity = None
        if query is not None:
            memories, ids, digests = self.state.memories, columns.ids, columns.digests()

            def similarity(rows: np.ndarray) -> np.ndarray:
                # The plain path's product: the shown memories' rows in link order, times the
                # query, so every factor is its float to the last bit. Contents are read only
                # for memories the cache has no vector for yet; asked only if a row is shown.
                shown = rows.tolist()
                texts = _Contents(memories, [ids[r] for r in shown])
                query_vector = self.embedder.embed([query])[0]
                sims = self.embed(texts, [digests[r] for r in shown]) @ query_vector
                return query_factor(sims)

        return columns.page(namespace, now, offset, limit, exact, similarity)

    def _columns_of(self, key: KeyNode) -> keyrank.KeyColumns:
        """The kept columns of big key `key`, up to date with the present state."""
        state = self.state
        kept = self._key_columns
        if kept is None or self._key_columns_state is not state:
            kept, self._key_columns_state = {}, state
            self._key_columns = kept
        decay = self.settings.time_decay_days
        columns = kept.pop(key.id, None)  # re-inserted below: the dict is oldest-used first
        if columns is not None and columns.fits(state, key, decay):
            columns.catch_up()
        else:
            columns = keyrank.KeyColumns(state, key, decay)
        kept[key.id] = columns
        while len(kept) > keyrank.KEPT_KEYS:
            del kept[next(iter(kept))]
        return columns

    def biggest_keys(self) -> list[str]:
        """The keys whose read_key ranks from kept columns, most links first, as many as are
        kept: what a warm-up builds so that a hub's first page costs milliseconds."""
        big = [k for k in self.state.keys.values() if len(k.links) >= keyrank.COLUMNS_MIN_LINKS]
        big.sort(key=lambda k: len(k.links), reverse=True)
        return [k.id for k in big[: keyrank.KEPT_KEYS]]

    def _memory_ref(self, node: MemoryNode, score: float, via_key: str) -> MemoryRef:
        keys = self.state.keys
        return MemoryRef(
            memory_id=node.id,
            namespace=node.namespace,
            score=round(score, 6),
            depth=round(node.depth, 6),
            created_at=node.created_at,
            keys={k: keys[k].label for k in node.keys if k != via_key},
        )

    def _forgotten(self, node: MemoryNode) -> bool:
        """Forgotten, as this view sees it (a view of the past also counts later forgets)."""
        return node.status == "forgotten"

    #: Why a read by id finds an expired memory (a view of the past says "had")
    _EXPIRED = "it has expired"

    def _visible_memory(self, field: str, memory_id: str, now: datetime) -> MemoryNode:
        """The memory `memory_id` names, if a read by id may show it at `now`; otherwise
        NotFound saying why (forgotten, deleted, expired: "no memory" alone reads as a
        mistyped id, and the log's lines tell anyone that much)."""
        node = self.state.memories.get(check.ident(field, memory_id))
        if node is None:
            raise self._missing(field, "memory", memory_id)
        if self._forgotten(node):
            raise NotFound(field, "memory", memory_id, FORGOTTEN)
        if node.status == "deleted":
            raise NotFound(field, "memory", memory_id, DELETED)
        if node.status == "expired" or (node.expires_at is not None and node.expires_at <= now):
            raise NotFound(field, "memory", memory_id, self._EXPIRED)
        return node

    def check_read(self, node: MemoryNode, namespace: str | None, via_key_id: str | None) -> None:
        """What `read_memory` refuses, now or in the past: a memory outside the namespace asked
        for, and a via key that is unknown or has no link to the memory."""
        if namespace is not None and node.namespace != namespace:
            raise NotFound("memory_id", "memory", node.id, f"it is not in namespace {namespace!r}")
        if via_key_id is not None:
            key = self.state.keys.get(check.ident("via_key_id", via_key_id))
            if key is None:
                # As of a past point, a key the present holds came later: say so.
                raise self._missing("via_key_id", "key", via_key_id)
            if node.id not in key.links:
                raise InvalidInput(
                    "via_key_id",
                    f"key {via_key_id!r} ({key.label}) has no link to memory {node.id!r}",
                    value=via_key_id,
                )

    def memory_view(self, node: MemoryNode, seq: int | None = None) -> MemoryView:
        return MemoryView(
            memory_id=node.id,
            namespace=node.namespace,
            content=node.content,
            depth=round(node.depth, 6),
            access_count=node.access_count,
            created_at=node.created_at,
            last_read_at=node.last_read_at,
            keys=[self._key_ref(k, node.id) for k in node.keys],
            related_to=[mid for mid in node.related_to if not self._forgotten_id(mid)],
            supersedes=self._named_version(node.supersedes, lambda n: n.supersedes),
            superseded_by=self._named_version(node.superseded_by, lambda n: n.superseded_by),
            # A replaced version is `superseded`, as `history` says: an agent reading `active`
            # on it would take the old fact for the current one. It stays so when the version
            # that replaced it is forgotten: forgetting a correction does not make the fact it
            # corrected true again (`forget` with all_versions takes the whole fact).
            status="superseded"
            if node.status == "active" and node.superseded_by is not None
            else node.status,
            expires_at=node.expires_at,
            source=node.source,
            session_id=node.session_id,
            seq=seq,
            valid_from=node.valid_from,
        )

    def _forgotten_id(self, memory_id: str) -> bool:
        """Whether a read leaves `memory_id` unnamed: forgotten (as this view sees it)."""
        node = self.state.memories.get(memory_id)
        return node is not None and self._forgotten(node)

    def _named_version(
        self, memory_id: str | None, step: Callable[[MemoryNode], str | None]
    ) -> str | None:
        """The neighbour version a read names: `memory_id`, or past versions forgotten (as this
        view sees it) the nearest one not forgotten on that side of the chain, or None. A
        forgotten id sent an agent told to read the newer version to a refusal."""
        memories = self.state.memories
        seen: set[str] = set()
        while memory_id is not None and memory_id not in seen:  # a loop: a hand-made log
            node = memories.get(memory_id)
            if node is None or not self._forgotten(node):
                return memory_id
            seen.add(memory_id)
            memory_id = step(node)
        return None

    # -- related ---------------------------------------------------------------------------

    def related(self, memory_id: str, limit: int | None = None) -> Related:
        """Memories sharing keys (rare keys count more than hubs) or related_to edges; without
        a `limit`, RELATED_PAGE (or the page limit if lower)."""
        limits = self.settings.limits
        limit = limits.default_page(RELATED_PAGE) if limit is None else limit
        limit = check.count("limit", limit, 1, limits.page)
        with self._mutex:
            self.refresh()
            now = self.clock()
            # What read_memory refuses: an expired one is hidden until cleanup, neighbours too.
            asked = self._visible_memory("memory_id", memory_id, now)
            node = self._related_start(asked)
            memories, keys = self.state.memories, self.state.keys
            # Its own versions share its keys but are the same fact, not a related one (the
            # newer is named by superseded_by), as related_to edges leave them out too.
            mine = (
                set(versions(memories, node.id, MAX_VERSIONS))
                if node.supersedes or node.superseded_by
                else set()
            )

            def shared_by(mid: str) -> bool:
                other = memories[mid]
                return (
                    other.namespace == node.namespace
                    and mid not in mine
                    and self._visible(other, now)
                )

            # Candidates: every sharer of an ordinary key, and a hub's newest links only (its
            # sharers all score the same small 1/df, and df comes from the kept count, so a
            # hub costs no walk). Each candidate is then scored over all its shared keys.
            idf: dict[str, float] = {}
            candidates: dict[str, None] = {}
            for key_id in node.keys:
                key = keys[key_id]
                hub = len(key.links) > HUB_LINKS
                found = [mid for mid in newest_links(key) if mid != node.id and shared_by(mid)]
                if hub:
                    df = self._count(key, node.namespace, now)
                else:
                    df = len(found) + (1 if self._visible(node, now) else 0)
                idf[key_id] = (1.0 if df <= 1 else 1.0 / df) * (
                    1.0 if key.type == "concept" else 0.5
                )
                candidates.update(dict.fromkeys(found))
            scores: dict[str, float] = {}
            shared: dict[str, list[str]] = {}
            for mid in candidates:
                via = [k for k in node.keys if mid in keys[k].links]
                scores[mid] = sum(idf[k] for k in via)
                shared[mid] = via
            # An edge to another namespace (a log from before remember refused them) stays
            # unseen like the rest of that namespace.
            edges = related_edges(memories, node, shared_by)
            for mid in edges:
                scores[mid] = scores.get(mid, 0.0) + 1.0
            ranked = sorted(scores.items(), key=lambda kv: -kv[1])[:limit]
            return Related(
                memory_id=node.id,
                related=[
                    RelatedMemory(
                        memory_id=mid,
                        score=round(score, 6),
                        shared_keys=[self._key_ref(k, mid) for k in shared.get(mid, [])],
                        related_edge=mid in edges,
                        depth=round(memories[mid].depth, 6),
                    )
                    for mid, score in ranked
                ],
                asked_id=None if node is asked else asked.id,
            )

    def _related_start(self, node: MemoryNode) -> MemoryNode:
        """The memory `related` starts from when asked for `node`: itself (at a valid time,
        a `TimeView` starts from the version of its chain true then)."""
        return node

    # -- listing and stats -----------------------------------------------------------------

    def list_memories(
        self, namespace: str | None = None, limit: int | None = None, offset: int = 0
    ) -> MemoryPage:
        """Current memories, newest first, with a short preview."""
        limit, offset, namespace = self._page(limit, offset, namespace)
        with self._mutex:
            self.refresh()
            now = self.clock()
            memories = self.state.memories
            if self._visible is visible:
                # The present: the total is kept (see `_Tally`), and the page is the newest
                # shown memories, walked from the end, rather than a walk of every memory.
                total = self._present_tally(now).shown(namespace)
                newest_first = (memories[mid] for mid in reversed(memories))
                page = list(
                    itertools.islice(
                        (
                            n
                            for n in newest_first
                            if visible(n, now) and namespace in (None, n.namespace)
                        ),
                        offset,
                        offset + limit,
                    )
                )
            elif (past := self._past_tally(now)) is not None:
                # A kept past state: the same from its kept counts and shown memories.
                total = past.shown(namespace)
                namespace_of = past.namespace_of
                wanted = (
                    mid
                    for mid in reversed(memories)
                    if mid in namespace_of and namespace in (None, namespace_of[mid])
                )
                page = [memories[mid] for mid in itertools.islice(wanted, offset, offset + limit)]
            else:
                nodes = [
                    n
                    for n in memories.values()
                    if self._visible(n, now) and namespace in (None, n.namespace)
                ]
                nodes.reverse()
                page, total = nodes[offset : offset + limit], len(nodes)
            return MemoryPage(
                total=total,
                offset=offset,
                memories=[
                    MemorySummary(
                        memory_id=n.id,
                        namespace=n.namespace,
                        preview=preview(n.content),
                        depth=round(n.depth, 6),
                        access_count=n.access_count,
                        created_at=n.created_at,
                        keys=[self._key_ref(k, n.id) for k in n.keys],
                        expires_at=n.expires_at,
                    )
                    for n in page
                ],
                next_offset=next_offset(offset, limit, total),
            )

    def _present_tally(self, now: datetime) -> _Tally:
        """What `memory_stats` counts on the present, brought up to `now`."""
        state, tally = self.state, self._tally
        if tally is None or tally.state is not state or not tally.caught_up(self, now):
            tally = self._tally = _Tally(self, state, now)
        return tally

    def memory_stats(self) -> Stats:
        with self._mutex:
            state = self.refresh()
            now = self.clock()
            log_bytes = sum((self.log.dir / s).stat().st_size for s in self.log.segments())
            # The counts change only with a new event or when a memory's expiry passes: until
            # then the last answer stands (a scan of every memory and link costs ~1 ms per
            # 1,000 memories). Keyed by the state object too: a time view has its own.
            cached = self._stats_cache
            if (
                cached is not None
                and cached.state is state
                and cached.seq == state.seq
                and cached.since <= now < cached.until
            ):
                return replace(
                    cached.stats, log_bytes=log_bytes, projection=self.projection_state()
                )
            namespaces: dict[str, int] = {}
            superseded = expired = forgotten = deleted = 0
            until = _NEVER
            # The present's counts, or a past state's, kept between calls and brought up to
            # date from what changed (a scan of every memory and link after each write cost
            # 600 ms at 100,000).
            kept = self._present_tally(now) if self._visible is visible else self._past_tally(now)
            if kept is not None:
                namespaces, superseded, expired, forgotten, deleted = kept.totals()
                until, hubs = kept.until, len(kept.hubs)
            else:  # a time view keeping nothing: its own rules for forgotten and shown
                for n in state.memories.values():
                    if self._forgotten(n):
                        forgotten += 1
                    elif n.status == "deleted":
                        deleted += 1
                    elif n.status == "expired" or (
                        n.expires_at is not None and n.expires_at <= now
                    ):
                        expired += 1
                    elif n.superseded_by is not None:
                        superseded += 1
                    else:
                        namespaces[n.namespace] = namespaces.get(n.namespace, 0) + 1
                    if n.expires_at is not None and now < n.expires_at < until:
                        until = n.expires_at
                hub_min = self.settings.hub_min
                hubs = sum(1 for k in state.keys.values() if self._count(k, None, now) >= hub_min)
            stats = Stats(
                store_id=state.store_id,
                seq=state.seq,
                memories=sum(namespaces.values()),
                superseded=superseded,
                expired=expired,
                forgotten=forgotten,
                deleted=deleted,
                keys=len(state.keys),
                links=kept.links
                if kept is not None
                else sum(len(k.links) for k in state.keys.values()),
                hubs=hubs,
                namespaces=dict(sorted(namespaces.items())),
                sessions=len(state.conversations),
                embedder=name_of(self.embedder),
                log_bytes=log_bytes,
                last_event_at=state.at if state.seq else None,
                projection=self.projection_state(),
            )
            self._stats_cache = _StatsCache(state, state.seq, now, until, stats)
            return stats

    # -- browsing keys and conversations ---------------------------------------------------

    def browse_keys(
        self,
        namespace: str | None = None,
        hubs_only: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> KeyBrowse:
        """Keys leading to current memories, most-used first, with memory counts and hub flags."""
        limit, offset, namespace = self._page(limit, offset, namespace)
        with self._mutex:
            self.refresh()
            now = self.clock()
            hub_min = self.settings.hub_min
            keys = self.state.keys
            present = self._visible is visible
            past: _PastTally | None = None
            kept: dict[str, int] | None = None
            if present or (past := self._past_tally(now)) is not None:
                tally: _Counts = self._present_tally(now) if past is None else past
                kept = tally.key_counts if namespace is None else tally.keys_in(namespace)
            if kept is not None:
                # The counts are kept (see `_Tally`, `_PastTally`), and only the keys that can
                # reach the page are sorted (every key cost ~60 ms at 20,000).
                counts = [
                    (key_id, c) for key_id, c in kept.items() if not hubs_only or c >= hub_min
                ]
                total = len(counts)
                if offset + limit < total:
                    floor = heapq.nlargest(offset + limit, (c for _, c in counts))[-1]
                    counts = [(key_id, c) for key_id, c in counts if c >= floor]
                counted = [(keys[key_id], c) for key_id, c in counts]
            else:
                counted = [
                    (k, c)
                    for k in keys.values()
                    if (c := self._count(k, namespace, now)) > 0 and (not hubs_only or c >= hub_min)
                ]
                total = len(counted)
            counted.sort(key=lambda kc: (-kc[1], kc[0].label.casefold(), kc[0].id))
            return KeyBrowse(
                total=total,
                offset=offset,
                keys=[
                    KeyListing(
                        key_id=k.id,
                        label=k.label,
                        type=k.type,
                        memory_count=c,
                        hub=c >= hub_min,
                        aliases=list(k.aliases),
                    )
                    for k, c in counted[offset : offset + limit]
                ],
                next_offset=next_offset(offset, limit, total),
            )

    def get_conversation(
        self,
        session_id: str,
        turn: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> Conversation:
        """A page of a session's recorded turns, in order: the newest `limit` (default
        CONVERSATION_PAGE) once the newest `offset` are skipped, so a long conversation answers
        with its latest turns and pages back from there. With `turn` (1-based), that turn only.
        """
        session_id = check.name("session_id", session_id, check.SESSION_CHARS)
        limit, offset, _ = self._page(limit, offset, None, default=CONVERSATION_PAGE)
        with self._mutex:
            self.refresh()
            turns = self.state.conversations.get(session_id)
            if not turns:
                # remember's session_id records no turn: say so, or it reads as a mistyped id
                now = self.clock()
                named = sum(
                    1
                    for n in self.state.memories.values()
                    if n.session_id == session_id and self._visible(n, now)
                )
                if not named:
                    raise self._missing("session_id", "session", session_id)
                raise NotFound(
                    "session_id",
                    "session",
                    session_id,
                    f"no turns were recorded in it (record_turn), though {named} "
                    f"memor{'y was' if named == 1 else 'ies were'} remembered with that "
                    "session_id",
                )
            if turn is not None:
                turn = check.count("turn", turn, 1, len(turns))
                chosen, offset, following = [t for t in turns if t.turn == turn], 0, None
            else:
                chosen = newest(turns, limit, offset)
                following = next_offset(offset, limit, len(turns))
            return Conversation(
                session_id=session_id,
                total=len(turns),
                turns=[
                    TurnView(turn=t.turn, role=t.role, content=t.content, at=t.at) for t in chosen
                ],
                offset=offset,
                next_offset=following,
            )

    def list_sessions(self, limit: int | None = None, offset: int = 0) -> SessionList:
        """Sessions with recorded turns, most recently active first, a page at a time."""
        limit, offset, _ = self._page(limit, offset, None)
        with self._mutex:
            self.refresh()
            sessions = [
                (turns[-1].at, sid, turns)
                for sid, turns in self.state.conversations.items()
                if turns
            ]
            sessions.sort(reverse=True, key=lambda s: (s[0], s[1]))
            return SessionList(
                total=len(sessions),
                offset=offset,
                sessions=[
                    SessionSummary(
                        session_id=sid, turns=len(turns), first_at=turns[0].at, last_at=last
                    )
                    for last, sid, turns in sessions[offset : offset + limit]
                ],
                next_offset=next_offset(offset, limit, len(sessions)),
            )


class _Contents(Sequence[str]):
    """The contents of memories by position, each read only when asked for."""

    def __init__(self, memories: dict[str, MemoryNode], ids: list[str]) -> None:
        self._memories = memories
        self._ids = ids

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self._memories[i].content for i in self._ids[index]]
        return self._memories[self._ids[index]].content


#: The power of a content's cosine with `read_key`'s query in its score. The query says what the
#: agent wants now, so it must decide: at 0.5 + 0.5·cosine (a 2× span) three reads of an
#: unrelated memory through the key, or the time factor's 2×, outranked the memory that
#: answers. At the 4th power a cosine of 0.6 is 5× one of 0.4, while reads (link weights up to
#: 3×), depth and recency still order memories about as relevant. On LoCoMo's key walk it took
#: held-out recall_any@5 from 26.5 to 45.0 (BENCHMARKS.md, "read_key's query factor"); higher
#: powers gained little more and would leave reading history no say.
QUERY_POWER = 4


def query_factor(sims: np.ndarray) -> np.ndarray:
    """What `read_key`'s `query` multiplies each memory's score by, from the cosine of its
    content with the query (one function for the plain and the column ranking, which must
    agree to the last bit)."""
    factor: np.ndarray = (np.clip(sims, 0.0, 1.0) ** QUERY_POWER).astype(np.float64)
    return factor


def preview(content: str, limit: int = PREVIEW_CHARS) -> str:
    """`content` on one line, cut to `limit` characters: what answers show of a text."""
    return clipped(" ".join(content.split()), limit)


def clipped(text: str, width: int) -> str:
    """`text` in at most `width` characters, cut with "…", never inside what shows as one
    character: not before a combining mark (कि cut after क shows क), nor inside an emoji
    of several code points (👩 + ZWJ + 💻 cut shows 👩) or a flag, nor before a skin tone."""
    if len(text) <= width:
        return text
    cut = width - 1
    while cut > 0 and (
        unicodedata.category(text[cut]).startswith("M")
        or "\U0001f3fb" <= text[cut] <= "\U0001f3ff"
        or not _emoji_edge(text, cut)
    ):
        cut -= 1
    return text[:cut] + "…"
