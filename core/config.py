"""Configuration: every constant in one place, each overridable by a KEYTRAIL_* variable.

Fold rules (depth step, weakening, Hebbian step and clamps) are written into the log when a store
is created, so changing their defaults here never rewrites the past. Everything else is a
query-time or input-limit knob.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keytrail.events import FoldRules, InvalidInput
from keytrail.events.errors import quoted

from .profiles import Thresholds

#: Items a paginated call answers when it is given no `limit` (`Limits.default_page`)
DEFAULT_PAGE = 50
#: The same for `read_key`, whose pages are ranked ids an agent reads from the top
KEY_PAGE = 20
#: The same for `get_conversation`: the latest turns, each of which may be long
CONVERSATION_PAGE = 20
#: The same for `related`: the memories nearest one, best first
RELATED_PAGE = 10
#: Results `recall` and `recall_memories` return when given no `top_k` (`Limits.default_top_k`)
DEFAULT_TOP_K = 10


@dataclass(frozen=True)
class Limits:
    """Input limits. Anything past them is refused with an error naming the field and limit."""

    content_chars: int = 20_000
    keys_per_memory: int = 24
    #: characters of a key label or alias: as many as an entity name, since an entity is a key
    key_chars: int = 200
    batch_items: int = 500
    related_to: int = 32
    source_chars: int = 200
    query_chars: int = 2_000
    ttl_seconds: int = 10 * 365 * 24 * 3600
    page: int = 200
    top_k: int = 100
    #: characters of a knowledge-graph entity name, entity type or relation type
    kg_name_chars: int = 200

    @property
    def entity_name_chars(self) -> int:
        """Characters of an entity's name: its key's label too, so no more than a key's
        (KEYTRAIL_MAX_KEY_CHARS set lower made entities no `remember(keys=[name])` took)."""
        return min(self.kg_name_chars, self.key_chars)

    def default_page(self, preferred: int = DEFAULT_PAGE) -> int:
        """The page a paginated call answers when no `limit` is given: `preferred`, or the
        page limit if that is lower (a default the store would refuse is no default)."""
        return min(preferred, self.page)

    def default_top_k(self) -> int:
        """The `top_k` of a recall given none: DEFAULT_TOP_K, or the top_k limit if that is
        lower (as for pages: a default the store would refuse is no default)."""
        return min(DEFAULT_TOP_K, self.top_k)


#: How recall_memories fuses its signals: "score" (scaled scores, the default) or "rrf"
FUSIONS = ("score", "rrf")


@dataclass(frozen=True)
class HybridParams:
    """Query-time knobs of direct hybrid recall (`recall_memories`), each a KEYTRAIL_HYBRID_*."""

    #: "score": each signal's scores are scaled to 0..1 (BM25 and keys by the best hit, dense
    #: as (cosine - mean cosine) / (best - mean)) and summed with the weights below. "rrf":
    #: reciprocal rank fusion, a list's item at rank r adds weight / (rrf_k + r). Score fusion
    #: is the default: on LoCoMo, RRF let memories mid-list in both BM25 and the weak dense
    #: list outrank BM25's clear top hits (BENCHMARKS.md).
    fusion: str = "score"
    rrf_k: float = 60.0
    #: per-signal weights, in either fusion. BM25 leads because a small embedding model
    #: (MiniLM) ranks much worse on its own.
    weight_bm25: float = 1.0
    weight_dense: float = 0.5
    #: low because extracted keys mostly repeat content words BM25 already scores
    weight_keys: float = 0.1
    #: candidates each signal contributes before fusion
    candidates: int = 100
    #: default breadth-first hops over shared keys and related_to (callers may ask 0-5)
    hops: int = 1
    #: a memory reached at hop h scores its parent's score x hop_decay^h (x edge specificity)
    hop_decay: float = 0.3
    #: memories expanded from per hop, and neighbours taken through one key
    fanout: int = 10
    #: results under this score are dropped. Both fusions are normalised so 1.0 is first in
    #: every signal; score fusion starts at 0, but under rrf any listed memory has at least
    #: the floor of one last in the lowest-weighted list, so there the gate is
    #: floor + min_score x (1 - floor): the same share of the range above "merely listed"
    min_score: float = 0.005
    #: how much of the time factor applies: score x (1 - w + w x time factor). Mild: an old
    #: fact is no less true, recency only breaks near-ties
    time_weight: float = 0.2
    #: a query naming a period (a day, month or year) raises memories of that period by this
    #: share; memories told up to date_grace_days after it count (things are told afterwards)
    date_boost: float = 0.5
    date_grace_days: float = 7.0
    #: share of top_k ranked by the direct score alone; the rest also count session context
    direct_share: float = 0.5
    #: session context: a memory gains this x the score of its best adjacent turn (the turn
    #: before or after it in the same session and namespace)...
    context_neighbour: float = 0.5
    #: ... and this x the best score of any result in its session
    context_session: float = 0.2
    #: session support in the head: a memory ranks there by score + this x the sum of the
    #: `support_turns` best scores of other candidates in its session, so a turn whose session
    #: holds several strong hits outranks an isolated hit of equal score (0: off)
    head_support: float = 0.2
    support_turns: int = 1
    #: session diversity in the head: each head pick already from a memory's session
    #: multiplies its head rank score by (1 - head_diversity) (0: off). Support and diversity
    #: together raised LoCoMo session recall@5 (a turn of an evidence session in the top 5)
    #: 89.2 -> 90.5 held out, at 2 points of recall_any@5 (BENCHMARKS.md)
    head_diversity: float = 0.2
    #: Hebbian step on the links that led to returned memories (explored-but-unreturned links
    #: lose the store's hebbian_decay)
    reinforce: float = 0.01

    def __post_init__(self) -> None:
        if self.fusion not in FUSIONS:
            raise InvalidInput(
                "fusion", f"unknown fusion {self.fusion!r}", limit=", ".join(FUSIONS)
            )
        if not self.rrf_k > 0:
            raise InvalidInput("rrf_k", f"must be positive, not {self.rrf_k}")


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
    #: the zone (an IANA name) a query's named days, months and years are read in
    time_zone: str = "UTC"
    #: write a key-graph snapshot after this many events past the last one
    snapshot_every: int = 10_000
    #: most archived snapshots kept for time travel: past that they thin out evenly, so their
    #: disk grows with the graph, not with the graph times the number of intervals
    snapshot_keep: int = 100
    segment_bytes: int = 64 * 1024 * 1024
    #: threads the local embedding model (fastembed's ONNX runtime) runs on; 0: one per core.
    #: One by default: a query or a remember embeds a text or a few, which a second thread does
    #: not speed up, while its threads spin between calls (BENCHMARKS, "Embedding threads").
    embed_threads: int = 1
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
        # Empty is unset, as for every KEYTRAIL_* variable: "" would mean the current directory.
        if env.get("KEYTRAIL_HOME"):
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
                if name in _NAMESPACES:
                    _check_namespace(var, env[var])
                if name == "embedder":
                    _check_embedder(var, env[var])
        for name, (kind, _help) in _SCALARS.items():
            var = f"KEYTRAIL_{name.upper()}"
            if env.get(var):
                values[name] = _parse(var, env[var], kind)
        for attr, prefix, _template in _GROUPS:
            values[attr] = _override(getattr(_DEFAULTS, attr), prefix, env)
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
        _check_clamp(values["rules"], env)
        values.update({k: v for k, v in overrides.items() if v is not None})
        for name in _NAMESPACES:  # a namespace given as an override (a command-line flag)
            if isinstance(overrides.get(name), str):
                _check_namespace(name.removeprefix("default_"), overrides[name])
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
    #: the values allowed, for a setting that names one of a few (None: any of its kind)
    choices: tuple[Any, ...] | None = None
    #: what a default of None means, as `serve --help` says it
    unset: str = "the model's profile"

    @property
    def flag(self) -> str:
        """`KEYTRAIL_MAX_CONTENT_CHARS` -> `--max-content-chars`."""
        return "--" + self.env.removeprefix("KEYTRAIL_").lower().replace("_", "-")


class TimeZone(str):
    """An IANA time zone name this machine knows ("Europe/Berlin", "UTC"); ValueError if not."""

    __slots__ = ()

    def __new__(cls, name: str) -> TimeZone:
        try:
            zone_info(name)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            raise ValueError(name) from None
        return super().__new__(cls, name)


@functools.cache
def zone_info(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


#: Scalar settings, each set by KEYTRAIL_<NAME>: name -> (type, help).
_SCALARS: dict[str, tuple[type[Any], str]] = {
    "time_decay_days": (float, "days in the time factor 0.5 + 0.5*exp(-age*(1-0.7*depth)/days)"),
    "hub_min": (int, "a key with at least this many active memories in a namespace is a hub"),
    "time_zone": (
        TimeZone,
        "the zone a query's named days, months and years are read in (an IANA name)",
    ),
    "snapshot_every": (int, "write a key-graph snapshot after this many new events"),
    "snapshot_keep": (int, "most archived key-graph snapshots kept for time travel"),
    "segment_bytes": (int, "start a new log segment past this size"),
    "embed_threads": (int, "threads the local embedding model runs on (0: one per core)"),
    "embed_dim": (
        int,
        "dimension of an unknown OpenAI-compatible model, of shorter text-embedding-3 vectors, "
        "or of hash vectors",
    ),
    "alias_after_reads": (int, "reads through a key with the same query that make it an alias"),
    "learned_aliases_per_key": (int, "learned aliases a key may hold at once"),
    "alias_unused_reads": (int, "reads through a key without its learned alias that drop it"),
}

#: Scalars unset by default that no model profile fills: variable -> what unset means.
_UNSET = {"KEYTRAIL_EMBED_DIM": "the model's own; 256 for hash"}

#: Settings whose value is one of a few names: variable -> the names.
_CHOICES: dict[str, tuple[str, ...]] = {"KEYTRAIL_HYBRID_FUSION": FUSIONS}

#: Groups of settings, each field set by <prefix><FIELD>: (Settings attribute, prefix, help).
_GROUPS = (
    ("limits", "KEYTRAIL_MAX_", "input limit: {}"),
    ("rules", "KEYTRAIL_", "fold rule, fixed in a new store's log: {}"),
    ("hybrid", "KEYTRAIL_HYBRID_", "direct recall: {}"),
)

_DEFAULTS = Settings()


def _field_names(obj: Any) -> list[str]:
    import msgspec

    if isinstance(obj, msgspec.Struct):
        return [f.name for f in msgspec.structs.fields(obj)]
    return [f.name for f in dataclasses.fields(obj)]


def tunable_variables() -> list[Variable]:
    """Every KEYTRAIL_* setting beyond the store options, in the order `serve --help` shows them.

    Store options (KEYTRAIL_HOME, _EMBEDDER, _EMBED_MODEL, _EMBED_MODEL_PATH, _NAMESPACE,
    _KG_NAMESPACE, _TOOLSETS) have flags of their own. `Settings.from_env` reads the same
    tables, so a setting cannot have a variable without a flag.
    """
    found = [
        Variable(env, kind, getattr(_DEFAULTS, name), help_, unset=_UNSET.get(env, Variable.unset))
        for name, (kind, help_) in _SCALARS.items()
        for env in [f"KEYTRAIL_{name.upper()}"]
    ]
    for attr, prefix, template in _GROUPS:
        group = getattr(_DEFAULTS, attr)
        found += [
            Variable(
                prefix + name.upper(),
                type(getattr(group, name)),
                getattr(group, name),
                template.format(name.replace("_", " ")),
                _CHOICES.get(prefix + name.upper()),
            )
            for name in _field_names(group)
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


#: hops a caller may ask of recall_memories, so also the most its default may be
MAX_HOPS = 5

#: Settings that name a namespace (checked like a namespace a call gives)
_NAMESPACES = ("default_namespace", "kg_namespace")

#: Numeric settings with a ceiling too (inclusive): depth and the factors and shares that
#: multiply it or a score are 0..1 (past 1 a score goes negative, depth past its range, or a
#: memory reached by a hop outscores the one it was reached from, overflowing to inf),
#: the two durations must keep a date computed from them inside year 9999, a vector's
#: width must fit in memory, and each input limit (KEYTRAIL_MAX_*) must stay a size a call
#: can be served at.
_AT_MOST: dict[str, float] = {
    "KEYTRAIL_HYBRID_HOPS": MAX_HOPS,
    "KEYTRAIL_MAX_TTL_SECONDS": 1000 * 365 * 24 * 3600,
    # Input limits: they had none, so `--max-page` of 1,000 digits served (its tool schemas
    # advertising that maximum) and `--max-content-chars` of as many failed as a traceback
    # (a schema's maxLength is a machine integer). Each is 20 to 100 times its default:
    # what it bounds is handled whole in one call (embedded, indexed, written as one log
    # line, answered as one message), and a `serve --http` request body may be as large as a
    # `remember_batch` at every limit (request_body_limit).
    #: a memory's text (an observation's), embedded and indexed whole: about 1 to 4 MB
    "KEYTRAIL_MAX_CONTENT_CHARS": 1_000_000,
    #: keys told with a memory, each a label resolved against the store's keys on a write
    "KEYTRAIL_MAX_KEYS_PER_MEMORY": 1_000,
    #: a key's label or alias, an entity's name or type, a memory's source: short names
    "KEYTRAIL_MAX_KEY_CHARS": 10_000,
    "KEYTRAIL_MAX_KG_NAME_CHARS": 10_000,
    "KEYTRAIL_MAX_SOURCE_CHARS": 10_000,
    #: memories of one remember_batch (or entities of one call), embedded and written at once
    "KEYTRAIL_MAX_BATCH_ITEMS": 10_000,
    #: memories one memory's related_to names, each looked up on a write
    "KEYTRAIL_MAX_RELATED_TO": 1_000,
    #: a query, embedded and split into a BM25 query of its words on every recall
    "KEYTRAIL_MAX_QUERY_CHARS": 100_000,
    #: items of one answer (each memory up to KEYTRAIL_MAX_CONTENT_CHARS), results of a recall
    "KEYTRAIL_MAX_PAGE": 10_000,
    "KEYTRAIL_MAX_TOP_K": 10_000,
    "KEYTRAIL_HYBRID_DATE_GRACE_DAYS": 100 * 365,
    "KEYTRAIL_DEPTH_STEP": 1,
    "KEYTRAIL_DEPTH_MAX": 1,
    "KEYTRAIL_WEAKEN_THRESHOLD": 1,
    "KEYTRAIL_WEAKEN_DEEP": 1,
    "KEYTRAIL_WEAKEN_SHALLOW": 1,
    "KEYTRAIL_HYBRID_TIME_WEIGHT": 1,
    "KEYTRAIL_HYBRID_HEAD_DIVERSITY": 1,
    "KEYTRAIL_HYBRID_HOP_DECAY": 1,
    #: every embedding allocates rows this wide (the largest models are a few thousand)
    "KEYTRAIL_EMBED_DIM": 65_536,
    #: each is an OS thread the model's runtime starts at once: more than cores is only waste
    "KEYTRAIL_EMBED_THREADS": 1024,
    #: weights and boosts that add to a score (defaults 0.1 to 1): only their ratios matter,
    #: and at 1e308 a score overflowed to inf, which no JSON answer can carry
    **dict.fromkeys(
        (
            "KEYTRAIL_HYBRID_WEIGHT_BM25",
            "KEYTRAIL_HYBRID_WEIGHT_DENSE",
            "KEYTRAIL_HYBRID_WEIGHT_KEYS",
            "KEYTRAIL_HYBRID_DATE_BOOST",
            "KEYTRAIL_HYBRID_DIRECT_SHARE",
            "KEYTRAIL_HYBRID_CONTEXT_NEIGHBOUR",
            "KEYTRAIL_HYBRID_CONTEXT_SESSION",
            "KEYTRAIL_HYBRID_HEAD_SUPPORT",
        ),
        1000,
    ),
}

#: Numeric settings that must be above zero: sizes, counts and divisors (0 breaks them).
#: Every other numeric setting must be at least 0, except thresholds (cosines, -1 to 1).
_POSITIVE = frozenset(
    {
        "KEYTRAIL_TIME_DECAY_DAYS",
        "KEYTRAIL_HUB_MIN",
        "KEYTRAIL_SNAPSHOT_EVERY",
        "KEYTRAIL_SNAPSHOT_KEEP",
        "KEYTRAIL_SEGMENT_BYTES",
        "KEYTRAIL_EMBED_DIM",
        "KEYTRAIL_ALIAS_AFTER_READS",
        "KEYTRAIL_HYBRID_CANDIDATES",
        "KEYTRAIL_HYBRID_FANOUT",
        "KEYTRAIL_HYBRID_RRF_K",
    }
)


def _parse(var: str, raw: str, kind: type[Any]) -> Any:
    choices = _CHOICES.get(var)
    if choices is not None and raw not in choices:
        raise InvalidInput(
            var, f"not one of {', '.join(choices)}: {quoted(raw)}", limit=", ".join(choices)
        )
    if kind in (int, float):
        from .validation import floating, integer  # validation imports this module

        value = integer(var, raw) if kind is int else floating(var, raw)
    else:
        try:
            value = kind(raw)
        except ValueError:
            raise InvalidInput(var, f"not a valid {kind.__name__}: {quoted(raw)}") from None
    if kind in (int, float):
        _check_range(var, raw, value)
    return value


def _check_range(var: str, raw: str, value: float) -> None:
    """Refuse a numeric setting no code path can use (nan, inf, a negative size, a zero divisor),
    so it fails here, named, rather than as a traceback deep in a query."""
    if isinstance(value, float) and not math.isfinite(value):  # an int of 400 digits is no float
        raise InvalidInput(var, f"{quoted(raw)} is not a finite number")
    if var.startswith("KEYTRAIL_THRESHOLD_"):
        # Each is compared with a cosine similarity, -1 to 1 (negatives meaningful): past an end
        # every pair meets it, or none does (--threshold-merge 1000 was taken).
        if not -1 <= value <= 1:
            raise InvalidInput(var, f"{quoted(raw)} is out of range", limit="-1 to 1, a cosine")
        return
    if var in _POSITIVE or var.startswith("KEYTRAIL_MAX_"):
        if value <= 0:
            raise InvalidInput(var, f"{quoted(raw)} is out of range", limit="above 0")
    elif value < 0:
        raise InvalidInput(var, f"{quoted(raw)} is out of range", limit="0 or more")
    ceiling = _AT_MOST.get(var)
    if ceiling is not None and value > ceiling:
        low = "above 0" if var in _POSITIVE or var.startswith("KEYTRAIL_MAX_") else "0"
        raise InvalidInput(var, f"{quoted(raw)} is out of range", limit=f"{low} to {ceiling}")


def _check_namespace(field: str, value: str) -> None:
    from .validation import NAMESPACE_CHARS, name  # validation imports this module

    name(field, value, NAMESPACE_CHARS)


def _check_embedder(var: str, value: str) -> None:
    """An embedder keytrail has, refused here by its variable rather than once the store's
    directories are made ("unknown embedder")."""
    from .embedders import EMBEDDERS  # it needs numpy, which settings alone do not

    if value not in EMBEDDERS:
        raise InvalidInput(var, f"unknown embedder {quoted(value)}", limit=", ".join(EMBEDDERS))


def _check_clamp(rules: FoldRules, env: Mapping[str, str]) -> None:
    """The link weight clamp [weight_min, weight_max] must not be inverted."""
    if rules.weight_min > rules.weight_max:
        var = "KEYTRAIL_WEIGHT_MIN" if env.get("KEYTRAIL_WEIGHT_MIN") else "KEYTRAIL_WEIGHT_MAX"
        raise InvalidInput(
            var,
            f"weight_min {rules.weight_min:g} is above weight_max {rules.weight_max:g}",
            limit="weight_min <= weight_max",
        )


def _override(obj: Any, prefix: str, env: Mapping[str, str]) -> Any:
    """A copy of a settings group with fields replaced by `<prefix><FIELD>` variables."""
    import msgspec

    changes: dict[str, Any] = {}
    for name in _field_names(obj):
        var = prefix + name.upper()
        if env.get(var):
            changes[name] = _parse(var, env[var], type(getattr(obj, name)))
    if not changes:
        return obj
    if isinstance(obj, msgspec.Struct):
        return msgspec.structs.replace(obj, **changes)
    return dataclasses.replace(obj, **changes)
