"""Times a caller gives (valid_from, as_of, valid_at) at the edges of what a datetime holds."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_server import call, log_bytes, refused, run, stdio_session

from keytrail.core import InvalidInput, Store
from keytrail.core.knowledge_graph import KnowledgeGraph
from keytrail.core.timetravel import parse_as_of, parse_time, view
from keytrail.core.validation import TIME_CHARS
from keytrail.server.cli import main


@pytest.mark.parametrize(
    "value", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "0001-01-01T00:30:00+00:45"]
)
def test_a_time_outside_utc_range_is_refused_by_name(value: str) -> None:
    # Valid ISO-8601, but its UTC instant is before year 1 or after 9999: it raised a bare
    # OverflowError (no field, not a KeytrailError, so the MCP client saw an internal error).
    with pytest.raises(InvalidInput) as caught:
        parse_time("valid_from", value)
    assert caught.value.field == "valid_from"


def test_remember_and_reads_refuse_such_a_time_and_change_nothing(store: Store) -> None:
    store.remember("Dana moved to Oslo", ["Oslo"])
    seq = store.state.seq
    with pytest.raises(InvalidInput) as caught:
        store.remember("Dana visited Rome", ["Rome"], valid_from="0001-01-01T00:00:00+01:00")
    assert caught.value.field == "valid_from"
    with pytest.raises(InvalidInput) as caught:
        view(store, "9999-12-31T23:59:59-05:00").recall("Oslo")
    assert caught.value.field == "as_of"
    with pytest.raises(InvalidInput) as caught:
        view(store, None, "9999-12-31T23:59:59-05:00").recall("Oslo")
    assert caught.value.field == "valid_at"
    assert store.refresh().seq == seq


@pytest.mark.parametrize("value", ["٣", "３", "²"])
def test_a_seq_is_ascii_digits_only(value: str) -> None:
    """int() reads other scripts' digits: "٣" (Arabic-Indic three) was taken for seq 3."""
    with pytest.raises(InvalidInput) as caught:
        parse_as_of(value)
    assert caught.value.field == "as_of"
    assert parse_as_of(" 3 ") == 3


@pytest.mark.parametrize(
    "value", ["2026-03-01T09:00:00z", "2026-03-01t09:00:00Z", " 2026-03-01T10:00:00+01:00 "]
)
def test_utc_in_either_case_is_one_instant(value: str) -> None:
    """RFC 3339 allows 'z' and 't' in lower case; '...09:00:00z' was refused as not ISO-8601."""
    assert parse_time("as_of", value) == parse_time("as_of", "2026-03-01T09:00:00Z")


@pytest.mark.parametrize("field", ["as_of", "since"])
def test_a_seq_of_more_digits_than_python_reads_is_refused_by_name(
    store: Store, field: str
) -> None:
    """int() refuses a string of over 4,300 digits: `as_of="999…"` raised a bare ValueError,
    which the MCP client heard as "Error executing tool memory_stats" (no field) and the
    command line as a traceback."""
    store.remember("Dana moved to Oslo", ["Oslo"])
    with pytest.raises(InvalidInput) as caught:
        parse_as_of("9" * 5000, field)
    assert caught.value.field == field
    with pytest.raises(InvalidInput) as caught:
        view(store, "9" * 5000).recall("Oslo")
    assert caught.value.field == "as_of"


@pytest.mark.parametrize("field", ["as_of", "valid_from"])
def test_a_huge_time_refused_is_not_echoed_whole(field: str) -> None:
    """A refused megabyte of text came back whole in the error (a 1 MB MCP answer)."""
    value = "2026-" + "x" * 1_000_000
    with pytest.raises(InvalidInput) as caught:
        parse_time(field, value)
    message = str(caught.value)
    assert caught.value.field == field
    assert len(message) < 300, len(message)
    assert "'2026-xxx" in message and "1,000,005 characters" in message


#: a million characters fromisoformat took as midnight, 1 January 2026 (zeros after the "T")
MIDNIGHT_MEGABYTE = "2026-01-01T" + "0" * 1_000_000


@pytest.mark.parametrize("field", ["as_of", "valid_at", "valid_from"])
def test_a_time_longer_than_any_iso_8601_time_is_refused_by_name(field: str) -> None:
    """fromisoformat reads any number of zeros after the "T": a megabyte was silently taken
    for a time. A time is held to TIME_CHARS (64) characters, as typed."""
    with pytest.raises(InvalidInput) as caught:
        parse_time(field, MIDNIGHT_MEGABYTE)
    assert (caught.value.field, caught.value.limit) == (field, f"{TIME_CHARS} characters")
    assert len(str(caught.value)) < 300  # quoted, not echoed whole
    at_limit = "2026-01-01T" + "0" * (TIME_CHARS - 11)
    assert parse_time(field, at_limit) == parse_time(field, "2026-01-01T00:00:00Z")
    with pytest.raises(InvalidInput):
        parse_time(field, at_limit + "0")
    with pytest.raises(InvalidInput):
        parse_time(field, " " * TIME_CHARS + "2026-01-01")  # whitespace counts, as typed
    # The longest time fromisoformat reads: fractions of a second on the time and its offset.
    assert parse_time(field, "2026-03-01T09:00:00.123456+05:30:00.123456").year == 2026


def test_such_a_time_changes_nothing_over_core_and_the_command_line(
    store: Store, tmp_path: Path, hash_cli: None, capsys: pytest.CaptureFixture[str]
) -> None:
    store.remember("Dana moved to Oslo", ["Oslo"])
    before = log_bytes(store.home)
    with pytest.raises(InvalidInput) as caught:
        store.remember("Dana visited Rome", ["Rome"], valid_from=MIDNIGHT_MEGABYTE)
    assert caught.value.field == "valid_from"
    with pytest.raises(InvalidInput) as caught:
        view(store, None, MIDNIGHT_MEGABYTE).recall("Oslo")
    assert caught.value.field == "valid_at"
    with pytest.raises(InvalidInput) as caught:
        KnowledgeGraph(store).read_graph(as_of=MIDNIGHT_MEGABYTE)
    assert caught.value.limit == f"{TIME_CHARS} characters"
    assert log_bytes(store.home) == before

    home = str(store.home)
    for args in [
        ["remember", "Dana visited Rome", "-k", "Rome", "--valid-from"],
        ["recall", "Oslo", "--valid-at"],
        ["recall", "Oslo", "--as-of"],
    ]:
        with pytest.raises(SystemExit) as exited:
            main([*args, MIDNIGHT_MEGABYTE, "--home", home])
        err = capsys.readouterr().err
        assert exited.value.code == 2
        assert err.startswith(f"keytrail: error: {args[-1]}: '2026-01-01T000"), err[:300]
        assert err.endswith(f"(limit: {TIME_CHARS} characters)\n") and len(err) < 300
    assert log_bytes(store.home) == before


def test_such_a_time_is_refused_over_mcp(tmp_path: Path) -> None:
    home = tmp_path / "store"
    # Refused by the published schema (maxLength), as every other too-long string argument is.
    limit = f"at most {TIME_CHARS} characters"

    async def scenario() -> None:
        flags = ("--toolsets", "keygraph,knowledge_graph")
        async with stdio_session(home, tmp_path / "err.txt", *flags) as s:
            await call(s, "remember", content="Dana moved to Oslo", keys=["Oslo"])
            told = {"content": "Dana visited Rome", "keys": ["Rome"]}
            for tool, args in [
                ("remember", {**told, "valid_from": MIDNIGHT_MEGABYTE}),
                ("recall", {"query": "Oslo", "valid_at": MIDNIGHT_MEGABYTE}),
                ("recall", {"query": "Oslo", "as_of": MIDNIGHT_MEGABYTE}),
                ("read_graph", {"as_of": MIDNIGHT_MEGABYTE}),
            ]:
                field = next(k for k, v in args.items() if v is MIDNIGHT_MEGABYTE)
                text = await refused(s, home, tool, args, f"{field}: ", limit)
                assert len(text) < 500

    run(scenario)
