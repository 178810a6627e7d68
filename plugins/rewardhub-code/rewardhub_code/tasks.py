"""Task ``code.functions``: small Python functions to write (shipped), scored by ``code_tests``."""

from __future__ import annotations

from typing import Any

__all__ = ["FUNCTIONS"]

#: the task (a plain mapping): ``functions.jsonl`` holds each prompt and its asserts, as JSON text
FUNCTIONS: dict[str, Any] = {
    "name": "code.functions", "reward": "code_tests", "file": "functions.jsonl", "ability": "code",
    "summary": "eight small Python functions, each checked by its asserts in the local sandbox",
}
