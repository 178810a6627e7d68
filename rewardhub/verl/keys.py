"""The keys verl's trainer config has, to tell a misspelt verl key from one the migration handles.

:func:`table` (data: ``verl_keys.txt``) lists verl 0.9.1's keys (``_generated_ppo_trainer.yaml``, its
Megatron twin, the fully-async configs and ``legacy_reward_impl.yaml``), one line per node:
``parent: leaf leaf ...`` (``node = other`` where its subtree is an earlier node's); a leaf written
``name/`` is a free-form mapping (any key below it is verl's: ``engine_kwargs``, ``override_config``).
:func:`derive_table` builds it from those files (tests/test_verl_trainer_keys.py checks it against the
installed verl); ``python -m rewardhub.verl.keys VERL_DIR`` writes it again for a newer verl.
"""

from __future__ import annotations

import difflib
import functools
import re
import string
from collections.abc import Iterable
from pathlib import Path

__all__ = ["ENGINES", "VERL_YAMLS", "Rule", "derive_table", "is_verl_key", "matches", "parse_rules", "roots",
           "closest_key", "suggest", "key_table"]

#: verl's rollout/reward-model engine names -> rewardhub's
ENGINES = {"vllm": "vllm", "hf": "transformers", "transformers": "transformers"}
#: (pattern, action): ``("move", new key)``, ``("drop", reason)`` or ``(kind,)`` (decided with the config)
Rule = tuple[str, tuple[str, ...]]

#: the files of a verl checkout (relative to its ``verl/`` package) the table is derived from
VERL_YAMLS = (
    "trainer/config/_generated_ppo_trainer.yaml",
    "trainer/config/_generated_ppo_megatron_trainer.yaml",
    "trainer/config/legacy_reward_impl.yaml",
    "experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml",
    "experimental/fully_async_policy/config/fully_async_ppo_megatron_trainer.yaml",
)

#: keys of earlier verl versions (0.4-0.8) that launch scripts still carry, and free-form nodes the
#: YAML files leave null (``name/``)
OLDER = """\
custom_reward_function: reward_kwargs/
reward_model: reward_kwargs/ sandbox_fusion/ strategy micro_batch_size mini_batch_size use_dynamic_bsz \
forward_max_token_len_per_gpu ulysses_sequence_parallel_size use_reward_loop launch_reward_fn_async optim/ \
profiler/ max_length micro_batch_size_per_gpu
reward_model.model: input_tokenizer fsdp_config/ use_remove_padding use_fused_kernels
reward_model.rollout: engine_kwargs/
reward_manager: name source module/
reward: reward_kwargs/
data: gen_batch_size datagen/ tool_config_path
actor_rollout_ref.rollout: engine_kwargs/ val_kwargs/ custom_chat_template
actor_rollout_ref.actor.optim: warmup_style
ray_init: num_cpus timeline_json_file
"""


def derive_table(yaml_texts: Iterable[str]) -> str:
    """The table (see :func:`table`) of the keys in verl's config files ``yaml_texts``."""
    import yaml

    from ..config.overrides import leaves

    groups: dict[str, set[str]] = {}
    for text in yaml_texts:
        data = yaml.safe_load(text) or {}
        for skip in ("defaults", "hydra"):
            data.pop(skip, None)
        for key, value in leaves(data):
            parent, _, name = key.rpartition(".")
            groups.setdefault(parent, set()).add(name + ("/" if value == {} else ""))
    out: list[str] = []
    seen: dict[frozenset[tuple[str, frozenset[str]]], str] = {}
    aliased: list[str] = []
    for parent in sorted(groups):
        if any(parent.startswith(a + ".") for a in aliased):
            continue
        below = {p[len(parent):]: groups[p] for p in groups if p == parent or p.startswith(parent + ".")}
        shape = frozenset((p, frozenset(n)) for p, n in below.items())
        if shape in seen and sum(len(p) + len(" ".join(n)) for p, n in below.items()) > 110:
            out.append(f"{parent} = {seen[shape]}\n")  # the same subtree as an earlier node's
            aliased.append(parent)
            continue
        seen.setdefault(shape, parent)
        out.append(f"{parent}: {' '.join(sorted(groups[parent]))}\n")
    return "".join(out)


def parse_rules(text: str, **reasons: str) -> list[Rule]:
    """A rule table written one rule a line: ``pattern -> new.key`` (a move), ``pattern (kind)`` (a key
    decided with the whole config) or ``pattern: reason`` (a drop; ``$name`` in it is ``reasons[name]``)."""
    out: list[Rule] = []
    for line in string.Template(text).substitute(reasons).splitlines():
        found = re.fullmatch(r"(\S+?)(?: -> (\S+)| \((\w+)\)|: (.+))", line)
        if found is None:
            raise ValueError(f"not a rule: {line!r}")
        pattern, new, kind, reason = found.groups()
        out.append((pattern, ("move", new) if new else (kind,) if kind else ("drop", reason)))
    return out


def matches(pattern: str, key: str) -> bool:
    """Whether dotted ``key`` is ``pattern``'s: ``*`` any key, ``a.*`` a and all under it, ``a.b_*`` a name
    prefix, else the key itself."""
    if pattern == "*":
        return True
    if pattern.endswith("_*"):
        return key.startswith(pattern[:-1])
    if pattern.endswith(".*"):
        return key == pattern[:-2] or key.startswith(pattern[:-1])
    return key == pattern


def key_table() -> str:
    """The key table of the verl this release follows (``verl_keys.txt``, written by this module's
    ``__main__``)."""
    return Path(__file__).with_name("verl_keys.txt").read_text(encoding="utf-8")


@functools.cache
def _known() -> tuple[frozenset[str], frozenset[str], dict[str, list[str]]]:
    """(every leaf key, the free-form nodes, parent -> its children's names, inner nodes too)."""
    entries: set[str] = set()  # every key, a free-form one ending in "/"
    for line in (key_table() + OLDER).splitlines():
        node, alias, same = line.partition(" = ")
        if alias:
            entries |= {node + e[len(same):] for e in entries if e.startswith(same + ".")}
        parent, _, names = line.partition(": ")
        entries.update(f"{parent}.{name}" for name in names.split())
    keys = {e for e in entries if not e.endswith("/")}
    opened = {e[:-1] for e in entries if e.endswith("/")}
    children: dict[str, set[str]] = {}
    for key in keys | opened:
        parts = key.split(".")
        for i in range(len(parts)):
            children.setdefault(".".join(parts[:i]), set()).add(parts[i])
    return frozenset(keys), frozenset(opened), {k: sorted(v) for k, v in children.items()}


def roots() -> tuple[str, ...]:
    """The top-level sections of verl's config (``actor_rollout_ref``, ``data``, ``trainer``...)."""
    return tuple(_known()[2][""])


def is_verl_key(key: str) -> bool:
    """Whether dotted ``key`` is a key of verl's config (a leaf, a node, or under a free-form node)."""
    keys, opened, children = _known()
    if key in keys or key in children or key in opened:
        return True
    parts = key.split(".")
    return any(".".join(parts[:i]) in opened for i in range(1, len(parts)))


def closest_key(key: str) -> str | None:
    """:func:`suggest`'s closest verl key, looser (0.85) where the default finds none."""
    return suggest(key) or suggest(key, 0.85)


def suggest(key: str, cutoff: float = 0.6) -> str | None:
    """The verl key closest to a misspelt ``key``: a sibling of its last part, else of the first part that
    is not verl's (``actor_rollout_ref.actr.optim.lr`` -> ``actor_rollout_ref.actor.optim.lr``)."""
    _, _, children = _known()
    parts = key.split(".")
    for i in range(len(parts)):
        head = ".".join(parts[:i])
        if head not in children:
            return None
        if parts[i] in children[head]:
            continue
        same_case = [c for c in children[head] if c.lower() == parts[i].lower()]
        close = same_case or difflib.get_close_matches(parts[i], children[head], n=1, cutoff=cutoff)
        if not close:
            return None
        fixed = ".".join([*parts[:i], close[0], *parts[i + 1:]])
        return fixed if is_verl_key(fixed) else ".".join([*parts[:i], close[0]])
    return None


if __name__ == "__main__":  # pragma: no cover - regenerates verl_keys.txt
    import os
    import sys

    base = sys.argv[1]
    texts = (open(os.path.join(base, p), encoding="utf-8").read() for p in VERL_YAMLS)
    Path(__file__).with_name("verl_keys.txt").write_text(derive_table(texts), encoding="utf-8")
