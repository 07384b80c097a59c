"""A verb that needs a store refuses a home that holds none, and creates nothing there.

A mistyped --home or KEYTRAIL_HOME must be an error naming the path, not an empty store made
at the wrong place and answered from ("0 memories", "verify: ok"). Only the verbs that can do
their job on an empty store (serve, remember, import) make one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_cli import kt

from keytrail.core import NoStore, Settings, Store, StoreError
from keytrail.events import segment_name
from keytrail.server.cli import build_parser, main
from keytrail.server.shell import CREATING_VERBS

#: Every verb that needs an existing store, with arguments that would make it run. {memory}
#: and {key} are filled in with real ids where a store exists.
NEEDS_A_STORE: dict[str, list[list[str]]] = {
    "stats": [[]],
    "log": [[], ["--follow"]],
    "verify": [[]],
    "rebuild": [[]],
    "reembed": [[], ["--list"]],
    "recall": [["fruit"]],
    "read-key": [["{key}"]],
    "read": [["{memory}"]],
    "correct": [["{memory}", "Alice likes raspberries"]],
    "forget": [["{memory}"]],
    "export": [[], ["--format", "memory-jsonl"], ["-o", "{out}"]],
    "history": [["{memory}"]],
    "changes": [[]],
    "recall-memories": [["fruit"]],
    "list": [[]],
    "related": [["{memory}"]],
    "keys": [[], ["--hubs"]],
    "cleanup-expired": [[]],
    "sessions": [[]],
    "conversation": [["chat-1"]],
}
CASES = [(verb, args) for verb, arg_lists in NEEDS_A_STORE.items() for args in arg_lists]


def case_id(case: tuple[str, list[str]]) -> str:
    return " ".join([case[0], *case[1]])


def all_verbs() -> set[str]:
    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(verbs.choices)


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("KEYTRAIL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")


def files_under(path: Path) -> list[str]:
    """Every path under `path` (itself included), with sizes: what 'nothing written' compares."""
    if not path.exists():
        return []
    found = [
        f"{p.relative_to(path.parent)} {p.stat().st_size if p.is_file() else '-'}"
        for p in path.rglob("*")
    ]
    return sorted([str(path.name), *found])


def run(
    home: Path, verb: str, args: list[str], capsys: pytest.CaptureFixture[str], **ids: str
) -> tuple[int, str, str]:
    argv = [verb, *(a.format(**ids) for a in args), "--home", str(home)]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_every_verb_is_either_creating_or_needs_a_store() -> None:
    # A new verb has to be put on one side, with a case above if it needs a store.
    assert all_verbs() == set(NEEDS_A_STORE) | set(CREATING_VERBS)
    assert not set(NEEDS_A_STORE) & set(CREATING_VERBS)


def not_a_store(tmp_path: Path, kind: str) -> Path:
    """A home that holds no store: missing, empty, a file, someone else's files, or a store
    whose first open died before its first line was whole (a torn line, or nothing at all)."""
    home = tmp_path / "home"
    if kind == "missing":
        return home
    if kind == "file":
        home.write_text("not a directory\n")
        return home
    home.mkdir()
    if kind == "unrelated":
        (home / "notes.txt").write_text("my notes\n")
        (home / "log").mkdir()  # a log/ that holds no segment is not a store's log
        (home / "log" / "app.log").write_text("2026-01-01 started\n")
    if kind in ("torn first line", "empty segment"):
        (home / "log").mkdir()
        first = b'{"seq":1,"at":"2026-' if kind == "torn first line" else b""
        (home / "log" / segment_name(1)).write_bytes(first)
    return home


HALF_MADE = ("torn first line", "empty segment")


# `log --follow` on a half-made store would follow forever if it did not refuse, so it runs in
# a subprocess with a timeout instead (test_log_follow_refuses_a_store_whose_first_line_...).
HOMES_AND_CASES = [
    pytest.param(kind, case, id=f"{case_id(case)}-{kind}")
    for case in CASES
    for kind in ("missing", "empty", "unrelated", "file", *HALF_MADE)
    if not ("--follow" in case[1] and kind in HALF_MADE)
]


@pytest.mark.parametrize(("kind", "case"), HOMES_AND_CASES)
def test_a_verb_that_needs_a_store_refuses_a_home_without_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: tuple[str, list[str]], kind: str
) -> None:
    home = not_a_store(tmp_path, kind)
    out_file = tmp_path / "out.jsonl"
    before = files_under(tmp_path)
    code, out, err = run(
        home, *case, capsys, memory="m_0123456789ab", key="k_0123456789", out=str(out_file)
    )
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"keytrail: error: no keytrail store at {home} (")
    assert "keytrail remember" in lines[0] and "KEYTRAIL_HOME" in lines[0]
    assert files_under(tmp_path) == before  # no directory, lock, log or output file


def test_the_refusal_from_a_shell(tmp_path: Path) -> None:
    """As a user sees it: one line on stderr, status 2, and the mistyped home still absent."""
    home = tmp_path / "typo"
    proc = kt(home, "stats", ok=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        f"keytrail: error: no keytrail store at {home} (no such directory); check --home / "
        "KEYTRAIL_HOME; a store is created by `keytrail serve`, `keytrail remember`, "
        "`keytrail import`\n"
    )
    assert not home.exists()


@pytest.mark.parametrize("kind", HALF_MADE)
def test_log_follow_refuses_a_store_whose_first_line_never_became_whole(
    tmp_path: Path, kind: str
) -> None:
    """Not a store (Store.open_existing says so too): refused at once, not followed forever."""
    home = not_a_store(tmp_path, kind)
    before = files_under(home)
    try:
        proc = kt(home, "log", "--follow", ok=False)
    except subprocess.TimeoutExpired:
        pytest.fail("log --follow followed a home that holds no store")
    assert proc.returncode == 2
    assert "(its log holds no complete event)" in proc.stderr
    assert files_under(home) == before


def test_help_says_which_verbs_create_a_store(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    assert "serve, remember, import create the store" in top
    assert "every other verb needs an existing store" in top
    with pytest.raises(SystemExit):
        main(["stats", "--help"])
    assert "Needs an existing store" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit):
        main(["remember", "--help"])
    assert "Creates the store" in " ".join(capsys.readouterr().out.split())


def test_help_names_every_exit_status_the_readme_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`keytrail --help` lists the exit statuses; it left out 143, `serve` on SIGTERM."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    said = readme.split("\nExit status:", 1)[1].split("\n\n", 1)[0]
    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    listed = top.split("Exit status:", 1)[1]
    assert {"0", "1", "2", "130", "143"} <= set(re.findall(r"\b\d+\b", said))
    assert set(re.findall(r"\b\d+\b", said)) <= set(re.findall(r"\b\d+\b", listed))
    assert "SIGTERM" in listed and "log --follow" in listed


def test_remember_on_a_missing_home_creates_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "new" / "store"
    code, out, _ = run(home, "remember", ["Alice likes strawberries", "-k", "fruit"], capsys)
    assert code == 0 and "remembered m_" in out
    assert (home / "log" / segment_name(1)).is_file()
    code, out, _ = run(home, "stats", ["--json"], capsys)
    assert code == 0 and json.loads(out)["memories"] == 1


@pytest.mark.parametrize("kind", ["missing", "empty", *HALF_MADE])
def test_import_creates_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    """Also on a home whose first open died before its first line was whole: an export's
    import failed there, "cannot move the import into .../log: Directory not empty" (its log/
    held the torn segment), though import is one of the verbs said to finish making it."""
    source = tmp_path / "source"
    assert run(source, "remember", ["Alice likes tea", "-n", "Alice"], capsys)[0] == 0
    dump = tmp_path / "dump.jsonl"
    assert run(source, "export", ["-o", str(dump)], capsys)[0] == 0
    graph = tmp_path / "memory.jsonl"
    graph.write_text(
        json.dumps(
            {
                "type": "entity",
                "name": "Bob",
                "entityType": "person",
                "observations": ["likes coffee"],
            }
        )
        + "\n"
    )
    for name, file in (("copy", dump), ("graph", graph)):
        (tmp_path / name).mkdir()
        home = not_a_store(tmp_path / name, kind)
        code, _, err = run(home, "import", [str(file)], capsys)
        assert code == 0, err
        assert run(home, "verify", [], capsys)[0] == 0
        if kind == "torn first line":  # the torn line is kept for inspection, as by any write
            assert [p.read_bytes() for p in (home / "log" / "torn").iterdir()] == [
                b'{"seq":1,"at":"2026-'
            ]


def test_serve_on_a_missing_home_creates_the_store(tmp_path: Path) -> None:
    home = tmp_path / "served"
    # stdin at its end: the server opens the store, then stops when the client goes.
    proc = kt(home, "serve", ok=False, stdin="")
    assert (home / "log" / segment_name(1)).is_file()
    # The client's server log (stderr) says which store; stdout carries only the protocol.
    assert f": serving {home} over stdio" in proc.stderr and proc.stdout == ""
    with Store.open_existing(Settings.from_env(home=home, embedder="hash")) as store:
        assert store.state.seq == 1


def test_every_verb_still_works_on_an_existing_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "store"
    code, out, _ = run(
        home,
        "remember",
        ["Alice likes strawberries", "-n", "Alice", "-k", "fruit", "--json"],
        capsys,
    )
    assert code == 0
    made = json.loads(out)
    with Store.open_existing(Settings.from_env(home=home, embedder="hash")) as store:
        store.record_turn("chat-1", "user", "Alice likes strawberries")  # for `conversation`
    ids = {
        "memory": made["memory_id"],
        "key": made["keys"][0]["key_id"],
        "out": str(tmp_path / "out.jsonl"),
    }
    # forget last: the verbs after it would find nothing to name
    order = sorted(CASES, key=lambda c: {"correct": 1, "forget": 2}.get(c[0], 0))
    for verb, args in order:
        if "--follow" in args:
            continue  # runs until interrupted: test_follow covers it
        code, out, err = run(home, verb, args, capsys, **ids)
        assert code == 0, (verb, args, err)
        assert "no keytrail store" not in err


def test_store_open_existing_refuses_without_writing(tmp_path: Path) -> None:
    settings = Settings.from_env(home=tmp_path / "none", embedder="hash")
    with pytest.raises(NoStore) as err:
        Store.open_existing(settings)
    assert err.value.path == str(tmp_path / "none") and err.value.reason == "no such directory"
    assert err.value.to_dict()["path"] == str(tmp_path / "none")
    assert not (tmp_path / "none").exists()
    # A first open that died before store.created was whole: segments but no complete event.
    half = tmp_path / "half"
    (half / "log").mkdir(parents=True)
    (half / "log" / segment_name(1)).write_bytes(b'{"seq":1,"at":')
    before = files_under(half)
    with pytest.raises(NoStore, match="holds no complete event"):
        Store.open_existing(Settings.from_env(home=half, embedder="hash"))
    assert files_under(half) == before
    # A writer's open finishes making it, and from then on it opens as an existing store.
    Store(Settings.from_env(home=half, embedder="hash")).close()
    with Store.open_existing(Settings.from_env(home=half, embedder="hash")) as store:
        assert store.state.seq == 1


def test_an_empty_home_never_means_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """KEYTRAIL_HOME="" (a client config whose variable expanded to nothing) is unset, like
    every other empty KEYTRAIL_* variable: the default home, not a store made in whatever
    directory the client started keytrail in. `--home ""` names no place and is refused."""
    cwd = tmp_path / "project"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.setenv("KEYTRAIL_HOME", "")
    assert Settings.from_env().home == tmp_path / "user" / ".keytrail"
    with pytest.raises(SystemExit) as exited:
        main(["remember", "Alice likes tea", "--home", ""])
    assert exited.value.code == 2
    assert "--home: empty" in capsys.readouterr().err
    assert list(cwd.iterdir()) == []  # no store made in the current directory


@pytest.mark.parametrize("inner", ["cache", "log/x", "notes/deeper/store"])
def test_no_store_is_made_inside_another_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], inner: str
) -> None:
    """`--home ~/.keytrail/cache` is a typo: a store made there would sit among the outer
    store's files (and go with its cache on a rebuild). Refused, naming both, creating nothing."""
    outer = tmp_path / "outer"
    assert run(outer, "remember", ["Alice likes tea", "-k", "tea"], capsys)[0] == 0
    dump = tmp_path / "dump.jsonl"
    assert run(outer, "export", ["-o", str(dump)], capsys)[0] == 0
    before = files_under(outer)
    home = outer / inner
    for verb, args in (("remember", ["Bob likes coffee", "-k", "coffee"]), ("import", [str(dump)])):
        code, out, err = run(home, verb, args, capsys)
        assert code == 2 and out == ""
        assert err == (
            f"keytrail: error: will not make a store at {home}: it is inside the keytrail store "
            f"at {outer}; choose a home outside it\n"
        )
    with pytest.raises(StoreError) as caught:
        Store(Settings(home=home, embedder="hash"))
    assert caught.value.fields == {"path": str(home), "store": str(outer)}
    assert files_under(outer) == before


def test_a_store_beside_or_above_another_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only an enclosing store refuses: siblings, and a store whose directory holds another
    store's directory (a folder of stores that is itself made a store), are fine."""
    assert run(tmp_path / "a", "remember", ["Alice likes tea", "-k", "tea"], capsys)[0] == 0
    assert run(tmp_path / "b", "remember", ["Bob likes coffee", "-k", "tea"], capsys)[0] == 0
    assert run(tmp_path, "remember", ["Carol likes cocoa", "-k", "tea"], capsys)[0] == 0
    code, out, _ = run(tmp_path / "b", "stats", ["--json"], capsys)
    assert code == 0 and json.loads(out)["memories"] == 1
