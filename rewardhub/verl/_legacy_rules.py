"""The table of verl's legacy reward keys: what each one becomes in the ``reward:`` schema, or why it is
dropped.

:mod:`rewardhub.verl.shim` applies it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from typing import Final

from .keys import Rule
from .keys import parse_rules

__all__ = [
    "DEFAULT_FUNCTION",
    "KEY_INTERP",
    "KNOWN_MANAGERS",
    "LEGACY_KEYS",
    "RM_FIELDS",
    "RULES",
    "SANDBOX_KEYS",
    "truthy",
]

#: verl's default name of the function in a custom reward file
DEFAULT_FUNCTION = "compute_score"

#: verl reward manager -> what it means for the custom reward term's execution policy
KNOWN_MANAGERS: dict[str, dict[str, Any]] = {
    "naive": {},
    "dapo": {},
    "batch": {"kind": "batched"},
    "prime": {"executor": "process"},
    "remote": {"executor": "ray"},
    "rate_limited": {"executor": "thread"},
    "limit": {"executor": "thread"},
    "rewardhub": {},  # rewardhub's own verl manager (rewardhub.verl.managers): it scores these terms
}

RM_FIELDS = frozenset({
    "enable", "model_path", "trust_remote_code", "external_lib", "kind", "engine", "pool", "num_workers",
    "n_gpus_per_node", "nnodes", "batch_size", "max_length", "rollout",
})

_FSDP = ("a training/FSDP setting of verl's reward-model worker; rewardhub runs reward models for "
         "inference only")
_LOOP_CLASS = ("rewardhub does not run verl reward-manager/reward-loop classes: write the scoring as a "
               "reward function and list it in reward.rewards (see `rewardhub show`)")

#: legacy namespace -> its rules, patterns relative to the node (:func:`~.keys.parse_rules`; first match wins)
RULES: dict[str, list[Rule]] = {ns: parse_rules(text, FSDP=_FSDP, LOOP_CLASS=_LOOP_CLASS) for ns, text in {
    "reward_model": """\
enable -> reward.reward_model.enable
enable_resource_pool: reward-model terms always get a Ray pool of their own in rewardhub \
(reward.reward_model.pool, sized by num_workers and n_gpus_per_node)
n_gpus_per_node -> reward.reward_model.n_gpus_per_node
nnodes -> reward.reward_model.nnodes
num_workers -> reward.reward_model.num_workers
model.path -> reward.reward_model.model_path
model.external_lib -> reward.reward_model.external_lib
model.trust_remote_code -> reward.reward_model.trust_remote_code
model.input_tokenizer: rewardhub tokenizes with the reward model's own tokenizer
max_length -> reward.reward_model.max_length
micro_batch_size_per_gpu -> reward.reward_model.batch_size
rollout.name (engine)
rollout.* -> reward.reward_model.rollout.*
reward_manager (manager)
reward_kwargs.* (kwargs)
sandbox_fusion.* (sandbox)
use_reward_loop: rewardhub always scores through its own runner (verl's reward loop is the default there)
launch_reward_fn_async: reward scoring overlaps training in rewardhub's trainer with \
trainer.mode=fully_async
reward_loop_source: rewardhub resolves rewards through its registry
reward_loop_module_path: $LOOP_CLASS
reward_loop_class_name: $LOOP_CLASS
model.*: $FSDP
strategy: $FSDP
micro_batch_size: verl's global micro batch (superseded by micro_batch_size_per_gpu, which maps to \
reward.reward_model.batch_size)
mini_batch_size: $FSDP
use_dynamic_bsz: $FSDP
forward_max_token_len_per_gpu: $FSDP
ulysses_sequence_parallel_size: $FSDP
optim.*: $FSDP
fsdp_config.*: $FSDP
profiler.*: verl's profiler settings have no meaning here
*: a setting of verl's reward-model worker that rewardhub has no counterpart for
""",
    "custom_reward_function": """\
path (crf)
name (crf)
reward_kwargs.* (crf)
*: not a custom_reward_function setting (path, name, reward_kwargs)
""",
    "reward_manager": """\
name (manager)
source: rewardhub resolves rewards through its registry (no register/importlib source)
module.*: $LOOP_CLASS
*: not a reward_manager setting rewardhub knows
""",
    "reward_kwargs": "* (kwargs)",
    "sandbox_fusion": "* (sandbox)",
}.items()}

#: the one-to-one moves, old (``*`` = any sub-key) -> new; the rest of the mapping is in ``RULES``
LEGACY_KEYS: Final[Mapping[str, str]] = {
    **{f"{ns}.{pattern}": action[1] for ns, rules in RULES.items() for pattern, action in rules
       if action[0] == "move"},
    **{f"{root}sandbox_fusion.{k}": f"reward.sandbox.{k}" for root in ("", "reward_model.", "reward.")
       for k in ("url", "max_concurrent", "memory_limit_mb")},
    "custom_reward_function.path": "reward.rewards[].path",
    "custom_reward_function.name": "reward.rewards[].function",
    "custom_reward_function.reward_kwargs.*": "reward.rewards[].kwargs.*",
    "reward_model.reward_manager": "reward.manager (+ the custom term's executor/kind)",
    "reward_manager.name": "reward.manager",
    "reward_model.reward_kwargs.overlong_buffer_cfg.*": "reward.rewards[] {name: overlong_penalty}",
    "reward.num_workers": "reward.workers.num_workers",
}

SANDBOX_KEYS = {"url": "url", "max_concurrent": "max_concurrent", "memory_limit_mb": "memory_limit_mb"}
KEY_INTERP = re.compile(r"^\$\{(?!oc\.env:|oc\.decode:)[^}]*\}$")


def truthy(value: Any) -> bool:
    """A flag as verl configs write it: a bool, a number, or the text true/1/yes (any case)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)
