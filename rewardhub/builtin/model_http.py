"""The HTTP side of ``llm_judge`` (per-minute limits, one session per event loop, a POST retried with
back-off on 429/5xx, no key in any message), for the other rewards that call a model: the graders'
``score_model`` / ``label_model`` / ``cosine`` (:mod:`rewardhub.graders`)."""

from __future__ import annotations

from ._judge_http import JudgeError
from ._judge_http import chat_url
from ._judge_http import limiter
from ._judge_http import post_json

__all__ = ["JudgeError", "chat_url", "limiter", "post_json"]
