"""Every framework passes the whole trajectory (issue 36 §2): one registry reward that reads tool calls
(``tool_call_format``) gives the same scores on the same agent episodes through ``rewardhub score``,
TRL's own reward path (conversational completions, ``environments``), verl 0.9.1 (rewardhub's reward
manager and ``to_verl`` under verl's naive manager, on batches shaped as ``ToolAgentLoop`` leaves them)
and the server (``/score`` and OpenRLHF's ``/get_reward``)."""

from __future__ import annotations

import json

import pytest
from serve_process import Server
from test_adapters import _trl_calculate_rewards
from test_verl_manager import _run

from rewardhub.adapters import to_trl
from rewardhub.cli import main

SYSTEM = {"role": "system", "content": "You may call add(a, b)."}
#: each episode: its question, then its model turns (text, tool calls as (name, arguments: a dict, or
#: text that is not JSON), the tool results that came back)
EPISODES = [
    ("2+2, then 3+3?", [("Adding.", [("add", {"a": 2, "b": 2}), ("add", '{"a": 3, "b": ')],
                         ["4", "bad JSON"]),
                        ("", [("add", {"a": 3, "b": 3})], ["6"]), ("4 and 6", [], [])]),
    ("1+1?", [("", [("add", {"a": 1, "b": 1})], ["2"]), ("2", [], [])]),
    ("Say hi", [("hi", [], [])]),
]
EXPECTED = [2 / 3, 1.0, 0.0]  # well-formed calls / calls; no calls at all scores 0


def _openai(question: str, turns: list, *, trl: bool = False) -> tuple[list, list]:
    """(prompt, completion) in the OpenAI chat format; TRL's has its arguments parsed and names its tools."""
    completion: list[dict] = []
    for k, (text, calls, results) in enumerate(turns):
        msg: dict = {"role": "assistant", "content": text}
        if calls:
            msg["tool_calls"] = [{"id": f"c{k}{j}", "type": "function", "function": {
                "name": name, "arguments": args if trl or isinstance(args, str) else json.dumps(args)}}
                for j, (name, args) in enumerate(calls)]
        completion.append(msg)
        for j, result in enumerate(results):
            completion.append({"role": "tool", "name": calls[j][0], "content": result} if trl else
                              {"role": "tool", "tool_call_id": f"c{k}{j}", "content": result})
    return [SYSTEM, {"role": "user", "content": question}], completion


def _hermes(turns: list) -> str:
    """The response text of verl's ToolAgentLoop with a ChatML model and hermes tool calls: each model
    turn, then the tool results it appended as one user turn."""
    out = ""
    for text, calls, results in turns:
        out += text + "".join("\n<tool_call>\n" + (json.dumps({"name": n, "arguments": a}) if isinstance(
            a, dict) else f'{{"name": "{n}", "arguments": {a}') + "\n</tool_call>" for n, a in calls)
        out += "<|im_end|>"
        if results:
            out += "\n<|im_start|>user" + "".join(f"\n<tool_response>\n{r}\n</tool_response>"
                                                   for r in results)
            out += "<|im_end|>\n<|im_start|>assistant\n"
    return out


class _Env:
    """An environment as TRL's environment_factory makes them, after its episode."""

    def __init__(self, calls: int) -> None:
        self.calls = calls


ROWS = [{"messages": [*p, *c], "ground_truth": None}
        for p, c in (_openai(q, t) for q, t in EPISODES)]

VERL = r'''
import asyncio, json, sys
import numpy as np
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl import DataProto
from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
from verl.trainer.ppo.reward import load_reward_manager
from verl.workers.reward_manager import get_reward_manager_cls
from rewardhub.adapters import to_verl

SPECIAL = ["<|im_start|>", "<|im_end|>"]


class ChatTokenizer:
    """One token per character; ChatML's markers are special tokens (1, 2) that skip_special_tokens drops."""

    def encode(self, text):
        ids = []
        while text:
            hit = next((k for k, s in enumerate(SPECIAL) if text.startswith(s)), None)
            ids.append(hit + 1 if hit is not None else ord(text[0]) + 3)
            text = text[len(SPECIAL[hit]) if hit is not None else 1:]
        return ids

    def decode(self, ids, skip_special_tokens=True):
        return "".join(("" if skip_special_tokens else SPECIAL[i - 1]) if i in (1, 2) else chr(i - 3)
                       for i in map(int, ids) if i)

    def batch_decode(self, seqs, skip_special_tokens=True):
        return [self.decode(s, skip_special_tokens) for s in seqs]


def trajectory(tok, raw_prompt, response, num_turns, tool_rewards):
    """One finished ToolAgentLoop trajectory as AgentLoopWorker._compute_score sends it to the reward loop."""
    prompt = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in raw_prompt)
    p, r = tok.encode(prompt + "<|im_start|>assistant\n"), tok.encode(response)
    ids = torch.tensor([p + r])
    batch = TensorDict({"prompts": torch.tensor([p]), "responses": torch.tensor([r]), "input_ids": ids,
                        "attention_mask": torch.ones_like(ids),
                        "position_ids": torch.arange(ids.shape[1])[None]}, batch_size=1)
    kwargs = {"data_source": "tools", "reward_model": {"ground_truth": None}, "extra_info": {"index": 0},
              "raw_prompt": raw_prompt, "agent_name": "tool_agent"}
    extra_fields = {"turn_scores": [], "tool_rewards": tool_rewards, "raw_prompt": raw_prompt}
    non_tensor = {k: np.array([v], dtype=object) if isinstance(v, (dict, list)) else np.array([v])
                  for k, v in kwargs.items()}
    non_tensor.update({"__num_turns__": np.array([num_turns]),
                       "tool_extra_fields": np.array([extra_fields], dtype=object),
                       "prompt_len": np.array([len(p)]), "response_len": np.array([len(r)])})
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def config(path):
    return OmegaConf.create({"reward": {
        "custom_reward_function": {"path": None, "name": "compute_score", "reward_kwargs": {}},
        "reward_manager": {"source": "register", "name": "rewardhub", "module": {"path": path, "name": "x"}},
        "reward_model": {"enable": False}, "sandbox_fusion": {"url": None}}})


tok = ChatTokenizer()
parts = [trajectory(tok, *e) for e in json.loads(open(sys.argv[3]).read())]


def scores(manager):
    async def go():
        return await asyncio.gather(*(manager.run_single(d) for d in parts))
    return [r["reward_score"] for r in manager.loop.run_until_complete(go())]


out = {}
for key, yaml, term in (("tools", sys.argv[1], "tool_call_format"),
                        ("seen", sys.argv[2], {"path": sys.argv[4], "function": "seen"})):
    cfg = config(yaml)
    ours = load_reward_manager(cfg, tok, reward_router_address=None, reward_model_tokenizer=None)
    out[key] = [scores(ours), scores(NaiveRewardManager(cfg, tok, to_verl(term)))]


def whole(parts):
    """The trajectories as one batch, as AgentLoopWorker._postprocess leaves it for the trainer: prompts
    left-padded, responses right-padded, the agent loop's extra fields as columns."""
    P = max(d.batch["prompts"].shape[1] for d in parts)
    R = max(d.batch["responses"].shape[1] for d in parts)
    rows = [(d.batch["prompts"][0].tolist(), d.batch["responses"][0].tolist()) for d in parts]
    prompts = torch.tensor([[0] * (P - len(p)) + p for p, _ in rows])
    responses = torch.tensor([r + [0] * (R - len(r)) for _, r in rows])
    mask = torch.tensor([[0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (R - len(r)) for p, r in rows])
    nt = {k: np.concatenate([d.non_tensor_batch[k] for d in parts])
          for k in ("data_source", "reward_model", "extra_info", "raw_prompt", "__num_turns__")}
    for key in ("turn_scores", "tool_rewards"):
        nt[key] = np.empty(len(parts), dtype=object)
        nt[key][:] = [d.non_tensor_batch["tool_extra_fields"][0][key] for d in parts]
    return DataProto.from_dict(tensors={"prompts": prompts, "responses": responses, "attention_mask": mask,
                                        "input_ids": torch.cat([prompts, responses], 1)}, non_tensors=nt)


batch_manager = get_reward_manager_cls("rewardhub")(tokenizer=tok, num_examine=0, config=config(sys.argv[2]))
out["seen"].append(batch_manager(whole(parts), return_dict=True)["reward_tensor"].sum(-1).tolist())
print(json.dumps(out))
'''


@pytest.mark.timeout(300)
def test_one_tool_reward_scores_the_same_through_every_framework(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("reward:\n  plugins: {autoload: false}\n  rewards:\n    - name: tool_call_format\n")
    data, out = tmp_path / "d.jsonl", tmp_path / "o.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert main(["score", str(cfg), str(data), "-o", str(out)]) == 0, capsys.readouterr().err
    scored = [json.loads(line)["score"] for line in out.read_text().splitlines()]
    assert scored == pytest.approx(EXPECTED)

    # TRL: conversational prompts and completions, and the environments of its environment_factory
    prompts, completions = zip(*(_openai(q, t, trl=True) for q, t in EPISODES))
    inputs = [{"prompt": p} for p in prompts]
    state = tmp_path / "env_state.py"
    state.write_text("def env_state(*, messages, extra_info, **kw):\n"
                     "    return float(extra_info['environment'].calls) + len(messages) / 100\n")
    funcs = [to_trl("tool_call_format"), to_trl({"path": str(state), "function": "env_state"})]
    envs = [_Env(n) for n in (3, 1, 0)]
    rows = _trl_calculate_rewards(funcs, inputs, list(prompts), list(completions), envs)
    assert [r[0] for r in rows] == pytest.approx(scored)
    # the environment's final state and the whole conversation reach a trajectory reward
    assert [r[1] for r in rows] == pytest.approx([3.08, 1.05, 0.03])

    # verl 0.9.1: rewardhub's reward manager and to_verl under verl's own naive manager
    episodes = [(_openai(q, t)[0], _hermes(t), 2 * len(t), [0.5] * sum(len(r) for _, _, r in t))
                for q, t in EPISODES]
    (tmp_path / "episodes.json").write_text(json.dumps(episodes))
    seen = tmp_path / "seen.py"
    seen.write_text("def seen(*, messages, extra_info, **kw):\n"  # what a trajectory reward gets from verl
                    "    return 100 * len(messages) + extra_info['num_turns']"
                    " + sum(extra_info['tool_rewards'])\n")
    seen_cfg = tmp_path / "seen.yaml"
    seen_cfg.write_text(f"reward:\n  rewards:\n    - {{path: {seen}, function: seen}}\n")
    got = _run(tmp_path, VERL, str(cfg), str(seen_cfg), str(tmp_path / "episodes.json"), str(seen))
    assert got["tools"] == [pytest.approx(scored)] * 2  # rewardhub's manager, to_verl under naive
    # the whole chat (tool results one message each), __num_turns__ and the per-turn tool rewards
    want = [100 * len(r["messages"]) + n + sum(t) for r, (_, _, n, t) in zip(ROWS, episodes)]
    assert got["seen"] == [want] * 3  # ... and rewardhub's batch manager on the whole batch

    # the server: its own /score rows and OpenRLHF's /get_reward queries
    with Server(cfg) as server:
        status, body = server.post("/score", {"rows": ROWS})
        assert status == 200, body
        assert [r["score"] for r in body["rows"]] == pytest.approx(scored)
        status, body = server.post("/get_reward", {"query": [r["messages"] for r in ROWS]})
        assert status == 200, body
        assert body["rewards"] == pytest.approx(scored)


class _ScriptedModel:
    """Stands in for OpenRLHF's vLLM engine: its k-th generate answers the k-th turn's text."""

    def __init__(self, tok, turns: list[str]) -> None:
        self.tok, self.turns = tok, list(turns)

    async def generate(self, prompt_token_ids, params, multi_modal_data=None):
        import types

        text = self.turns.pop(0)
        out = types.SimpleNamespace(token_ids=self.tok.encode(text, add_special_tokens=False), text=text,
                                    finish_reason="stop", logprobs=None)
        return types.SimpleNamespace(outputs=[out])


@pytest.mark.timeout(120)
def test_openrlhf_agent_steps_and_episode_are_scored_through_the_registry(tmp_path):
    """OpenRLHF's own MultiTurnAgentExecutor runs an AgentInstanceBase whose step scores through an
    Episode: each step by the step reward, the finished episode by the reward, as score does."""
    import asyncio
    import types

    from test_serve import _openrlhf_agent
    from test_serve_openrlhf import _tokenizer

    from rewardhub.agents import Episode

    agent = _openrlhf_agent()
    question, turns = EPISODES[0]
    texts = [_hermes([t]).split("<|im_end|>")[0] + "<|im_end|>" for t in turns]
    episodes: list[Episode] = []

    class Instance(agent.AgentInstanceBase):
        def __init__(self, *args, **kwargs):
            self.turn = 0

        async def reset(self, states, **kwargs):
            episodes.append(Episode("tool_call_format", [SYSTEM, {"role": "user", "content": question}],
                                    states["label"], step_reward="tool_call_format"))
            return {"observation": states["observation"]}

        async def step(self, states, **kwargs):
            results = turns[self.turn][2]
            self.turn += 1
            feedback = "".join(f"<tool_response>{r}</tool_response>" for r in results)
            return await episodes[-1].step(states["action_text"], results, self.turn == len(turns),
                                           feedback=feedback)

    tok = _tokenizer(tmp_path / "tok")
    params = types.SimpleNamespace(max_tokens=8, logprobs=None)
    out = asyncio.run(agent.MultiTurnAgentExecutor(Instance).execute(
        question, None, params, 4096, tok, _ScriptedModel(tok, texts)))
    # step rewards: 1 of 2 calls well formed, then 2 of 3; the episode's: 2 of 3, as score gives it
    assert out["reward"] == pytest.approx(1 / 2 + 2 / 3 + EXPECTED[0])
    assert float(out["scores"]) == pytest.approx(EXPECTED[0])
    assert [m["role"] for m in episodes[0].messages] == [m["role"] for m in ROWS[0]["messages"]]
