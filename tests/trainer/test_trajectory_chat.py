"""The trainer gives trajectory rewards the chat it generated (issue 36 §2): the messages the model
was given (system prompt and instruction in) and its reply; text rewards keep the text they had."""

from __future__ import annotations

from rewardhub.execution.runner import Runner
from rewardhub.testing import make_registry
from rewardhub_trainer.config import DataConfig
from rewardhub_trainer.data import Prompt
from rewardhub_trainer.data import PromptDataset
from rewardhub_trainer.data import render
from rewardhub_trainer.generation import Completion
from rewardhub_trainer.reward_client import samples_of
from rewardhub_trainer.rollouts import PromptBatch
from rewardhub_trainer.rollouts import Rollout


def test_trajectory_rewards_get_the_chat_the_model_was_given(tmp_path):
    reward = tmp_path / "r.py"
    reward.write_text("def chat(*, messages, **kw):\n    return {'score': float(len(messages)),\n"
                      "            'chat': '|'.join(m['role'] + ':' + m['content'] for m in messages)}\n"
                      "def text(*, prompt, response, **kw):\n"
                      "    return {'score': 1.0, 'seen': prompt + response}\n")
    items = [Prompt("What is 1 + 2?", "3", "s"),
             Prompt("", "4", "s", messages=({"role": "user", "content": "What is 2 + 2?"},))]
    cfg = DataConfig(template="plain", instruction=" Think.", system="Be brief.", max_prompt_length=0)
    ds, _ = render(PromptDataset(items), None, cfg, "data.train_files")  # plain text: no tokenizer needed
    groups = [[Completion([], [], [], "3", True)], [Completion([], [], [], "4", True)]]
    rollout = Rollout(batch=PromptBatch(0, ds.items, [0, 1]), version=0, groups=groups, gen_s=0.0,
                      rollouter_pid=0)
    terms = [{"path": str(reward), "function": f} for f in ("chat", "text")]
    res = Runner.from_config({"rewards": terms}, make_registry()).score(samples_of(rollout))
    assert [e["chat"]["chat"] for e in res.extra] == [
        "system:Be brief.|user:What is 1 + 2? Think.|assistant:3",
        "system:Be brief.|user:What is 2 + 2? Think.|assistant:4"]
    # a text reward reads the prompt as the model saw it, as before
    assert res.extra[0]["text"]["seen"] == "Question: What is 1 + 2? Think.\nAnswer:3"
