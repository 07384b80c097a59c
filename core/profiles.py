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
    # Calibrated on the scenario tests (tests/test_scenarios.py) with the real model:
    # apple~apples 0.77 (merge), apples~fruit 0.72 (keep apart), paraphrase 0.95 (dedup).
    "sentence-transformers/all-MiniLM-L6-v2": Thresholds(
        merge=0.76, dedup=0.90, contradiction=0.55, key_recall=0.45, content_recall=0.30,
        auto_link=0.60),
    # Feature hashing: cosine is token overlap, so thresholds sit higher.
    "hash": Thresholds(
        merge=0.80, dedup=0.92, contradiction=0.60, key_recall=0.35, content_recall=0.20,
        auto_link=0.60),
}

FALLBACK = "sentence-transformers/all-MiniLM-L6-v2"


def profile_for(model_id: str, overrides: dict[str, float] | None = None) -> Thresholds:
    """The thresholds for `model_id`, with overrides applied. Unknown models warn and fall back."""
    base = PROFILES.get(model_id)
    if base is None:
        warnings.warn(
            f"no similarity profile for model {model_id!r}; using {FALLBACK}'s. "
            "Set KEYTRAIL_THRESHOLD_* to calibrate.", stacklevel=2)
        base = PROFILES[FALLBACK]
    return dataclasses.replace(base, **(overrides or {}))
