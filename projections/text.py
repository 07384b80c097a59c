"""The text projection: a Tantivy BM25 index over memory content and key labels.

Lives in `<home>/index/text/`. Each document is one memory (id, namespace as a raw field,
content, the key labels whose words the content lacks, and the `seq` that created it as a fast
field, so a search can be limited to what existed at a past seq). One extra `meta` document
carries the seq the index reflects; it is replaced in the same commit as the documents it
describes, so the recorded seq and the indexed memories can never disagree, whatever point a
writer is killed at. Adding a memory deletes any document with its id first, so catching up
twice over the same events is harmless.

The index is derived: when it is missing, unreadable or from another schema it is rebuilt from
the key graph (which the caller folded from the log). Forgotten memories are deleted from it;
`purge` also rewrites the index so their text is physically gone from its files.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tantivy

from .keygraph import GraphState, MemoryNode

#: 2: the keys field holds only labels the content does not already contain
SCHEMA_VERSION = 2
_WORD = re.compile(r"\w+", re.UNICODE)
#: Query words the BM25 path ignores (they match nearly every memory and carry no meaning).
_STOPWORDS_WORDS = """
    a about after again all also am an and any are as at be because been before being both
    but by can could did do does doing done for from had has have having he her here hers him
    his how i if in into is it its just me more most my no nor not of off on once only or other
    our ours out over own same she should so some such than that the their theirs them then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with would you your yours"""
STOPWORDS = frozenset(_STOPWORDS_WORDS.split())


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("kind", stored=True, tokenizer_name="raw")
    builder.add_text_field("memory_id", stored=True, tokenizer_name="raw")
    builder.add_text_field("namespace", stored=True, tokenizer_name="raw")
    builder.add_text_field("content", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("keys", stored=True, tokenizer_name="en_stem")
    builder.add_integer_field("seq", stored=True, indexed=True, fast=True)
    builder.add_integer_field("schema", stored=True)
    return builder.build()


@dataclass(frozen=True)
class TextHit:
    memory_id: str
    score: float


def query_terms(text: str) -> list[str]:
    """The words of a query worth searching for, lower-cased, stopwords dropped, in order."""
    words = [w for w in _WORD.findall(text.casefold()) if w not in STOPWORDS]
    return list(dict.fromkeys(words))


def _new_labels(content: str, labels: list[str]) -> list[str]:
    """The key labels whose words the content lacks: what the keys field adds to BM25.

    A label the content already says (every extracted key, most names) would only count its
    words twice, so a memory's own speaker or a word it repeats outranks better matches.
    """
    words = set(_WORD.findall(content.casefold()))
    return [label for label in labels if not set(_WORD.findall(label.casefold())) <= words]


class TextIndex:
    """BM25 over memories. Not thread-safe: the store calls it under its own mutex."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.schema = _schema()
        self._index: tantivy.Index | None = None
        self.seq = 0  # the seq the committed index reflects

    # -- opening ---------------------------------------------------------------------------

    def _open(self) -> tantivy.Index:
        if self._index is not None:
            return self._index
        for leftover in (self._sibling("new"), self._sibling("old")):
            shutil.rmtree(leftover, ignore_errors=True)  # an interrupted purge or rebuild
        try:
            index = tantivy.Index.open(str(self.dir))
            index.reload()
            self.seq = self._read_meta(index)
        except (ValueError, OSError):  # missing, corrupt or another schema: rebuild
            shutil.rmtree(self.dir, ignore_errors=True)
            index = self._create(self.dir)
            self.seq = 0
        self._index = index
        return index

    def _sibling(self, suffix: str) -> Path:
        return self.dir.with_name(f"{self.dir.name}.{suffix}")

    def _create(self, path: Path) -> tantivy.Index:
        path.mkdir(parents=True, exist_ok=True)
        return tantivy.Index(self.schema, path=str(path), reuse=False)

    def _read_meta(self, index: tantivy.Index) -> int:
        searcher = index.searcher()
        hits = searcher.search(tantivy.Query.term_query(self.schema, "kind", "meta"), 1).hits
        if not hits:
            if searcher.num_docs:
                raise ValueError("text index without a meta document")
            return 0
        doc = searcher.doc(hits[0][1])
        if doc.get_first("schema") != SCHEMA_VERSION:
            raise ValueError("text index of another schema version")
        return int(doc.get_first("seq") or 0)

    @staticmethod
    def _meta_doc(seq: int) -> tantivy.Document:
        return tantivy.Document(kind="meta", seq=seq, schema=SCHEMA_VERSION)

    def _doc(self, node: MemoryNode, state: GraphState) -> tantivy.Document:
        labels = _new_labels(
            node.content, [state.keys[k].label for k in node.keys if k in state.keys]
        )
        return tantivy.Document(
            kind="memory",
            memory_id=node.id,
            namespace=node.namespace,
            content=node.content,
            keys=" ; ".join(labels),
            seq=node.created_seq,
        )

    # -- catching up -----------------------------------------------------------------------

    def sync(self, state: GraphState, forgotten: Iterable[str] = ()) -> int:
        """Index every memory created after the index's seq, delete `forgotten`; commit.

        `forgotten` are memories forgotten since the index's seq (the caller observed the
        events). Returns how many documents were added.
        """
        index = self._open()
        if state.seq < self.seq:  # the log is older than the index (a restored store): rebuild
            return self.rebuild(state)
        if state.seq == self.seq:
            return 0
        fresh: list[MemoryNode] = []
        for node in reversed(state.memories.values()):  # newest first: stop at the indexed ones
            if node.created_seq <= self.seq:
                break
            fresh.append(node)
        forgotten = list(forgotten)
        if not fresh and not forgotten:
            # Nothing the index holds changed (reads, link weights): no commit. The seq on disk
            # lags, so the next open walks back over these events again, finding nothing.
            self.seq = state.seq
            return 0
        with index.writer(heap_size=50_000_000, num_threads=1) as writer:
            for node in reversed(fresh):
                writer.delete_documents_by_term("memory_id", node.id)
                if node.status != "forgotten":
                    writer.add_document(self._doc(node, state))
            for memory_id in forgotten:
                writer.delete_documents_by_term("memory_id", memory_id)
            writer.delete_documents_by_term("kind", "meta")
            writer.add_document(self._meta_doc(state.seq))
            writer.commit()
        index.reload()
        self.seq = state.seq
        return len(fresh)

    def rebuild(self, state: GraphState) -> int:
        """Index every memory that is not forgotten from scratch, then swap the index in."""
        nodes = [n for n in state.memories.values() if n.status != "forgotten"]
        self._swap_in(
            [self._doc(n, state) for n in nodes],
            state.seq,
        )
        return len(nodes)

    def _swap_in(self, docs: Sequence[tantivy.Document], seq: int) -> None:
        """Write a fresh index beside the live one and rename it into place."""
        new, old = self._sibling("new"), self._sibling("old")
        shutil.rmtree(new, ignore_errors=True)
        index = self._create(new)
        with index.writer(heap_size=50_000_000, num_threads=1) as writer:
            for doc in docs:
                writer.add_document(doc)
            writer.add_document(self._meta_doc(seq))
            writer.commit()
        self._index = None
        if self.dir.exists():
            self.dir.rename(old)
        new.rename(self.dir)
        shutil.rmtree(old, ignore_errors=True)
        self._index = tantivy.Index.open(str(self.dir))
        self._index.reload()
        self.seq = seq

    def purge(self, memory_ids: Iterable[str]) -> int:
        """Remove memories so their text is physically gone from the index files.

        Deleting only marks documents; their terms and stored text stay in the segment until
        it is merged. The Python binding cannot force a merge, so the surviving documents are
        rewritten into a fresh index that replaces the old one, whose files are removed.
        Returns how many documents were removed.
        """
        index = self._open()
        gone = set(memory_ids)
        searcher = index.searcher()
        everything = searcher.search(
            tantivy.Query.term_query(self.schema, "kind", "memory"), max(1, searcher.num_docs)
        )
        keep: list[tantivy.Document] = []
        removed = 0
        for _, address in everything.hits:
            doc = searcher.doc(address)
            if doc.get_first("memory_id") in gone:
                removed += 1
                continue
            keep.append(
                tantivy.Document(
                    kind="memory",
                    memory_id=doc.get_first("memory_id"),
                    namespace=doc.get_first("namespace"),
                    content=doc.get_first("content") or "",
                    keys=doc.get_first("keys") or "",
                    seq=doc.get_first("seq"),
                )
            )
        self._swap_in(keep, self.seq)
        return removed

    # -- searching -------------------------------------------------------------------------

    def search(
        self,
        query: str,
        limit: int,
        namespace: str | None = None,
        max_seq: int | None = None,
    ) -> list[TextHit]:
        """BM25 over content and key labels, best first, filtered before the top-k cut.

        `namespace` keeps one namespace; `max_seq` keeps memories created at or before it (what
        existed at a past seq). Superseded or expired memories are the caller's to filter.
        """
        index = self._open()
        terms = query_terms(query)
        if not terms:
            return []
        text_query, _errors = index.parse_query_lenient(
            " ".join(terms), ["content", "keys"], field_boosts={"keys": 0.5}
        )
        filters = [tantivy.Query.term_query(self.schema, "kind", "memory")]
        if namespace is not None:
            filters.append(tantivy.Query.term_query(self.schema, "namespace", namespace))
        if max_seq is not None:
            filters.append(
                tantivy.Query.range_query(self.schema, "seq", tantivy.FieldType.Integer, 0, max_seq)
            )
        # Filters score nothing, so the score stays plain BM25.
        clauses = [(tantivy.Occur.Must, text_query)] + [
            (tantivy.Occur.Must, tantivy.Query.const_score_query(f, 0.0)) for f in filters
        ]
        searcher = index.searcher()
        hits = searcher.search(tantivy.Query.boolean_query(clauses), limit).hits
        ids = [searcher.doc(address).get_first("memory_id") for _, address in hits]
        return [TextHit(str(mid), float(score)) for (score, _), mid in zip(hits, ids, strict=True)]

    def close(self) -> None:
        self._index = None
