"""Edge-case input at the server's and the command line's edge, found by running them.

Each test pins one bug that was found: a traceback where a user error belongs, an error that
names the wrong field, or a bad value silently taken for a different one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import kt, kt_json
from test_server import call, refused, run, stdio_session

from keytrail.core import InvalidInput, RememberItem, Settings, Store

# -- settings: every KEYTRAIL_* value is checked, naming the variable ----------------------------


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("KEYTRAIL_MAX_CONTENT_CHARS", "-5"),  # built the tool schemas with a negative length
        ("KEYTRAIL_MAX_TOP_K", "0"),  # every recall refused with "limit: 1 to 0"
        ("KEYTRAIL_TIME_DECAY_DAYS", "0"),  # ZeroDivisionError in every ranking
        ("KEYTRAIL_TIME_DECAY_DAYS", "nan"),
        ("KEYTRAIL_HYBRID_CANDIDATES", "0"),  # a panic inside the text index
        ("KEYTRAIL_SEGMENT_BYTES", "-1"),
        ("KEYTRAIL_SNAPSHOT_EVERY", "0"),
        ("KEYTRAIL_SNAPSHOT_KEEP", "0"),
        ("KEYTRAIL_HUB_MIN", "-3"),
        ("KEYTRAIL_HYBRID_WEIGHT_DENSE", "-1"),
        ("KEYTRAIL_HYBRID_RRF_K", "inf"),
    ],
)
def test_a_setting_out_of_range_is_refused_naming_its_variable(variable: str, raw: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({variable: raw})
    assert caught.value.field == variable
    assert raw in caught.value.message


def test_settings_that_may_be_zero_still_may() -> None:
    zero = {
        "KEYTRAIL_HYBRID_HOPS": "0",
        "KEYTRAIL_HYBRID_WEIGHT_KEYS": "0",
        "KEYTRAIL_HYBRID_CONTEXT_NEIGHBOUR": "0",
        "KEYTRAIL_HYBRID_CONTEXT_SESSION": "0",
        "KEYTRAIL_HYBRID_TIME_WEIGHT": "0",
        "KEYTRAIL_HYBRID_MIN_SCORE": "0",
        "KEYTRAIL_HYBRID_REINFORCE": "0",
        "KEYTRAIL_HEBBIAN_DECAY": "0",
        "KEYTRAIL_THRESHOLD_KEY_RECALL": "-0.2",  # a cosine may be negative
    }
    settings = Settings.from_env(zero)
    assert settings.hybrid.hops == 0 and settings.threshold_overrides["key_recall"] == -0.2


def test_serve_with_a_bad_setting_flag_is_a_one_line_error(tmp_path: Path) -> None:
    proc = kt(tmp_path / "store", "serve", "--max-content-chars", "-5", ok=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("keytrail: error: --max-content-chars:")  # the flag typed


# -- remember_batch: an item's key_types error names that item ----------------------------------


def test_batch_key_types_error_names_the_item(store: Store) -> None:
    items = [
        RememberItem(content="Alice likes tea", keys=["Alice"]),
        RememberItem(content="Bob likes coffee", keys=["coffee"], key_types={"Bob": "name"}),
    ]
    with pytest.raises(InvalidInput) as caught:
        store.remember_batch(items)
    assert caught.value.field == "items[1].key_types"
    assert store.state.seq == 1  # nothing written


@pytest.mark.parametrize(
    ("items", "said"),
    [
        ([{"content": "Alice likes tea"}], "items[0]: must be a RememberItem, got dict"),
        (
            [RememberItem(content="Alice likes tea"), None],
            "items[1]: must be a RememberItem, got NoneType",
        ),
        ("Alice likes tea", "items: must be a list of RememberItem, got str"),
    ],
)
def test_batch_items_of_another_type_are_refused_naming_the_item(
    store: Store, items: object, said: str
) -> None:
    """A dict (the shape the MCP tool takes), None or a string as items met AttributeError
    ('dict' object has no attribute 'content'), not an error of keytrail's."""
    with pytest.raises(InvalidInput) as caught:
        store.remember_batch(items)  # type: ignore[arg-type]
    assert str(caught.value) == said
    assert store.state.seq == 1  # nothing written


# -- as_of over MCP: a boolean is not a seq ---------------------------------------------------


def test_as_of_true_is_refused_not_read_as_seq_1(tmp_path: Path) -> None:
    home = tmp_path / "store"

    async def scenario() -> None:
        async with stdio_session(home, tmp_path / "err.txt") as s:
            await call(s, "remember", content="Alice likes tea", keys=["Alice"])
            for tool, args in [
                ("recall", {"query": "Alice"}),
                ("list_memories", {}),
                ("memory_stats", {}),
            ]:
                await refused(s, home, tool, {**args, "as_of": True}, "as_of")
            await refused(s, home, "changes", {"since": True}, "since")

    run(scenario)


# -- keytrail log --type: a misspelt type is an error, not an empty log ------------------------


def test_log_type_that_does_not_exist_is_an_error(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", "Alice likes tea", "-n", "Alice")
    proc = kt(home, "log", "--type", "memory.remember", ok=False)  # for memory.remembered
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("keytrail: error: --type: no event type 'memory.remember'")
    assert "memory.remembered" in proc.stderr  # the known types are listed
    assert "memory.remembered" in kt(home, "log", "--type", "memory.remembered").stdout
    # A long one is quoted short: it came back whole, 100,000 characters of error.
    proc = kt(home, "log", "--type", "x" * 100_000, ok=False)
    assert proc.returncode == 2 and "… (100,000 characters)" in proc.stderr
    assert len(proc.stderr) < 1000


# -- forget vs time travel: a forgotten memory stays hidden from past reads too -----------------


def test_a_forgotten_memory_is_hidden_from_reads_of_the_past(store: Store) -> None:
    from keytrail.core import NotFound
    from keytrail.core.timetravel import read_memory_at, view

    secret = store.remember("my bank PIN is 7391", ["bank", "PIN"])
    store.remember("Alice likes tea", ["Alice"], {"Alice": "name"})
    before = store.state.seq
    bank = store.state.labels["bank"]  # the forget erases the label: only the id stays
    assert store.forget(secret.memory_id, "user asked").labels_erased == sorted(
        store.state.memories[secret.memory_id].keys
    )
    listed = view(store, before).list_memories(None, 50, 0)
    assert secret.memory_id not in [m.memory_id for m in listed.memories]
    recalled = store.recall_memories("bank PIN", as_of=before)
    assert secret.memory_id not in [m.memory_id for m in recalled.memories]
    with pytest.raises(NotFound, match="forgotten"):
        read_memory_at(store, secret.memory_id, as_of=before)
    past = view(store, before)
    assert past.recall("bank").keys == []  # a key leading to nothing visible is not offered
    assert past.read_key(bank).total == 0 and past.read_key(bank).memories == []
    assert past.read_key(bank).label == ""  # the past does not know the erased label either
    # The rest of the past is as it was: the other memory is still there.
    assert len(listed.memories) == 1 and "tea" in listed.memories[0].preview


def test_a_past_read_before_a_forget_loses_the_labels_it_erased(store: Store) -> None:
    """A past state read before a forget is kept: the labels the forget erased go from it as
    its content does, so it answers as a state folded afresh from the redacted log."""
    from keytrail.core.timetravel import PastStates, view

    secret = store.remember("my bank PIN is 7391", ["bank", "PIN"])
    store.remember("Alice likes tea", ["Alice"], {"Alice": "name"})
    before = store.state.seq
    store.remember("Omar plays the cello", ["cello"])
    bank = store.state.labels["bank"]
    assert view(store, before).read_key(bank).label == "bank"  # a past state, kept from here
    store.forget(secret.memory_id, "user asked")
    past = view(store, before)
    kept = past.read_key(bank), past.browse_keys(limit=10), past.recall("bank PIN")
    store.past = PastStates(store)  # folded afresh
    fresh = view(store, before)
    assert kept == (fresh.read_key(bank), fresh.browse_keys(limit=10), fresh.recall("bank PIN"))
    assert kept[0].label == "" and "bank" not in {k.label for k in kept[1].keys}


# -- keytrail import: a file that is not UTF-8 text is a user error -----------------------------


def test_import_of_a_binary_file_is_a_one_line_error(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", "Alice likes tea", "-n", "Alice")
    before = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    binary = tmp_path / "graph.json"
    binary.write_bytes(b'{"keys": {}, "memories": {"m": {"content": "\xff\xfe"}}}')
    for fmt in ([], ["--format", "keymem"]):
        proc = kt(home, "import", str(binary), *fmt, ok=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"keytrail: error: {binary}: not UTF-8 text")
    after = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    assert after == before


# -- keytrail serve --port: out of range is a user error ----------------------------------------


def test_serve_with_a_port_out_of_range_is_a_one_line_error(tmp_path: Path) -> None:
    proc = kt(tmp_path / "store", "serve", "--http", "--port", "70000", ok=False, timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == "keytrail: error: --port: 70000 is out of range (limit: 1 to 65535)\n"


# -- a lone surrogate: text no log line can hold is refused, not a traceback ---------------------
# An argument in no valid encoding reaches Python as \udcXX (surrogateescape), and a JSON escape
# such as "\ud800" in an imported file decodes to a lone surrogate: both passed every check and
# then failed when the event was encoded, as a UnicodeEncodeError traceback (status 1). (Over
# MCP the SDK's own JSON parser drops such a request before any tool sees it.)


def test_a_lone_surrogate_on_the_command_line_is_a_one_line_error(tmp_path: Path) -> None:
    home = tmp_path / "store"
    kt(home, "remember", "Alice likes tea", "-n", "Alice")
    before = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    for args, field in [
        (["remember", "bad \udcff byte", "-k", "tea"], "content"),
        (["remember", "fine", "-k", "b\udcffd"], "keys[0]"),
        (["remember", "fine", "-k", "tea", "--source", "s\udcff"], "--source"),
    ]:
        proc = kt(home, *args, ok=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"keytrail: error: {field}: is not valid Unicode text")
    bad = tmp_path / "graph.jsonl"
    for line in (
        r'{"type":"entity","name":"\ud800","entityType":"p","observations":["x"]}',
        r'{"type":"entity","name":"A","entityType":"p","observations":["x\udc00y"]}',
    ):
        bad.write_text(line + "\n")
        proc = kt(home, "import", str(bad), ok=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith(f"keytrail: error: {bad} line 1: is not valid Unicode")
    keymem = tmp_path / "graph.json"
    keymem.write_text(r'{"keys": {"k1": {"concept": "c", "aliases": ["\ud800"]}}, "memories": {}}')
    proc = kt(home, "import", str(keymem), ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    after = b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))
    assert after == before
    # An import into no store leaves no store behind either.
    proc = kt(tmp_path / "fresh", "import", str(bad), ok=False)
    assert proc.returncode == 2 and not (tmp_path / "fresh").exists()


def test_an_event_that_cannot_be_encoded_is_invalid_input() -> None:
    """The codec's own guard, for text that reaches an event past every field check."""
    from keytrail.events import MemoryForgotten
    from keytrail.events.codec import encode_line

    event = MemoryForgotten(memory_id="m_1", content_hash="0" * 64, reason="r\ud800")
    with pytest.raises(InvalidInput, match="not valid Unicode"):
        encode_line(event)


# -- keytrail import of an export: damaged content is refused, not imported as if told ----------


def test_import_of_an_export_with_edited_content_is_refused(tmp_path: Path) -> None:
    """Export lines carry no checksum, so a backup whose content was changed (an edit, bit rot)
    imported silently and `verify` said ok; each memory's content_hash says what was told."""
    home, copy = tmp_path / "store", tmp_path / "copy"
    kt(home, "remember", "Dana lives in Oslo", "-n", "Dana")
    kt(home, "remember", "Bob likes tea", "-n", "Bob")
    export = tmp_path / "backup.jsonl"
    kt(home, "export", "-o", str(export))
    kt(copy, "import", str(export))  # the export as written imports
    assert (copy / "log").exists()
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text(export.read_text().replace("Dana lives in Oslo", "Dana lives in Osla"))
    fresh = tmp_path / "fresh"
    proc = kt(fresh, "import", str(damaged), ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(
        f"keytrail: error: corrupt event log: {damaged} line 2: the content of m_"
    ), proc.stderr
    assert "does not match its content_hash" in proc.stderr
    assert not fresh.exists()


def test_import_of_an_export_with_a_content_emptied_but_never_forgotten_is_refused(
    tmp_path: Path,
) -> None:
    """Empty content is the redaction mark of a forget: a memory whose content is empty in an
    export that never forgets it was edited or damaged (remember refuses empty content). It
    imported, and the new store's `verify` failed at once ('content redacted but the memory
    was never forgotten'). An export of a store that forgot one still imports."""
    home = tmp_path / "store"
    kt(home, "remember", "Dana lives in Oslo", "-n", "Dana")
    secret = kt_json(home, "remember", "Bob's PIN is 7391", "-n", "Bob")
    export = tmp_path / "backup.jsonl"
    kt(home, "export", "-o", str(export))
    emptied = tmp_path / "emptied.jsonl"
    emptied.write_text(export.read_text().replace('"content":"Dana lives in Oslo"', '"content":""'))
    fresh = tmp_path / "fresh"
    proc = kt(fresh, "import", str(emptied), ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(
        f"keytrail: error: corrupt event log: {emptied} line 2: the content of m_"
    ), proc.stderr
    assert "never forgotten" in proc.stderr
    assert not fresh.exists()

    kt(home, "forget", secret["memory_id"])
    kt(home, "export", "-o", str(export))
    copy = tmp_path / "copy"
    kt(copy, "import", str(export))
    assert "redacted (forgotten, content removed): 1" in kt(copy, "verify").stdout


def test_import_of_an_export_holding_a_forgotten_content_writes_it_redacted(
    tmp_path: Path,
) -> None:
    """An export whose creating line still holds the content of a memory it forgets (taken
    from a store with a log segment put back from a backup, or edited) wrote that content
    into the new store's log, which verify then reported. The forget is in the history being
    imported: the line is written as the forget left it, and no file holds the text."""
    home = tmp_path / "store"
    kt(home, "remember", "Dana lives in Oslo", "-n", "Dana")
    secret = kt_json(home, "remember", "Bob's PIN is 7391", "-n", "Bob")
    kt(home, "forget", secret["memory_id"], "--reason", "asked")
    export = tmp_path / "backup.jsonl"
    kt(home, "export", "-o", str(export))
    restored = tmp_path / "restored.jsonl"
    restored.write_text(
        export.read_text().replace('"content":""', '"content":"Bob\'s PIN is 7391"')
    )
    assert "7391" in restored.read_text()

    copy = tmp_path / "copy"
    kt(copy, "import", str(restored))
    report = kt(copy, "verify").stdout
    assert f"redacted (forgotten, content removed): 1: {secret['memory_id']}" in report
    assert not [p for p in copy.rglob("*") if p.is_file() and b"7391" in p.read_bytes()]
    assert kt(copy, "export").stdout == export.read_text()  # the same history as the source
