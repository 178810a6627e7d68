"""The ``@rewardhub.reward`` decorator and turning functions into specs."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any
from typing import TypeVar
from typing import overload

from .errors import UsageError
from .types import EXECUTORS
from .types import KINDS
from .types import ON_FAILURE
from .types import ExecutionPolicy
from .types import RewardSpec

__all__ = ["CHECK_KWARGS_ATTR", "PLAIN_KEYS", "reward", "reward_meta", "plain_meta", "spec_from_object",
           "summary_of", "decorated_in_process"]

F = TypeVar("F", bound=Callable[..., Any])

#: the attribute of a reward function that holds a check of a term's kwargs (it raises ``UsageError``);
#: resolving a term runs it, so that a bad setting is refused before the first call (the judges have one)
CHECK_KWARGS_ATTR = "_rewardhub_check_kwargs"

#: module:qualname of every function decorated in this process, so that a reward only
#: a driver script declares can be found and explained (see rewardhub.distributed).
_DECORATED: dict[str, str] = {}


def summary_of(obj: Any) -> str:
    """First line of ``obj``'s docstring, or ``""``."""
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0].strip() if doc.strip() else ""


def _check_choice(key: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value is not None and value not in allowed:
        raise UsageError(f"{key}={value!r} is not valid\nallowed: {', '.join(allowed)}")


@overload
def reward(fn: F, /) -> F: ...
@overload
def reward(
    *,
    name: str | None = ...,
    kind: str = ...,
    executor: str | None = ...,
    timeout_s: float | None = ...,
    max_concurrency: int | None = ...,
    retries: int | None = ...,
    on_failure: str | None = ...,
    data_sources: tuple[str, ...] = ...,
    capabilities: tuple[str, ...] = ...,
    pure: bool | None = ...,
    memory_limit_mb: int | None = ...,
    cache: bool | None = ...,
    max_rpm: float | None = ...,
) -> Callable[[F], F]: ...
def reward(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    kind: str = "function",
    executor: str | None = None,
    timeout_s: float | None = None,
    max_concurrency: int | None = None,
    retries: int | None = None,
    on_failure: str | None = None,
    data_sources: tuple[str, ...] = (),
    capabilities: tuple[str, ...] = (),
    pure: bool | None = None,
    memory_limit_mb: int | None = None,
    cache: bool | None = None,
    max_rpm: float | None = None,
) -> Any:
    """Declare a function as a reward, with its name and default execution policy.

    The decorator only records metadata on the function; the function is registered by the
    source that names its module (an entry point, a plugin hook, or a config term), so that
    every worker process finds it the same way.

    Example::

        >>> import rewardhub
        >>> @rewardhub.reward(name="is_short", timeout_s=1)
        ... def is_short(*, response, **kwargs):
        ...     "1.0 when the response has under 20 characters."
        ...     return float(len(response) < 20)
        >>> is_short(response="hi")
        1.0
    """
    _check_choice("kind", kind, KINDS)
    _check_choice("executor", executor, EXECUTORS)
    _check_choice("on_failure", on_failure, ON_FAILURE)

    def deco(f: F) -> F:
        meta = {
            "name": name or getattr(f, "__name__", None),
            "kind": kind,
            "policy": ExecutionPolicy().merged(
                executor=executor,
                timeout_s=timeout_s,
                max_concurrency=max_concurrency,
                retries=retries,
                on_failure=on_failure,
                pure=pure,
                memory_limit_mb=memory_limit_mb,
                cache=cache,
                max_rpm=max_rpm,
            ),
            "data_sources": tuple(data_sources),
            "capabilities": tuple(capabilities),
        }
        f.__rewardhub__ = meta  # type: ignore[attr-defined]
        mod = getattr(f, "__module__", "?")
        _DECORATED[f"{mod}:{getattr(f, '__qualname__', meta['name'])}"] = str(meta["name"])
        return f

    return deco(fn) if fn is not None else deco


def decorated_in_process() -> Mapping[str, str]:
    """``module:qualname`` → reward name, for every ``@reward`` seen in this process."""
    return dict(_DECORATED)


#: the execution-policy fields a reward may declare
POLICY_KEYS = ("executor", "timeout_s", "max_concurrency", "retries", "on_failure", "pure", "memory_limit_mb",
               "cache", "max_rpm")
#: the keys of a plain ``__rewardhub__`` dict: what a package that does not import rewardhub declares
PLAIN_KEYS = ("name", "kind", "data_sources", "capabilities", *POLICY_KEYS)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain_value_error(key: str, value: Any) -> str | None:
    """Why ``value`` is not valid for plain key ``key`` (``None`` when it is)."""
    choices = {"kind": KINDS, "executor": EXECUTORS, "on_failure": ON_FAILURE}
    if value is None:
        return None
    if key in choices:
        return None if value in choices[key] else f"one of {', '.join(choices[key])}"
    if key == "name":
        return None if isinstance(value, str) and value else "a non-empty string"
    if key in ("timeout_s", "max_rpm"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        return None if ok else "a number of seconds above 0" if key == "timeout_s" else "a number above 0"
    if key in ("max_concurrency", "memory_limit_mb"):
        return None if _is_int(value) and value >= 1 else "a whole number of at least 1"
    if key == "retries":
        return None if _is_int(value) and value >= 0 else "a whole number of at least 0"
    if key in ("pure", "cache"):
        return None if isinstance(value, bool) else "true or false"
    # data_sources, capabilities
    ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    return None if ok else "a list of strings"


def plain_meta(raw: Any, where: str) -> dict[str, Any]:
    """The metadata of a plain ``__rewardhub__`` dict (keys :data:`PLAIN_KEYS`, plain values), in the
    form ``@reward`` records it; a :class:`UsageError` naming ``where``, the key and the allowed values
    when it is not valid.

    A reward package that does not depend on rewardhub declares its default policy this way::

        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs): ...
        compute_score.__rewardhub__ = {"timeout_s": 5, "pure": True}
    """
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: __rewardhub__ is a {type(raw).__name__}, not a dict\n"
                         f"expected e.g. {{'timeout_s': 5, 'pure': True}} (keys: {', '.join(PLAIN_KEYS)})")
    for key, value in raw.items():
        if key not in PLAIN_KEYS:
            import difflib  # only for a key that is not known: `rewardhub list` imports no difflib

            close = difflib.get_close_matches(str(key), PLAIN_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UsageError(f"{where}: __rewardhub__ key {key!r} is not known{hint}\n"
                             f"allowed: {', '.join(PLAIN_KEYS)}")
        why = _plain_value_error(key, value)
        if why:
            raise UsageError(f"{where}: __rewardhub__[{key!r}] = {value!r} is not valid: expected {why}")
    return {
        "name": raw.get("name"),
        "kind": raw.get("kind") or "function",
        "policy": ExecutionPolicy().merged(**{k: raw.get(k) for k in POLICY_KEYS}),
        "data_sources": tuple(raw.get("data_sources") or ()),
        "capabilities": tuple(raw.get("capabilities") or ()),
    }


def reward_meta(obj: Any, where: str = "reward") -> dict[str, Any]:
    """``obj``'s reward metadata: what ``@reward`` recorded, or its plain ``__rewardhub__`` dict read
    with :func:`plain_meta`; ``{}`` when it declares none."""
    raw = getattr(obj, "__rewardhub__", None)
    if raw is None or raw == {}:
        return {}
    if isinstance(raw, Mapping) and isinstance(raw.get("policy"), ExecutionPolicy):
        return dict(raw)
    return plain_meta(raw, where)


def _capabilities(obj: Any, declared: tuple[str, ...]) -> tuple[str, ...]:
    caps = set(declared)
    call = obj if inspect.isfunction(obj) or inspect.ismethod(obj) else getattr(obj, "__call__", None)
    if inspect.iscoroutinefunction(obj) or (call is not None and inspect.iscoroutinefunction(call)):
        caps.add("async")
    try:
        if "messages" in inspect.signature(obj).parameters:
            caps.add("trajectory")  # it reads the whole conversation (rewardhub.trajectory)
    except (TypeError, ValueError):
        pass
    return tuple(sorted(caps))


def spec_from_object(
    obj: Any,
    *,
    target: str,
    source: str,
    name: str | None = None,
    dist: str | None = None,
    version: str | None = None,
    plugin: str | None = None,
    sha256: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> RewardSpec:
    """Build a :class:`RewardSpec` for a loaded callable, honouring ``@reward`` metadata."""
    meta: dict[str, Any] = reward_meta(obj, f"reward {name or target!r} ({target})")
    if extra:
        meta.update({k: v for k, v in extra.items() if v is not None})
    return RewardSpec(
        name=name or meta.get("name", "") or getattr(obj, "__name__", target.rpartition(":")[2]),
        target=target,
        source=source,
        dist=dist,
        version=version,
        sha256=sha256,
        kind=meta.get("kind", "function"),
        capabilities=_capabilities(obj, tuple(meta.get("capabilities", ()))),
        summary=summary_of(obj),
        policy=meta.get("policy", ExecutionPolicy()),
        data_sources=tuple(meta.get("data_sources", ())),
        plugin=plugin,
    )
