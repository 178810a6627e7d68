"""Applying :mod:`rewardhub_trainer.verl.rules`'s table to a config: moves, drops with their reasons,
the keys decided with the whole config (KL, warm-up, checkpoints kept, mini-batches, LoRA: in
:mod:`._special`; the fully-async keys: :mod:`._async`), the unknown (misspelt) keys, and verl's
defaults that differ from the trainer's."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from rewardhub.config.migration_report import KeyMoves
from rewardhub.config.migration_report import put_key
from rewardhub.config.overrides import leaves as dotted_leaves
from rewardhub.datasets import dig
from rewardhub.errors import UsageError
from rewardhub.verl.keys import closest_key
from rewardhub.verl.keys import is_verl_key
from rewardhub.verl.owner import ENTRY_KEY

from ._special import decide
from .resources import pop_key
from .rules import KEY_RULES
from .rules import VERL_ROOTS
from .rules import rule

__all__ = ["ENTRY_KEY", "VERL_DEFAULTS", "Mapping_", "map_verl_keys"]


_ABSENT = object()

#: verl's defaults (verl/trainer/config/_generated_ppo_trainer.yaml, 0.9.1) that differ from this trainer's:
#: (verl key, verl's default, trainer key, trainer's default, carried over). A verl config that does not set
#: the verl key (nor the trainer key) runs with verl's value when ``carried`` (said in the report's notes),
#: and otherwise gets a note "verl's default X, here Y".
VERL_DEFAULTS: tuple[tuple[str, Any, str, Any, bool], ...] = (
    (
        "actor_rollout_ref.actor.loss_agg_mode",
        "token-mean",
        "trainer.loss_agg_mode",
        "seq-mean-token-mean",
        True,
    ),
    ("actor_rollout_ref.actor.optim.weight_decay", 0.01, "trainer.weight_decay", 0.0, True),
    ("actor_rollout_ref.actor.clip_ratio_c", 3.0, "trainer.clip_ratio_c", 3.0, True),
    ("actor_rollout_ref.actor.optim.lr", 1e-6, "trainer.lr", 1e-5, False),
    ("actor_rollout_ref.actor.optim.betas", [0.9, 0.999], "", "AdamW betas (0.9, 0.99)", False),
    (
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        256,
        "",
        "1 optimizer step per batch and PPO epoch (the whole batch is the mini-batch)",
        False,
    ),
    ("data.max_response_length", 512, "rollout.max_new_tokens", 32, False),
    ("data.max_prompt_length", 512, "data.max_prompt_length", 0, False),
    ("data.train_batch_size", 1024, "rollout.prompts_per_step", 4, False),
    ("trainer.max_actor_ckpt_to_keep", None, "trainer.checkpoint_keep", 3, False),
    ("trainer.val_before_train", True, "trainer.val_before_train", False, False),
)


class Mapping_(KeyMoves):
    """One pass of the table over a config (``rule(key)`` gives a key's action, ``None`` for the
    trainer's)."""

    moved_text = "verl key {old} is now {new}"
    dropped_text = "verl key {old}={value!r} is ignored: {reason}"

    def __init__(
        self, cfg: dict[str, Any], report: Any, rule: Callable[[str], tuple[str, ...] | None]
    ) -> None:
        super().__init__(report)
        self.cfg, self.rule = cfg, rule
        self.taken: dict[str, tuple[Any, tuple[str, ...]]] = {}

    def given(self, key: str) -> Any:
        return self.taken[key][0] if key in self.taken else None

    def run(self) -> None:
        entry = self.cfg.pop(ENTRY_KEY, None)
        if "defaults" in self.cfg:  # a Hydra config of verl's: built on verl's own base config
            entry = self.hydra_defaults(self.cfg.pop("defaults")) or entry
        roots = ("data", *VERL_ROOTS, "rollout", "trainer")
        leaves = [(k, v) for root in roots if isinstance(self.cfg.get(root), Mapping)
                  for k, v in dotted_leaves(self.cfg[root], root)]
        unknown = [(k, v) for k, v in leaves if k.split(".")[0] in VERL_ROOTS and k.split(".")[0] != "hydra"
                   and not is_verl_key(k)
                   and not any(p == k for p, _ in KEY_RULES)]  # an earlier verl's key the table names
        unknown += self._misspelt_roots(roots) + self._misspelt_verl_names(leaves)
        self.taken = {k: (v, rule) for k, v in leaves if (rule := self.rule(k)) is not None}
        if "trainer.total_training_steps" not in self.taken:  # then it is the trainer's own key, as it is
            self.taken.pop("trainer.total_epochs", None)
        for key, value in unknown:
            self.taken.pop(key, None)
            pop_key(self.cfg, key)
            self.report.add_unknown(key, value, closest_key(key))
        verl_config = entry is not None or any(k.split(".")[0] in VERL_ROOTS for k in self.taken)
        for key in self.taken:
            pop_key(self.cfg, key)
        from ._async import fully_async
        from ._async import map_async

        why = fully_async(entry, self.taken)
        if why:  # verl's fully-async trainer sizes a step by its mini-batches
            for key in ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size"):
                if key in self.taken:
                    self.taken[key] = (self.taken[key][0], ("async",))
        async_keys = {k: v for k, (v, action) in self.taken.items() if action[0] == "async"}
        for key, (value, action) in self.taken.items():
            if action[0] == "async":
                continue
            if isinstance(value, str) and value.startswith("${") and value.endswith("}") \
                    and not value.startswith(("${oc.env:", "${oc.decode:")):
                self.dropped(
                    key,
                    f"an interpolation of another key of verl's config ({value}); write the value "
                    "itself if it matters here",
                    value,
                )
            elif action[0] == "move":
                self.put(action[1], value, key)
            elif action[0] == "drop":
                self.dropped(key, action[1], value)
            else:
                decide(self, action[0], key, value)
        map_async(self, why, async_keys)
        if verl_config:
            # verl's fully-async trainer sizes a step by its mini-batches (said by map_async)
            self.defaults(
                skip=("actor_rollout_ref.actor.ppo_mini_batch_size", "data.train_batch_size") if why else ()
            )
        for new, (value, key) in self.sets.items():
            put_key(self.cfg, new, value, key, "the trainer's key")

    def hydra_defaults(self, value: Any) -> dict[str, Any] | None:
        """A YAML config's Hydra ``defaults:`` list: verl's own base configs are what the report's defaults
        describe; any other file it would be built on is not read here, so the config is refused."""
        from rewardhub.verl.scripts import VERL_CONFIGS

        items = value if isinstance(value, list) else [value]
        names = [str(next(iter(i.values())) if isinstance(i, Mapping) and i else i) for i in items]
        other = [n for n in names if n not in (*VERL_CONFIGS, "_self_")]
        if other:
            raise UsageError(
                f"defaults={value!r}: the config is built on {', '.join(other)}, which is not read "
                "here\nwrite those settings into this file, or keep only verl's own base config "
                f"({', '.join(VERL_CONFIGS)})"
            )
        self.dropped(
            "defaults",
            "verl's own base config: its defaults that differ from the trainer's are in the notes",
            value,
        )
        fully = next((n for n in names if n.startswith("fully_async")), None)
        return {"module": f"defaults: {fully}", "mode": "fully_async", "line": "-"} if fully else None

    def _misspelt_verl_names(self, leaves: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """Keys under ``data.``/``trainer.`` one letter or so from a verl-only name
        (``trainer.total_training_step``): the trainer's schema would not know what was meant. A name close to
        one the trainer shares with verl (``data.train_file``) is left to the schema, whose did-you-mean names
        it."""
        from rewardhub.verl.keys import suggest

        out = []
        for key, value in leaves:
            if key.split(".")[0] in ("data", "trainer") and self.rule(key) is None and not is_verl_key(key):
                meant = suggest(key, cutoff=0.85)
                if meant and self.rule(meant) is not None and meant not in ("trainer.total_epochs",):
                    out.append((key, value))
        return out

    def _misspelt_roots(self, roots: tuple[str, ...]) -> list[tuple[str, Any]]:
        """The leaves of a top-level key that is a misspelling of one of verl's sections
        (``actor_rollout_reff``); a misspelt section of the trainer's (``trainr``) is left for the section
        check."""
        from rewardhub.verl.keys import suggest

        from .rules import SECTIONS as OWN

        sections = (*OWN, "reward")

        out: list[tuple[str, Any]] = []
        for key in [k for k in self.cfg if isinstance(k, str) and k not in roots and k not in sections]:
            meant = suggest(key)
            if meant and meant not in sections and isinstance(self.cfg[key], Mapping):
                out.extend(dotted_leaves(self.cfg[key], key))
        return out

    def defaults(self, skip: tuple[str, ...] = ()) -> None:
        """verl's defaults that differ from the trainer's, for a config written for verl."""
        for verl_key, verl_value, key, here, carried in VERL_DEFAULTS:
            if (
                verl_key in skip
                or verl_key in self.taken
                or (key and (key in self.sets or dig(self.cfg, key, _ABSENT) is not _ABSENT))
            ):
                continue
            if verl_value == here:
                continue
            if carried:
                self.sets[key] = (verl_value, verl_key)
                self.report.notes.append(f"verl's default {verl_key}={verl_value!r} is carried over: {key}="
                                         f"{verl_value!r} (this trainer's own default is {here!r})")
            else:
                self.report.notes.append(
                    f"verl's default {verl_key}={verl_value!r}, here "
                    + (f"{key}={here!r}" if key else here)
                    + " (the config does not set it)"
                )


def map_verl_keys(cfg: dict[str, Any], report: Any) -> None:
    """Move verl's trainer keys in ``cfg`` (a plain dict, changed in place) to the trainer's, recording each
    in ``report`` (``moved`` / ``dropped`` / ``notes``, and ``unknown`` for a key verl does not have)."""
    Mapping_(cfg, report, rule).run()
