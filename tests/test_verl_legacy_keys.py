"""verl configs whose legacy reward keys meet verl's own defaults under ``reward.`` (a full verl
config: migrate_legacy_reward_impl not called, or a config dumped by verl): the key the user set is
taken, never verl's default, never a "disagree" error over a null."""

from __future__ import annotations

import warnings

import pytest

from rewardhub.errors import UsageError
from rewardhub.verl._config import reward_section
from rewardhub.verl.keys import matches
from rewardhub.verl.keys import parse_rules
from rewardhub.verl.shim import migrate

# what verl 0.9.1's composed defaults hold next to the legacy keys
VERL_DEFAULTS = {"reward": {"custom_reward_function": {"path": None, "name": "compute_score"},
                            "reward_manager": {"source": "register", "name": "naive",
                                               "module": {"path": None, "name": "custom_reward_manager"}},
                            "sandbox_fusion": {"url": None, "max_concurrent": 64, "memory_limit_mb": 1024}},
                 "custom_reward_function": {"path": None, "name": None},
                 "reward_model": {"reward_manager": None, "enable": None, "num_workers": None},
                 "sandbox_fusion": {"url": None, "max_concurrent": None, "memory_limit_mb": None}}


def _with(**legacy):
    cfg = {k: (dict(v) if isinstance(v, dict) else v) for k, v in VERL_DEFAULTS.items()}
    for key, value in legacy.items():
        section, leaf = key.split("__")
        cfg[section] = {**cfg[section], leaf: value}
    return cfg


def test_the_legacy_function_wins_over_verls_default_null_path():
    cfg = _with(custom_reward_function__path="my_reward.py", custom_reward_function__name="my_fn",
                reward_model__reward_manager="rewardhub")
    # on_failure "zero": the verl adapter's default, as verl cannot leave a failed sample out
    [term] = reward_section(cfg).rewards
    assert (term.on_failure, term.path, term.function, term.name) == ("zero", "my_reward.py", "my_fn", None)


def test_without_any_function_verls_default_scorer_is_the_term():
    assert reward_section(_with()).rewards[0].function == "default_compute_score"


def test_a_function_and_a_module_path_yaml_is_an_error_naming_both(tmp_path):
    rh = tmp_path / "rh.yaml"
    rh.write_text("reward:\n  rewards:\n    - {name: exact_match}\n")
    cfg = _with(custom_reward_function__path="my_reward.py")
    cfg["reward"]["reward_manager"]["module"] = {"path": str(rh), "name": "x"}
    with pytest.raises(UsageError, match=r"custom_reward_function\.path='my_reward\.py' and "
                                         r"reward\.reward_manager\.module\.path=.*both name the rewards"):
        reward_section(cfg)
    cfg["custom_reward_function"] = {"path": None, "name": None}
    assert reward_section(cfg).rewards[0].name == "exact_match"


def test_the_shim_takes_the_set_key_when_the_other_spelling_is_null():
    cfg = {"custom_reward_function": {"path": "r.py", "name": "f"},
           "reward": {"custom_reward_function": {"path": None, "name": None}}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        migrated, report = migrate(cfg)
    assert migrated["reward"]["rewards"] == [{"path": "r.py", "function": "f"}]
    assert {d["key"] for d in report.dropped} >= {"reward.custom_reward_function.path"}
    with pytest.raises(UsageError, match="disagree"):  # two values set: still the user's to settle
        migrate(
            {
                "custom_reward_function": {"path": "a.py"},
                "reward": {"custom_reward_function": {"path": "b.py"}},
            }
        )


def test_a_rule_table_is_one_rule_a_line_and_a_bad_line_is_named():
    text = "a.b -> reward.x\na.c (engine)\na.*: $WHY, always\nlog_*: no\n"
    rules = parse_rules(text, WHY="not here")
    assert rules == [("a.b", ("move", "reward.x")), ("a.c", ("engine",)),
                     ("a.*", ("drop", "not here, always")), ("log_*", ("drop", "no"))]
    first = [next(p for p, _ in rules if matches(p, key)) for key in ("a.b", "a", "a.d.e", "log_prob")]
    assert first == ["a.b", "a.*", "a.*", "log_*"] and not matches("a.*", "ab")
    with pytest.raises(ValueError, match="not a rule: 'a.b = c'"):
        parse_rules("a.b = c\n")
