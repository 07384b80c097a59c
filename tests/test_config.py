"""Settings: every KEYTRAIL_* variable the registry lists is one Settings.from_env honours."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from keytrail.core import InvalidInput, Settings
from keytrail.core.config import Variable, tunable_variables


def _value_of(settings: Settings, env: str) -> object:
    name = env.removeprefix("KEYTRAIL_").lower()
    if name.startswith("threshold_"):
        return settings.threshold_overrides.get(name.removeprefix("threshold_"))
    if name.startswith("hybrid_"):
        return getattr(settings.hybrid, name.removeprefix("hybrid_"))
    if name.startswith("max_"):
        return getattr(settings.limits, name.removeprefix("max_"))
    if name in {f.name for f in msgspec.structs.fields(settings.rules)}:
        return getattr(settings.rules, name)
    return getattr(settings, name)


def _accepted(env: str, value: str) -> bool:
    try:
        Settings.from_env({env: value})
    except InvalidInput:
        return False
    return True


@pytest.mark.parametrize("var", tunable_variables(), ids=lambda v: v.env)
def test_each_listed_variable_changes_its_setting(var: Variable) -> None:
    if var.choices:
        changed = next(c for c in var.choices if c != var.default)
    elif var.kind not in (int, float):
        changed = var.kind("Europe/Berlin")  # the one named setting (a time zone)
    else:
        # The first of these in the variable's range (some are 0..1, hops 0..5) that changes it.
        changed = next(
            var.kind(c)
            for c in (7, 9, 0.5, 2)
            if var.kind(c) != var.default and _accepted(var.env, str(var.kind(c)))
        )
    before = _value_of(Settings.from_env({}), var.env)
    after = _value_of(Settings.from_env({var.env: str(changed)}), var.env)
    assert before == var.default
    assert after == changed


def test_the_registry_covers_every_limit_rule_and_threshold() -> None:
    listed = {v.env for v in tunable_variables()}
    defaults = Settings()
    expected = {f"KEYTRAIL_MAX_{f.name.upper()}" for f in dataclasses.fields(defaults.limits)}
    expected |= {f"KEYTRAIL_{f.name.upper()}" for f in msgspec.structs.fields(defaults.rules)}
    expected |= {f"KEYTRAIL_HYBRID_{f.name.upper()}" for f in dataclasses.fields(defaults.hybrid)}
    expected |= {"KEYTRAIL_EMBED_DIM", "KEYTRAIL_ALIAS_AFTER_READS", "KEYTRAIL_ALIAS_UNUSED_READS"}
    assert expected <= listed
    assert len([v for v in listed if v.startswith("KEYTRAIL_THRESHOLD_")]) == 6


def test_a_malformed_value_names_the_variable() -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({"KEYTRAIL_MAX_PAGE": "many"})
    assert caught.value.field == "KEYTRAIL_MAX_PAGE"


def test_a_named_choice_outside_its_list_names_the_variable_and_the_choices() -> None:
    with pytest.raises(InvalidInput) as caught:
        Settings.from_env({"KEYTRAIL_HYBRID_FUSION": "borda"})
    assert caught.value.field == "KEYTRAIL_HYBRID_FUSION"
    assert caught.value.limit == "score, rrf"
    assert Settings.from_env({"KEYTRAIL_HYBRID_FUSION": "rrf"}).hybrid.fusion == "rrf"
