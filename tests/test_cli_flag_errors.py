"""A value the store refuses, given by a flag, is said of the flag typed (`--ttl`), not of the
MCP field it becomes (`ttl_seconds`): one line on stderr, status 2, nothing written."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from test_cli import REPO, env_for

from keytrail.core import Store
from keytrail.server.cli import build_parser, main


@pytest.fixture
def home(tmp_path: Path, hash_cli: None) -> Path:
    home = tmp_path / "store"
    assert main(["remember", "Dana lives in Lyon", "-n", "Dana", "--home", str(home)]) == 0
    return home


def refused(home: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    log = sorted((home / "log").glob("*.jsonl"))
    before = [p.read_bytes() for p in log]
    with pytest.raises(SystemExit) as exited:
        main([*args, "--home", str(home)])
    assert exited.value.code == 2
    assert [p.read_bytes() for p in sorted((home / "log").glob("*.jsonl"))] == before
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    return err


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["remember", "a fact", "--ttl", "-5"], "--ttl"),
        (["remember", "a fact", "--valid-from", "someday"], "--valid-from"),
        (["recall", "Dana", "--top-k", "0"], "--top-k"),
        (["recall-memories", "Dana", "--top-k", "1000"], "--top-k"),
        (["list", "--as-of", "yesterday"], "--as-of"),
        (["list", "--valid-at", "yesterday"], "--valid-at"),
        (["keys", "--valid-at", "yesterday"], "--valid-at"),
        (["sessions", "--as-of", "yesterday"], "--as-of"),
        (["recall-memories", "Dana", "--valid-at", "yesterday"], "--valid-at"),
        (["list", "--limit", "0"], "--limit"),
        (["keys", "--offset", "-1"], "--offset"),
        (["changes", "--since", "5", "--until", "2"], "--since"),
        (["changes", "--top", "0"], "--top"),
        (["recall-memories", "Dana", "--hops", "9"], "--hops"),
        (["log", "--memory", ""], "--memory"),  # it printed every event, as if not given
    ],
)
def test_a_refused_flag_value_names_the_flag(
    home: Path, capsys: pytest.CaptureFixture[str], args: list[str], flag: str
) -> None:
    assert refused(home, capsys, *args).startswith(f"keytrail: error: {flag}: ")


def test_a_key_the_via_flag_names_that_does_not_exist(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["list", "--json", "--home", str(home)]) == 0
    memory_id = json.loads(capsys.readouterr().out)["memories"][0]["memory_id"]
    err = refused(home, capsys, "read", memory_id, "--via", "k_nope")
    assert err == "keytrail: error: --via: no key 'k_nope'\n"


def test_another_argument_a_message_points_to_is_named_as_its_flag(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A past before the store points to valid_at, which a person types as --valid-at.
    err = refused(home, capsys, "list", "--as-of", "2001-01-01")
    assert err.startswith("keytrail: error: --as-of: 2001-01-01T00:00:00+00:00 is before")
    assert "pass --valid-at" in err and "valid_at" not in err


def test_a_positional_argument_keeps_its_name(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(home, capsys, "history", "m_missing")
    assert err == "keytrail: error: memory_id: no memory 'm_missing'\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--ttl", "-5"], "--ttl: "),
        (["--valid-from", "someday"], "--valid-from: "),
        (["-k", " "], "keys[0]: "),
        (["--session", "a b"], "--session: "),
        (["--related-to", "m_0123456789ab"], "related_to[0]: no memory 'm_0123456789ab'"),
    ],
)
def test_a_refused_remember_makes_no_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    said: str,
) -> None:
    """`remember` makes the store when the home holds none, but only for a memory it writes:
    refused, it left a store of one store.created event behind, and `keytrail import` of a
    backup there was then refused (`already holds 1 events; import needs an empty store`)."""
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    home = tmp_path / "new"
    with pytest.raises(SystemExit) as exited:
        main(["remember", "Dana lives in Lyon", *args, "--home", str(home)])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"keytrail: error: {said}")
    assert not home.exists()


def test_import_into_a_store_of_one_event_says_event_not_events(
    tmp_path: Path,
    make_store: Callable[..., Store],
    capsys: pytest.CaptureFixture[str],
    hash_cli: None,
) -> None:
    """A store made and never written to holds its one store.created event: the refusal of an
    import there read "already holds 1 events"."""
    home = tmp_path / "made"
    make_store(home).close()
    dump = tmp_path / "export.jsonl"
    assert main(["export", "--home", str(home), "-o", str(dump)]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["import", "--home", str(home), str(dump)])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert f"{home} already holds 1 event; import needs an empty store" in said


def _number_flags(kind: type) -> list[tuple[str, Callable[[str], object], str]]:
    """(verb, parser, flag) of every flag that takes a number of `kind`, in every verb. A
    setting's flag keeps the text typed (it sets its variable to it): its parser is the one
    its `type` checks the text with."""
    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for verb, parser in verbs.choices.items():
        for action in parser._actions:
            if not callable(action.type) or not action.option_strings:
                continue
            parse = getattr(action.type, "parse", action.type)
            try:
                seven = parse("7")
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
            if type(seven) is kind:
                found.append((verb, parse, action.option_strings[-1]))
    return found


def test_every_integer_flag_takes_ascii_digits_only() -> None:
    """int() reads other scripts' digits and underscores: `serve --http --port ٣` served on
    port 3, `list --limit 1_0` showed 10. An integer flag takes ASCII digits, after a minus
    (a range says which negatives mean something), and nothing else."""
    flags = _number_flags(int)
    assert {"--port", "--ttl", "--top-k", "--limit", "--offset", "--max-page"} <= {
        flag for _, _, flag in flags
    }
    for verb, parse, flag in flags:
        for value in ("٣", "1_0", "+7", "7.0", "", " "):
            with pytest.raises(argparse.ArgumentTypeError):
                parse(value)
        assert parse("-3") == -3, (verb, flag)
        assert parse("0012") == 12


def test_every_float_flag_takes_ascii_digits_only() -> None:
    """float() reads other scripts' digits, underscores and a plus: `serve --time-decay-days
    ١.٥` was 1.5 and `--hybrid-weight-bm25 1_0.5` 10.5, though integer flags refused them."""
    flags = _number_flags(float)
    assert {"--time-decay-days", "--depth-step", "--hybrid-weight-bm25", "--threshold-merge"} <= {
        flag for _, _, flag in flags
    }
    for verb, parse, flag in flags:
        for value in ("١.٥", "1_0.5", "+7", "7.0.1", "", " ", "nan", "inf", "0x1p3"):
            with pytest.raises(argparse.ArgumentTypeError):
                parse(value)
        assert parse("-3.5") == -3.5, (verb, flag)
        assert parse("1e3") == 1000.0


#: What an integer flag and a decimal one are refused as, other digits given
INTEGER_REFUSED = "not an integer", "ASCII digits 0-9, after a minus if negative"
FLOAT_REFUSED = (
    "not a number",
    "ASCII digits 0-9, after a minus if negative; a decimal point and an exponent optional: "
    "2.5, .5, 1e-3",
)


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["serve", "--port", "٣"], INTEGER_REFUSED),  # --http left out: unrefused, it would serve
        (["serve", "--max-page", "1_000"], INTEGER_REFUSED),
        (["list", "--limit", "١٠"], INTEGER_REFUSED),
        (["remember", "a fact", "--ttl", "+60"], INTEGER_REFUSED),
        (["serve", "--time-decay-days", "١.٥"], FLOAT_REFUSED),
        (["serve", "--depth-step", "0_5"], FLOAT_REFUSED),
    ],
)
def test_a_number_flag_in_other_digits_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], refused: tuple[str, str]
) -> None:
    home = tmp_path / "store"
    with pytest.raises(SystemExit) as exited:
        main([*args, "--home", str(home)])
    assert exited.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    flag, value = args[-2:]
    said, limit = refused
    assert last.endswith(f"error: argument {flag}: {said}: {value!r} (limit: {limit})")
    assert not home.exists()


LONG = "x" * 3000


@pytest.mark.parametrize(
    ("args", "env"),
    [
        ([LONG], {}),  # argparse: invalid choice (a verb)
        (["export", "--format", LONG], {}),  # invalid choice
        (["serve", "--time-zone", LONG], {}),  # invalid TimeZone value
        (["serve", "--depth-step", LONG], {}),  # not a number
        (["serve", "--max-page", "-" + "9" * 1000], {}),
        (["serve", "--http", "--port", "9" * 1000], {}),
        (["serve", "--http", "--host", LONG], {}),  # a token is required on this host
        (["serve", "--http", "--host", LONG, "--token", "t"], {}),  # cannot resolve it
        (["serve"], {"KEYTRAIL_DIRECT_RECALL": LONG}),
        (["serve"], {"KEYTRAIL_EMBEDDER": LONG}),
        (["serve"], {"KEYTRAIL_HYBRID_FUSION": LONG}),
        (["stats"], {"KEYTRAIL_TIME_DECAY_DAYS": "1" * 400}),  # inf, not a finite number
    ],
)
def test_a_refused_long_value_is_quoted_short(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    """A refused value came back whole in the error: argparse's own messages, a setting's
    value, a host, the path of an --output too long to be a file name (6,000 characters)."""
    home = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env_for(home) | env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr[-300:]
    said = proc.stderr.splitlines()[-1]
    assert "error: " in said and not re.search(r"(.)\1{99}", said), said  # cut short
    assert not home.exists()


@pytest.mark.parametrize("verb", ["export -o", "import"])
def test_a_path_too_long_to_name_a_file_is_quoted_short(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """`export -o` and `import` of a path too long to name a file echoed all of it."""
    path = tmp_path / ("x" * 3000)
    err = refused(home, capsys, *verb.split(), str(path))
    assert "File name too long" in err and len(err) < 300, err
    assert f"{str(path)[:100]}" in err


@pytest.mark.parametrize("verb", ["stats", "list", "serve"])
def test_a_home_too_long_to_name_a_file_is_quoted_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """`--home` of a path too long to name a directory: opening the store said the path
    twice, whole (about 10 KB for a 5,000-character path)."""
    home = tmp_path / ("x" * 3000)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["--home", str(home), verb])
    assert exited.value.code != 0
    err = capsys.readouterr().err
    assert "File name too long" in err and len(err) < 600, err
    assert f"{str(home)[:100]}" in err
