"""The domain: the Store with its commands and queries, configuration, embedders, scoring."""

from keytrail.events import (
    CorruptLog,
    InvalidInput,
    KeytrailError,
    NoStore,
    NotFound,
    StoreError,
    require_log,
)

from .config import Limits, Settings
from .embedders import Embedder, FastEmbedder, HashEmbedder, make_embedder
from .profiles import PROFILES, Thresholds, profile_for
from .results import to_dict
from .store import RememberItem, Store, open_store

__all__ = [
    "PROFILES",
    "CorruptLog",
    "Embedder",
    "FastEmbedder",
    "HashEmbedder",
    "InvalidInput",
    "KeytrailError",
    "Limits",
    "NoStore",
    "NotFound",
    "RememberItem",
    "Settings",
    "Store",
    "StoreError",
    "Thresholds",
    "make_embedder",
    "open_store",
    "profile_for",
    "require_log",
    "to_dict",
]
