"""A process that opens the store, or reads its log, while another process is in the middle of a
forget's purge must never miss that forget.

The forgetting process appends `memory.forgotten` and then, still holding the appenders' lock,
erases the content from the log, snapshots, vector caches and text index, one after another. A
process opening the store meanwhile folds the forget from files some of which still hold the
content. The tests below stop the forget between each two of those steps (a hook on the step) and
open the store or read the log right then.

Two `Store` objects on one directory stand for two processes (each has its own lock file
descriptor, so one waits for the other as two processes would); the forgetting one runs in a
thread so that it can be held mid-purge while the other one opens.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_forget import files_holding

from keytrail.core import HashEmbedder, NotFound, Settings, Store, forgetting
from keytrail.core.knowledge_graph import EntityInput, KnowledgeGraph
from keytrail.core.maintenance import verify
from keytrail.core.timetravel import read_memory_at, view
from keytrail.events import EventLog
from keytrail.server.cli import main

SECRET = "my bank PIN is 7391, tell nobody"

#: The steps of a forget after its event is durable, in the order it takes them: the hook
#: holds the forget right before the named function runs (`write_pending` with an empty list
#: is the last step, removing the pending record).
PURGE_STEPS = ["purge", "purge_snapshots", "purge_vectors", "purge_text_index", "write_pending"]


def open_store(home: Path) -> Store:
    return Store(
        Settings(home=home, embedder="hash", snapshot_every=4, segment_bytes=3000),
        embedder=HashEmbedder(),
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "store"


def a_store_with_a_secret(home: Path) -> str:
    """A store whose secret is in every kind of file: a log line, snapshots (archived ones
    too), a vector row and the text index. It is an observation of an entity, so that
    knowledge-graph reads would show it too. Returns the secret's memory id."""
    store = open_store(home)
    KnowledgeGraph(store).create_entities([EntityInput("Alice", "person", [SECRET])])
    (secret,) = store.state.memories
    for i in range(9):
        store.remember(f"filler fact {i} about tea", ["tea"])
    store.recall_memories("bank PIN")  # the text index holds the secret now
    store.close()
    assert {"log", "cache", "index"} <= {p.split("/")[0] for p in files_holding(home, SECRET)}
    return secret


class HeldForget:
    """Another process's forget, held right before `step` until this process waits for the
    appenders' lock (which the forget holds), or until `release`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, home: Path, step: str) -> None:
        self.store = open_store(home)
        self.held = threading.Event()
        self.go = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

        def hold(real: Callable[..., Any]) -> Callable[..., Any]:
            def step_of_the_forget(*args: Any, **kwargs: Any) -> Any:
                last = step != "write_pending" or args[1] == []
                if threading.current_thread() is self._thread and last and not self.held.is_set():
                    self.held.set()
                    assert self.go.wait(30), "nobody released the held forget"
                return real(*args, **kwargs)

            return step_of_the_forget

        monkeypatch.setattr(forgetting, step, hold(getattr(forgetting, step)))
        # Whoever else waits for the lock lets the forget go on: it is what a second process
        # would do, and holding the forget then would only deadlock the test.
        for name in ("_acquire", "wait_for_lock"):
            real = getattr(EventLog, name)
            monkeypatch.setattr(EventLog, name, self._releasing(real))

    def _releasing(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def wait_for_the_lock(log: EventLog, *args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not self._thread:
                self.go.set()
            return real(log, *args, **kwargs)

        return wait_for_the_lock

    def start(self, memory_id: str) -> None:
        def run() -> None:
            try:
                self.store.forget(memory_id, reason="user asked")
            except BaseException as exc:  # reported by `finish`
                self.error = exc

        self._thread = threading.Thread(target=run, name="forgetting process")
        self._thread.start()
        assert self.held.wait(30), "the forget never reached its step"

    def finish(self) -> None:
        self.go.set()
        assert self._thread is not None
        self._thread.join(30)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error
        self.store.close()


def no_read_returns_the_secret(store: Store, secret: str) -> None:
    """Every kind of read, as of every seq and in the present, leaves the secret out. None of
    them takes the appenders' lock (nothing is recorded), so they run while the forget is held."""
    kg = KnowledgeGraph(store)
    for seq in range(1, store.state.seq + 1):
        with pytest.raises(NotFound):
            read_memory_at(store, secret, as_of=seq)
        assert SECRET not in repr(view(store, seq).list_memories())
        assert SECRET not in repr(store.recall_memories("bank PIN", as_of=seq))
        assert SECRET not in repr(kg.read_graph(as_of=seq))
        # Nor does any past state hold it for other uses (a snapshot it keeps, a history).
        node = store.past.state(seq).memories.get(secret)
        assert node is None or node.content == ""
    with pytest.raises(NotFound):
        store.read_memory(secret)
    assert SECRET not in repr(store.recall("bank PIN"))
    assert SECRET not in repr(store.recall_memories("bank PIN", hops=2, learn=False))
    assert SECRET not in repr(kg.read_graph())


@pytest.mark.parametrize("step", PURGE_STEPS)
def test_a_store_opened_during_another_process_purge_never_serves_the_forgotten_content(
    home: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """The opener folds the forget from a snapshot and log read while the purge is unfinished.

    Closed by the open itself: the forget records `forget.pending` before its event and
    removes it after the last step, so an opener that folded the event and still sees the
    record waits for the appenders' lock (held by the purge) before it reads anything else.
    """
    secret = a_store_with_a_secret(home)
    forget = HeldForget(monkeypatch, home, step)
    forget.start(secret)
    opener = open_store(home)  # folds the forget during its open
    assert opener.state.memories[secret].status == "forgotten"
    no_read_returns_the_secret(opener, secret)
    forget.finish()
    opener.remember("the opener writes after the forget", ["later"])
    opener.close()
    assert files_holding(home, SECRET) == []
    report = verify(home)
    assert report.ok and report.redacted == [secret], report.problems


def export_lines(home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    monkeypatch.setenv("KEYTRAIL_HOME", str(home))
    out = tmp_path / "export.jsonl"
    assert main(["export", "-o", str(out)]) == 0
    return out.read_text().splitlines()


def holds_the_forget_and_the_content(lines: list[str], secret: str) -> bool:
    forgets = [ln for ln in lines if '"memory.forgotten"' in ln and secret in ln]
    return bool(forgets) and any(SECRET in ln for ln in lines)


def an_import_of(lines: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "imported"
    dump = tmp_path / "to-import.jsonl"
    dump.write_text("".join(ln + "\n" for ln in lines))
    monkeypatch.setenv("KEYTRAIL_HOME", str(copy))
    assert main(["import", str(dump)]) == 0
    return copy


@pytest.mark.parametrize("step", PURGE_STEPS)
def test_an_export_taken_during_another_process_purge_does_not_carry_the_content(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """`keytrail export` reads the log itself, without opening a store. Taken while a forget is
    purging, it read the creating line before its redaction and then the forget: an export
    holding both, which an import turns into a store whose log keeps the forgotten content."""
    secret = a_store_with_a_secret(home)
    forget = HeldForget(monkeypatch, home, step)
    forget.start(secret)
    lines = export_lines(home, monkeypatch, tmp_path)
    forget.finish()
    assert not holds_the_forget_and_the_content(lines, secret)
    assert files_holding(an_import_of(lines, tmp_path, monkeypatch), SECRET) == []
    assert files_holding(home, SECRET) == [] and verify(home).ok


def test_an_export_running_across_a_forget_does_not_carry_both(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export that has read the creating line when another process forgets the memory
    (and acknowledges it) must not go on to include the forget: the export stands for the log
    as it was when the export began."""
    secret = a_store_with_a_secret(home)
    forgetter = open_store(home)
    forgot: list[object] = []
    real_iter_new = EventLog.iter_new

    def forget_after_the_first_event(log: EventLog) -> Iterator[Any]:
        for event in real_iter_new(log):
            yield event
            if not forgot and log is not forgetter.log:  # the exporter's read, not the forget's
                forgot.append(forgetter.forget(secret))

    monkeypatch.setattr(EventLog, "iter_new", forget_after_the_first_event)
    lines = export_lines(home, monkeypatch, tmp_path)
    forgetter.close()
    assert forgot
    assert not holds_the_forget_and_the_content(lines, secret)
    # What it holds is the store as it was before the forget, whole: it imports and verifies.
    copy = an_import_of(lines, tmp_path, monkeypatch)
    assert verify(copy).ok


@pytest.mark.parametrize("step", ["purge", "purge_text_index"])
def test_the_log_verb_during_another_process_purge_does_not_show_the_content(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    step: str,
) -> None:
    """`keytrail log` reads the log itself too; it must not print the content of a memory it
    also lists as forgotten."""
    secret = a_store_with_a_secret(home)
    forget = HeldForget(monkeypatch, home, step)
    forget.start(secret)
    monkeypatch.setenv("KEYTRAIL_HOME", str(home))
    capsys.readouterr()
    assert main(["log", "--json"]) == 0
    printed = capsys.readouterr().out
    forget.finish()
    assert not holds_the_forget_and_the_content(printed.splitlines(), secret)
    assert files_holding(home, SECRET) == [] and verify(home).ok


def test_an_export_refuses_while_a_dead_process_left_a_purge_unfinished(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forget killed between its event and the end of its purge leaves the content in the log
    until a store is opened. An export then would carry the forget and the content: it refuses,
    saying how to finish the purge, and works once a store has been opened."""
    secret = a_store_with_a_secret(home)
    store = open_store(home)

    def killed(*args: object, **kwargs: object) -> list[str]:
        raise KeyboardInterrupt("killed mid-purge")

    monkeypatch.setattr(forgetting, "purge", killed)
    with pytest.raises(KeyboardInterrupt):
        store.forget(secret)
    monkeypatch.undo()
    with pytest.raises(SystemExit):
        export_lines(home, monkeypatch, tmp_path)
    open_store(home).close()  # the next open finishes the purge
    lines = export_lines(home, monkeypatch, tmp_path)
    assert not holds_the_forget_and_the_content(lines, secret)
    assert files_holding(home, SECRET) == []
