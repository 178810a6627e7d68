"""The legacy-key shim: verl-style reward settings -> the ``reward:`` schema.

:func:`migrate` is pure: it returns a new config and a :class:`MigrationReport`; the input is never
touched. Every legacy key is either *moved* (``{"from", "to"}``) or *dropped* with a reason; no
legacy node is left in the result, so migrating the result again changes nothing and reports
nothing. Each key also gives one :class:`~rewardhub.RewardhubDeprecationWarning` naming old and new.
The spellings covered (verl's, over its versions) are the README's table ("Legacy (verl) keys") and
:data:`~._legacy_rules.RULES`; the keys decided with the others (the custom term, the manager, DAPO's
overlong penalty, the reward-model term) are decided here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..config.migration_report import KeyMoves
from ..config.migration_report import MigrationReport
from ..config.migration_report import put_key
from ..config.migration_report import unknown_line
from ..errors import UsageError
from ._legacy_leaves import Leaf
from ._legacy_leaves import is_legacy_key
from ._legacy_leaves import legacy_keys
from ._legacy_leaves import legacy_leaves
from ._legacy_leaves import plain_dict
from ._legacy_leaves import rule_of
from ._legacy_rules import DEFAULT_FUNCTION
from ._legacy_rules import KEY_INTERP
from ._legacy_rules import KNOWN_MANAGERS
from ._legacy_rules import LEGACY_KEYS
from ._legacy_rules import SANDBOX_KEYS
from ._legacy_rules import truthy
from .keys import ENGINES
from .keys import closest_key

__all__ = ["DEFAULT_FUNCTION", "KNOWN_MANAGERS", "LEGACY_KEYS", "MigrationReport", "is_legacy_key",
           "legacy_keys", "migrate", "truthy", "unknown_line"]

#: overlong_buffer_cfg's settings -> the overlong_penalty term's kwargs
_OVERLONG_KWARGS = {"len": "overlong_buffer_len", "penalty_factor": "penalty_factor"}


class _Migration(KeyMoves):
    def __init__(self, cfg: dict[str, Any], report: MigrationReport) -> None:
        super().__init__(report)
        self.cfg = cfg
        reward = cfg.get("reward")
        if reward is None:
            reward = {}
        elif not isinstance(reward, Mapping):
            raise UsageError(f"reward={reward!r} is not valid\nexpected a mapping (the reward: section)")
        self.reward: dict[str, Any] = dict(reward)
        self.crf: dict[str, tuple[Any, str]] = {}  # path / name -> (value, key)
        self.crf_kwargs: dict[str, tuple[Any, str]] = {}
        self.kwargs: dict[str, tuple[Any, str]] = {}  # reward_kwargs.* (rel without prefix)
        self.managers: list[tuple[str, str]] = []  # (name, key)

    # ---- the walk -------------------------------------------------------------------------------
    def run(self, leaves: list[Leaf]) -> None:
        for leaf in leaves:
            if isinstance(leaf.value, str) and KEY_INTERP.match(leaf.value):
                self.dropped(leaf.key, f"an interpolation of another key of verl's config ({leaf.value}); "
                                       "write the value itself if it matters here", leaf.value)
                continue
            action = rule_of(leaf)
            kind = action[0]
            if kind == "unknown":
                self.report.add_unknown(leaf.key, leaf.value, closest_key(leaf.key))
            elif kind == "drop":
                self.dropped(leaf.key, action[1], leaf.value)
            elif kind == "move":
                target = action[1]
                if target.endswith(".*"):
                    head = leaf.rel.split(".", 1)
                    target = target[:-2] + ("." + head[1] if len(head) > 1 else "")
                self.put(target, leaf.value, leaf.key)
            elif kind == "engine":
                engine = ENGINES.get(str(leaf.value).lower()) if leaf.value is not None else None
                if engine:
                    self.put("reward.reward_model.engine", engine, leaf.key)
                else:
                    self.put("reward.reward_model.rollout.name", leaf.value, leaf.key)
                    self.report.notes.append(
                        f"{leaf.key}={leaf.value!r}: rewardhub serves reward models with transformers or "
                        "vllm; the name is kept in reward.reward_model.rollout.name")
            elif kind == "manager":
                if leaf.value is None:
                    self.dropped(leaf.key, "unset", leaf.value)
                else:
                    self.managers.append((str(leaf.value), leaf.key))
            elif kind == "crf":
                if leaf.rel.startswith("reward_kwargs."):
                    self._once(self.crf_kwargs, leaf.rel[len("reward_kwargs."):], leaf)
                elif leaf.rel == "reward_kwargs":  # an empty mapping
                    self.dropped(leaf.key, "empty", leaf.value)
                else:
                    self._once(self.crf, leaf.rel, leaf)
            elif kind == "kwargs":
                rel = leaf.rel[len("reward_kwargs."):] if leaf.ns == "reward_model" else leaf.rel
                if rel in ("", "reward_kwargs"):
                    self.dropped(leaf.key, "empty", leaf.value)
                else:
                    self._once(self.kwargs, rel, leaf)
            elif kind == "sandbox":
                rel = leaf.rel[len("sandbox_fusion."):] if leaf.ns == "reward_model" else leaf.rel
                if rel in SANDBOX_KEYS:
                    self.put(f"reward.sandbox.{SANDBOX_KEYS[rel]}", leaf.value, leaf.key)
                else:  # verl's sandbox_fusion has these three keys only
                    self.report.add_unknown(leaf.key, leaf.value, closest_key(leaf.key))
        self._finish()

    def _once(self, table: dict[str, tuple[Any, str]], rel: str, leaf: Leaf) -> None:
        if rel in table:
            other_value, other = table[rel]
            # an unset key (verl's default null) leaves the set one
            if leaf.value is None or other_value is None:
                unset, kept = (leaf.key, other) if leaf.value is None else (other, leaf.key)
                self.dropped(unset, f"unset (null); {kept} is set", None)
                if leaf.value is None:
                    return
            elif other_value != leaf.value:
                raise UsageError(f"{other}={other_value!r} and {leaf.key}={leaf.value!r} disagree\n"
                                 "keep one of them")
            else:
                # agreeing: reported with the first, line for line
                self.also.setdefault(other, []).append(leaf.key)
                return
        table[rel] = (leaf.value, leaf.key)

    # ---- decisions that need every key ----------------------------------------------------------
    def _finish(self) -> None:
        manager = self._manager()
        terms = self.reward.get("rewards")
        terms = [] if terms is None else list(terms)
        if not isinstance(self.reward.get("rewards", []) or [], (list, tuple)):
            raise UsageError(f"reward.rewards={self.reward['rewards']!r} is not valid\n"
                             "expected a list of terms")
        self.terms: list[Any] = [copy.deepcopy(t) for t in terms]

        custom_index = self._custom_term(manager)
        self._overlong()
        self._reward_model_term(custom_index)
        # the remaining reward_kwargs go to the custom term
        for rel, (value, key) in list(self.kwargs.items()):
            if custom_index is None:
                self.dropped(key, "no custom_reward_function to pass it to", value)
            else:
                self._term_put(custom_index, f"kwargs.{rel}", value, key)
        if self.terms or "rewards" in self.reward:
            self.reward["rewards"] = self.terms
        out = {"reward": self.reward}
        for new, (value, key) in self.sets.items():
            put_key(out, new, value, key)
        self.reward = out["reward"]
        if self.reward or "reward" in self.cfg:
            self.cfg["reward"] = self.reward

    def _manager(self) -> str | None:
        names: dict[str, str] = {}
        for name, key in self.managers:
            names.setdefault(name, key)
        if len(names) > 1:
            shown = " and ".join(f"{k}={n!r}" for n, k in names.items())
            raise UsageError(f"{shown} name different reward managers\nkeep one of them")
        if not names:
            return None
        (name, key), = names.items()
        for _, k in self.managers:
            self.put("reward.manager", name, k)
        if name not in KNOWN_MANAGERS:
            self.report.notes.append(
                f"{key}={name!r} is a custom verl reward manager: rewardhub scores the reward.rewards terms "
                "itself; register the manager's scoring function as a reward")
        return name

    def _custom_term(self, manager: str | None) -> int | None:
        path = self.crf.pop("path", (None, ""))  # (value, key); no key when not set
        name = self.crf.pop("name", (None, ""))
        if path[0] in (None, ""):
            no_path = "custom_reward_function.path is not set, so there is no custom function"
            for value, key in (path, name):
                if key:
                    self.dropped(key, no_path, value)
            for rel, (value, key) in self.crf_kwargs.items():
                self.dropped(key, no_path, value)
            return None
        function = name[0] if name[0] not in (None, "") else DEFAULT_FUNCTION
        index = next((i for i, t in enumerate(self.terms) if isinstance(t, Mapping)
                      and t.get("path") == path[0] and (t.get("function") or DEFAULT_FUNCTION) == function),
                     None)
        if index is None:
            index = len(self.terms)
            self.terms.append({"path": path[0], "function": function})
            existed = False
        else:
            self.terms[index] = dict(self.terms[index])
            self.terms[index].setdefault("function", function)
            existed = True
        self.moved(path[1], f"reward.rewards[{index}].path")
        if name[1]:
            self.moved(name[1], f"reward.rewards[{index}].function")
        elif not existed:
            self.report.notes.append(f"{path[1]} has no name: the function is verl's default "
                                     f"{DEFAULT_FUNCTION!r}")
        for rel, (value, key) in self.crf_kwargs.items():
            self._term_put(index, f"kwargs.{rel}", value, key)
        for field_name, value in KNOWN_MANAGERS.get(manager or "", {}).items():
            self._term_put(index, field_name, value, f"the {manager!r} reward manager", report=False)
            self.report.notes.append(f"the {manager!r} reward manager sets "
                                     f"reward.rewards[{index}].{field_name}={value}")
        if manager in ("rate_limited", "limit"):
            for rel, field_name in (("max_concurrent", "max_concurrency"), ("timeout", "timeout_s"),
                                    ("max_rpm", "max_rpm")):
                if rel in self.kwargs:
                    value, key = self.kwargs.pop(rel)
                    self._term_put(index, field_name, value, key)
            self._tokens_per_minute(index)
        return index

    def _tokens_per_minute(self, index: int) -> None:
        """verl's rate-limited manager charges every call ``estimated_tokens_per_request`` tokens (2000
        unless set), so its ``max_tpm`` is a limit of ``max_tpm / estimated`` calls a minute."""
        est, est_key = self.kwargs.pop("estimated_tokens_per_request", (2000, ""))
        if "max_tpm" not in self.kwargs:
            if est_key:
                self.dropped(est_key, "it only sizes max_tpm, which is not set", est)
            return
        value, key = self.kwargs.pop("max_tpm")
        try:
            rpm = float(value) / float(est)
        except (TypeError, ValueError, ZeroDivisionError):
            raise UsageError(f"{key}={value!r} with estimated_tokens_per_request={est!r} is not valid\n"
                             "give both as positive numbers") from None
        term = self.terms[index] = dict(self.terms[index])
        term["max_rpm"] = min(rpm, float(term["max_rpm"])) if term.get("max_rpm") else rpm
        for k in (key, est_key):
            if k:
                self.moved(k, f"reward.rewards[{index}].max_rpm")

    def _reward_model_term(self, custom_index: int | None) -> None:
        """verl scores with the reward model alone when it is enabled and no custom function is given."""
        enable = self.sets.get("reward.reward_model.enable")
        if enable is None or not truthy(enable[0]):
            return
        if custom_index is not None:
            self.report.notes.append(
                f"{enable[1]}=true with a custom reward function: verl serves the model to that function; "
                "rewardhub "
                "does not start a model server for it. To score with the model itself add a term "
                "{name: reward_model} (a classifier) or {name: judge} (a generative judge)")
            return
        if any(isinstance(t, Mapping) and t.get("name") in ("reward_model", "judge") for t in self.terms):
            return
        self.terms.append({"name": "reward_model"})
        self.report.notes.append(f"{enable[1]}=true and no custom reward function: the reward model scores "
                                 f"every sample (reward.rewards[{len(self.terms) - 1}] "
                                 "{name: reward_model}, from rewardhub-models), on Ray reward workers of the "
                                 "pool reward.reward_model.pool (give the term executor: inline to score "
                                 "in-process)")

    def _overlong(self) -> None:
        cfg_keys = {k: v for k, v in self.kwargs.items() if k.startswith("overlong_buffer_cfg.")}
        if not cfg_keys:
            return
        for k in cfg_keys:
            del self.kwargs[k]
        enable = cfg_keys.get("overlong_buffer_cfg.enable", (False, ""))
        max_len = self.kwargs.pop("max_resp_len", None)
        if not truthy(enable[0]):
            reason = "overlong_buffer_cfg.enable is not true, so there is no overlong penalty"
            for value, key in [*cfg_keys.values(), *([max_len] if max_len else [])]:
                self.dropped(key, reason, value)
            return
        if max_len is None:
            data_len = (self.cfg.get("data") or {}).get("max_response_length")
            if data_len is None:
                raise UsageError(f"{enable[1]}=true needs the maximum response length\nset "
                                 f"{enable[1].rsplit('.', 2)[0]}.max_resp_len (or data.max_response_length)")
            max_len = (data_len, "data.max_response_length")
            self.report.notes.append("the overlong penalty's max_resp_len is data.max_response_length "
                                     f"({data_len})")
        index = next((i for i, t in enumerate(self.terms)
                      if isinstance(t, Mapping) and t.get("name") == "overlong_penalty"), None)
        if index is None:
            index = len(self.terms)
            self.terms.append({"name": "overlong_penalty"})
        else:
            self.terms[index] = dict(self.terms[index])
        self.moved(enable[1], f"reward.rewards[{index}]")
        self._term_put(index, "kwargs.max_resp_len", max_len[0], max_len[1],
                       report=max_len[1] != "data.max_response_length")
        for k, (value, key) in cfg_keys.items():
            rel = k[len("overlong_buffer_cfg."):]
            if rel in _OVERLONG_KWARGS:
                self._term_put(index, f"kwargs.{_OVERLONG_KWARGS[rel]}", value, key)
            elif rel == "log":
                self.dropped(key, "the penalty is always reported as a per-reward metric", value)
            elif rel != "enable":
                self.dropped(key, "not an overlong_buffer_cfg setting (enable, len, penalty_factor, log)",
                             value)

    def _term_put(self, index: int, dotted: str, value: Any, key: str, report: bool = True) -> None:
        term = self.terms[index]
        node = term
        parts = dotted.split(".")
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, Mapping):
                nxt = {}
            node[p] = nxt = dict(nxt)
            node = nxt
        last = parts[-1]
        if last in node and node[last] is not None and node[last] != value:
            raise UsageError(f"{key}={value!r} conflicts with reward.rewards[{index}].{dotted}="
                             f"{node[last]!r}\nkeep one of them (reward.rewards is the new key)")
        node[last] = value
        if report:
            self.moved(key, f"reward.rewards[{index}].{dotted}")


def migrate(config: Any, report: MigrationReport | None = None) -> tuple[dict[str, Any], MigrationReport]:
    """Move every legacy reward key of ``config`` to the ``reward:`` schema.

    :param config: a whole trainer config (mapping or ``DictConfig``); it is not modified.
    :param report: where to record what moved (a new one by default).
    :returns: ``(new_config, report)``; ``new_config`` is a plain dict with no legacy node left and
        every other section untouched (verl's trainer keys are mapped after this, by the loader:
        :mod:`rewardhub_trainer.verl.rules`).
    :raises UsageError: when a legacy key and a new key (or two legacy spellings) set different values.
    """
    cfg = plain_dict(config)
    leaves = legacy_leaves(cfg)
    report = MigrationReport() if report is None else report
    if not leaves:
        return cfg, report
    m = _Migration(cfg, report)
    m.run(leaves)
    return m.cfg, m.report
