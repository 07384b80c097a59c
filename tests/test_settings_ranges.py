"""KEYTRAIL_* values no code path can use are refused when settings are read, by variable name.

Each of these was accepted, so `keytrail serve` started and then every call that used the
setting failed (an error naming a call field the caller never gave, or a bare OverflowError),
or the store was created with fold rules outside what the design allows.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import REPO, env_for, kt

from keytrail.core import InvalidInput, Settings
from keytrail.core.config import tunable_variables
from keytrail.core.profiles import Thresholds

THRESHOLDS = [f.name for f in dataclasses.fields(Thresholds)]


@pytest.mark.parametrize(
    ("var", "value"),
    [
        # recall_memories refused its own default: "hops: 7 is out of range (limit: 0 to 5)"
        ("KEYTRAIL_HYBRID_HOPS", "7"),
        # every remember/recall without a namespace failed naming "namespace"
        ("KEYTRAIL_NAMESPACE", "bad ns!"),
        ("KEYTRAIL_KG_NAMESPACE", "bad ns!"),
        # a ttl under this limit overflowed the expiry datetime (OverflowError in remember)
        ("KEYTRAIL_MAX_TTL_SECONDS", str(10**13)),
        # a dated query overflowed the period's end + grace (OverflowError in recall_memories)
        ("KEYTRAIL_HYBRID_DATE_GRACE_DAYS", "5000000"),
        # fold rules: depth is 0..1, weakening multiplies depth by a factor 0..1, and the link
        # clamp [weight_min, weight_max] must not be inverted
        ("KEYTRAIL_DEPTH_MAX", "3"),
        ("KEYTRAIL_WEAKEN_DEEP", "1000"),
        ("KEYTRAIL_WEAKEN_SHALLOW", "1.5"),
        ("KEYTRAIL_WEIGHT_MIN", "5"),
        # a share of the score: above 1 makes older memories' scores negative
        ("KEYTRAIL_HYBRID_TIME_WEIGHT", "5"),
        ("KEYTRAIL_HYBRID_HEAD_DIVERSITY", "1.5"),
        # no such embedder: refused only once the store's directories were made, without
        # naming the variable ("unknown embedder 'bogus'")
        ("KEYTRAIL_EMBEDDER", "bogus"),
        ("KEYTRAIL_EMBEDDER", "HASH"),
        # every embedding allocated rows of this width: a MemoryError traceback on the first
        # remember ("Unable to allocate 7.28 TiB"), after the store was made
        ("KEYTRAIL_EMBED_DIM", str(10**12)),
        # a decay that grows: a memory two hops away outscored the direct hit (7.2 against
        # 1.0), and at 1e308 the score was inf, served as null, which the MCP client refuses
        # ("Invalid structured content returned by tool recall_memories")
        ("KEYTRAIL_HYBRID_HOP_DECAY", "2"),
        ("KEYTRAIL_HYBRID_HOP_DECAY", "1e308"),
        # an additive weight or boost that large made a score inf ("score": Infinity)
        ("KEYTRAIL_HYBRID_CONTEXT_NEIGHBOUR", "1e308"),
        ("KEYTRAIL_HYBRID_CONTEXT_SESSION", "1e308"),
        ("KEYTRAIL_HYBRID_WEIGHT_BM25", "1e308"),
        ("KEYTRAIL_HYBRID_WEIGHT_DENSE", "1001"),
        # a cosine similarity is -1 to 1: a threshold past either end is met by every pair or
        # by none (--threshold-merge 1000 was taken)
        ("KEYTRAIL_THRESHOLD_MERGE", "1000"),
        ("KEYTRAIL_THRESHOLD_DEDUP", "1.0001"),
        ("KEYTRAIL_THRESHOLD_KEY_RECALL", "-1.5"),
    ],
)
def test_an_unusable_value_is_refused_naming_its_variable(var: str, value: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({var: value})
    assert caught.value.field == var


@pytest.mark.parametrize("var", [f"KEYTRAIL_THRESHOLD_{name.upper()}" for name in THRESHOLDS])
def test_a_threshold_is_a_cosine_from_minus_one_to_one(var: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({var: "1000"})
    assert str(caught.value) == f"{var}: '1000' is out of range (limit: -1 to 1, a cosine)"


@pytest.mark.parametrize(
    "value", ["٣", "１２", "1_000", "+5", "5.0", "0x10", "-" + "9" * 1000, "9" * 5000]
)
def test_an_integer_setting_takes_ascii_digits_and_is_quoted_short(value: str) -> None:
    """int() read other scripts' digits and underscores (KEYTRAIL_MAX_PAGE=٣ was 3); a value of
    1,000 digits failed as an OverflowError traceback, and a refused one was echoed whole."""
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({"KEYTRAIL_MAX_PAGE": value})
    assert caught.value.field == "KEYTRAIL_MAX_PAGE"
    assert len(caught.value.message) < 200, caught.value.message
    assert Settings.from_env({"KEYTRAIL_MAX_PAGE": " 42 "}).limits.page == 42


#: The most each input limit may be raised to (README, "Configuration")
LIMIT_CEILINGS = {
    "KEYTRAIL_MAX_CONTENT_CHARS": 1_000_000,
    "KEYTRAIL_MAX_KEYS_PER_MEMORY": 1_000,
    "KEYTRAIL_MAX_KEY_CHARS": 10_000,
    "KEYTRAIL_MAX_BATCH_ITEMS": 10_000,
    "KEYTRAIL_MAX_RELATED_TO": 1_000,
    "KEYTRAIL_MAX_SOURCE_CHARS": 10_000,
    "KEYTRAIL_MAX_QUERY_CHARS": 100_000,
    "KEYTRAIL_MAX_TTL_SECONDS": 1000 * 365 * 24 * 3600,
    "KEYTRAIL_MAX_PAGE": 10_000,
    "KEYTRAIL_MAX_TOP_K": 10_000,
    "KEYTRAIL_MAX_KG_NAME_CHARS": 10_000,
}


@pytest.mark.parametrize(
    "var", [v.env for v in tunable_variables() if v.env.startswith("KEYTRAIL_MAX_")]
)
def test_every_input_limit_has_a_ceiling(var: str) -> None:
    """They had none: --max-page of 1,000 digits served, its tool schemas advertising that
    maximum, and --max-content-chars of as many failed as a SchemaError traceback."""
    ceiling = LIMIT_CEILINGS[var]
    Settings.from_env({var: str(ceiling)})
    for value in (str(ceiling + 1), "9" * 1000):
        with pytest.raises(InvalidInput) as caught:
            Settings.from_env({var: value})
        said = str(caught.value)
        assert said.startswith(f"{var}: {value[:20]!r}"[:-1]), said
        assert said.endswith(f" is out of range (limit: above 0 to {ceiling})"), said
        assert len(said) < 200, said


#: What a float setting or flag is made of, as its error says it
FLOAT_FORM = (
    "ASCII digits 0-9, after a minus if negative; a decimal point and an exponent optional: "
    "2.5, .5, 1e-3"
)


@pytest.mark.parametrize(
    "value",
    [
        "١.٥",
        "１.５",
        "1_0.5",
        "+1.5",
        "1.5.0",
        "--1",
        "1e",
        "e3",
        ".",
        "0x1p3",
        "nan",
        "-inf",
        "1,5",
    ],
)
def test_a_float_setting_takes_ascii_digits_only(value: str) -> None:
    """float() reads other scripts' digits, underscores and a plus: KEYTRAIL_TIME_DECAY_DAYS=١.٥
    was 1.5 and 1_0.5 was 10.5, though an integer setting refused them."""
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({"KEYTRAIL_TIME_DECAY_DAYS": value})
    assert str(caught.value) == (
        f"KEYTRAIL_TIME_DECAY_DAYS: not a number: {value!r} (limit: {FLOAT_FORM})"
    )


@pytest.mark.parametrize(
    ("var", "value", "read"),
    [
        ("KEYTRAIL_TIME_DECAY_DAYS", " 2.5 ", 2.5),
        ("KEYTRAIL_TIME_DECAY_DAYS", ".5", 0.5),
        ("KEYTRAIL_TIME_DECAY_DAYS", "5.", 5.0),
        ("KEYTRAIL_TIME_DECAY_DAYS", "007", 7.0),
        ("KEYTRAIL_TIME_DECAY_DAYS", "1e3", 1000.0),
        ("KEYTRAIL_TIME_DECAY_DAYS", "2.5E+1", 25.0),
        ("KEYTRAIL_THRESHOLD_MERGE", "-5e-1", -0.5),
    ],
)
def test_a_float_setting_reads_decimals_and_exponents(var: str, value: str, read: float) -> None:
    settings = Settings.from_env({var: value})
    got = settings.time_decay_days if var == "KEYTRAIL_TIME_DECAY_DAYS" else None
    got = settings.threshold_overrides.get("merge", got)
    assert got == read


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("KEYTRAIL_HYBRID_HOPS", "5"),
        ("KEYTRAIL_HYBRID_HOPS", "0"),
        ("KEYTRAIL_NAMESPACE", "work.notes@me"),
        ("KEYTRAIL_MAX_TTL_SECONDS", str(100 * 365 * 24 * 3600)),
        ("KEYTRAIL_HYBRID_DATE_GRACE_DAYS", "365"),
        ("KEYTRAIL_DEPTH_MAX", "1"),
        ("KEYTRAIL_WEIGHT_MIN", "3"),
        ("KEYTRAIL_HYBRID_TIME_WEIGHT", "1"),
        ("KEYTRAIL_EMBED_DIM", "65536"),
        ("KEYTRAIL_HYBRID_HOP_DECAY", "1"),
        ("KEYTRAIL_HYBRID_WEIGHT_BM25", "1000"),
        ("KEYTRAIL_HYBRID_DIRECT_SHARE", "2"),
        ("KEYTRAIL_THRESHOLD_MERGE", "1"),
        ("KEYTRAIL_THRESHOLD_KEY_RECALL", "-1"),
    ],
)
def test_the_edges_of_each_range_are_accepted(var: str, value: str) -> None:
    Settings.from_env({var: value})


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("KEYTRAIL_HYBRID_HOPS", "7"),
        # neither on nor off: it used to be read as on
        ("KEYTRAIL_DIRECT_RECALL", "maybe"),
        ("KEYTRAIL_TIME_ZONE", "Mars/Olympus_Mons"),
        ("KEYTRAIL_EMBEDDER", "bogus"),
    ],
)
def test_serve_refuses_to_start_on_such_a_value_and_creates_nothing(
    tmp_path: Path, var: str, value: str
) -> None:
    home = tmp_path / "store"
    env = env_for(home) | {var: value}
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "serve"],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode != 0
    assert var in proc.stderr and proc.stderr.count("\n") == 1  # one line, no traceback
    assert not home.exists()


@pytest.mark.parametrize("given", ["variable", "flag"])
def test_a_model_path_that_is_no_directory_is_refused_before_a_store_is_made(
    tmp_path: Path, given: str
) -> None:
    """It made the store and started serving, then failed every call at the model's load."""
    home = tmp_path / "store"
    env = env_for(home) | {"KEYTRAIL_EMBEDDER": "fastembed"}
    env.pop("KEYTRAIL_EMBED_MODEL_PATH", None)
    args = ["remember", "Dana lives in Lyon"]
    if given == "variable":
        env["KEYTRAIL_EMBED_MODEL_PATH"] = str(tmp_path / "no-model")
    else:
        args += ["--model-path", str(tmp_path / "no-model")]
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", *args],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    name = "KEYTRAIL_EMBED_MODEL_PATH" if given == "variable" else "--model-path"
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"keytrail: error: {name}: ") and proc.stderr.count("\n") == 1
    assert not home.exists()


def test_a_long_model_path_that_is_no_directory_is_quoted_short(tmp_path: Path) -> None:
    """The path was echoed whole: one of 2,000 characters (short names, so no "File name too
    long") came back in full."""
    home = tmp_path / "store"
    path = str(tmp_path / ("x/" * 1000))
    proc = subprocess.run(
        [sys.executable, "-m", "keytrail.server.cli", "stats", "--model-path", path],
        env=env_for(home) | {"KEYTRAIL_EMBEDDER": "fastembed"},
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"keytrail: error: --model-path: {path[:100]!r}"[:-1])
    assert "is no directory" in proc.stderr and len(proc.stderr) < 400, proc.stderr[:400]


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [
        ("--hybrid-weight-bm25", "1e308", "--hybrid-weight-bm25"),
        ("--max-page", "0", "--max-page"),
        ("--threshold-merge", "1000", "--threshold-merge"),
        ("--max-content-chars", "9" * 1000, "--max-content-chars"),
    ],
)
def test_a_serve_flag_out_of_range_is_refused_naming_the_flag(
    tmp_path: Path, flag: str, value: str, named: str
) -> None:
    """It was refused naming the variable the flag sets (KEYTRAIL_MAX_PAGE), which the person
    who typed --max-page never wrote; a variable given as one is still named as itself."""
    home = tmp_path / "store"
    proc = kt(home, "serve", flag, value, ok=False, stdin="")
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"keytrail: error: {named}: ") and proc.stderr.count("\n") == 1
    assert not home.exists()


@pytest.mark.parametrize(
    ("flag", "value", "limit"),
    [
        ("--hybrid-weight-bm25", "1001", "0 to 1000"),
        ("--threshold-merge", "1000", "-1 to 1, a cosine"),
        ("--time-decay-days", "-2.50", "above 0"),
        ("--hub-min", "-05", "above 0"),
    ],
)
def test_a_serve_flag_out_of_range_is_quoted_as_typed(
    tmp_path: Path, flag: str, value: str, limit: str
) -> None:
    """The flag set its variable to the number parsed, written back by Python: `--threshold-merge
    1000` was refused as '1000.0', `--hub-min -05` as '-5', values no one typed."""
    home = tmp_path / "store"
    proc = kt(home, "serve", flag, value, ok=False, stdin="")
    assert proc.returncode == 2
    assert proc.stderr == f"keytrail: error: {flag}: {value!r} is out of range (limit: {limit})\n"
    assert not home.exists()
