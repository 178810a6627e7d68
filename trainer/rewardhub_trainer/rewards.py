"""The registry adapter: the ``reward:`` section resolved in the driver, and the fingerprint every
process proves.

Only the ``reward:`` section (a frozen :class:`rewardhub.config.RewardConfig`, validated once by the
loader) crosses process boundaries. The driver resolves every
term here, before Ray starts; the reward workers (:class:`rewardhub.distributed.RewardWorkerPool`,
driven by :class:`rewardhub_trainer.actors.RewardClient`) rebuild the registry from the same
section and score through the execution engine. They are the only processes that call rewards,
and the only ones checked: each reward the config uses must be the driver's (a difference in
another reward is not the run's business). Rollouters and the learner never build a registry.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rewardhub.config import RewardConfig
from rewardhub.errors import RewardhubError
from rewardhub.errors import UnknownRewardError
from rewardhub.errors import UsageError

__all__ = ["POOL_ATTEMPTS", "nested_call_timeout", "provenance", "remote_identities", "used_rewards",
           "validate_rewards"]

#: times a reward pool sends one chunk before failing its samples
#: (:class:`rewardhub.distributed.PoolSettings`'s ``max_attempts``, which the reward client leaves as it is)
POOL_ATTEMPTS = 3
#: what the trainer's bound on a score call keeps above the pool's bounds (a call's trip, a restart)
NEST_SLACK_S = 60.0
#: the pool's own slack over the sum of the terms' timeouts (rewardhub.distributed's CALL_SLACK_S)
POOL_SLACK_S = 30.0


def validate_rewards(reward: RewardConfig, *, default_timeout_s: float | None = None,
                     chunk: int | None = None, call_timeout_s: float = 0.0) -> tuple[RewardConfig, Any, Any]:
    """Resolve every reward term in the driver, before Ray starts.

    :param reward: the plan's ``reward:`` section (validated when the config was loaded).
    :param default_timeout_s: the ``timeout_s`` of each term whose config and reward set none
        (``trainer.reward_timeout_s``): in training a hung reward call fails (and its sample is
        invalid) instead of hanging the run.
    :returns: the ``reward:`` section the reward workers get (with the driver's plugin environment
        folded in, so every process builds the same registry) and the driver's
        :class:`rewardhub.distributed.WorkerSetup` made here, in the driver: the reward workers are
        checked against its fingerprint items (each used reward must be the driver's), wherever
        the reward client that starts them runs; and the registry built here, the driver's only one
        (``None`` with ``reward.remote``): pass it on (:func:`used_rewards`), never build another.
    :param chunk: the samples of one score call on a reward worker, and ``call_timeout_s``
        (``trainer.call_timeout_s``) the trainer's bound on a whole score call: the pool's own bound on
        a worker's call (``reward.workers.call_timeout_s``, unset: the terms' ``timeout_s`` x ``chunk``)
        is nested under it (:func:`_nest_pool_bound`), so that a hung worker is restarted by its pool
        before the trainer gives up on the whole reward client.
    :raises UsageError: naming the term (``reward.rewards[i].name``) and the valid choices.
    """
    from rewardhub.distributed import prepare_setup
    from rewardhub.execution import Runner
    from rewardhub.registry import build_registry
    from rewardhub.scorers import scores_remotely

    if scores_remotely(reward):  # the server answers (GET /info) before Ray starts; its terms are its own
        _server_provenance(reward)
        return reward, prepare_setup(reward)[0], None
    try:
        registry = build_registry(reward)
        for i, term in enumerate(reward.rewards):
            if not term.name or term.path or term.module:
                continue
            try:
                registry.get_reward(term.name)
            except UnknownRewardError as exc:
                raise UsageError(f"reward.rewards[{i}].name: {exc}") from exc
        # resolves (imports) file and module terms too; a judge's served model starts with the fleet, not here
        runner = Runner.from_config(reward, registry, serve_models=False)
        runner.close()
        if any(t.config.calibration for t in runner.terms):  # a judge's gate: refuse to train under it
            from rewardhub.builtin.judging.calibrate import calibration_problems

            gate = [p for t in runner.terms for p in calibration_problems(t, registry)]
            if gate:
                raise UsageError("\n".join(gate))
        if default_timeout_s:
            reward = _with_timeouts(reward, [t.policy.timeout_s for t in runner.terms], default_timeout_s)
        if chunk and call_timeout_s:
            reward = _nest_pool_bound(reward, [(t.policy.timeout_s or default_timeout_s or None,
                                                t.policy.retries or 0) for t in runner.terms],
                                      chunk, call_timeout_s)
        setup, _ = prepare_setup(reward, registry=registry)
    except UsageError:
        raise
    except RewardhubError as exc:
        raise UsageError(f"reward: {exc}") from exc
    return setup.reward_cfg, setup, registry


def _nest_pool_bound(reward: RewardConfig, terms: list[tuple[float | None, int]], chunk: int,
                     call_timeout_s: float) -> RewardConfig:
    """``reward`` whose pool bounds a worker's call of ``chunk`` samples within what the trainer waits for a
    score call (``call_timeout_s``), each of its :data:`POOL_ATTEMPTS` tries included: the pool's own
    bound (the terms' ``timeout_s x (1 + retries)`` summed, x ``chunk``) where it fits, else that share of
    ``call_timeout_s``. A ``reward.workers.call_timeout_s`` set in the config is kept (the trainer's bound
    scales with it instead: :func:`nested_call_timeout`)."""
    if reward.workers.call_timeout_s:
        return reward
    per_row = None if any(t is None for t, _ in terms) else sum(float(t or 0) * (1 + r) for t, r in terms)
    derived = None if per_row is None else POOL_SLACK_S + chunk * per_row
    cap = (call_timeout_s - min(NEST_SLACK_S, call_timeout_s / 2)) / POOL_ATTEMPTS
    if derived is not None and derived <= cap:
        return reward
    return dataclasses.replace(reward, workers=dataclasses.replace(reward.workers, call_timeout_s=cap))


def nested_call_timeout(call_timeout_s: float, reward: RewardConfig) -> float:
    """``trainer.call_timeout_s``, raised where ``reward.workers.call_timeout_s`` (set in the config) and
    the pool's :data:`POOL_ATTEMPTS` tries of a chunk would outlast it: the nearest bound (the pool's, which
    restarts one worker) acts first, the trainer's (which restarts the whole reward client) after it."""
    from rewardhub.scorers import scores_remotely

    pool = reward.workers.call_timeout_s
    if not call_timeout_s or not pool or scores_remotely(reward):
        return call_timeout_s
    return max(call_timeout_s, pool * POOL_ATTEMPTS + NEST_SLACK_S)


def _with_timeouts(reward: RewardConfig, timeouts: list[float | None], default: float) -> RewardConfig:
    """``reward`` with ``timeout_s: default`` in each term whose resolved policy has no timeout."""
    return dataclasses.replace(reward, rewards=tuple(
        dataclasses.replace(term, timeout_s=default) if timeout is None else term
        for term, timeout in zip(reward.rewards, timeouts)))


def used_rewards(reward: RewardConfig, *, registry: Any = None) -> list[dict[str, Any]]:
    """Provenance of each reward the config uses, in the driver: name, source, distribution and
    version, target, sha256 (a file reward) and ``identity`` (what the reward workers are checked against).

    :param registry: the driver's registry :func:`validate_rewards` built (else one is built here).
    """
    from rewardhub.distributed import prepare_setup
    from rewardhub.distributed import reward_facts
    from rewardhub.scorers import scores_remotely

    if scores_remotely(reward):  # the server's own provenance of each term it scores with
        return _server_provenance(reward)
    setup, registry = prepare_setup(reward, ship_files=False, registry=registry)
    return [{"name": name, **reward_facts(registry.get_reward(name), setup.driver_items.get(name))}
            for name in dict.fromkeys(setup.used)]


def provenance(reward: RewardConfig, workers: list[dict[str, Any]], *,
               used: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """:func:`used_rewards` (``used``, when the driver listed them already), each with the reward workers
    of the run (``workers``: the actors' infos) and each worker's own values of the reward (from the
    registry it built).

    A reward worker starts only when its identity of each used reward (dist==version, or the
    file's sha256) equals the driver's.
    """
    from rewardhub.scorers import scores_remotely

    used = [dict(r) for r in used] if used is not None else used_rewards(reward)
    if scores_remotely(reward):
        return used
    scorers = [w for w in workers if w["role"] == "reward_worker"]
    for r in used:
        r["workers"] = [{"pool": w.get("pool"), "node": w.get("node"), "pid": w.get("pid"),
                         **(w.get("rewards") or {}).get(r["name"], {"identity": None}),
                         **({"file": w["files"][r["name"]]} if r["name"] in (w.get("files") or {}) else {})}
                        for w in scorers]
    return used


#: ``reward.remote``'s provenance, by the section's text: the driver asks the server once (``GET /info``)
_SERVER_PROVENANCE: dict[str, list[dict[str, Any]]] = {}


def _server_provenance(reward: RewardConfig) -> list[dict[str, Any]]:
    """The server's provenance of each term it scores with, asked once per driver process (its start-up
    check and the run's records are one question, so a server that restarts just after it is met by the
    reward client's retries, not by a second start-up check)."""
    from rewardhub.scorers import open_scorer

    key = repr(reward)
    if key not in _SERVER_PROVENANCE:
        scorer = open_scorer(reward)
        _SERVER_PROVENANCE[key] = scorer.provenance()
        scorer.close()
    return [dict(r) for r in _SERVER_PROVENANCE[key]]


def remote_identities(used: list[dict[str, Any]]) -> dict[str, str]:
    """``reward.remote``: each term the server scores with -> what identifies its code on the server
    (the file's ``sha256:``, else ``dist==version``, else its target), from the server's provenance
    (:func:`used_rewards`). A resumed run checks its checkpoint's against these, as a local run checks
    its own rewards' (:func:`rewardhub_trainer.runfolder.check_resume_rewards`)."""
    out = {}
    for r in used:
        identity = r.get("identity") or (f"sha256:{r['sha256']}" if r.get("sha256") else
                                         f"{r['dist']}=={r['version']}" if r.get("dist") else r.get("target"))
        if r.get("name") and identity:
            out[str(r["name"])] = str(identity)
    return out
