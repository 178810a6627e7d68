"""A package ``rewardhub new`` writes is used without rewardhub: ``pip install`` into a fresh virtual
environment that has verl (0.9.1, its reward loop) or TRL and no rewardhub, then the framework's own
code loads the reward and scores with it.

The frameworks (torch, TRL; torch, Ray and what verl's reward modules import) are installed once into
a cached environment under ``~/.cache/rewardhub-tests/`` (minutes the first time) that no test
changes; each test makes a fresh venv that sees it through a ``.pth`` file and installs the generated
package into that venv with its own pip.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
VERL_COMPAT = os.path.join(os.path.dirname(HERE), ".venv", "verl-compat")

#: the framework environments: what each installs (torch pinned: its CPU wheel lies on this machine)
FRAMEWORKS = {
    "trl": ["torch==2.13.0", "trl==1.16.0"],
    "verl": ["torch==2.13.0", "ray==2.60.0", "transformers==5.19.0", "omegaconf>=2.3", "numpy", "packaging",
             "aiohttp"],
}

# the rows each framework scores: (prompt, response, ground truth) and the scores the reward gives
ROWS = [("2+3=", "so it is 5", "5"), ("6*7=", "I get 41", "42"), ("9-1=", "8", "8"), ("1+1=", "no idea", "2")]
SCORES = [1.0, 0.0, 1.0, 0.0]


def _env() -> dict[str, str]:
    """This process's environment without our PYTHONPATH (it would put this checkout's rewardhub on the
    path) and without a virtual environment's variables."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


def _run(args, **kw) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=_env(), timeout=900,
                         **kw)
    assert res.returncode == 0, f"{args}\n{res.stdout}\n{res.stderr}"
    return res


def _base_python() -> str:
    """The interpreter the venvs are made from (the one this venv was made from)."""
    return os.path.join(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")


def _purelib(py: str) -> str:
    return _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()


def _framework(kind: str) -> str:
    """The site-packages folder of the cached framework environment ``kind`` (built when missing)."""
    reqs = FRAMEWORKS[kind]
    key = hashlib.sha256("\n".join([sys.version, *reqs]).encode()).hexdigest()[:12]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(base, "rewardhub-tests", f"venv-{kind}-{key}")
    if not os.path.exists(os.path.join(root, "complete")):  # missing, or a build that was cut short
        shutil.rmtree(root, ignore_errors=True)
        _run([_base_python(), "-m", "venv", root])
        _run([os.path.join(root, "bin", "python"), "-m", "pip", "install", "-q", *reqs])
        with open(os.path.join(root, "complete"), "w") as f:
            f.write("\n".join(reqs) + "\n")
    return _purelib(os.path.join(root, "bin", "python"))


def _fresh_venv(path, *site_dirs: str) -> str:
    """A new venv with its own pip that also sees ``site_dirs`` (their packages and entry points)."""
    _run([_base_python(), "-m", "venv", path])
    py = os.path.join(path, "bin", "python")
    with open(os.path.join(_purelib(py), "_frameworks.pth"), "w") as f:
        f.write("".join(f"import site; site.addsitedir({d!r})\n" for d in site_dirs))
    # (from the venv's folder: `python -c` puts the current folder first on sys.path, and this
    # checkout's holds rewardhub)
    found = _run([py, "-c", "import importlib.util as u; print(u.find_spec('rewardhub') is None)"], cwd=path)
    assert found.stdout.strip() == "True", "rewardhub is importable in the fresh venv"
    return py


@pytest.fixture
def package(tmp_path):
    """A package written by ``rewardhub new`` (this checkout's), and its folder."""
    res = subprocess.run([sys.executable, "-m", "rewardhub", "new", "shouty_answer"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return tmp_path / "shouty-answer"


VERL_SCRIPT = r'''
import asyncio, json, sys
import numpy as np
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager


class CharTokenizer:
    """One token per character (0 pads): the naive manager only decodes."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(int(i)) for i in ids if int(i) != 0)


rows = json.loads(sys.argv[2])
P, R = 8, 24
prompts, responses, mask = [], [], []
for prompt, resp, _ in rows:
    p, r = [ord(c) for c in prompt], [ord(c) for c in resp]
    prompts.append([0] * (P - len(p)) + p)
    responses.append(r + [0] * (R - len(r)))
    mask.append([0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (R - len(r)))
data = DataProto.from_dict(
    tensors={"prompts": torch.tensor(prompts), "responses": torch.tensor(responses),
             "attention_mask": torch.tensor(mask)},
    non_tensors={"data_source": np.array(["demo"] * len(rows), dtype=object),
                 "reward_model": np.array([{"ground_truth": gt} for _, _, gt in rows], dtype=object),
                 "extra_info": np.array([{"index": i} for i in range(len(rows))], dtype=object)})
config = OmegaConf.create({"reward": {
    "custom_reward_function": {"path": sys.argv[1], "name": "compute_score", "reward_kwargs": {}},
    "reward_manager": {"source": "register", "name": "naive", "module": {"path": None, "name": "x"}},
    "reward_model": {"enable": False}, "sandbox_fusion": {"url": None}}})
manager = load_reward_manager(config, CharTokenizer())


async def score_all():  # what verl's RewardLoopWorker does: every row's run_single
    return await asyncio.gather(*(manager.run_single(data[i:i + 1]) for i in range(len(rows))))

out = manager.loop.run_until_complete(score_all())
print(json.dumps([o["reward_score"] for o in out]))
'''

TRL_SCRIPT = r'''
import importlib, json, sys
from types import SimpleNamespace
from trl import GRPOTrainer

module, name = sys.argv[1].split(":")
fn = getattr(importlib.import_module(module), name)
rows = json.loads(sys.argv[2])
prompts = [p for p, _, _ in rows]
completions = [r if i % 2 else [{"role": "assistant", "content": r}] for i, (_, r, _) in enumerate(rows)]
inputs = [{"prompt": p, "ground_truth": gt} for p, _, gt in rows]
trainer = SimpleNamespace(  # what GRPOTrainer._calculate_rewards reads of the trainer
    accelerator=SimpleNamespace(device="cpu", is_main_process=True), reward_funcs=[fn],
    reward_processing_classes=[None], reward_func_names=[fn.__name__],
    state=SimpleNamespace(global_step=0), _log_completion_extra=lambda *a, **k: None,
    _log_metric=lambda *a, **k: None, environments=None, args=SimpleNamespace(report_to=[]),
    _metrics={"train": {}}, control=SimpleNamespace(should_evaluate=False),
    model=SimpleNamespace(training=True))
out = GRPOTrainer._calculate_rewards(trainer, inputs, prompts, completions, [[1]] * len(rows))
print(json.dumps({"name": fn.__name__, "scores": [r[0] for r in out.tolist()]}))
'''


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_new_package_in_verl_without_rewardhub(tmp_path, package):
    if not os.path.isdir(os.path.join(VERL_COMPAT, "verl")):
        pytest.skip(f"verl 0.9.1 is not at {VERL_COMPAT} (make installs it)")
    py = _fresh_venv(str(tmp_path / "venv"), _framework("verl"), VERL_COMPAT)
    _run([py, "-m", "pip", "install", "-q", str(package)], cwd=tmp_path)
    site = _purelib(py)
    assert not os.path.exists(os.path.join(site, "rewardhub"))
    installed = os.path.join(site, "shouty_answer", "reward.py")
    assert os.path.isfile(installed)  # a real install, not a link to the source folder
    # verl's custom_reward_function, by the installed module and by its file
    for path in ("pkg://shouty_answer.reward", installed):
        out = _run([py, "-c", VERL_SCRIPT, path, json.dumps(ROWS)], cwd=tmp_path)
        assert json.loads(out.stdout.strip().splitlines()[-1]) == SCORES, path


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_new_package_in_trl_without_rewardhub(tmp_path, package):
    py = _fresh_venv(str(tmp_path / "venv"), _framework("trl"))
    _run([py, "-m", "pip", "install", "-q", str(package)], cwd=tmp_path)
    out = _run([py, "-c", TRL_SCRIPT, "shouty_answer:shouty_answer", json.dumps(ROWS)], cwd=tmp_path)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"name": "shouty_answer", "scores": SCORES}
    # its own plain tests pass there; the contract test is skipped (no rewardhub)
    _run([py, "-m", "pip", "install", "-q", "pytest"], cwd=tmp_path)
    res = subprocess.run([py, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(package / "tests")],
                         capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert res.returncode == 0 and "2 passed, 1 skipped" in res.stdout, res.stdout + res.stderr
    assert "rewardhub is not installed" in res.stdout

