"""`--namespace` on a verb that cannot filter by it is refused, not silently ignored.

The help and the README say a reading verb given `--namespace NS` looks only at that
namespace. `stats`, `related`, `history`, `log`, `sessions`, `conversation` and the
store-wide verbs answered about every namespace instead (`related m_x --namespace work` listed
another namespace's memories), and `cleanup-expired --namespace work` expired every
namespace's memories: a filter the user typed was dropped without a word.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from keytrail.core import Store
from keytrail.server.cli import main


def log_bytes(home: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((home / "log").glob("*.jsonl")))


@pytest.mark.parametrize(
    "verb",
    [
        ["stats"],
        ["log"],
        ["verify"],
        ["rebuild"],
        ["reembed"],
        ["related", "MID"],
        ["history", "MID"],
        ["sessions"],
        ["conversation", "s1"],
        ["cleanup-expired"],
        ["correct", "MID", "new text"],
        ["forget", "MID"],
    ],
)
def test_a_verb_that_cannot_filter_refuses_namespace(
    make_store: Callable[..., Store],
    capsys: pytest.CaptureFixture[str],
    verb: list[str],
) -> None:
    store = make_store()
    mid = store.remember("Ana moved to Porto", keys=["Ana"], namespace="home").memory_id
    store.record_turn("s1", "user", "hello")
    store.close()
    home = store.home
    before = log_bytes(home)
    argv = [mid if a == "MID" else a for a in verb]
    for args in (
        [*argv, "--home", str(home), "--namespace", "work"],
        ["--namespace", "work", "--home", str(home), *argv],
    ):
        with pytest.raises(SystemExit) as stopped:
            main(args)
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith(f"keytrail: error: --namespace: `keytrail {verb[0]}` ")
        assert err.count("\n") == 1
        assert log_bytes(home) == before


def test_the_variable_is_no_filter_and_filtering_verbs_still_take_it(
    make_store: Callable[..., Store],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = make_store()
    store.remember("Ana moved to Porto", keys=["Ana"], namespace="home")
    store.close()
    home = str(store.home)
    monkeypatch.setenv("KEYTRAIL_NAMESPACE", "work")
    assert main(["stats", "--home", home, "--embedder", "hash"]) == 0
    capsys.readouterr()
    assert main(["list", "--home", home, "--namespace", "home", "--embedder", "hash"]) == 0
    assert "Ana moved to Porto" in capsys.readouterr().out


def test_importing_a_keytrail_export_refuses_namespace(
    make_store: Callable[..., Store],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """A keytrail export is replayed byte for byte, its namespaces included: `import
    --namespace zzz` of one wrote the memories into their old namespaces, not into zzz."""
    store = make_store()
    store.remember("Ana moved to Porto", keys=["Ana"], namespace="home")
    store.close()
    dump = tmp_path / "dump.jsonl"
    assert main(["export", "--home", str(store.home), "-o", str(dump)]) == 0
    capsys.readouterr()
    target = tmp_path / "target"
    with pytest.raises(SystemExit) as stopped:
        main(["import", str(dump), "--home", str(target), "--namespace", "zzz"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("keytrail: error: --namespace: ") and err.count("\n") == 1
    assert not target.exists()


@pytest.mark.parametrize(
    "verb",
    [
        ["list"],
        ["keys"],
        ["recall", "Porto"],
        ["read-key", "KEY"],
        ["recall-memories", "Porto"],
        ["changes"],
    ],
)
def test_a_read_of_a_namespace_never_told_says_so_on_text_output(
    make_store: Callable[..., Store],
    capsys: pytest.CaptureFixture[str],
    hash_cli: None,
    verb: list[str],
) -> None:
    """`list --namespace wrok` answered empty without a word (export refuses it): an empty
    namespace is a fair question, so the answer stands, with a note naming the namespaces. A
    namespace whose memories are all forgotten held some: no note."""
    store = make_store()
    store.remember("Ana moved to Porto", keys=["Ana"], namespace="home")
    store.forget(
        store.remember("Ana's old flat in Lisbon", keys=["Ana"], namespace="old").memory_id
    )
    key = store.state.key_for_label("Ana")
    assert key is not None
    store.close()
    argv = [*[key.id if a == "KEY" else a for a in verb], "--home", str(store.home)]
    note = "note: no memory was ever told in namespace 'wrok' (namespaces: home, old)"

    def said(*extra: str) -> tuple[str, str]:
        assert main([*argv, *extra]) == 0
        out = capsys.readouterr()
        return out.out, out.err

    out, err = said("--namespace", "wrok")
    assert [line for line in err.splitlines() if "note" in line] == [note], err
    assert "Porto" not in out
    for extra in (
        ["--namespace", "wrok", "--json"],
        ["--namespace", "old"],
        ["--namespace", "home"],
    ):
        assert "note" not in said(*extra)[1], extra
