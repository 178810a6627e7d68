"""The files ``rewardhub new`` writes: a reward package that needs no rewardhub.

The reward is a plain function in verl's ``compute_score`` form (standard library only), with a TRL
``reward_funcs`` form beside it; its default policy is a plain ``__rewardhub__`` dict that rewardhub
reads (``rewardhub list`` without importing the module). ``rewardhub`` is an optional extra.
"""

from __future__ import annotations

import os

__all__ = ["TEMPLATE_NAMES", "files"]

#: names the reward module defines or imports itself: a reward of that name would overwrite one
TEMPLATE_NAMES = ("compute_score", "annotations", "re", "Any")

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{reward}: a reward function for LLM RL (verl, TRL, rewardhub)"
readme = "README.md"
requires-python = ">=3.9"
# none: the reward is plain Python, usable from verl and TRL without rewardhub
dependencies = []

[project.optional-dependencies]
# `rewardhub test {reward}`, configs that name it; not needed to use the reward
rewardhub = ["rewardhub>={core}"]
test = ["pytest>=8"]

# rewardhub finds the reward here (`rewardhub list` shows it, a config names it: `name: {reward}`);
# for everyone else this is inert metadata
[project.entry-points."rewardhub.rewards"]
{reward} = "{package}.reward:compute_score"

[tool.setuptools]
packages = ["{package}"]
'''

INIT = '''\
"""{dist}: the {reward} reward, for verl, TRL and rewardhub (no dependencies)."""

from .reward import compute_score
from .reward import {reward}

__all__ = ["compute_score", "{reward}"]
'''

REWARD = '''\
"""The {reward} reward: plain Python (standard library only), no rewardhub needed.

- verl: ``reward.custom_reward_function.path=pkg://{package}.reward``
  ``reward.custom_reward_function.name=compute_score``
- TRL: ``GRPOTrainer(reward_funcs=[{package}.{reward}], ...)`` with a ``ground_truth`` dataset column
- rewardhub: ``name: {reward}`` in a config (the entry point in pyproject.toml)
"""

from __future__ import annotations

import re
from typing import Any

_NUMBER = re.compile(r"-?\\d+(?:\\.\\d+)?")


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> float:
    """1.0 when the last number in the response equals the ground truth, else 0.0 (none given: 0.0)."""
    if ground_truth is None:
        return 0.0
    numbers = _NUMBER.findall(solution_str or "")
    return 1.0 if numbers and numbers[-1] == str(ground_truth).strip() else 0.0


# The reward's default policy, as plain data: rewardhub reads it (`rewardhub list` reads it from this
# file without importing it); verl and TRL ignore it. Keys: executor (inline, thread, process, ray),
# timeout_s, pure (no side effects: the same call gives the same score), on_failure (zero, nan, drop,
# raise), retries, max_concurrency, memory_limit_mb, data_sources (the data sources it scores; none: all).
compute_score.__rewardhub__ = {{"timeout_s": 5, "pure": True}}


def _text(completion: Any) -> str:
    """A TRL completion's text: a string, or (conversational) messages whose last one is the reply."""
    if isinstance(completion, str):
        return completion
    content = completion[-1]["content"] if completion else ""
    if isinstance(content, list):  # content parts
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def {reward}(completions: list[Any], ground_truth: list[Any] | None = None, **kwargs: Any) -> list[float]:
    """TRL's ``reward_funcs`` form: one score per completion; TRL passes each dataset column as a list
    keyword (here ``ground_truth``). TRL logs it as ``rewards/{reward}``."""
    truths = ground_truth if ground_truth is not None else [None] * len(completions)
    return [compute_score(None, _text(c), truth) for c, truth in zip(completions, truths)]
'''

TEST = '''\
"""The reward's own tests: plain pytest, no rewardhub needed."""

from {package} import compute_score
from {package} import {reward}


def test_scores():
    assert compute_score("demo", "6 * 7 = 42", "42") == 1.0
    assert compute_score("demo", "it is 41", "42") == 0.0
    assert compute_score("demo", "no number", "42") == 0.0
    assert compute_score("demo", "42", None) == 0.0


def test_trl_form():
    completions = ["6 * 7 = 42", [{{"role": "assistant", "content": "it is 41"}}]]
    assert {reward}(completions=completions, ground_truth=["42", "42"]) == [1.0, 0.0]
'''

CONTRACT = '''\
"""The contract `rewardhub test {reward}` checks, where rewardhub is installed (skipped elsewhere)."""

import pytest


def test_contract():
    testing = pytest.importorskip("rewardhub.testing", reason="rewardhub is not installed")
    # a float for every row, edge responses survived, under its timeout, deterministic (it is
    # declared pure), the same scores on every executor; raises AssertionError with the table if not
    testing.check_reward("{reward}", executors=("inline", "process"))
'''

README = '''\
# {dist}

The `{reward}` reward: {summary} Plain Python with no dependencies: the same package works in
verl, in TRL and in [rewardhub](https://github.com/rewardhub/rewardhub).

```bash
pip install .                        # or: pip install -e . while you edit it
pytest tests/                        # its own tests (the contract test runs where rewardhub is installed)
```

## verl

`custom_reward_function` loads the installed module (`pkg://`; or give the file,
`python -c "import {package}.reward as m; print(m.__file__)"`):

```bash
python -m verl.trainer.main_ppo ... \\
    reward.custom_reward_function.path=pkg://{package}.reward \\
    reward.custom_reward_function.name=compute_score
```

## TRL

```python
from trl import GRPOTrainer
from {package} import {reward}

trainer = GRPOTrainer(model=..., reward_funcs=[{reward}], train_dataset=dataset)  # a `ground_truth` column
```

## rewardhub

The entry point in `pyproject.toml` registers it by name; its default policy is the
`compute_score.__rewardhub__` dict in `{package}/reward.py` (timeout, executor, pure, data sources).

```bash
rewardhub list | grep {reward}       # its policy shows: timeout 5s, pure
rewardhub test {reward}              # the contract: a float per row, edge responses, timeout, executors
```

```yaml
reward:
  rewards:
    - name: {reward}
```
'''

SUMMARY = "1.0 when the last number in the response equals the ground truth."


def files(dist: str, package: str, reward: str, core: str) -> dict[str, str]:
    """Relative path -> text of every file of the package."""
    values = {"dist": dist, "package": package, "reward": reward, "core": core, "summary": SUMMARY}
    templates = {
        "pyproject.toml": PYPROJECT,
        os.path.join(package, "__init__.py"): INIT,
        os.path.join(package, "reward.py"): REWARD,
        os.path.join("tests", f"test_{reward}.py"): TEST,
        os.path.join("tests", f"test_{reward}_contract.py"): CONTRACT,
        "README.md": README,
    }
    return {rel: text.format(**values) for rel, text in templates.items()}
