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

__all__ = ["reward", "spec_from_object", "summary_of", "decorated_in_process"]

F = TypeVar("F", bound=Callable[..., Any])

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


def _capabilities(obj: Any, declared: tuple[str, ...]) -> tuple[str, ...]:
    caps = set(declared)
    call = obj if inspect.isfunction(obj) or inspect.ismethod(obj) else getattr(obj, "__call__", None)
    if inspect.iscoroutinefunction(obj) or (call is not None and inspect.iscoroutinefunction(call)):
        caps.add("async")
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
    meta: dict[str, Any] = dict(getattr(obj, "__rewardhub__", {}) or {})
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
