"""``score_model`` and ``label_model`` graders against the demo model (SmolLM2-135M-Instruct) under vLLM's
API server (the session fixture ``served`` of conftest.py, shared with test_vllm_judge): every reply a
reward in range or its flag (``model_grader_parse_error``), never a silent number (issue 46)."""

from __future__ import annotations

import math

import pytest

from rewardhub.execution import Runner

ROWS = [{"prompt": "What is 2 + 2?", "response": r, "extra_info": {"reference_answer": "4"}}
        for r in ("4", "The answer is 5.", "four", "I do not know.")]
USER = "Question: {{ item.prompt }}\nReference: {{ item.reference_answer }}\nAnswer: {{ sample.output_text }}"
SCORE = {"type": "score_model", "name": "score", "model": "judge", "range": [0, 1],
         "sampling_params": {"temperature": 0, "max_completions_tokens": 256},
         "input": [{"role": "system",
                    "content": "Grade the answer against the reference. Reply in JSON with steps and a "
                               "result from 0 to 1."},
                   {"role": "user", "content": USER}]}
LABEL = {"type": "label_model", "name": "label", "model": "judge", "labels": ["correct", "incorrect"],
         "passing_labels": ["correct"], "sampling_params": {"temperature": 0, "max_completions_tokens": 256},
         "input": [{"role": "system", "content": "Label the answer correct or incorrect. Reply in JSON."},
                   {"role": "user", "content": USER}]}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("spec, allowed", [(SCORE, None), (LABEL, {0.0, 1.0})],
                         ids=["score_model", "label_model"])
def test_model_graders_on_a_served_model(served, spec, allowed):
    base_url = served.base_url
    term = {"grader": spec, "base_url": base_url, "timeout_s": 600}
    with Runner.from_config({"rewards": [term]}) as runner:
        res = runner.score(ROWS)
    name = spec["name"]
    assert len(res.rewards) == len(ROWS)
    for row, kinds, errors in zip(res.rewards, res.error_kinds, res.errors):
        value = row[name]
        if name in kinds:  # a failure: its flag, and no number
            assert kinds[name] in ("model_grader_parse_error", "model_grader_refusal_error"), errors[name]
            assert value is None or math.isnan(value)
        else:
            assert 0.0 <= value <= 1.0 and (allowed is None or value in allowed)
    print(name, [r[name] for r in res.rewards], [k.get(name) for k in res.error_kinds],
          [e.get(name, "")[-160:] for e in res.errors])
