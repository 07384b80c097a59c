"""The cost of `GraphState.key_for_label` when a non-ASCII word is no label; prints one JSON object.

Every word and phrase of a recall query is looked up as a label, and most are no label, so the
miss is the common case. A non-ASCII miss looks further than an ASCII one: the NFD form, the NFC
form, then an index of the labels an old log stored unnormalised (built on the first such miss
of a state object, from all its labels). Measured on a state of `--labels` labels, a quarter of
them non-ASCII (all NFC, as every label written since labels were normalised):

- `first_miss_ms`: the first non-ASCII miss of a new state object (it builds the index), the
  best of 5 fresh states;
- `miss_us` against `baseline_miss_us`: one later miss, and the same miss by the lookup before
  the index (label, then NFD form), alternated in the same process, `--rounds` times;
- `first_loose_ms`: the first `loose_keys` of a new state object, which builds recall's index
  of labels by their accent-free `loose_form` (every non-ASCII label here has an accent), the
  best of 5 fresh states.
"""

from __future__ import annotations

import argparse
import json
import time
import unicodedata

from keytrail.projections.keygraph import GraphState

MISSES = ["crème brûlée", "zoë ångström", "привет мир", "naïve"]


def baseline_lookup(state: GraphState, label: str) -> str | None:
    """key_for_label before the index of unnormalised labels (label, then its NFD form)."""
    key_id = state.labels.get(label.casefold())
    if key_id is None and not label.isascii():
        key_id = state.labels.get(unicodedata.normalize("NFD", label).casefold())
    return key_id


def current_lookup(state: GraphState, label: str) -> str | None:
    key = state.key_for_label(label)
    return key.id if key is not None else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lookups", type=int, default=100_000)
    args = parser.parse_args()
    labels = {(f"label{i}" if i % 4 else f"café{i}"): f"k_{i:010d}" for i in range(args.labels)}
    firsts = []
    for _ in range(5):
        state = GraphState(labels=dict(labels))
        start = time.perf_counter()
        state.key_for_label("zoë")
        firsts.append(time.perf_counter() - start)
    loose = []
    for _ in range(5):
        state = GraphState(labels=dict(labels))
        start = time.perf_counter()
        state.loose_keys(["zoë"])
        loose.append(time.perf_counter() - start)
    repeats = max(1, args.lookups // len(MISSES))
    timings: dict[str, list[float]] = {"baseline_miss_us": [], "miss_us": []}
    for _ in range(args.rounds):
        for name, lookup in (("baseline_miss_us", baseline_lookup), ("miss_us", current_lookup)):
            start = time.perf_counter()
            for _ in range(repeats):
                for label in MISSES:
                    lookup(state, label)
            per_call = (time.perf_counter() - start) / (repeats * len(MISSES))
            timings[name].append(round(per_call * 1e6, 3))
    print(
        json.dumps(
            {
                "labels": args.labels,
                "non_ascii_labels": (args.labels + 3) // 4,
                "first_miss_ms": round(min(firsts) * 1e3, 3),
                "first_loose_ms": round(min(loose) * 1e3, 3),
                **timings,
            }
        )
    )


if __name__ == "__main__":
    main()
