"""``rewardhub check CONFIG [KEY=VALUE ...]``: migrate, validate, resolve every term; run nothing.

A ``path:`` / ``module:`` term's file is parsed, not imported (its module code would run): the
function's existence, parameters and ``@reward`` metadata are read from the source.

Every problem is listed (not only the first), and the exit status is 1 when there is any.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any

from ..config.schema import TermConfig
from ..errors import RewardhubError
from ..errors import UsageError
from ..execution import effective_executor
from ..scorers import executor_problems
from ..scorers import kwargs_problems
from ..scorers import scores_remotely
from ._common import dump_json
from ._common import load_plan_quiet
from ._common import migration_line

NAME = "check"
HELP = ("check a config: migrate legacy keys, validate, resolve every reward term (nothing is run: "
        "path:/module: reward files are read, not imported)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config or launch script")
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides (Hydra's +key=value too)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def check_config(path: str | None, overrides: list[str]) -> dict[str, Any]:
    """The check's findings: ``terms`` (resolved), ``problems``, ``migration``, ``warnings``."""
    from ..execution import resolve_term
    from ..registry import build_registry

    problems: list[str] = []
    plan, others = load_plan_quiet(path, overrides)
    report = plan.report
    notes = [str(w.message) for w in others]
    reward = plan.reward
    if not reward.rewards and not scores_remotely(reward):  # data.source: TASK alone, as `train` runs it
        reward, task_note, task_problem = task_reward(plan)
        notes.extend([task_note] if task_note else [])
        problems.extend([task_problem] if task_problem else [])
    terms_cfg = list(reward.rewards)
    if not terms_cfg and not scores_remotely(reward) and not problems:
        problems.append("reward.rewards is empty: name at least one reward term (see `rewardhub list`)")
    # file and module terms are registered one by one below, each problem kept
    registry = build_registry(dataclasses.replace(reward, rewards=()))
    for spec in (s for s in registry.list_rewards() if s.status == "broken"):
        notes.append(f"plugin {spec.name} ({spec.dist or '?'} {spec.version or ''}) is broken: {spec.error}")
    terms: list[dict[str, Any]] = []
    for i, term_cfg in enumerate(terms_cfg):
        where = f"reward.rewards[{i}]"
        try:
            notes.extend(f"{where}: {n}" for n in _read_not_import(registry, term_cfg))
            term = resolve_term(registry, term_cfg, i)
        except RewardhubError as exc:
            problems.append(f"{where}: {exc}")
            continue
        except Exception as exc:  # a reward module that fails to import, say
            problems.append(f"{where}: {type(exc).__name__}: {exc}")
            continue
        spec = term.spec
        bad, maybe = kwargs_problems(term)
        problems.extend(f"{where}.kwargs: {p}" for p in bad)
        notes.extend(f"{where}.kwargs: {p}" for p in maybe)
        problems.extend(f"{where}: {p}" for p in executor_problems(term))
        if getattr(term.config, "calibration", None) is not None:  # a judge's gate
            from ..builtin.judging.calibrate import calibration_problems

            problems.extend(calibration_problems(term, registry))
        problems.extend(f"{where}: {p}" for p in judge_preflight(term))
        terms.append({"index": i, "name": term.name, "reward": spec.name, "weight": term.weight,
                      "executor": effective_executor(term), "executor_why": executor_reason(term),
                      "capabilities": sorted(spec.capabilities),
                      **{k: getattr(spec, k) for k in ("source", "dist", "version", "target", "kind")},
                      **{k: getattr(term.policy, k) for k in _POLICY_SHOWN}})
    if not scores_remotely(reward) and len(terms) > 1:
        from ._failures import drop_note

        for t in (t for t in terms if t["on_failure"] == "drop"):
            notes.append(f"reward.rewards[{t['index']}]: "
                         f"{drop_note(t['name'], [o['name'] for o in terms if o is not t])}")
    if scores_remotely(reward):
        terms, problems = remote_terms(reward, registry, notes)
    rm = reward.reward_model
    if rm.enable and not rm.model_path:
        problems.append("reward.reward_model.enable is true but reward.reward_model.model_path is not set\n"
                        "set reward.reward_model.model_path (legacy: reward_model.model.path)")
    elif rm.enable and rm.model_path and not str(rm.model_path).startswith("${") \
            and os.path.isabs(str(rm.model_path)) and not os.path.exists(str(rm.model_path)):
        notes.append(f"reward.reward_model.model_path {rm.model_path!r} does not exist on this machine")
    if reward.sandbox.url and not any("sandbox" in t["capabilities"] for t in terms):
        notes.append(
            "reward.sandbox.url is set but no reward term uses the sandbox (add code_tests or code_io "
            "from rewardhub-code)"
        )
    if reward.manager:
        notes.append(
            f"reward.manager={reward.manager!r}: verl's reward manager this config names; rewardhub runs "
            "the terms above with the policies shown instead of that manager"
        )
    return {"terms": terms, "problems": problems, "notes": notes + list(report.notes),
            "migration": {"moved": report.moved, "dropped": report.dropped}, "manager": reward.manager}


#: the policy settings a term's row shows
_POLICY_SHOWN = ("timeout_s", "on_failure", "pure", "cache", "max_concurrency", "max_rpm", "memory_limit_mb")

#: ``data.source`` values that are the trainer's own datasets, not task names (rewardhub_trainer.config)
_TRAINER_SOURCES = ("builtin", "reasoning_gym")


def task_reward(plan: Any) -> tuple[Any, str, str]:
    """The reward a config with no reward terms runs under ``rewardhub train``: that of the task its
    ``data.source`` names (as the trainer reads it), with a note saying so; or the plan's own reward and
    the problem with ``data.source`` (one that names no installed task)."""
    from ..config.loader import resolve_or_explain
    from ..config.schema import validate_reward
    from ..tasks import get_task

    data: Any = plan.config.get("data") if hasattr(plan.config, "get") else None
    source = data.get("source") if hasattr(data, "get") else None
    if not isinstance(source, str) or source in _TRAINER_SOURCES or data.get("train_files") is not None:
        return plan.reward, "", ""
    try:
        task = get_task(source)
    except UsageError as exc:
        known = ", ".join(_TRAINER_SOURCES)
        return plan.reward, "", (f"data.source={source!r} is not {known} or an installed task, and "
                                 "reward.rewards is empty\n" + str(exc).partition("\n")[2])
    raw = resolve_or_explain(plan.config.get("reward"), "reward") or {}
    reward = validate_reward({**raw, **task.reward_section})
    names = ", ".join(str(t.get("name")) for t in task.rewards)
    note = f"reward: the terms of task {task.name!r} (data.source), as rewardhub train runs it: {names}"
    return reward, note, ""


def remote_terms(reward: Any, registry: Any, notes: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """``reward.remote``'s terms as its server describes them (``GET /info``), and the problems: a
    server that does not answer, or one whose reward differs in provenance (distribution, version, file
    hash) from the same reward installed here, where scores would differ (a reward installed on the
    server only is what ``reward.remote`` is for: a note)."""
    from ..distributed import reward_facts
    from ..scorers import open_scorer

    try:
        scorer = open_scorer(reward)
    except UsageError as exc:
        return [], [str(exc)]
    terms, problems, only_there = [], [], []
    for i, (f, r) in enumerate(zip(scorer.facts, scorer.provenance())):
        url = r.get("remote")
        terms.append({**{k: r.get(k) for k in ("name", "reward", "source", "dist", "version", "target")},
                      "index": i, "where": f"reward.remote {url}", "executor": f.executor,
                      "executor_why": "on the server", "timeout_s": f.timeout_s,
                      "on_failure": f.on_failure, "weight": f.weight})
        if not registry.has_reward(r.get("reward")):
            only_there.append(str(r.get("reward")))
            continue
        here = reward_facts(registry.get_reward(r["reward"]))
        if any(here[k] != r.get(k) for k in _IDENTITY):
            problems.append(f"reward.remote: the server {url} scores {r['name']!r} with {r['reward']} "
                            f"from {_said(r)}, and this machine has {_said(here)}\nscores here and on the "
                            "server would differ: install the same version in both places")
    if only_there:
        notes.append(f"reward.remote: {', '.join(only_there)} installed on the server only (scored there)")
    return terms, problems


#: what tells two copies of a reward apart
_IDENTITY = ("dist", "version", "sha256")


def _said(facts: Any) -> str:
    return " ".join(str(facts.get(k)) for k in _IDENTITY if facts.get(k)) or "no distribution"


def _read_not_import(registry: Any, term_cfg: TermConfig) -> list[str]:
    """For a ``path:`` or ``module:`` term whose module is not imported yet: read the function from the
    file (see :mod:`._static`) and hand the registry a stand-in, so that resolving the term imports
    nothing; returns notes on what could not be read."""
    from .._discovery import find_module_file
    from ._static import read_reward

    if term_cfg.path is None and term_cfg.module is None:
        return []
    spec = registry.term_spec(term_cfg)
    module, _, function = spec.target.rpartition(":")
    if spec.is_file_target:
        file = module
    elif module in sys.modules:
        return []  # imported already (by a plugin): nothing more runs
    else:
        file = find_module_file(module) or ""
    if not file.endswith(".py"):
        return [f"{spec.target}: not a Python source file; its signature is checked when the reward runs"]
    stand_in, notes = read_reward(file, function, spec.target)
    if stand_in is not None:
        registry.use_object(spec, stand_in)
    else:  # its signature is unknown: resolving it must not import it either
        registry.use_object(spec, _unknown(function, spec.target))
    return notes


def _unknown(function: str, target: str) -> Any:
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{target} was read, not imported, by rewardhub check")

    stand_in.__name__ = stand_in.__qualname__ = function
    return stand_in


def executor_reason(term: Any) -> str:
    if effective_executor(term) != term.policy.executor:
        return (
            f"{term.policy.executor} with timeout_s {term.policy.timeout_s:g}: a sync call is timed out by "
            "killing its process"
        )
    return ""


def judge_preflight(term: Any) -> list[str]:
    """What would fail an ``llm_judge`` / ``llm_judge_group`` term's first call here: its key's
    environment variable unset, or aiohttp (the ``serve`` extra) not installed."""
    import importlib.util

    if not str(term.spec.target).startswith("rewardhub.builtin.judge:"):
        return []
    out = []
    env = (term.kwargs or {}).get("api_key_env")
    if env and not os.environ.get(str(env)):
        out.append(f"kwargs.api_key_env={env!r}: that environment variable is not set here\n"
                   f"export {env}=... before the run, or leave api_key_env out for a server that needs "
                   "no key")
    try:
        aiohttp = importlib.util.find_spec("aiohttp")
    except (ImportError, ValueError):
        aiohttp = None
    if aiohttp is None:
        out.append(f"{term.name} calls its server with aiohttp, which is not installed here\n"
                   "pip install 'rewardhub[serve]'")
    return out


def run(args: argparse.Namespace) -> int:
    if not os.path.exists(args.config):
        raise UsageError(f"config file {args.config!r} does not exist")
    result = check_config(args.config, list(args.overrides))
    if args.json:
        dump_json(result)
        return 1 if result["problems"] else 0
    if line := migration_line(**result["migration"], config=args.config, overrides=args.overrides):
        print(line)
    for t in result["terms"]:
        origin = f"{t['source']} {t['dist']} {t['version']}" if t["dist"] else t["source"]
        why = f" ({t['executor_why']})" if t["executor_why"] else ""
        where = t.get("where") or f"reward.rewards[{t['index']}]"
        print(f"ok  {where} {t['name']}: {t['reward']} ({origin}), executor "
              f"{t['executor'] or 'inline'}{why}, timeout {t['timeout_s'] or 'none'}, weight {t['weight']:g}")
    for note in result["notes"]:
        print(f"note: {note}")
    if result["problems"]:
        print(f"{len(result['problems'])} problem(s):", file=sys.stderr)
        for p in result["problems"]:
            lines = p.splitlines()
            print(f"  - {lines[0]}", file=sys.stderr)
            for line in lines[1:]:
                print(f"    {line}", file=sys.stderr)
        return 1
    print(f"{args.config}: OK ({len(result['terms'])} reward term(s))")
    return 0
