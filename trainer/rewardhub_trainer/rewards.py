"""The registry adapter: the ``reward:`` section checked in the driver, and the fingerprint every process
proves.

Only the ``reward:`` section (plain data) crosses process boundaries. The driver resolves every
term here, before Ray starts; the reward workers (:class:`rewardhub.distributed.RewardWorkerPool`,
driven by :class:`rewardhub_trainer.actors.RewardClient`) rebuild the registry from the same
section and score through the execution engine. They are the only processes that call rewards,
and the only ones checked: each reward the config uses must be the driver's (a difference in
another reward is not the run's business). Rollouters and the learner never build a registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardhub.errors import RewardhubError
from rewardhub.errors import UnknownRewardError
from rewardhub.errors import UsageError

__all__ = ["provenance", "used_rewards", "validate_rewards"]


def _to_node(reward_cfg: Mapping[str, Any]) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create(dict(reward_cfg))


def validate_rewards(reward_cfg: Mapping[str, Any], *, validated: bool = False,
                     default_timeout_s: float | None = None) -> tuple[dict[str, Any], Any, Any]:
    """Resolve every reward term in the driver, before Ray starts.

    :param default_timeout_s: the ``timeout_s`` of each term whose config and reward set none
        (``trainer.reward_timeout_s``): in training a hung reward call fails (and its sample is
        invalid) instead of hanging the run.
    :param validated: ``reward_cfg`` is a :class:`~rewardhub.config.ConfigPlan`'s ``reward:`` section,
        validated when the config was loaded: its schema is not checked again.
    :returns: the ``reward:`` section the reward workers get (validated, with the driver's plugin
        environment folded in, so every process builds the same registry) and the driver's
        :class:`rewardhub.distributed.WorkerSetup` made here, in the driver: the reward workers are
        checked against its fingerprint items (each used reward must be the driver's), wherever
        the reward client that starts them runs; and the registry built here, the driver's only one
        (``None`` with ``reward.remote``): pass it on (:func:`used_rewards`), never build another.
    :raises UsageError: naming the term (``reward.rewards[i].name``) and the valid choices.
    """
    from rewardhub.distributed import prepare_setup
    from rewardhub.execution import Runner
    from rewardhub.registry import build_registry

    if reward_cfg.get("remote"):
        return _validate_remote(reward_cfg)
    node = _to_node(reward_cfg)
    try:
        registry = build_registry(node)
    except UsageError:
        raise
    except RewardhubError as exc:
        raise UsageError(f"reward: {exc}") from exc
    for i, term in enumerate(reward_cfg.get("rewards") or []):
        name = term.get("name") if isinstance(term, Mapping) else None
        if not name or term.get("path") or term.get("module"):
            continue
        try:
            registry.get_reward(name)
        except UnknownRewardError as exc:
            raise UsageError(f"reward.rewards[{i}].name: {exc}") from exc
    try:
        runner = Runner.from_config(node, registry)  # resolves (imports) file and module terms too
        runner.close()
        if default_timeout_s:
            reward_cfg = _with_timeouts(reward_cfg, [t.policy.timeout_s for t in runner.terms], default_timeout_s)
        setup, _ = prepare_setup(reward_cfg, validated=validated, registry=registry)
    except UsageError:
        raise
    except RewardhubError as exc:
        raise UsageError(f"reward: {exc}") from exc
    return dict(setup.reward_cfg), setup, registry


def _with_timeouts(reward_cfg: Mapping[str, Any], timeouts: list[float | None], default: float) -> dict[str, Any]:
    """``reward_cfg`` with ``timeout_s: default`` in each term whose resolved policy has no timeout."""
    terms = []
    for term, timeout in zip(reward_cfg.get("rewards") or [], timeouts):
        term = {"name": term} if isinstance(term, str) else dict(term)
        if timeout is None:
            term["timeout_s"] = default
        terms.append(term)
    return {**reward_cfg, "rewards": terms}


def used_rewards(reward_cfg: Mapping[str, Any], *, validated: bool = False,
                 registry: Any = None) -> list[dict[str, Any]]:
    """Provenance of each reward the config uses, in the driver: name, source, distribution and
    version, target, sha256 (a file reward) and ``identity`` (what the reward workers are checked against).

    :param validated: ``reward_cfg`` is the section :func:`validate_rewards` returned (not checked again).
    :param registry: the driver's registry :func:`validate_rewards` built (else one is built here).
    """
    from rewardhub.distributed import prepare_setup
    from rewardhub.distributed import reward_facts

    if reward_cfg.get("remote"):  # the server's own provenance of each term it scores with
        from rewardhub.server.client import RemoteScorer

        return [{**r, "remote": reward_cfg["remote"]} for r in RemoteScorer(str(reward_cfg["remote"])).info()["rewards"]]
    setup, registry = prepare_setup(reward_cfg, ship_files=False, validated=validated, registry=registry)
    return [{"name": name, **reward_facts(registry.get_reward(name), setup.driver_items.get(name))}
            for name in dict.fromkeys(setup.used)]


def provenance(reward_cfg: Mapping[str, Any], workers: list[dict[str, Any]], *, validated: bool = False,
               used: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """:func:`used_rewards` (``used``, when the driver listed them already), each with the reward workers
    of the run (``workers``: the actors' infos) and each worker's own values of the reward (from the
    registry it built).

    A reward worker starts only when its identity of each used reward (dist==version, or the
    file's sha256) equals the driver's.
    """
    used = [dict(r) for r in used] if used is not None else used_rewards(reward_cfg, validated=validated)
    if reward_cfg.get("remote"):
        return used
    scorers = [w for w in workers if w["role"] == "reward_worker"]
    for r in used:
        r["workers"] = [{"pool": w.get("pool"), "node": w.get("node"), "pid": w.get("pid"),
                         **(w.get("rewards") or {}).get(r["name"], {"identity": None}),
                         **({"file": w["files"][r["name"]]} if r["name"] in (w.get("files") or {}) else {})}
                        for w in scorers]
    return used


def _validate_remote(reward_cfg: Mapping[str, Any]) -> tuple[dict[str, Any], Any, None]:
    """``reward.remote``: the server answers (``GET /info``) before Ray starts; its terms are its own,
    so the ones listed here are not resolved (they need not be installed where the trainer runs)."""
    from rewardhub.distributed import prepare_setup
    from rewardhub.server.client import RemoteScorer
    from rewardhub.server.client import check_url

    url = check_url(reward_cfg["remote"])
    try:
        terms = RemoteScorer(url, tries=2).terms
    except RewardhubError as exc:
        raise UsageError(f"reward.remote: {exc}") from None
    if not terms:
        raise UsageError(f"reward.remote: the server at {url} scores with no reward terms")
    section = {**dict(reward_cfg), "remote": url}
    setup, _ = prepare_setup({**section, "rewards": []})
    return section, setup, None
