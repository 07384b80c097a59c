"""A concept key the caller names a name (or proper noun) is promoted: it matches literally from
then on.

"paris" told as a concept, and later `remember(..., key_types={"Paris": "name"})`, kept the key a
concept (`Paris [concept] existing`): the caller's type was dropped without a word. Promotion is
recorded in the remember line itself (the link's resolution `promoted` and its new type), so a
replay, a snapshot and a past read agree on when the key became a name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from keytrail.core import RememberItem, Store
from keytrail.core.results import Remembered
from keytrail.core.timetravel import view
from keytrail.events import EventLog
from keytrail.projections import fold
from keytrail.projections.snapshot import materialize
from keytrail.server.cli import main


def key_type(store: Store, label: str) -> str:
    key = store.state.key_for_label(label)
    assert key is not None
    return key.type


def test_a_concept_key_named_a_name_becomes_one(make_store: Callable[..., Store]) -> None:
    store = make_store()
    first = store.remember("Paris is lovely in spring", ["paris"])
    assert [(k.type, k.resolution) for k in first.keys] == [("concept", "new")]
    seq_before = store.state.seq
    told = store.remember("Dana flies to Paris", ["Paris", "travel"], key_types={"Paris": "name"})
    paris = told.keys[0]
    assert (paris.key_id, paris.type, paris.resolution) == (
        first.keys[0].key_id,
        "name",
        "promoted",
    )
    assert key_type(store, "paris") == "name"
    # Told once: the next mention links to the name as it is, default type or not.
    again = store.remember("Paris has many museums", ["paris"])
    assert [(k.type, k.resolution) for k in again.keys] == [("name", "existing")]
    # Never back: a name told as a concept (the default) stays a name.
    assert key_type(store, "Paris") == "name"
    # Replay, reopen and the past agree.
    assert msgspec.msgpack.encode(fold(EventLog(store.home).read_new())) == msgspec.msgpack.encode(
        materialize(store.state)
    )
    store.close()
    reopened = make_store()
    assert key_type(reopened, "Paris") == "name"
    past = view(reopened, seq_before, None)
    assert past.state.key_for_label("Paris").type == "concept"  # type: ignore[union-attr]


def test_extracted_keys_promote_nothing(make_store: Callable[..., Store]) -> None:
    """The extractor's guesses (a capitalised word is a name) must not retype a key the caller
    made a concept: "Apple" at the start of a sentence is not the company."""
    store = make_store()
    store.remember("paris is a word for a city", ["paris"])
    extracted = store.remember("We had lunch in Paris with Dana")  # no keys: extracted
    assert {(k.label, k.type, k.resolution) for k in extracted.keys} >= {
        ("paris", "concept", "existing"),
        ("Dana", "name", "new"),
    }
    assert key_type(store, "paris") == "concept"


def test_a_batch_promotes_once_and_its_later_items_link_to_the_name(
    make_store: Callable[..., Store],
) -> None:
    store = make_store()
    store.remember("Lyon is a city", ["lyon"])
    done = store.remember_batch(
        [
            RememberItem("Dana moved to Lyon", ["Lyon"], key_types={"Lyon": "name"}),
            RememberItem("Lyon has two rivers", ["lyon"]),
        ]
    )
    kinds = [[(k.type, k.resolution) for k in item.keys] for item in done]
    assert kinds == [[("name", "promoted")], [("name", "existing")]]
    assert key_type(store, "Lyon") == "name"


def test_a_key_new_in_a_batch_is_promoted_by_a_later_item_as_if_told_one_by_one(
    make_store: Callable[..., Store], tmp_path: Path
) -> None:
    """A batch decides as if its items came one after another: "paris" made a concept by one
    item and named a name by the next is promoted, as two remembers promote it. The key new in
    the batch kept its first item's type, the later item's name dropped without a word."""
    items = [
        RememberItem("We visited paris", ["paris"]),
        RememberItem("Paris is the capital", ["Paris"], key_types={"Paris": "name"}),
        RememberItem("A paris trip", ["paris"]),
    ]
    one_by_one = make_store(home=tmp_path / "one-by-one")
    told = [one_by_one.remember(i.content, i.keys, i.key_types) for i in items]
    store = make_store()
    done = store.remember_batch(items)

    def kinds(outcomes: list[Remembered]) -> list[list[tuple[str, str]]]:
        return [[(k.type, k.resolution) for k in item.keys] for item in outcomes]

    assert (
        kinds(done)
        == kinds(told)
        == [
            [("concept", "new")],
            [("name", "promoted")],
            [("name", "existing")],
        ]
    )
    assert key_type(store, "paris") == key_type(one_by_one, "paris") == "name"
    # The fold of the log agrees with the state the batch left.
    assert msgspec.msgpack.encode(fold(EventLog(store.home).read_new())) == msgspec.msgpack.encode(
        materialize(store.state)
    )


def test_a_batch_reports_a_label_it_aliased_as_its_key_as_one_by_one(tmp_path: Path) -> None:
    """An item naming a label an earlier item of the batch merged as an alias links to that
    key, and says so with the key's label, as a remember after the merge does ("gardens
    existing"), not the alias as typed, which is no key's label."""
    from keytrail.core import HashEmbedder, Settings

    def fresh(name: str) -> Store:
        settings = Settings(
            home=tmp_path / name, embedder="hash", threshold_overrides={"merge": 0.6}
        )
        store = Store(settings, embedder=HashEmbedder())
        store.remember("We have a garden", ["gardens"])
        return store

    items = [RememberItem("The garden is big", ["garden"]), RememberItem("It is green", ["garden"])]
    with fresh("one-by-one") as one_by_one, fresh("batch") as batch:
        told = [one_by_one.remember(i.content, i.keys) for i in items]
        done = batch.remember_batch(items)
        for outcomes in (told, done):
            assert [(k.label, k.resolution) for k in outcomes[0].keys] == [("garden", "alias")]
            assert [(k.label, k.resolution) for k in outcomes[1].keys] == [("gardens", "existing")]


def test_a_batch_merges_a_label_into_a_key_an_earlier_item_made_as_one_by_one(
    tmp_path: Path,
) -> None:
    """Labels are compared with the keys the batch's earlier items made (rows of one matrix,
    past its first growth here), and decide as remembers one by one do: "garden" merges into
    the "gardens" the first item made, 40 new keys before it."""
    from keytrail.core import HashEmbedder, Settings

    def fresh(name: str) -> Store:
        settings = Settings(
            home=tmp_path / name, embedder="hash", threshold_overrides={"merge": 0.6}
        )
        return Store(settings, embedder=HashEmbedder())

    items = [
        RememberItem("We have a garden", ["gardens", *(f"topic {i}" for i in range(20))]),
        RememberItem("Some more topics", [f"subject {i}" for i in range(20)]),
        RememberItem("The garden is big", ["garden", "lawn"]),
        RememberItem("It is green", ["garden"]),
    ]
    with fresh("one-by-one") as one_by_one, fresh("batch") as batch:
        told = [one_by_one.remember(i.content, i.keys) for i in items]
        done = batch.remember_batch(items)
        for outcomes in (told, done):
            third = [(k.label, k.resolution, k.merged_into) for k in outcomes[2].keys]
            assert third == [("garden", "alias", "gardens"), ("lawn", "new", None)]
            assert outcomes[2].keys[0].key_id == outcomes[0].keys[0].key_id
            assert [(k.label, k.resolution) for k in outcomes[3].keys] == [("gardens", "existing")]
        assert done[2].keys[0].similarity == pytest.approx(told[2].keys[0].similarity, abs=1e-6)
        for one, other in zip(told, done, strict=True):
            assert [(k.label, k.resolution) for k in one.keys] == [
                (k.label, k.resolution) for k in other.keys
            ]
        assert len(batch.state.keys) == len(one_by_one.state.keys) == 42


def test_a_batch_matches_its_labels_with_the_graph_in_bounded_memory(
    make_store: Callable[..., Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every new concept label of a batch is compared with every key of the graph: a chunk of
    labels at a time, so the scores held are not keys x labels (500 items of 24 labels at
    50,000 keys made a matrix of 2.4 GB), and a label past the first chunk still merges."""
    import tracemalloc

    from keytrail.core import decide

    store = make_store(threshold_overrides={"merge": 0.6})
    stored = [
        RememberItem(f"stored {i}", [f"stored {i} {j}" for j in range(24)]) for i in range(200)
    ]
    stored.append(RememberItem("We have gardens", ["gardens"]))
    store.remember_batch(stored)
    store.key_vectors()  # the graph's rows, read before the batch is measured
    monkeypatch.setattr(decide, "LABEL_CHUNK", 16, raising=False)
    items = [RememberItem(f"new {i}", [f"new {i} {j}" for j in range(24)]) for i in range(100)]
    items.append(RememberItem("The garden is big", ["garden"]))
    labels = sum(len(item.keys or ()) for item in items)
    tracemalloc.start()
    try:
        done = store.remember_batch(items)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    every_score = len(store.key_vectors()) * labels * 4  # float32, all labels at once
    assert peak < every_score / 2  # about a quarter with chunks of 16 labels
    (garden,) = done[-1].keys
    assert (garden.resolution, garden.merged_into) == ("alias", "gardens")


def test_correct_promotes_the_keys_it_is_given(make_store: Callable[..., Store]) -> None:
    store = make_store()
    old = store.remember("Mia likes Berlin", ["berlin"])
    fixed = store.correct(old.memory_id, "Mia loves Berlin", ["Berlin"], {"Berlin": "proper_noun"})
    assert [(k.type, k.resolution) for k in fixed.keys] == [("proper_noun", "promoted")]
    assert key_type(store, "berlin") == "proper_noun"


def test_the_command_line_says_promoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYTRAIL_EMBEDDER", "hash")
    home = str(tmp_path / "store")
    assert main(["remember", "--home", home, "Paris is lovely", "-k", "paris"]) == 0
    assert main(["remember", "--home", home, "Dana flies to Paris", "-n", "Paris"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].endswith("  paris [name] promoted"), out


def test_a_label_given_both_ways_is_spelled_as_the_name(
    make_store: Callable[..., Store], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """keys=["paris"] with key_types={"Paris": "name"} is one key, a name, spelled "Paris": the
    caller told how the name is written. A concept given twice keeps its first spelling."""
    store = make_store()
    told = store.remember("I went to Paris in May", ["paris"], key_types={"Paris": "name"})
    assert [(k.label, k.type) for k in told.keys] == [("Paris", "name")]
    plain = store.remember("Rome was hot", ["ROME", "rome"])
    assert [(k.label, k.type) for k in plain.keys] == [("ROME", "concept")]
    store.close()
    home = str(tmp_path / "cli")
    assert main(["remember", "--home", home, "Off to Berlin", "-k", "berlin", "-n", "Berlin"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("  Berlin [name] new")
