"""Conversations and the session list answer a page at a time.

A session an agent records every turn of grows without bound, and a turn may be 20,000
characters: `get_conversation` answered every turn at once and `list_sessions` every session.
Now a conversation answers its latest turns (in order) and pages back with `offset`, and the
session list pages like every other list, each with the exact total beside it.
"""

from __future__ import annotations

import pytest

from keytrail.core import InvalidInput, NotFound, Store
from keytrail.core.config import CONVERSATION_PAGE


def test_a_long_conversation_answers_its_latest_turns_and_pages_back(store: Store) -> None:
    turns = CONVERSATION_PAGE * 2 + 5
    for i in range(1, turns + 1):
        store.record_turn("long", "user" if i % 2 else "assistant", f"turn {i}")
    pages, offset = [], 0
    while offset is not None:
        page = store.get_conversation("long", offset=offset)
        assert page.total == turns and page.offset == offset
        pages.append([t.turn for t in page.turns])
        offset = page.next_offset
    assert pages == [
        list(range(CONVERSATION_PAGE + 6, turns + 1)),
        list(range(6, CONVERSATION_PAGE + 6)),
        [1, 2, 3, 4, 5],
    ]
    assert [t.content for t in store.get_conversation("long", limit=2).turns] == [
        f"turn {turns - 1}",
        f"turn {turns}",
    ]
    # One turn by number, whatever the page.
    one = store.get_conversation("long", turn=3, limit=1, offset=7)
    assert [t.content for t in one.turns] == ["turn 3"] and one.next_offset is None
    # Past the oldest: an empty page, not an error.
    assert store.get_conversation("long", offset=turns).turns == []
    for bad in ({"limit": 0}, {"limit": 10_000}, {"offset": -1}):
        with pytest.raises(InvalidInput) as refused:
            store.get_conversation("long", **bad)  # type: ignore[arg-type]
        assert refused.value.field == next(iter(bad))


def test_sessions_page_most_recently_active_first(store: Store) -> None:
    for i in range(7):
        store.record_turn(f"s{i}", "user", "hello")
    store.record_turn("s2", "assistant", "hi again")  # s2 is now the most recent
    order = ["s2", "s6", "s5", "s4", "s3", "s1", "s0"]
    seen = []
    for offset in range(0, 7, 3):
        page = store.list_sessions(limit=3, offset=offset)
        assert (page.total, page.offset) == (7, offset)
        seen += [s.session_id for s in page.sessions]
    assert seen == order
    assert [s.session_id for s in store.list_sessions().sessions] == order
    with pytest.raises(InvalidInput) as refused:
        store.list_sessions(limit=0)
    assert refused.value.field == "limit"


def test_a_session_only_memories_name_says_it_has_no_turns(store: Store) -> None:
    """remember's session_id ("the conversation this came from") makes no recorded turns:
    get_conversation of such a session said only "no session 's9'", as for a mistyped id."""
    store.remember("Caroline joined a mentorship program", ["Caroline"], session_id="s9")
    store.remember("Caroline mentors a transgender teen", ["Caroline"], session_id="s9")
    with pytest.raises(NotFound) as info:
        store.get_conversation("s9")
    assert str(info.value) == (
        "session_id: no session 's9': no turns were recorded in it (record_turn), though 2 "
        "memories were remembered with that session_id"
    )
    with pytest.raises(NotFound) as info:
        store.get_conversation("s10")
    assert str(info.value) == "session_id: no session 's10'"
