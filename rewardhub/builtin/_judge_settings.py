"""The settings (term kwargs) of ``llm_judge`` and ``llm_judge_group``, checked before the first call.

:func:`check_settings` runs when a term is resolved (so ``rewardhub score`` refuses, and ``rewardhub
check`` reports, a bad judge before any request) and again when a judge is called directly. It refuses:
a key the judge does not take (``scor_range``: the valid keys named, the closest first), a missing or
non-http(s) ``base_url``, a missing ``model``, a template naming a field the judge does not fill, a
``score_regex`` that does not compile, a ``score_range`` that is not ``[low, high]`` with low < high,
non-positive limits (``max_rpm: 0`` would be no limit at all), an ``api_key_env`` that holds a key, and
a ``serve`` (a model rewardhub serves: :mod:`.served`) that is not valid or stands beside ``base_url`` or
``model``.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any

from .._secrets import looks_like_key
from ..errors import UsageError

__all__ = ["KEY_IN_NAME", "SAMPLE_KEYS", "TEMPLATE_FIELDS", "check_settings"]

#: sample fields a judge is handed through ``**kwargs`` (a term may set them too)
SAMPLE_KEYS = frozenset({"prompt", "response", "messages", "ground_truth", "data_source", "extra_info",
                         "prompts", "responses", "ground_truths", "data_sources", "extra_infos"})
#: the fields each judge's template may name
TEMPLATE_FIELDS = {
    "llm_judge": ("prompt", "response", "ground_truth", "messages", "low", "high"),
    "llm_judge_group": ("n", "prompt", "ground_truth", "responses", "reply_format", "low", "high"),
}
#: the error of an ``api_key_env`` that holds a key (it never shows the value)
KEY_IN_NAME = ("{who} api_key_env holds what looks like an API key itself ({n} characters), not the name "
               "of an environment variable\nput the key in a variable (export JUDGE_API_KEY=...) and set "
               "api_key_env: JUDGE_API_KEY; the key itself never goes in a config")
_POSITIVE = ("max_rpm", "max_tpm", "max_concurrency", "request_timeout_s", "max_tokens", "max_reply_bytes")
_NOT_NEGATIVE = ("retries", "backoff_s", "temperature")


@functools.lru_cache(maxsize=8)
def _settings_of(fn: Callable[..., Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters.values()
    return {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY and p.name not in SAMPLE_KEYS}


def _number(who: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{who} {key}={value!r} is not a number\nset it to a finite number")
    return float(value)


def check_settings(who: str, fn: Callable[..., Any], settings: Mapping[str, Any]) -> None:
    """Refuse what the module's docstring lists in ``settings``, the kwargs of judge ``fn`` named ``who``.

    :raises UsageError: naming the setting and the fix.
    """
    known = _settings_of(getattr(fn, "__wrapped__", fn))
    for key in settings:
        if key not in known and key not in SAMPLE_KEYS:
            import difflib  # only for a setting that is not known: `rewardhub list` imports no difflib

            close = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{who} has no setting {key!r}{hint}\nits settings: {', '.join(sorted(known))}")
    merged = {**known, **settings}
    if "serve" in known and merged.get("serve") is not None:
        _check_served(who, merged)
        merged = {**merged, "base_url": "http://127.0.0.1/v1", "model": "served"}  # the pool's, once started
    for key in ("base_url", "model"):
        if merged.get(key) in (None, "", inspect.Parameter.empty):
            raise UsageError(f"{who} needs kwargs.{key}\nset it, e.g. base_url: http://127.0.0.1:8000/v1, "
                             "model: the name the server serves")
    from .model_http import chat_url

    chat_url(merged["base_url"])  # UsageError for anything but http(s)://host
    for key in _POSITIVE:
        if merged.get(key) is not None and _number(who, key, merged[key]) <= 0:
            raise UsageError(f"{who} {key}={merged[key]!r} is not valid\nuse a number above 0, or leave "
                             f"{key} out{' (no limit)' if key.startswith('max_') else ''}")
    for key in _NOT_NEGATIVE:
        if merged.get(key) is not None and _number(who, key, merged[key]) < 0:
            raise UsageError(f"{who} {key}={merged[key]!r} is not valid\nuse a number of 0 or more")
    rng = merged.get("score_range")
    if not (isinstance(rng, (list, tuple)) and len(rng) == 2):
        raise UsageError(f"{who} score_range={rng!r} is not valid\nuse [low, high], low < high")
    low, high = (_number(who, "score_range", x) for x in rng)
    if not low < high:
        raise UsageError(f"{who} score_range={list(rng)!r} is not valid\nuse [low, high], low < high")
    if merged.get("score_regex") is not None:
        try:
            re.compile(merged["score_regex"])
        except (re.error, TypeError) as exc:
            raise UsageError(f"{who} score_regex={merged['score_regex']!r} is not a regular expression "
                             f"({exc})\nfix it, or leave it out to read `Score: N`") from None
    _check_template(who, merged.get("template"))
    key_env = merged.get("api_key_env")
    if key_env not in (None, "") and looks_like_key(str(key_env)):
        raise UsageError(KEY_IN_NAME.format(who=who, n=len(str(key_env))))


def _check_served(who: str, merged: Mapping[str, Any]) -> None:
    """``serve`` instead of an endpoint: never beside ``base_url`` or ``model`` (the pool gives both)."""
    for key in ("base_url", "model"):
        if merged.get(key) not in (None, ""):
            raise UsageError(f"{who}: kwargs.serve and kwargs.{key} are both set\nkeep serve (rewardhub "
                             f"runs the model and gives the judge its {key}) or {key} (an endpoint you run), "
                             "not both")
    from .served import check_serve

    check_serve(merged["serve"])


def _check_template(who: str, template: Any) -> None:
    fields = TEMPLATE_FIELDS.get(who, TEMPLATE_FIELDS["llm_judge"])
    if not isinstance(template, str):
        raise UsageError(f"{who} template={template!r} is not text")
    import string  # when a judge term is checked: `rewardhub list` imports no string

    try:
        named = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        named, problem = [], str(exc)
    else:
        problem = ""
    for f in named:
        base = re.split(r"[.\[]", f, maxsplit=1)[0]
        if base not in fields:
            problem = f"it names {{{f}}}, which is not a field" if f else "it has an empty {}"
            break
    if problem:
        shown = ", ".join("{" + k + "}" for k in fields)
        raise UsageError(f"{who} template: {problem}\nits fields: {shown}; write a literal brace as "
                         "{{ or }}")
