"""The error flags of OpenAI's grader spec, raised as :class:`GraderError` with the flag as its ``kind``.

A reward that raises one fails its sample with that flag as the row's error kind (``error_kinds``), never
with a silent number; ``on_failure: zero`` gives the 0 the spec's hosted runner gives, the flag still in
the row's ``errors``.
"""

from __future__ import annotations

from ..errors import RewardhubError

__all__ = ["FLAGS", "GraderError"]

#: the flags of OpenAI's ``graders/run`` answer (``metadata.errors``), in its order
FLAGS = (
    "formula_parse_error",
    "sample_parse_error",
    "truncated_observation_error",
    "unresponsive_reward_error",
    "invalid_variable_error",
    "other_error",
    "python_grader_server_error",
    "python_grader_runtime_error",
    "model_grader_server_error",
    "model_grader_refusal_error",
    "model_grader_parse_error",
)


class GraderError(RewardhubError):
    """A grader failed on a sample; ``kind`` is one of :data:`FLAGS`."""

    __module__ = "rewardhub.graders"

    def __init__(self, flag: str, message: str) -> None:
        if flag not in FLAGS:
            raise ValueError(f"unknown grader flag {flag!r}")
        super().__init__(message, kind=flag)
        self.flag = flag
