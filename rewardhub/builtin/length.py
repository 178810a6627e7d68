"""Length rewards: DAPO's soft overlong penalty."""

from __future__ import annotations

from typing import Any

from ..decorator import reward
from ..hookspecs import hookimpl

__all__ = ["overlong_penalty"]


def _length(response: str, extra_info: Any, response_length: int | None) -> int:
    if response_length is not None:
        return int(response_length)
    if isinstance(extra_info, dict):
        for key in ("response_length", "num_tokens", "response_tokens"):
            if extra_info.get(key) is not None:
                return int(extra_info[key])
    return len(response or "")


@reward(name="overlong_penalty")
def overlong_penalty(*, response: str, extra_info: Any = None, max_resp_len: int = 4096,
                     overlong_buffer_len: int = 1024, penalty_factor: float = 1.0,
                     response_length: int | None = None, **kwargs: Any) -> float:
    """DAPO soft overlong penalty: 0 up to ``max_resp_len - overlong_buffer_len``, then down to
    ``-penalty_factor``.

    The length is ``response_length`` (kwarg), else ``extra_info["response_length"]`` (tokens, as
    a trainer passes it), else the number of characters of the response.

    Example:

        >>> overlong_penalty(response="x" * 10, max_resp_len=20, overlong_buffer_len=10)
        0.0
        >>> overlong_penalty(response="x" * 15, max_resp_len=20, overlong_buffer_len=10)
        -0.5
    """
    if overlong_buffer_len <= 0:
        raise ValueError(f"overlong_penalty overlong_buffer_len={overlong_buffer_len!r} must be > 0")
    if overlong_buffer_len > max_resp_len:
        raise ValueError(
            f"overlong_penalty overlong_buffer_len={overlong_buffer_len} exceeds max_resp_len={max_resp_len}"
        )
    expected = max_resp_len - overlong_buffer_len
    exceed = _length(response, extra_info, response_length) - expected
    return float(min(-exceed / overlong_buffer_len * penalty_factor, 0.0)) + 0.0


@hookimpl
def rewardhub_register_rewards() -> list[Any]:
    return [overlong_penalty]
