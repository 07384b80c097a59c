"""Configuration: every constant in one place, each overridable by a KEYTRAIL_* variable.

Fold rules (depth step, weakening, Hebbian step and clamps) are written into the log when a store
is created, so changing their defaults here never rewrites the past. Everything else is a
query-time or input-limit knob.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keytrail.events import FoldRules, InvalidInput

from .profiles import Thresholds


@dataclass(frozen=True)
class Limits:
    """Input limits. Anything past them is refused with an error naming the field and limit."""

    content_chars: int = 20_000
    keys_per_memory: int = 24
    key_chars: int = 100
    batch_items: int = 500
    related_to: int = 32
    source_chars: int = 200
    query_chars: int = 2_000
    ttl_seconds: int = 10 * 365 * 24 * 3600
    page: int = 200
    top_k: int = 100
    #: characters of a knowledge-graph entity name, entity type or relation type
    kg_name_chars: int = 200


@dataclass(frozen=True)
class HybridParams:
    """Query-time knobs of direct hybrid recall (`recall_memories`), each a KEYTRAIL_HYBRID_*."""

    #: reciprocal rank fusion: a list's item at rank r adds weight/(rrf_k + r)
    rrf_k: float = 60.0
    weight_bm25: float = 1.0
    weight_dense: float = 1.0
    weight_keys: float = 1.0
    #: candidates each signal contributes before fusion
    candidates: int = 100
    #: default breadth-first hops over shared keys and related_to (callers may ask 0-5)
    hops: int = 1
    #: a memory reached at hop h scores its parent's score x hop_decay^h (x edge specificity)
    hop_decay: float = 0.3
    #: memories expanded from per hop, and neighbours taken through one key
    fanout: int = 10
    #: results under this fused score (1.0 = first in every signal) are dropped
    min_score: float = 0.005
    #: how much of the time factor applies: score x (1 - w + w x time factor)
    time_weight: float = 1.0
    #: Hebbian step on the links that led to returned memories (explored-but-unreturned links
    #: lose the store's hebbian_decay)
    reinforce: float = 0.01


@dataclass(frozen=True)
class Settings:
    home: Path = field(default_factory=lambda: Path.home() / ".keytrail")
    embedder: str = "fastembed"
    model: str | None = None
    model_path: str | None = None
    #: dimension of an OpenAI-compatible model keytrail does not know (else asked once)
    embed_dim: int | None = None
    default_namespace: str = "default"
    limits: Limits = field(default_factory=Limits)
    hybrid: HybridParams = field(default_factory=HybridParams)
    rules: FoldRules = field(default_factory=FoldRules)
    threshold_overrides: dict[str, float] = field(default_factory=dict)
    #: days in the time factor 0.5 + 0.5·exp(−age·(1−0.7·depth)/decay_days)
    time_decay_days: float = 30.0
    #: a key with at least this many active memories in a namespace is a hub
    hub_min: int = 3
    #: write a key-graph snapshot after this many events past the last one
    snapshot_every: int = 10_000
    segment_bytes: int = 64 * 1024 * 1024
    #: MCP tool sets to serve: "keygraph" (associative memory), "knowledge_graph" (entities)
    toolsets: tuple[str, ...] = ("keygraph",)
    #: namespace of knowledge-graph observations; None: the default namespace
    kg_namespace: str | None = None

    #: reads through a key carrying the same query after which the query becomes its alias
    alias_after_reads: int = 3
    #: learned aliases a key may hold at once
    learned_aliases_per_key: int = 5
    #: a learned alias is dropped after this many reads through its key that did not use it
    alias_unused_reads: int = 50

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from KEYTRAIL_* variables, then explicit overrides (e.g. command-line flags)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        if "KEYTRAIL_HOME" in env:
            values["home"] = Path(env["KEYTRAIL_HOME"]).expanduser()
        for name, var in (
            ("embedder", "KEYTRAIL_EMBEDDER"),
            ("model", "KEYTRAIL_EMBED_MODEL"),
            ("model_path", "KEYTRAIL_EMBED_MODEL_PATH"),
            ("default_namespace", "KEYTRAIL_NAMESPACE"),
            ("kg_namespace", "KEYTRAIL_KG_NAMESPACE"),
        ):
            if env.get(var):
                values[name] = env[var]
        for name, var, kind in (
            ("time_decay_days", "KEYTRAIL_TIME_DECAY_DAYS", float),
            ("hub_min", "KEYTRAIL_HUB_MIN", int),
            ("snapshot_every", "KEYTRAIL_SNAPSHOT_EVERY", int),
            ("segment_bytes", "KEYTRAIL_SEGMENT_BYTES", int),
            ("embed_dim", "KEYTRAIL_EMBED_DIM", int),
            ("alias_after_reads", "KEYTRAIL_ALIAS_AFTER_READS", int),
            ("learned_aliases_per_key", "KEYTRAIL_LEARNED_ALIASES_PER_KEY", int),
            ("alias_unused_reads", "KEYTRAIL_ALIAS_UNUSED_READS", int),
        ):
            if env.get(var):
                values[name] = _parse(var, env[var], kind)
        values["rules"] = _override(FoldRules(), "KEYTRAIL_", env)
        values["limits"] = _override(Limits(), "KEYTRAIL_MAX_", env)
        values["hybrid"] = _override(HybridParams(), "KEYTRAIL_HYBRID_", env)
        values["threshold_overrides"] = {
            f.name: _parse(
                f"KEYTRAIL_THRESHOLD_{f.name.upper()}",
                env[f"KEYTRAIL_THRESHOLD_{f.name.upper()}"],
                float,
            )
            for f in dataclasses.fields(Thresholds)
            if env.get(f"KEYTRAIL_THRESHOLD_{f.name.upper()}")
        }
        if env.get("KEYTRAIL_TOOLSETS"):
            values["toolsets"] = parse_toolsets(env["KEYTRAIL_TOOLSETS"], "KEYTRAIL_TOOLSETS")
        values.update({k: v for k, v in overrides.items() if v is not None})
        if isinstance(values.get("home"), str):
            values["home"] = Path(values["home"]).expanduser()
        return cls(**values)


@dataclass(frozen=True)
class Variable:
    """One KEYTRAIL_* setting, as `keytrail serve --help` lists it and as a flag sets it."""

    env: str
    kind: type[Any]
    default: Any
    help: str

    @property
    def flag(self) -> str:
        """`KEYTRAIL_MAX_CONTENT_CHARS` -> `--max-content-chars`."""
        return "--" + self.env.removeprefix("KEYTRAIL_").lower().replace("_", "-")


_SCALAR_HELP = {
    "time_decay_days": "days in the time factor 0.5 + 0.5*exp(-age*(1-0.7*depth)/days)",
    "hub_min": "a key with at least this many active memories in a namespace is a hub",
    "snapshot_every": "write a key-graph snapshot after this many new events",
    "segment_bytes": "start a new log segment past this size",
}


def tunable_variables() -> list[Variable]:
    """Every KEYTRAIL_* setting beyond the store options, in the order `serve --help` shows them.

    Store options (KEYTRAIL_HOME, _EMBEDDER, _EMBED_MODEL, _EMBED_MODEL_PATH, _NAMESPACE) have
    flags of their own on every verb.
    """
    defaults = Settings()
    found = [
        Variable(
            f"KEYTRAIL_{name.upper()}", type(getattr(defaults, name)), getattr(defaults, name), h
        )
        for name, h in _SCALAR_HELP.items()
    ]
    found += [
        Variable(
            f"KEYTRAIL_MAX_{f.name.upper()}",
            type(getattr(defaults.limits, f.name)),
            getattr(defaults.limits, f.name),
            f"input limit: {f.name.replace('_', ' ')}",
        )
        for f in dataclasses.fields(Limits)
    ]
    import msgspec

    found += [
        Variable(
            f"KEYTRAIL_{f.name.upper()}",
            float,
            f.default,
            f"fold rule, fixed in a new store's log: {f.name.replace('_', ' ')}",
        )
        for f in msgspec.structs.fields(FoldRules)
    ]
    found += [
        Variable(
            f"KEYTRAIL_THRESHOLD_{f.name.upper()}",
            float,
            None,
            f"similarity threshold: {f.name.replace('_', ' ')}",
        )
        for f in dataclasses.fields(Thresholds)
    ]
    return found


TOOLSETS = ("keygraph", "knowledge_graph")


def parse_toolsets(raw: str, field: str = "toolsets") -> tuple[str, ...]:
    """A comma-separated list of tool set names, e.g. "keygraph,knowledge_graph"."""
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    unknown = [n for n in names if n not in TOOLSETS]
    if unknown or not names:
        raise InvalidInput(
            field, f"unknown tool set(s) {unknown or [raw]}", limit=", ".join(TOOLSETS)
        )
    return names


def _parse(var: str, raw: str, kind: type[Any]) -> Any:
    try:
        return kind(raw)
    except ValueError:
        raise InvalidInput(var, f"not a valid {kind.__name__}: {raw!r}") from None


def _override(obj: Any, prefix: str, env: Mapping[str, str]) -> Any:
    """A copy of a FoldRules or Limits with fields replaced by `<prefix><FIELD>` variables."""
    import msgspec

    names = (
        [f.name for f in msgspec.structs.fields(obj)]
        if isinstance(obj, msgspec.Struct)
        else [f.name for f in dataclasses.fields(obj)]
    )
    changes: dict[str, Any] = {}
    for name in names:
        var = prefix + name.upper()
        if env.get(var):
            changes[name] = _parse(var, env[var], type(getattr(obj, name)))
    if not changes:
        return obj
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(obj, **changes)
    return dataclasses.replace(obj, **changes)
