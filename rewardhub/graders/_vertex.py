"""Google Vertex AI reinforcement-tuning reward configs as graders.

A ``SingleReinforcementTuningRewardConfig`` (``rewardName`` and one scorer) becomes a grader of the internal
type ``vertex``; a ``CompositeReinforcementTuningRewardConfig`` a ``multi`` of them whose ``calculate_output``
is the weighted sum. Each reward is clipped to [-1, 1], as Vertex does. Keys are read in camelCase (the REST
API's) or snake_case (the Python SDK's). What each scorer and ``parseResponseConfig`` does, and why
``cloudRunRewardScorer`` is refused: docs/graders.md ("Vertex AI reward configs").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._flags import GraderError
from ._template import lookup

__all__ = ["VERTEX_KEYS", "is_vertex", "vertex_grader", "vertex_problems", "vertex_score"]

_SCORERS = (
    "string_match_reward_scorer",
    "code_execution_reward_scorer",
    "autorater_scorer",
    "cloud_run_reward_scorer",
)
VERTEX_KEYS = ("reward_name", "parse_response_config", *_SCORERS)
_OPS = ("EXACT_MATCH", "PARTIAL_MATCH", "REGEX_CONTAINS")
_REFS = re.compile(r"\{\{\s*references\.([\w.\[\]-]+)\s*\}\}")


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def _norm(node: Any) -> Any:
    """camelCase keys in snake_case, at every level (values as they are)."""
    if isinstance(node, Mapping):
        return {_snake(str(k)): _norm(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_norm(v) for v in node]
    return node


def is_vertex(doc: Any) -> bool:
    """Whether a document is a Vertex reward config (single, composite, or a spec that holds one)."""
    if not isinstance(doc, Mapping):
        return False
    keys = {_snake(str(k)) for k in doc}
    return bool(
        keys
        & {
            *_SCORERS,
            "weighted_reward_configs",
            "single_reward_config",
            "composite_reward_config",
            "reinforcement_tuning_spec",
        }
    )


def _ident(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name) or "reward"
    base = base if not base[0].isdigit() else "r_" + base
    out, k = base, 2
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


def vertex_grader(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The grader a Vertex reward config stands for."""
    doc = _norm(doc)
    for key in ("reinforcement_tuning_spec",):
        if isinstance(doc.get(key), Mapping):
            doc = doc[key]
    if isinstance(doc.get("composite_reward_config"), Mapping):
        doc = doc["composite_reward_config"]
    elif isinstance(doc.get("single_reward_config"), Mapping):
        doc = doc["single_reward_config"]
    if "weighted_reward_configs" not in doc:
        return {"type": "vertex", "name": str(doc.get("reward_name") or "vertex_reward"), "config": doc}
    graders: dict[str, Any] = {}
    terms: list[str] = []
    taken: set[str] = set()
    for i, item in enumerate(doc.get("weighted_reward_configs") or []):
        item = item if isinstance(item, Mapping) else {}
        single: Mapping[str, Any] = item.get("reward_config") or {}
        single = single if isinstance(single, Mapping) else {}
        name = _ident(str(single.get("reward_name") or f"reward_{i}"), taken)
        graders[name] = {"type": "vertex", "name": name, "config": single}
        terms.append(f"{float(item.get('weight', 1.0))!r} * {name}")
    return {"type": "multi", "graders": graders, "calculate_output": " + ".join(terms) or "0"}


def _problems_of_match(m: Any, at: str) -> list[str]:
    if not isinstance(m, Mapping):
        return [f"{at}: {m!r} is not a string match expression {{match_operation, expression}}"]
    out = []
    if m.get("match_operation") not in _OPS:
        out.append(f"{at}.match_operation: {m.get('match_operation')!r}; use one of {', '.join(_OPS)}")
    if not isinstance(m.get("expression"), str):
        out.append(f"{at}.expression: {m.get('expression')!r} is not a string")
    elif m.get("match_operation") == "REGEX_CONTAINS":
        try:
            re.compile(_REFS.sub("x", m["expression"]))
        except re.error as exc:
            out.append(f"{at}.expression: not a valid regular expression ({exc})")
    return out


def vertex_problems(config: Any, at: str) -> list[str]:
    """Every problem with one (normalized) single reward config."""
    if not isinstance(config, Mapping):
        return [f"{at}config: {config!r} is not a reward config"]
    scorers = [k for k in _SCORERS if config.get(k) is not None]
    if len(scorers) != 1:
        return [
            f"{at}config: {len(scorers)} scorers ({', '.join(scorers) or 'none'}); give exactly one of "
            f"{', '.join(_SCORERS)}"
        ]
    out = []
    parse = config.get("parse_response_config") or {}
    if parse.get("parse_type", "IDENTITY") not in ("IDENTITY", "REGEX_EXTRACT"):
        out.append(
            f"{at}parse_response_config.parse_type: {parse.get('parse_type')!r}; "
            "use IDENTITY or REGEX_EXTRACT"
        )
    scorer, kind = config[scorers[0]], scorers[0]
    where = f"{at}{kind}"
    if kind == "cloud_run_reward_scorer":
        out.append(
            f"{where}: a Cloud Run scorer calls a Google service, which rewardhub does not run locally; "
            "serve "
            "the reward with `rewardhub serve` and point reward.remote at it, or write it as a python term"
        )
    elif kind == "string_match_reward_scorer":
        if scorer.get("json_match_expression") is not None:
            j = scorer["json_match_expression"]
            out += _problems_of_match(
                j.get("value_string_match_expression") if isinstance(j, Mapping) else j,
                f"{where}.json_match_expression.value_string_match_expression",
            )
        else:
            out += _problems_of_match(
                scorer.get("string_match_expression"), f"{where}.string_match_expression"
            )
    elif kind == "code_execution_reward_scorer":
        src = scorer.get("python_code_snippet")
        if not isinstance(src, str) or "def evaluate(" not in src:
            out.append(f"{where}.python_code_snippet: Python source defining evaluate(example, response)")
    elif not isinstance((scorer.get("autorater_config") or {}).get("autorater_model"), str):
        out.append(
            f"{where}.autorater_config.autorater_model: missing; the model's name at the grader endpoint"
        )
    return out


def _refs(text: str, scope: Mapping[str, Any]) -> str:
    return _REFS.sub(lambda m: str(lookup(scope, "item." + m.group(1))), text)


def _parse(text: str, config: Mapping[str, Any]) -> str:
    parse = config.get("parse_response_config") or {}
    if parse.get("parse_type") != "REGEX_EXTRACT":
        return text
    m = re.search(parse.get("regex_extract_expression") or "(.*)", text, re.S)
    if m is None:
        return ""
    return m.group(1) if m.re.groups else m.group(0)


def _matches(m: Mapping[str, Any], target: str, scope: Mapping[str, Any]) -> bool:
    expr = _refs(m["expression"], scope)
    op = m["match_operation"]
    if op == "EXACT_MATCH":
        return target == expr
    if op == "PARTIAL_MATCH":
        return expr in target
    return re.search(expr, target) is not None


def _clip(x: float) -> float:
    return max(-1.0, min(1.0, float(x)))


def vertex_score(config: Mapping[str, Any], scope: Mapping[str, Any]) -> float:
    """One single reward config's reward for a sample (no network: string match and code execution)."""
    text = _parse(str(scope["sample"]["output_text"]), config)
    if config.get("string_match_reward_scorer") is not None:
        s = config["string_match_reward_scorer"]
        if s.get("json_match_expression") is not None:
            import json

            j = s["json_match_expression"]
            try:
                value = json.loads(text)[j["key_name"]]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise GraderError(
                    "sample_parse_error",
                    f"the response has no JSON key {j.get('key_name')!r}: {text[:120]!r}",
                ) from None
            ok = _matches(j["value_string_match_expression"], str(value), scope)
        else:
            ok = _matches(s["string_match_expression"], text, scope)
        return _clip(s.get("correct_answer_reward", 1.0) if ok else s.get("wrong_answer_reward", 0.0))
    from ._python import run_in_sandbox

    snippet = config["code_execution_reward_scorer"]["python_code_snippet"]
    example = {
        "references": {k: v for k, v in scope["item"].items() if v is not None},
        "contents": [{"role": "user", "parts": [{"text": str(scope["item"].get("prompt") or "")}]}],
    }
    response = {"role": "model", "parts": [{"text": text}]}
    return _clip(run_in_sandbox(snippet, "evaluate", [example, response], {"timeout_s": 100.0}))


async def ask_autorater(config: Mapping[str, Any], scope: Mapping[str, Any], endpoint: Any) -> float:
    """An ``autoraterScorer``'s reward: the prompt, the question and the (parsed) response to the endpoint's
    ``autoraterModel``; its reply parsed and scored as the config says."""
    from ..builtin.model_http import chat_url
    from ._model import endpoint_of
    from ._model import post_grader

    a = config["autorater_scorer"]
    base, headers, key = endpoint_of({}, endpoint)
    question = scope["item"].get("prompt")
    text = _parse(str(scope["sample"]["output_text"]), config)
    prompt = _refs(str(a.get("autorater_prompt") or "Rate the response."), scope)
    if re.search(r"\{\{\s*response\s*\}\}", prompt):  # the SDK's own example fills {{response}} in place
        user = re.sub(r"\{\{\s*response\s*\}\}", lambda _: text, prompt)
    else:
        user = f"{prompt}\n\nQUESTION:\n{question or ''}\n\nRESPONSE:\n{text}"
    body = {
        "model": a["autorater_config"]["autorater_model"],
        "temperature": 0.0,
        "messages": [{"role": "user", "content": user}],
    }
    reply = await post_grader(chat_url(base), body, headers, key)
    try:
        said = str(reply["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError):
        raise GraderError(
            "model_grader_server_error", "the autorater's reply has no choices[0].message"
        ) from None
    parsed = _parse(said, {"parse_response_config": a.get("autorater_response_parse_config") or {}}).strip()
    exact = a.get("exact_match_scorer")
    if exact is not None:
        ok = parsed == _refs(str(exact.get("expression", "")), scope)
        return _clip(exact.get("correct_answer_reward", 1.0) if ok else exact.get("wrong_answer_reward", 0.0))
    try:
        return _clip(float(parsed))
    except ValueError:
        raise GraderError(
            "model_grader_parse_error", f"the autorater's reply is not a number: {said[:200]!r}"
        ) from None
