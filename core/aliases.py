"""Learned aliases: a query that keeps leading to a key's memories becomes a name of that key.

The rule (decided by `read_memory`, under the log lock, right after the read is recorded):

- A read through key K carrying query Q counts for (K, Q), with Q compared case-folded and with
  whitespace collapsed. When (K, Q) reaches `Settings.alias_after_reads` reads, Q becomes an alias
  of K (a `key.aliased` event with `learned=true`), so the next `recall` of Q finds K directly:
  literally, and by the alias's own vector.
- Not learned: a Q longer than a key label may be or that no label could be (a control
  character, nothing visible), a Q that already names a key (any key), a Q that holds K's
  label or one of its aliases as whole words (it finds K by that already: an agent reading
  three memories through "Caroline" for one question about Caroline taught nothing), or
  when K already holds `Settings.learned_aliases_per_key` learned aliases.
- A learned alias is used whenever a read through K carries it again. One that went unused for
  `Settings.alias_unused_reads` reads through K is dropped (a `key.unaliased` event).

The fold only applies these events and counts reads; it never decides.
"""

from __future__ import annotations

from keytrail.events import Event, InvalidInput, KeyAliased, KeyUnaliased
from keytrail.projections import GraphState, KeyNode
from keytrail.projections.keygraph import alias_form, loose_form

from . import validation as check
from .config import Settings
from .queries import literal_candidates


def decide(state: GraphState, settings: Settings, key: KeyNode, query: str | None) -> list[Event]:
    """Events to append after a read through `key` (with `query`, if any) was folded."""
    events: list[Event] = []
    kept = len(key.learned)
    for alias in key.aliases:
        last = key.learned.get(alias_form(alias))
        if last is not None and key.reads - last >= settings.alias_unused_reads:
            events.append(
                KeyUnaliased(
                    key_id=key.id,
                    alias=alias,
                    evidence=f"unused in the last {key.reads - last} reads through the key",
                )
            )
            kept -= 1
    if query is None:
        return events
    alias = " ".join(query.split())
    form = alias_form(alias)
    reads = key.query_reads.get(form, 0)
    if (
        reads >= settings.alias_after_reads
        and 0 < len(alias) <= settings.limits.key_chars
        and _may_label(alias, settings)
        and state.key_for_label(alias) is None
        and kept < settings.learned_aliases_per_key
        and not _names(alias, key)
    ):
        events.append(
            KeyAliased(
                key_id=key.id,
                alias=alias,
                evidence=f"{reads} reads through the key after this query",
                learned=True,
            )
        )
    return events


def _names(query: str, key: KeyNode) -> bool:
    """Whether `query` holds `key`'s label or one of its aliases as whole words (for a name,
    as recall finds it: with other accents, or a hyphen for a space, too)."""
    words = set(literal_candidates(query))
    labels = (key.label, *key.aliases)
    if any(label.casefold() in words for label in labels):
        return True
    if key.type == "concept":
        return False
    loose = {loose_form(word) for word in words}
    return any(loose_form(label) in loose for label in labels)


def _may_label(alias: str, settings: Settings) -> bool:
    """Whether `alias` passes as a key label: a learned alias is one, shown and matched as
    one, so a query holding a control character (a terminal escape) or nothing visible is not
    learned."""
    try:
        check.label("alias", alias, settings.limits.key_chars)
    except InvalidInput:
        return False
    return True
