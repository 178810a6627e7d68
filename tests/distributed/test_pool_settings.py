"""The reward worker pool's settings type and its flat plan of worker groups (no Ray started here)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from rewardhub.distributed import PoolSettings
from rewardhub.distributed import RewardWorkerPool
from rewardhub.distributed._pool import _plan

ROOT = Path(__file__).resolve().parents[2]


def _cfg(rewards, **rm):
    return {"reward_model": {"enable": True, "model_path": "/models/rm", "num_workers": 3, **rm},
            "rewards": rewards, "workers": {"num_workers": 1, "num_cpus": 0}}


RM = {"name": "reward_model", "weight": 2.0}
REGEX = {"name": "regex_match", "kwargs": {"pattern": "[0-9]"}}


def test_the_reward_model_terms_get_a_group_of_their_own_with_the_pools_healing_settings():
    settings = PoolSettings(max_restarts=5, max_attempts=4, max_inflight=3, call_timeout_s=7.0, chunk_size=2,
                            dispatch="round_robin", pool="mine", runtime_env={"env_vars": {"A": "1"}})
    plan = _plan(_cfg([REGEX, RM, dict(REGEX, alias="again")]), settings, None, None)
    groups = [(setup.pool, positions) for setup, _, positions in plan]
    assert groups == [("mine", [0, 2]), ("reward_model", [1])]
    (main, main_settings, _), (rm, rm_settings, _) = plan
    assert main_settings == settings
    assert [t.name for t in main.reward_cfg.rewards] == ["regex_match", "regex_match"]
    assert [t.name for t in rm.reward_cfg.rewards] == ["reward_model"]
    # how the workers are run and healed carries over; where and how many come from reward.reward_model
    assert (rm_settings.max_restarts, rm_settings.max_attempts, rm_settings.max_inflight,
            rm_settings.call_timeout_s, rm_settings.runtime_env) == (5, 4, 3, 7.0, {"env_vars": {"A": "1"}})
    assert (rm_settings.num_workers, rm_settings.chunk_size, rm_settings.dispatch, rm_settings.pool) == (
        3, None, None, None)
    assert rm_settings.split_models is False


def test_one_group_without_a_split():
    settings = PoolSettings(num_workers=2)
    (setup, got, positions), = _plan(_cfg([REGEX, RM]), dataclasses.replace(settings, split_models=False),
                                     None, None)
    assert (setup.pool, got.num_workers, positions) == ("reward", 2, [0, 1])
    (setup, got, positions), = _plan(_cfg([RM], pool="rm_pool"), settings, None, None)
    assert (setup.pool, got.num_workers, positions) == ("rm_pool", 3, [0])  # reward_model's num_workers


def test_the_pool_takes_a_settings_value_and_single_options():
    params = inspect.signature(RewardWorkerPool.__init__).parameters
    assert list(params) == ["self", "reward_cfg", "settings", "reference", "registry", "options"]
    with pytest.raises(TypeError, match="num_worker"):
        RewardWorkerPool({"rewards": [{"name": "exact_match"}]}, num_worker=2)


def test_no_pool_builds_a_pool():
    """The split is a flat list of groups: neither the pool nor a group constructs a pool of its own."""
    for rel in ("rewardhub/distributed/_pool.py", "rewardhub/distributed/_group.py"):
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        calls = [n.func.id for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        assert "RewardWorkerPool" not in calls, rel


def test_a_terms_provenance_is_its_own_groups_workers():
    """With the reward-model terms on a group of their own, a term's provenance comes from the workers
    that run it: the other group's workers have not its reward (their facts of it are none)."""
    from types import SimpleNamespace

    from rewardhub.distributed._chunks import WorkerTerm
    from rewardhub.execution import TermFacts

    def group(pool, name, dist):
        facts = [{"pool": pool, "node": "n", "pid": 7, "registry_fingerprint": "f",
                  "rewards": {name: {"dist": dist}}}]
        return SimpleNamespace(pool=pool, terms=[WorkerTerm(name, name, 1.0, "nan")],
                               facts=[TermFacts(name, name, "ray", "nan")], workers_info=lambda: facts)

    pool = RewardWorkerPool.__new__(RewardWorkerPool)  # its groups' layer stood in for (no Ray here)
    pool.groups = [group("reward", "regex_match", "rewardhub"),
                   group("rm", "reward_model", "rewardhub-models")]
    pool.terms = [t for g in pool.groups for t in g.terms]
    pool._group_of = {t.name: g for g in pool.groups for t in g.terms}
    got = {p["name"]: p for p in pool.provenance()}
    assert got["reward_model"]["dist"] == "rewardhub-models" and got["regex_match"]["dist"] == "rewardhub"
    assert [w["pool"] for w in got["reward_model"]["workers"]] == ["rm"]
    assert [w["pool"] for w in got["regex_match"]["workers"]] == ["reward"]
