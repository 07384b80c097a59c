"""The CLI's text output (paged verbs say there is more, layouts hold, numbers read alike) and
its verbs taking what their MCP tools take (`recall --context`, `correct --related-to`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keytrail.core import HashEmbedder, Settings, Store
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph, ObservationInput
from keytrail.events import BY_TAG
from keytrail.server.cli import main
from keytrail.server.shell import preview


@pytest.fixture
def home(tmp_path: Path, hash_cli: None) -> Path:
    return tmp_path / "store"


def open_store(home: Path) -> Store:
    return Store(Settings(home=home, embedder="hash"), embedder=HashEmbedder())


def out_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_read_key_says_more_memories_exist(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(home)
    for fact in ("Mia likes drawing", "Mia starts school", "Mia is six"):
        store.remember(fact, ["Mia"])
    key = store.state.key_for_label("Mia")
    assert key is not None
    store.close()
    first = out_of(capsys, "read-key", key.id, "--limit", "1", "--home", str(home))
    assert first.splitlines()[-1] == "more: --offset 1"
    middle = out_of(
        capsys, "read-key", key.id, "--limit", "1", "--offset", "1", "--home", str(home)
    )
    assert middle.splitlines()[-1] == "more: --offset 2"
    last = out_of(capsys, "read-key", key.id, "--offset", "2", "--home", str(home))
    assert "more:" not in last
    assert "more:" not in out_of(capsys, "read-key", key.id, "--home", str(home))


def test_remember_says_a_key_became_an_alias_once(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key merged into another reads `apples [concept] alias of apple (cosine)`: the line
    said `alias -> alias of apple`."""
    monkeypatch.setenv("KEYTRAIL_THRESHOLD_MERGE", "0.1")  # the hash embedder's cosines are low
    out_of(capsys, "remember", "an apple a day", "-k", "apple", "--home", str(home))
    line = out_of(capsys, "remember", "apples in autumn", "-k", "apples", "--home", str(home))
    said = line.splitlines()[1]
    assert " apples [concept] alias of apple (" in said, said
    assert "->" not in said
    # correct said only `alias`, not of what
    pear = out_of(capsys, "remember", "a pear", "-k", "pear", "--home", str(home)).split()[1]
    line = out_of(capsys, "correct", pear, "two pears", "-k", "pears", "--home", str(home))
    assert " pears [concept] alias of pear (" in line.splitlines()[1], line


def test_read_key_says_a_key_label_a_forget_erased(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key whose label went with the memory it alone led to is still read by its id: the
    line says why it has no label, rather than showing a blank where the label goes."""
    store = open_store(home)
    secret = store.remember("my PIN is 7391", ["PIN"]).memory_id
    key = store.state.key_for_label("PIN")
    assert key is not None
    assert store.forget(secret).labels_erased == [key.id]
    store.close()
    for past in ([], ["--as-of", "2"]):
        out = out_of(capsys, "read-key", key.id, *past, "--home", str(home))
        assert out == f"{key.id}  (label erased by a forget) [concept]  0 memories\n"


def test_conversation_indents_the_later_lines_of_a_turn(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(home)
    store.record_turn("s1", "user", "Plan for today:\n1. call Dana\n2. buy tea")
    store.record_turn("s1", "assistant", "Noted.")
    store.close()
    lines = out_of(capsys, "conversation", "s1", "--home", str(home)).splitlines()
    assert lines[0] == "s1: 2 turns"
    head = lines[1].index("Plan for today:")
    assert lines[1].startswith("   1  ") and lines[1].endswith("user: Plan for today:")
    assert lines[2:4] == [" " * head + "1. call Dana", " " * head + "2. buy tea"]
    assert lines[4].startswith("   2  ") and lines[4].endswith("assistant: Noted.")
    assert len(lines) == 5


def test_one_turn_and_one_session_read_in_the_singular(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(home)
    store.record_turn("s1", "user", "Hi")
    store.close()
    assert out_of(capsys, "conversation", "s1", "--home", str(home)).startswith("s1: 1 turn\n")
    assert "  1 turn  " in out_of(capsys, "sessions", "--home", str(home))
    past_the_end = out_of(capsys, "sessions", "--offset", "5", "--home", str(home))
    assert past_the_end.startswith("1 session, most recently active first (showing none)"), (
        past_the_end
    )


def test_log_lines_keep_their_columns_for_every_event_type(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The type column was 18 wide: `observations.deleted` (20) pushed the rest of its line
    two characters right of every other line's."""
    store = open_store(home)
    kg = KnowledgeGraph(store)
    kg.create_entities([EntityInput("Dana", "person", ["likes tea", "lives in Lyon"])])
    kg.delete_observations([ObservationInput("Dana", ["likes tea"])])
    store.close()
    lines = out_of(capsys, "log", "--home", str(home)).splitlines()
    tags = [line.split()[3] for line in lines]
    assert "observations.deleted" in tags
    starts = {len(line) - len(line.split(None, 4)[4]) for line in lines}
    assert len(starts) == 1, lines
    assert starts == {7 + 2 + 26 + 2 + max(len(tag) for tag in BY_TAG) + 1}


def test_correct_prints_the_old_depth_with_two_decimals(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As read, read-key and list print depth (and the README shows `old depth 0.05`)."""
    store = open_store(home)
    fresh = store.remember("Mia starts school in 2025", ["Mia"]).memory_id
    read = store.remember("Dana lives in Lyon", ["Dana"]).memory_id
    for _ in range(3):
        store.read_memory(read)
    store.close()
    out = out_of(capsys, "correct", fresh, "Mia starts school in 2026", "--home", str(home))
    assert "; old depth 0.00 x0.3)" in out.splitlines()[0]
    out = out_of(capsys, "correct", read, "Dana lives in Paris", "--home", str(home))
    assert "; old depth 0.15 x0.3)" in out.splitlines()[0]


def test_list_and_keys_say_more_exist(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(home)
    for fact in ("Mia likes drawing", "Dana likes tea", "Lyon is a city"):
        store.remember(fact)
    store.close()
    for verb in ("list", "keys"):
        first = out_of(capsys, verb, "--limit", "2", "--home", str(home))
        assert first.splitlines()[-1] == "more: --offset 2", (verb, first)
        total = int(first.split()[0])  # "3 memories, newest first (showing 1-2)"
        rest = out_of(capsys, verb, "--limit", "2", "--offset", "2", "--home", str(home))
        assert ("more: --offset 4" in rest) == (total > 4), (verb, rest)
        assert "more:" not in out_of(capsys, verb, "--limit", "200", "--home", str(home))


def test_history_of_a_forgotten_memory_says_its_content_is_forgotten(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The version's content line was printed blank (only indentation), where `keytrail log`
    says `[content forgotten]` for the same memory."""
    store = open_store(home)
    secret = store.remember("my bank PIN is 7391", ["bank"])
    store.forget(secret.memory_id, "user asked")
    store.close()
    out = out_of(capsys, "history", secret.memory_id, "--home", str(home))
    lines = out.splitlines()
    assert lines[1].split()[:3] == ["v1", secret.memory_id, "forgotten"]
    assert lines[2] == "       [content forgotten]"
    log = out_of(capsys, "log", "--memory", secret.memory_id, "--home", str(home))
    assert "[content forgotten]" in log


def test_times_before_year_1000_print_four_digit_years(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """strftime("%Y") printed year 1 as "1": `valid from 1-01-01 00:00:00` in history."""
    store = open_store(home)
    old = store.remember("an ancient fact", ["history"], valid_from="0001-01-01T00:00:00Z")
    store.close()
    out = out_of(capsys, "history", old.memory_id, "--home", str(home))
    assert "valid from 0001-01-01 00:00:00" in out, out


def test_previews_show_control_characters_escaped(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A memory's text may hold anything an agent was told, terminal escapes included: a
    preview (list, history, recall-memories) printed them raw, so `keytrail list` could recolour
    or retitle the terminal, or hide a line. Shown escaped, as `keytrail log` shows them."""
    store = open_store(home)
    told = store.remember("alert \x1b[31mred\x1b[0m and a bell\x07 in Lyon", ["Lyon"])
    store.close()
    at = ["--home", str(home)]
    for verb in (["list"], ["history", told.memory_id], ["recall-memories", "Lyon"]):
        out = out_of(capsys, *verb, *at)
        assert "\x1b" not in out and "\x07" not in out, verb
        assert "alert \\x1b[31mred\\x1b[0m and a bell\\x07 in Lyon" in out, verb
    log = out_of(capsys, "log", "--memory", told.memory_id, *at)
    assert "'alert \\x1b[31mred\\x1b[0m and a bell\\x07 in" in log  # repr, escaped once


def test_whole_texts_show_control_characters_escaped_and_keep_their_lines(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`read` and `conversation` print a whole text, and `history` a read's query and a
    forget's reason: each printed terminal escapes raw. Escaped like a preview, but a text's
    own line breaks and tabs stay what they are."""
    store = open_store(home)
    told = store.remember("line one \x1b]0;pwned\x07\n\tline\rtwo", ["Lyon"])
    store.read_memory(told.memory_id, query="Lyon \x1b[2J")
    store.record_turn("s1", "user", "hello \x1b[31mred\nsecond line")
    other = store.remember("a fact to forget", ["Lyon"])
    store.forget(other.memory_id, reason="asked \x1b[8mhidden")
    store.close()
    at = ["--home", str(home)]
    read = out_of(capsys, "read", told.memory_id, *at)
    assert "line one \\x1b]0;pwned\\x07\n\tline\\rtwo\n" in read, read
    turns = out_of(capsys, "conversation", "s1", *at)
    assert "user: hello \\x1b[31mred\n" in turns and "second line" in turns, turns
    history = out_of(capsys, "history", told.memory_id, *at)
    assert 'query "Lyon \\x1b[2J"' in history, history
    forgotten = out_of(capsys, "history", other.memory_id, *at)
    assert "reason: asked \\x1b[8mhidden" in forgotten, forgotten
    for out in (read, turns, history, forgotten):
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out


def test_bidirectional_controls_in_texts_and_labels_are_shown_escaped(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A right-to-left override (U+202E) or isolate (U+2066-2069) is a format character, not a
    control one: printed raw, it makes the terminal show a line other than the one stored
    (Trojan Source), "pay \u202eyppa" reads as "pay appy". Texts and key labels show them
    escaped in every verb that prints them, as control characters are."""
    from keytrail.core.store import content_hash
    from keytrail.events import KeyAliased, KeyLink, MemoryRemembered, NewMemory

    label = "Lyon \u202enoyL"
    content = "pay \u202etxet desrever\u202c and \u2066isolated\u2069 in Lyon"
    store = open_store(home)
    # Labels drop these characters now; a store written before holds them as typed.
    old = NewMemory(
        memory_id="m_0123456789ab",
        namespace="default",
        content="a fact told before",
        content_hash=content_hash("a fact told before"),
        keys=[KeyLink(key_id="k_0123456789", label=label, resolution="new")],
    )
    store._write(lambda app: store._append(app, MemoryRemembered(memories=[old])))
    told = store.remember(content, ["Lyon noyL"])
    store.remember("another fact about the city", [label])
    key = told.keys[0].key_id
    assert key == "k_0123456789"
    store._write(lambda app: store._append(app, KeyAliased(key_id=key, alias="Ly\u202eon")))
    store.read_memory(told.memory_id, via_key_id=key, query="Lyon \u202eagain")
    store.record_turn("s1", "user", content)
    gone = store.remember("a fact to forget", ["other"]).memory_id
    store.forget(gone, reason="asked \u202eti tegrof\u202c \x1b[8mhidden")
    store.close()
    at = ["--home", str(home)]
    remembered = out_of(capsys, "remember", "a third fact", "-k", label, *at)
    assert "k_0123456789  Lyon \\u202enoyL [concept] existing" in remembered, remembered
    verbs = [
        ["read", told.memory_id],
        ["conversation", "s1"],
        ["history", told.memory_id],
        ["list"],
        ["recall", "Lyon"],
        ["read-key", key],
        ["keys"],
        ["related", told.memory_id],
        ["log"],
    ]
    for verb in verbs:
        out = out_of(capsys, *verb, *at)
        assert not {"\u202e", "\u202c", "\u2066", "\u2069"} & set(out), (verb, out)
        assert "\\u202e" in out, (verb, out)
    read = out_of(capsys, "read", told.memory_id, *at)
    assert "pay \\u202etxet desrever\\u202c and \\u2066isolated\\u2069 in Lyon" in read
    assert "keys: Lyon \\u202enoyL (" in read
    keys = out_of(capsys, "keys", *at)
    assert "Lyon \\u202enoyL [" in keys and "Ly\\u202eon" in keys.split("aliases: ")[1]
    log = out_of(capsys, "log", "--memory", gone, *at)
    assert "asked \\u202eti tegrof\\u202c \\x1b[8mhidden" in log and "\x1b" not in log


# -- the verbs take what their MCP tools take ---------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(list(args))
    except SystemExit as exit_:
        code = exit_.code  # type: ignore[assignment]
    out = capsys.readouterr()
    return code, out.out, out.err


def test_recall_context_weighs_in_like_the_tool(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(home)
    store.remember("Ada keeps stick insects", ["insects"])
    store.remember("Ada drinks green tea", ["tea"])
    store.close()
    query = "what does Ada keep"
    code, out, _ = run(capsys, "recall", query, "--home", str(home), "--json")
    assert code == 0 and json.loads(out)["nearest"][0]["label"] == "insects"
    context = "tea tea green tea drinks"
    code, out, _ = run(capsys, "recall", query, "--context", context, "--home", str(home), "--json")
    assert code == 0 and json.loads(out)["nearest"][0]["label"] == "tea"
    # the tool's limit: as long as a query
    code, _, err = run(capsys, "recall", query, "--context", "x" * 100_000, "--home", str(home))
    assert code == 2 and "context" in err
    assert "--context" in run(capsys, "recall", "--help")[1]


def test_correct_related_to_like_the_tool(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = open_store(home)
    a = store.remember("Mia starts school in 2025", ["Mia"]).memory_id
    b = store.remember("Dana is Mia's mother", ["Dana"]).memory_id
    c = store.remember("The school is in Lyon", ["school"]).memory_id
    store.close()
    code, out, _ = run(
        capsys, "correct", a, "Mia starts school in 2026", "--related-to", b,
        "--related-to", c, "--home", str(home), "--json",
    )  # fmt: skip
    assert code == 0
    new = json.loads(out)["memory_id"]
    # omitted, the old version's related_to stays
    code, out, _ = run(capsys, "correct", new, "Mia starts in 2027", "--home", str(home), "--json")
    newer = json.loads(out)["memory_id"]
    code, _, err = run(
        capsys, "correct", newer, "x", "--related-to", "m_000000000000", "--home", str(home)
    )
    assert code == 2 and "related_to" in err
    store = open_store(home)
    assert store.state.memories[new].related_to == [b, c]
    assert store.state.memories[newer].related_to == [b, c]
    store.close()
    assert "--related-to" in run(capsys, "correct", "--help")[1]


def test_correct_by_makes_a_memory_told_once_the_new_version(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`keytrail correct ID --by ID2`, as the tool's by_memory_id: no second memory of the
    text; refusals name the flag typed and change nothing."""
    store = open_store(home)
    stale = store.remember("Dana's daughter Mia is 6 years old.", ["Mia"]).memory_id
    fresh = store.remember("Dana's daughter Mia is 7 years old.", ["Mia"]).memory_id
    store.close()
    log = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    for args, says in (
        ([stale, "Mia is 7", "--by", fresh], "--by: give content or --by, not both"),
        ([stale, "--by", stale], "--by: is the memory corrected"),
        # the flag a problem points to is said as typed, also where the field is not a flag's
        ([stale, "--by", fresh, "-k", "age"], "keys: describes new content: with --by the"),
        ([stale], "content: is required: the new version's text (or --by: a memory that"),
    ):
        code, _, err = run(capsys, "correct", *args, "--home", str(home))
        assert code == 2 and says in err and "by_memory_id" not in err, err
    assert b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl"))) == log
    out = out_of(capsys, "correct", stale, "--by", fresh, "--home", str(home))
    assert out.splitlines()[0] == f"corrected {stale} -> {fresh} (seq 4; old depth 0.00 x0.3)"
    store = open_store(home)
    assert store.state.memories[stale].superseded_by == fresh
    assert [m.memory_id for m in store.list_memories().memories] == [fresh]
    store.close()
    assert "--by" in run(capsys, "correct", "--help")[1]
    # The log names it; an export of the store or of its namespace brings it to a copy.
    logged = out_of(capsys, "log", "--memory", stale, "--home", str(home)).splitlines()
    assert "memory.replaced" in logged[-1] and f"{stale} -> {fresh}" in logged[-1]
    for n, scope in enumerate(([], ["--namespace", "default"])):
        dump = home.parent / f"export{n}.jsonl"
        run(capsys, "export", *scope, "-o", str(dump), "--home", str(home))
        copy = home.parent / f"copy{n}"
        assert run(capsys, "import", str(dump), "--home", str(copy))[0] == 0
        assert run(capsys, "verify", "--home", str(copy))[0] == 0
        store = open_store(copy)
        assert store.state.memories[stale].superseded_by == fresh
        assert [m.memory_id for m in store.list_memories().memories] == [fresh]
        store.close()


def test_one_memory_is_said_in_the_singular(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ "1 memory", as a person writes it, in every line that counts a key's or a page's."""
    store = open_store(home)
    store.remember("Mia starts school", ["Mia", "school"], {"Mia": "name"})
    store.remember("Mia likes school lunches", ["school"])
    mia = store.state.key_for_label("Mia")
    assert mia is not None
    store.close()
    at = ("--home", str(home))
    assert out_of(capsys, "recall", "Mia", *at).splitlines()[0].endswith("  1 memory")
    assert out_of(capsys, "read-key", mia.id, *at).splitlines()[0].endswith("  1 memory")
    keys = out_of(capsys, "keys", *at).splitlines()
    assert keys[1].endswith("school [concept]  2 memories") and keys[2].endswith("  1 memory")
    assert out_of(capsys, "list", "--limit", "1", *at).startswith("2 memories, newest first")


@pytest.mark.parametrize(
    ("word", "whole_cuts"),
    [
        ("किताब", ("", "कि", "किता", "किताब")),  # क + vowel sign ि: cut apart, कि showed as क
        ("👩\u200d💻", ("", "👩\u200d💻")),  # woman + ZWJ + laptop: cut, a plain woman
        ("🇸🇪", ("", "🇸🇪")),  # two regional indicators: cut, a lone letter
    ],
)
def test_a_preview_never_cuts_a_character_apart(
    home: Path, word: str, whole_cuts: tuple[str, ...]
) -> None:
    """Previews are cut at a width in code points: a letter and its combining mark, or an
    emoji of several code points, were cut apart, showing another letter or emoji."""
    store = open_store(home)
    made = {}
    for lead in range(60, 121):  # the cut falls at every place of `word` for some of these
        content = "x" * lead + " " + word + " and more" * 20
        made[store.remember(content, [f"cut {lead}"]).memory_id] = lead  # no dedup
    shown = {m.memory_id: m.preview for m in store.list_memories(limit=100).memories}
    store.close()
    for memory_id, lead in made.items():
        content = "x" * lead + " " + word + " and more" * 20
        for cut in (shown[memory_id], preview(content, 70), preview(content, 90)):
            kept = cut.removesuffix("…")[lead + 1 :][: len(word)]
            assert kept in whole_cuts, (lead, cut)
