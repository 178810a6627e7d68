"""rewardhub-verifiers against verifiers 0.4's own code: an environment package installed with pip is
listed by name, and ``rewardhub score`` gives the scores the environment's own rubric gives the same
rollouts (traces built and scored by verifiers itself, in another process)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VERIFIERS = REPO / ".venv" / "verifiers-compat"  # verifiers 0.4 wants openai<3; vLLM's venv has 3
TOY_ENV = REPO / "tests" / "data" / "vf-toy-env"

pytestmark = pytest.mark.skipif(
    not (VERIFIERS / "verifiers").is_dir(),
    reason="verifiers is not installed (make install puts it in .venv/verifiers-compat)",
)

def _call(i: int, expr: str) -> dict[str, object]:
    """An OpenAI-format tool call."""
    call = {"name": "calc", "arguments": json.dumps({"e": expr})}
    return {"id": f"c{i}", "type": "function", "function": call}


# rollouts of the toy environment (what is 0+4? / 1+4?): right with a tool call, right without,
# wrong with a tool call (the tool said 5, the reply 6), wrong without


ROLLOUTS = [
    ("4", [{"role": "user", "content": "what is 0+4?"},
           {"role": "assistant", "content": "", "tool_calls": [_call(1, "0+4")]},
           {"role": "tool", "tool_call_id": "c1", "content": "4"},
           {"role": "assistant", "content": "It is 4."}]),
    ("4", [{"role": "user", "content": "what is 0+4?"}, {"role": "assistant", "content": "4"}]),
    ("5", [{"role": "user", "content": "what is 1+4?"},
           {"role": "assistant", "content": "", "tool_calls": [_call(2, "1+4")]},
           {"role": "tool", "tool_call_id": "c2", "content": "5"},
           {"role": "assistant", "content": "It is 6."}]),
    ("5", [{"role": "user", "content": "what is 1+4?"}, {"role": "assistant", "content": "no idea"}]),
]

# verifiers' side: build each rollout's trace with verifiers' own types and score it with Task.score
NATIVE = textwrap.dedent('''
    import asyncio, json, sys
    from pydantic import TypeAdapter
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask
    from verifiers.v1.episode import Episode, EnvInfo
    task_cls = vf.task_type("vf_toy_env")
    out = []
    for answer, messages in json.load(sys.stdin):
        msgs = []
        for m in messages:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{"id": c["id"], **c["function"]} for c in m["tool_calls"]]
            msgs.append(TypeAdapter(vf.Message).validate_python(m))
        data = task_cls.data_type()(prompt=messages[0]["content"], answer=answer)
        nodes = [MessageNode(parent=i - 1 if i else None, message=m, sampled=m.role == "assistant")
                 for i, m in enumerate(msgs)]
        trace = vf.Trace(task=TraceTask(type=task_cls.__name__, data=data),
                         agent=AgentInfo(config=vf.AgentConfig()), nodes=nodes)
        asyncio.run(task_cls(data).score(trace))
        episode = Episode(env=EnvInfo(id="vf_toy_env"), task=trace.task, traces=[trace], ok=trace.ok)
        line = json.loads(TypeAdapter(type(episode)).dump_json(episode, exclude_none=True))  # traces.jsonl's
        out.append({"trace": trace.model_dump(mode="json"), "reply": trace.last_reply, "total": trace.reward,
                    "line": line,
                    "rewards": {k: r.score for k, r in trace.rewards.items()}})
    json.dump(out, sys.stdout)
''')


@pytest.fixture(scope="module")
def env_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """PYTHONPATH with verifiers and the toy environment, installed by pip into a folder of its own."""
    target, source = tmp_path_factory.mktemp("vf-env"), tmp_path_factory.mktemp("vf-src") / "env"
    shutil.copytree(TOY_ENV, source)  # setuptools builds inside the source folder: not in the repo
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    return os.pathsep.join([str(target), str(VERIFIERS), os.environ.get("PYTHONPATH", "")])


def _run(args: list[str], path: str, **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": path, "REWARDHUB_NO_CACHE": "1"}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300,
                          **kw)  # type: ignore[call-overload]


def test_an_installed_environment_is_listed_with_its_dist_version_and_weights(env_path: str) -> None:
    done = _run(["-m", "rewardhub", "list", "--json"], env_path)
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)}
    for name in ("verifiers.vf_toy_env", "verifiers.vf_toy_env.correct", "verifiers.vf_toy_env.used_tool"):
        assert rows[name]["dist"] == "vf-toy-env" and rows[name]["version"] == "0.2.0", rows[name]
        assert rows[name]["status"] == "ok"
    assert "rubric weight 0.25" in rows["verifiers.vf_toy_env.used_tool"]["summary"]
    # without the environment on the path, nothing is registered (and nothing breaks)
    bare = _run(["-m", "rewardhub", "list", "--json"], os.environ.get("PYTHONPATH", ""))
    assert not [r for r in json.loads(bare.stdout) if r["name"].startswith("verifiers.")]


@pytest.mark.parametrize("given", ["trace", "messages"])
def test_score_equals_the_environments_own_rubric_on_the_same_rollouts(env_path: str, tmp_path: Path,
                                                                        given: str) -> None:
    """Rows holding verifiers' own traces, or only the conversation (OpenAI format) and the task's data."""
    native = _run(["-c", NATIVE], env_path, input=json.dumps(ROLLOUTS))
    assert native.returncode == 0, native.stderr
    expected = json.loads(native.stdout)
    assert [e["total"] for e in expected] == [1.25, 1.0, 0.25, 0.0]  # the toy rubric, worked by hand
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(
        {"prompt": m[0]["content"], "response": e["reply"], "extra_info": {"trace": e["trace"]}}
        if given == "trace" else {"messages": m, "extra_info": {"task": {"answer": answer}}}) + "\n"
        for (answer, m), e in zip(ROLLOUTS, expected)))
    config = tmp_path / "reward.yaml"
    config.write_text("reward:\n  rewards:\n"
                      "    - {name: verifiers.vf_toy_env}\n"
                      "    - {name: verifiers.vf_toy_env.correct, weight: 0}\n"
                      "    - {name: verifiers.vf_toy_env.used_tool, weight: 0}\n")
    out = tmp_path / "scored.jsonl"
    done = _run(["-m", "rewardhub", "score", str(config), str(rows), "-o", str(out), "--no-progress"],
                env_path)
    assert done.returncode == 0, done.stderr
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == len(ROLLOUTS)
    for got, want in zip(scored, expected):
        terms = got["rewards"]
        assert terms["verifiers.vf_toy_env"] == want["total"]
        assert terms["verifiers.vf_toy_env.correct"] == want["rewards"]["correct"]
        assert terms["verifiers.vf_toy_env.used_tool"] == want["rewards"]["used_tool"]


def test_a_whole_traces_jsonl_line_is_scored_with_no_prompt_or_response_beside_it(env_path: str,
                                                                                  tmp_path: Path) -> None:
    """A row that is only ``extra_info.trace`` (a line of verifiers' traces.jsonl, as verifiers wrote it)
    gets the rubric's total; every row is scored (no dummy prompt or response needed)."""
    native = _run(["-c", NATIVE], env_path, input=json.dumps(ROLLOUTS))
    assert native.returncode == 0, native.stderr
    expected = json.loads(native.stdout)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"extra_info": {"trace": e["line"]}}) + "\n" for e in expected))
    config = tmp_path / "reward.yaml"
    config.write_text("reward:\n  rewards:\n    - {name: verifiers.vf_toy_env}\n")
    out = tmp_path / "scored.jsonl"
    done = _run(["-m", "rewardhub", "score", str(config), str(rows), "-o", str(out), "--no-progress"],
                env_path)
    assert done.returncode == 0, done.stderr
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [s["rewards"]["verifiers.vf_toy_env"] for s in scored] == [e["total"] for e in expected]


# an environment whose rewards need the runtime (a sandbox) that an offline score has not got
RUNTIME_ENV = textwrap.dedent('''
    import verifiers.v1 as vf


    class RtData(vf.TaskData):
        answer: str


    class RtTask(vf.Task[RtData]):
        @vf.reward(weight=1.0)
        async def passes_tests(self, trace: vf.Trace, runtime) -> float:
            return 1.0
        # more

    class RtTaskset(vf.Taskset[RtTask]):
        def load(self):
            yield RtTask(RtData(prompt="what is 0+4?", answer="4"))


    __all__ = ["RtTaskset"]
''')
PLAIN_REWARD = """
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer in trace.last_reply)
"""


def _runtime_env(root: Path, module: str, more: str) -> str:
    """An installed-looking environment ``module`` (a dist-info that requires verifiers, no pip)."""
    info = root / f"{module}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1.0\n"
                                   "Requires-Dist: verifiers>=0.4\n")
    (info / "top_level.txt").write_text(module + "\n")
    (root / module).mkdir()
    (root / module / "__init__.py").write_text(RUNTIME_ENV.replace("    # more\n", more))
    return os.pathsep.join([str(root), str(VERIFIERS), os.environ.get("PYTHONPATH", "")])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("more", ["", PLAIN_REWARD], ids=["none_offline", "some_offline"])
def test_a_rubric_with_rewards_it_cannot_score_offline_says_so(tmp_path: Path, more: str) -> None:
    """No reward scorable offline: every row fails (never a silent 0.0); some: one WARNING naming them."""
    path = _runtime_env(tmp_path / "site", "vf_rt_env", more)
    config = tmp_path / "reward.yaml"
    config.write_text("reward:\n  rewards:\n    - {name: verifiers.vf_rt_env}\n")
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": "what is 0+4?", "response": r, "ground_truth": "4"}) + "\n"
                            for r in ("It is 4.", "5", "4")))
    out = tmp_path / "scored.jsonl"
    done = _run(["-m", "rewardhub", "score", str(config), str(rows), "-o", str(out),
                 "--no-progress"], path)
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == 3
    if not more:
        assert done.returncode != 0, done.stderr
        said = "none of its rewards can be scored offline (passes_tests"
        assert all(said in r["errors"]["verifiers.vf_rt_env"] for r in scored), scored
        assert "failed on 3 of 3 rows" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert [r["rewards"]["verifiers.vf_rt_env"] for r in scored] == [1.0, 0.0, 1.0]
        assert done.stderr.count("leaves out passes_tests") == 1, done.stderr
