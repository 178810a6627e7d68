"""verl's cluster-size keys -> the trainer's ``resources:`` section.

``trainer.nnodes`` -> ``resources.nnodes`` and ``trainer.n_gpus_per_node`` -> ``resources.gpus_per_node``
(checked against Ray's cluster before any actor starts);
``actor_rollout_ref.rollout.tensor_model_parallel_size`` -> ``resources.rollouter.num_gpus`` and
``rollout.tensor_parallel_size``. With GPUs per node declared, the learner gets one GPU and, unless
``trainer.num_rollouters`` is set, the others become rollouters (after one rollouter's share for the
evaluator with ``data.val_files``): verl colocates actor and rollout on every GPU, this trainer gives
them separate GPUs. A key already set in ``resources:`` wins only when it agrees. Pure.
"""

from __future__ import annotations

import copy
from typing import Any

from rewardhub.config.fields import invalid
from rewardhub.datasets import dig
from rewardhub.errors import UsageError

__all__ = ["VERL_RESOURCE_KEYS", "migrate_resources", "pop_key"]

#: verl key -> the ``resources:`` key it sets
VERL_RESOURCE_KEYS = {
    "trainer.nnodes": "resources.nnodes",
    "trainer.n_gpus_per_node": "resources.gpus_per_node",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "resources.rollouter.num_gpus",
}


def pop_key(cfg: dict[str, Any], key: str) -> None:
    """Remove dotted ``key`` (which ``cfg`` has), and the mappings it leaves empty."""
    parts = key.split(".")
    nodes = [cfg]
    for p in parts[:-1]:
        nodes.append(nodes[-1][p])
    del nodes[-1][parts[-1]]
    for node, p in zip(reversed(nodes[:-1]), reversed(parts[:-1])):
        if node[p] == {}:
            del node[p]


def _int(value: Any, key: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if not number.is_integer() or number < 0:
        raise invalid(key, value, "expected a whole number >= 0")
    return int(number)


def migrate_resources(config: dict[str, Any], report: Any) -> tuple[dict[str, Any], Any]:
    """Move verl's cluster-size keys of ``config`` into ``resources:``; record each in ``report``."""
    given = {key: dig(config, key) for key in VERL_RESOURCE_KEYS}
    found = {key: _int(value, key) for key, value in given.items() if value is not None}
    if not found:
        return config, report
    cfg = copy.deepcopy(config)
    for key in found:
        pop_key(cfg, key)
    res = cfg.setdefault("resources", {})
    if not isinstance(res, dict):
        raise invalid("resources", res, "expected a mapping")

    def put(path: str, value: Any, source: str) -> None:
        node = res
        *parents, last = path.split(".")[1:]
        for p in parents:
            node = node.setdefault(p, {})
        if last in node and float(node[last]) != float(value):
            raise UsageError(f"{source}={value!r} sets {path}, which the config sets to {node[last]!r}\n"
                             "keep one of them")
        node[last] = value
        report.moved.append({"from": source, "to": path})

    for key, value in found.items():
        put(VERL_RESOURCE_KEYS[key], value, key)
    tp_key = "actor_rollout_ref.rollout.tensor_model_parallel_size"
    if tp_key in found:
        rollout = cfg.setdefault("rollout", {})
        if ("tensor_parallel_size" in rollout
                and _int(rollout["tensor_parallel_size"], "rollout.tensor_parallel_size") != found[tp_key]):
            raise UsageError(
                f"{tp_key}={found[tp_key]!r} sets rollout.tensor_parallel_size, which the config "
                f"sets to {rollout['tensor_parallel_size']!r}\nkeep one of them"
            )
        rollout["tensor_parallel_size"] = found[tp_key]
        report.notes.append(
            f"{tp_key}={found[tp_key]}: also rollout.tensor_parallel_size (each vLLM engine's GPUs)"
        )
    gpus = found.get("trainer.n_gpus_per_node", 0)
    if gpus:
        learner = res.setdefault("learner", {})
        learner.setdefault("num_gpus", 1)
        tp = found.get("actor_rollout_ref.rollout.tensor_model_parallel_size") or 1
        res.setdefault("rollouter", {}).setdefault("num_gpus", tp)
        trainer = cfg.setdefault("trainer", {})
        if "num_rollouters" not in trainer:
            total = gpus * (found.get("trainer.nnodes") or 1)
            # with a validation set the evaluator asks for a rollouter's GPUs too (resources.evaluator)
            evaluator = tp if (cfg.get("data") or {}).get("val_files") and "evaluator" not in res else 0
            trainer["num_rollouters"] = max(1, (total - int(learner["num_gpus"]) - evaluator) // tp)
            report.notes.append(
                f"trainer.n_gpus_per_node={gpus}: the learner gets {learner['num_gpus']} GPU"
                + (f", the evaluator (data.val_files) {evaluator}" if evaluator else "") + " and the other "
                f"GPUs {trainer['num_rollouters']} rollouter(s) of {tp} GPU(s) each (trainer.num_rollouters)")
    return cfg, report
