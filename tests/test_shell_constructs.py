"""A launch script is read as bash runs it, or refused naming the construct and its line (issue 43 §5):
each case runs in real bash with a ``python3`` that writes down its arguments, and the words read here
are compared with them."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from rewardhub.errors import UsageError
from rewardhub.verl.scripts import read_script

RUN = "python3 -m verl.trainer.main_ppo"

#: scripts whose words are read here as bash hands them to python3 (with STEPS unset, empty and set)
READ = [
    f'if [ -z "$STEPS" ]; then STEPS=5; fi\n{RUN} trainer.total_training_steps=$STEPS\n',
    f'if [[ -z ${{STEPS}} ]]; then\n  STEPS="5"\nfi\n{RUN} trainer.total_training_steps=$STEPS\n',
    f'[ -z "$STEPS" ] && STEPS=5\n{RUN} trainer.total_training_steps=$STEPS\n',
    f'[ -n "$STEPS" ] || STEPS=5\n{RUN} trainer.total_training_steps=$STEPS\n',
    f'test -z "$STEPS" && STEPS=5\n{RUN} trainer.total_training_steps=$STEPS\n',
    f"{RUN} custom_reward_function.path=$'./my_reward.py'\n",
    f"{RUN} a.b=$'tab\\there\\x41\\101\\u00e9 \\'q\\''\n",
    f'{RUN} a.b=$"./my_reward.py"\n',
    f"STEPS=3\n(STEPS=5)\necho x | STEPS=6\n{RUN} trainer.total_training_steps=$STEPS\n",
    f"A={{x,y}}\n{RUN} a.b=$A a.c='{{x,y}}' \"a.d={{x,y}}\" a.e={{x}}\n",
]

#: scripts refused here: (script, what the error names)
REFUSED = [
    (f"{RUN} a.b=<(echo x)\n", ["process substitution <(echo x)", "line 1"]),
    (f"{RUN} a.b=>(cat)\n", ["process substitution >(cat)", "line 1"]),
    (f"{RUN} \\\n  a.b=./{{a,b}}.py\n", ["brace expansion {a,b}", "line 2"]),
    (f"{RUN} a.b=x{{1..3}}\n", ["brace expansion {1..3}", "line 1"]),
    (f"A=(a.b={{x,y}})\n{RUN} \"${{A[@]}}\"\n", ["brace expansion {x,y}", "line 1"]),
    (f"export A={{x,y}}\n{RUN} a.b=$A\n", ["brace-expands {x,y}", "line 1", "$A in line 2"]),
    (f"true && STEPS=5\n{RUN} a.b=$STEPS\n", ["set after &&", "$STEPS in line 2"]),
    (f"if [ -z \"$STEPS\" ]; then\n  STEPS=5\n  N=2\nfi\n{RUN} a.b=$STEPS\n", ["the if block on line 1"]),
]


def _bash(tmp_path, script: str, env: dict[str, str]) -> list[str]:
    (tmp_path / "bin").mkdir(exist_ok=True)
    fake = tmp_path / "bin" / "python3"
    fake.write_text('#!/bin/sh\nprintf "%s\\0" "$@" > argv.bin\n')
    fake.chmod(0o755)
    (tmp_path / "run.sh").write_text(script)
    full = dict(env, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    subprocess.run(["bash", "run.sh"], env=full, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    return (tmp_path / "argv.bin").read_text().split("\0")[:-1]


def _env(steps: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "STEPS"}
    if steps is not None:
        env["STEPS"] = steps
    return env


@pytest.mark.timeout(120)
@pytest.mark.parametrize("steps", [None, "", "9"])
@pytest.mark.parametrize("script", READ)
def test_a_script_reads_as_bash_runs_it(tmp_path, monkeypatch, script, steps):
    env = _env(steps)
    bash = _bash(tmp_path, script, env)
    monkeypatch.setattr(os, "environ", env)
    words = [w.text for w in read_script(script).words]
    resolved = [re.sub(r"\$\{oc\.env:(\w+)\}", lambda m: env[m.group(1)], w) for w in words]
    assert ["-m", "verl.trainer.main_ppo", *resolved] == bash


@pytest.mark.parametrize("script,names", REFUSED)
def test_a_construct_not_read_here_is_refused_by_name_and_line(monkeypatch, script, names):
    monkeypatch.delenv("STEPS", raising=False)
    with pytest.raises(UsageError) as err:
        read_script(script)
    for name in names:
        assert name in str(err.value)
