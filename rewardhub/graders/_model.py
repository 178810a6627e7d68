"""The model-backed graders: ``score_model`` and ``label_model`` on any OpenAI-compatible
``/chat/completions`` endpoint, and ``text_similarity`` ``cosine`` on its ``/embeddings``, sent with
``llm_judge``'s HTTP machinery (retries with back-off on 429/5xx, one session per event loop, the key kept
out of every message).

The reply is read as OpenAI documents it: a JSON object whose ``result`` is the score (cut to ``range``, as
the graders guide says) or the label (one of ``labels``); the request asks for that shape with a
``response_format`` JSON schema. A reply that is not that is a ``model_grader_parse_error``, a refusal a
``model_grader_refusal_error``, an endpoint that fails a ``model_grader_server_error``: never a number.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from ..builtin.model_http import JudgeError
from ..builtin.model_http import chat_url
from ..builtin.model_http import post_json
from ..errors import UsageError
from ._flags import GraderError
from ._template import render_template

if TYPE_CHECKING:
    from ._run import GraderEndpoint

__all__ = ["ask_grader", "endpoint_of", "post_grader"]

_DEFAULT_BASE = "https://api.openai.com/v1"
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def endpoint_of(spec: Mapping[str, Any], endpoint: GraderEndpoint) -> tuple[str, dict[str, str], str]:
    """``(base_url, headers, key)``: the spec's, else the term's, else ``OPENAI_BASE_URL`` /
    ``OPENAI_API_KEY``."""
    base = spec.get("base_url") or endpoint.base_url or os.environ.get("OPENAI_BASE_URL") or _DEFAULT_BASE
    key_env = spec.get("api_key_env") or endpoint.api_key_env
    if key_env:
        key = os.environ.get(key_env, "")
        if not key:
            raise UsageError(
                f"grader api_key_env={key_env!r}: that environment variable is not set\n"
                "export it in every process that scores (the key itself never goes in a config)"
            )
    else:
        key = os.environ.get("OPENAI_API_KEY", "")
    return str(base), ({"Authorization": f"Bearer {key}"} if key else {}), key


def _content(content: Any, scope: Mapping[str, Any]) -> Any:
    if isinstance(content, str):
        return render_template(content, scope)
    parts: list[Any] = []
    for p in content if isinstance(content, list) else [content]:
        if isinstance(p, Mapping) and isinstance(p.get("text"), str):
            parts.append({"type": "text", "text": render_template(p["text"], scope)})
        elif isinstance(p, Mapping) and p.get("type") == "input_image":
            url = render_template(str(p.get("image_url", "")), scope)
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append(p)
    return parts


def _schema(spec: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = (
        {"type": "string", "enum": list(spec["labels"])}
        if spec["type"] == "label_model"
        else {"type": "number"}
    )
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["steps", "result"],
        "properties": {
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["description", "conclusion"],
                    "properties": {"description": {"type": "string"}, "conclusion": {"type": "string"}},
                },
            },
            "result": result,
        },
    }
    return {"type": "json_schema", "json_schema": {"name": "grader_result", "strict": True, "schema": schema}}


def _body(spec: Mapping[str, Any], scope: Mapping[str, Any]) -> dict[str, Any]:
    messages = [
        {
            "role": "system" if m.get("role") == "developer" else m.get("role", "user"),
            "content": _content(m["content"], scope),
        }
        for m in spec["input"]
    ]
    body: dict[str, Any] = {"model": spec["model"], "messages": messages, "response_format": _schema(spec)}
    for key, value in (spec.get("sampling_params") or {}).items():
        if value is None:
            continue
        body["max_tokens" if key in ("max_completions_tokens", "max_completion_tokens") else key] = value
    body.setdefault("temperature", 0.0)
    return body


def _scrub(text: str, key: str) -> str:
    return text.replace(key, "<api key>") if key else text


async def post_grader(url: str, body: dict[str, Any], headers: dict[str, str], key: str) -> Any:
    try:
        return await post_json(url, body, headers, retries=4, backoff_s=0.5, request_timeout_s=120.0)
    except JudgeError as exc:
        raise GraderError("model_grader_server_error", _scrub(str(exc), key)) from None


def _result(reply: Any, spec: Mapping[str, Any], key: str) -> Any:
    try:
        message = reply["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        raise GraderError(
            "model_grader_server_error",
            f"the reply has no choices[0].message: {_scrub(json.dumps(reply)[:200], key)}",
        ) from None
    if message.get("refusal"):
        raise GraderError(
            "model_grader_refusal_error", f"the grader model refused: {str(message['refusal'])[:200]!r}"
        )
    text = message.get("content")
    if not isinstance(text, str):
        raise GraderError(
            "model_grader_parse_error", f"the reply has no text content: {json.dumps(message)[:200]}"
        )
    fenced = _FENCE.match(text)
    try:
        obj = json.loads(fenced.group(1) if fenced else text)
    except json.JSONDecodeError:
        obj = None
    if not isinstance(obj, Mapping) or "result" not in obj:
        cut = reply["choices"][0].get("finish_reason") == "length"
        why = " (it was cut at the token limit: raise sampling_params.max_completions_tokens)" if cut else ""
        raise GraderError(
            "model_grader_parse_error",
            f"the reply is not a JSON object with 'result'{why}: {_scrub(text[:200], key)!r}",
        )
    return obj["result"]


async def ask_grader(spec: Mapping[str, Any], scope: Mapping[str, Any], endpoint: GraderEndpoint) -> float:
    """One model-backed grader's score for one sample."""
    base, headers, key = endpoint_of(spec, endpoint)
    if spec["type"] == "text_similarity":
        return await _cosine(spec, scope, base, headers, key)
    reply = await post_grader(chat_url(base), _body(spec, scope), headers, key)
    result = _result(reply, spec, key)
    if spec["type"] == "label_model":
        if result not in spec["labels"]:
            raise GraderError(
                "model_grader_parse_error",
                f"the label {result!r} is not one of labels {list(spec['labels'])}",
            )
        return 1.0 if result in spec["passing_labels"] else 0.0
    low, high = (float(x) for x in spec.get("range", (0, 1)))
    if isinstance(result, bool) or not isinstance(result, (int, float)) or not math.isfinite(result):
        raise GraderError("model_grader_parse_error", f"the result {result!r} is not a number")
    return min(high, max(low, float(result)))  # the guide: "truncated to the given range"


async def _cosine(
    spec: Mapping[str, Any], scope: Mapping[str, Any], base: str, headers: dict[str, str], key: str
) -> float:
    url = chat_url(base).removesuffix("/chat/completions") + "/embeddings"
    texts = [render_template(spec["input"], scope), render_template(spec["reference"], scope)]
    reply = await post_grader(
        url, {"model": spec.get("model") or "text-embedding-3-large", "input": texts}, headers, key
    )
    try:
        a, b = (
            list(map(float, d["embedding"])) for d in sorted(reply["data"], key=lambda d: d.get("index", 0))
        )
    except (KeyError, TypeError, ValueError):
        raise GraderError(
            "model_grader_server_error",
            f"{url} answered without two embeddings: {_scrub(json.dumps(reply)[:200], key)}",
        ) from None
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(x * x for x in b))
    if len(a) != len(b) or not na or not nb:
        raise GraderError("model_grader_server_error", f"{url} answered embeddings that cannot be compared")
    return sum(x * y for x, y in zip(a, b)) / (na * nb)
