"""Similarity thresholds per embedding model.

Cosine similarities are not comparable across models, so every decision that compares one
(merging a key into an alias, deduplicating a memory, flagging a contradiction, recalling a key)
uses a profile for the model in use. Each threshold can be overridden by a KEYTRAIL_* variable
(see `Settings`).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Thresholds:
    #: a new concept key at or above this cosine to an existing one becomes its alias
    merge: float
    #: a new memory at or above this cosine to an active one sharing a key supersedes it
    dedup: float
    #: a memory sharing a key in [contradiction, dedup) is flagged as a possible contradiction
    contradiction: float
    #: a concept key at or above this cosine to the query is recalled
    key_recall: float
    #: a memory content at or above this cosine to the query is a content-path candidate
    content_recall: float
    #: cosine at or above which a key is linked to a memory automatically
    auto_link: float


PROFILES: dict[str, Thresholds] = {
    # Calibrated with the real model on the pairs of tests/test_scenarios.py and ~90 more
    # (measured cosines; details in the scenario file's docstring):
    # - merge 0.76: apple~apples 0.771, berry~berries 0.761, preference~preferences 0.774 merge;
    #   apple~"Apple Inc" 0.753, apples~fruit 0.724, strawberries~raspberries 0.722 stay apart.
    #   Cosine alone cannot tell siblings from inflections: Monday~Tuesday 0.874,
    #   husband~wife 0.869, car~vehicle 0.870 score above child~children 0.706.
    # - dedup 0.90: paraphrases 0.905-0.989 (green tea 0.929) merge; peanut allergy rewording
    #   0.898 is only flagged. Changed facts in the same words also pass (age 34~41 0.928,
    #   "likes"~"does not like" 0.910, meeting Monday~Tuesday 0.991): the newer supersedes.
    # - contradiction 0.65: every changed fact measured sits at 0.673 or above (Berlin~Munich
    #   0.771, tea~coffee 0.719, vegetarian~eats meat 0.685); compatible facts on one topic
    #   mostly below (fruit~"likes strawberries" 0.607, dog Rex~walks Rex 0.613).
    # - key_recall 0.40: "Where does the user live?"~"home city" 0.43, "What did Newton
    #   discover?"~gravity 0.40 are found; unrelated query~key pairs peak at 0.35.
    "sentence-transformers/all-MiniLM-L6-v2": Thresholds(
        merge=0.76,
        dedup=0.90,
        contradiction=0.65,
        key_recall=0.40,
        content_recall=0.30,
        auto_link=0.60,
    ),
    # Feature hashing: cosine is token overlap, so thresholds sit higher.
    "hash": Thresholds(
        merge=0.80,
        dedup=0.92,
        contradiction=0.60,
        key_recall=0.35,
        content_recall=0.20,
        auto_link=0.60,
    ),
}

FALLBACK = "sentence-transformers/all-MiniLM-L6-v2"


def profile_for(model_id: str, overrides: dict[str, float] | None = None) -> Thresholds:
    """The thresholds for `model_id`, with overrides applied. Unknown models warn and fall back."""
    base = PROFILES.get(model_id)
    if base is None:
        warnings.warn(
            f"no similarity profile for model {model_id!r}; using {FALLBACK}'s. "
            "Set KEYTRAIL_THRESHOLD_* to calibrate.",
            stacklevel=2,
        )
        base = PROFILES[FALLBACK]
    return dataclasses.replace(base, **(overrides or {}))
