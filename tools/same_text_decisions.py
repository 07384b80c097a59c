"""Whether two trees decide the same 200 remembers on a big store: run it under each tree's
PYTHONPATH and compare what it prints (`cmp`). On a copy of a built store (`bench_calls.py`'s
`built-100000`), one process, ids and clock fixed, it remembers 200 texts: retellings of the
store's texts and of its own (case, spacing, no-break spaces, tabs), and texts told in more
than one way (ligatures, ß, the Kelvin sign, decomposed accents, the Turkish İ, Greek final
sigma, kanji), under keys of their own and the store's. After the first 100 the store is
closed, a snapshot saved and the store opened again, so the last 100 find the first in the
snapshot's columns. Prints each new event, less its time and checksum.

    PYTHONPATH=OLD_TREE .venv/bin/python tools/same_text_decisions.py --store BUILT_100000 > a
    PYTHONPATH=. .venv/bin/python tools/same_text_decisions.py --store BUILT_100000 --fresh > b
    cmp a b

`--fresh`: a new `SameTexts` before each remember, as each one-shot `keytrail remember` has
(a tree without the same-text scan then builds the index 200 times).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from keytrail.server.entry import one_blas_thread

one_blas_thread()  # as the `keytrail` command does, before numpy loads

from keytrail.core import HashEmbedder, Settings, Store, decide  # noqa: E402
from keytrail.projections.snapshot import peek_text  # noqa: E402

#: Texts told more than one way: each line one fact
TOLD_WAYS = [
    "the \ufb01sh swam over the harbour at dawn",
    "the fish swam over the harbour at dawn",
    "THE FISH SWAM OVER THE HARBOUR AT DAWN",
    "Die Stra\u00dfe am Hafenbecken ist lang",
    "die strasse am hafenbecken ist lang",
    "DIE STRASSE AM HAFENBECKEN IST LANG",
    "Zo\u00eb drove the Volvo home",
    "Zoe\u0308 drove the volvo home",
    "ZO\u00cb DROVE THE VOLVO HOME",
    "\u0130zmir harbour report for Monday",
    "i\u0307zmir harbour report for monday",
    "izmir harbour report for monday",
    "probe reading 300 K overnight",
    "probe reading 300 \u212a overnight",
    "probe reading 300 k overnight",
    "the \ufb02oor was \ufb01xed by the o\ufb03ce",
    "the floor was fixed by the office",
    "Meeting moved from 3pm to 5pm on Monday",
    "meeting moved from 5pm to 3pm on monday",
    "meeting moved from 3pm to 5pm on Tuesday",
    "meeting  moved from 3pm to 5pm on monday",
    "\u03c3\u03af\u03c3\u03c5\u03c6\u03bf\u03c2 rolled the boulder",
    "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 rolled the boulder",
    "\u03c3\u03af\u03c3\u03c5\u03c6\u03bf\u03c3 rolled the boulder",
    "\u6771\u4eac harbour opened",
    "\u6771\u4eac HARBOUR OPENED",
    "\u6771\u4eacharbour opened",
    "ab",
    "AB",
    "a b",
    "ok",
    "OK",
    "\u0149 apostrophe n",
    "\u02bcn apostrophe n",
    "\u017ftrange long s words",
    "strange long s words",
    "Gr\u00fc\u00dfe aus K\u00f6ln",
    "GR\u00dcSSE AUS K\u00d6LN",
    "gr\u00fcsse aus k\u00f6ln",
    "caf\u00e9 cr\u00e8me br\u00fbl\u00e9e",
    "cafe\u0301 cre\u0300me bru\u0302le\u0301e",
    "CAF\u00c9 CR\u00c8ME BR\u00dbL\u00c9E",
]


def vary(text: str, way: int) -> str:
    words = text.split()
    return [
        text.upper(),
        "  " + text + "\n",
        "\u00a0".join(words),
        text.title(),
        text.replace(" ", "\t"),
        text.swapcase(),
    ][way % 6]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True, help="a built store (copied)")
    parser.add_argument("--fresh", action="store_true", help="a new SameTexts per remember")
    args = parser.parse_args()
    ids = itertools.count()

    class FixedIds:
        @staticmethod
        def token_hex(size: int) -> str:
            return f"{next(ids):0{2 * size}x}"

    decide.secrets = FixedIds  # type: ignore[assignment]
    start, ticks = datetime(2026, 11, 28, tzinfo=UTC), itertools.count()

    def clock() -> datetime:
        return start + timedelta(seconds=next(ticks))

    with tempfile.TemporaryDirectory(prefix="same-text-decisions-") as tmp:
        home = Path(tmp) / "store"
        shutil.copytree(args.store, home)

        def opened(every: int) -> Store:
            settings = Settings(home=home, embedder="hash", snapshot_every=every)
            return Store(settings, embedder=HashEmbedder(), clock=clock)

        store = opened(10**12)
        rng = random.Random(11)
        memories = store.state.memories
        stored = list(memories)
        texts: list[tuple[str, str, list[str]]] = []
        for j, i in enumerate(rng.sample(range(len(stored)), 60)):
            node = peek_text(memories, stored[i])
            namespace = node.namespace if j % 5 else "default"
            texts.append((vary(node.content, j), namespace, [f"retold {j}"]))
        for j, text in enumerate(TOLD_WAYS):
            texts.append((text, "default" if j % 4 else "side", [f"told {j % 7}"]))
        while len(texts) < 200:
            text, namespace, _ = rng.choice(texts)
            way = rng.randrange(6)
            key = rng.choice(["user", "other", "topic 42", f"again {len(texts)}"])
            texts.append((vary(text, way), namespace if way % 3 else "default", [key]))
        for n, (text, namespace, keys) in enumerate(texts):
            if n == 100:  # the first 100 into a snapshot, loaded lazily
                store.close()
                opened(1).close()
                store = opened(10**12)
            if args.fresh:
                store.same_texts = decide.SameTexts()
            store.remember(text, keys=keys, namespace=namespace)
        store.close()
        for path in sorted((home / "log").glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                event = json.loads(line)
                if event["at"] >= start.strftime("%Y-%m-%d"):
                    del event["at"], event["crc"]
                    print(json.dumps(event, sort_keys=True, ensure_ascii=False))


if __name__ == "__main__":
    main()
