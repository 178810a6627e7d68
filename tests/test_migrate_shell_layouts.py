"""Launch scripts of every layout: rewritten into valid scripts; loops, broken continuations and
unknowable arrays refused with their line; values from the environment kept as references."""

from __future__ import annotations

import os
import warnings

import pytest
import yaml
from migrate_helpers import example_files
from migrate_helpers import script_config

from rewardhub.config.loader import read_and_migrate

LAYOUTS = {
    "one line": lambda words: "python3 -m verl.trainer.main_ppo " + " ".join(words) + "\n",
    "continued": lambda words: (
        "set -x\npython3 -m verl.trainer.main_ppo \\\n    "
        + " \\\n    ".join(["data.train_files=t.parquet", *words])
        + "\n"
    ),
    "continued, last word legacy, then more": lambda words: (
        "python3 -m verl.trainer.main_ppo \\\n  " + " \\\n  ".join(words) + ' \\\n  "$@" 2>&1 | tee l.txt\n'
        "echo done\n"
    ),
    "in a pipeline after a step": lambda words: (
        "python3 prep.py && python3 -m verl.trainer.main_ppo " + " ".join(words) + "; status=$?\n"
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize(
    "path", [p for p in example_files() if p.suffix == ".overrides"], ids=lambda p: p.name
)
def test_write_keeps_every_example_a_valid_script(cli, tmp_path, path, layout):
    import subprocess

    words = [w for w in path.read_text().splitlines() if w.strip() and not w.startswith("#")]
    script = tmp_path / "run.sh"
    script.write_text(LAYOUTS[layout](words))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = read_and_migrate(str(script))[0]["reward"]
    out = cli("migrate", str(script), "--write")
    assert out.returncode == 0, out.stderr
    check = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert check.returncode == 0, (script.read_text(), check.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert read_and_migrate(str(script))[0]["reward"] == expected  # the same reward config, read back


@pytest.mark.parametrize(
    "body,message",
    [
        (
            "for lr in 1e-6 2e-6; do\n  python3 -m verl.trainer.main_ppo "
            "actor_rollout_ref.actor.optim.lr=$lr\ndone\n",
            r"\$lr in line 3 is set by the script in a way that cannot be read here",
        ),
        (
            'run() {\n  python3 -m verl.trainer.main_ppo "$@"\n}\nrun custom_reward_function.path=r.py\n',
            r"\$@ in line 3: the script defines a function",
        ),
        (
            "read -r MODEL < model.txt\npython3 -m verl.trainer.main_ppo "
            "actor_rollout_ref.model.path=$MODEL\n",
            r"\$MODEL in line 3 is set by the script",
        ),
        (
            'if [ -n "$BIG" ]; then\n  python3 -m verl.trainer.main_ppo a.b=1\nelse\n'
            "  python3 -m verl.trainer.main_ppo a.b=2\nfi\n",
            "lines 3, 5",
        ),
    ],
)
def test_loops_functions_and_branches_are_refused(tmp_path, body, message):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError, match=message):
        script_config(tmp_path, body)


@pytest.mark.parametrize(
    "body,line",
    [
        (
            "python3 -m verl.trainer.main_ppo \\\n    data.train_files=t.parquet \\\n    # the model\n"
            "    actor_rollout_ref.model.path=/m \\\n    custom_reward_function.path=r.py\n",
            5,
        ),
        (
            "python3 -m verl.trainer.main_ppo \\\n    data.train_files=t.parquet \\ \n    "
            "custom_reward_function.path=r.py\n",
            4,
        ),
        (
            "python3 -m verl.trainer.main_ppo \\\n    data.train_files=t.parquet\n    "
            "custom_reward_function.path=r.py\n",
            4,
        ),
    ],
)
def test_a_broken_continuation_is_refused_not_half_read(tmp_path, body, line):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError, match=f"line {line}: .* is a command of its own"):
        script_config(tmp_path, body)


def test_write_keeps_a_misspelt_key_of_a_yaml_file(cli, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(
        "custom_reward_function:\n  path: r.py\n  nmae: my_fn  # typo\ntrainer:\n  total_steps: 3\n"
    )
    out = cli("migrate", str(path), "--write")
    assert out.returncode == 0 and "did you mean custom_reward_function.name?" in out.stderr
    written = yaml.safe_load(path.read_text())
    assert written["custom_reward_function"] == {"nmae": "my_fn"}  # kept for the user to fix, not lost
    assert written["reward"]["rewards"] == [{"path": "r.py", "function": "compute_score"}]


def test_words_inside_a_substitution_are_not_overrides(tmp_path):
    cfg = script_config(tmp_path, "N=$(python3 -c 'print(1)' trainer.total_training_steps=9)\n"
                                  "python3 -m verl.trainer.main_ppo trainer.total_epochs=2\n")
    assert cfg == {"trainer": {"total_epochs": 2}}


def test_an_assignment_is_not_split_but_its_unquoted_use_is(tmp_path):
    cfg = script_config(tmp_path, 'A="trainer.total_epochs=2 trainer.test_freq=1"\nB=$A\n'
                                  'python3 -m verl.trainer.main_ppo $B data.prompt_key="$A"\n')
    assert cfg == {"trainer": {"total_epochs": 2, "test_freq": 1},
                   "data": {"prompt_key": "trainer.total_epochs=2 trainer.test_freq=1"}}


FROM_ENV = [
    ('a.k="$RH_SECRET"', {"k": "s+/k=="}),
    ("a.k=${RH_SECRET}", {"k": "s+/k=="}),
    ("a.k=pre${RH_SECRET}post", {"k": "pres+/k==post"}),
    ("a.k=${RH_SECRET:-none}", {"k": "s+/k=="}),
    # quoted: bash would brace-expand an unquoted {...,...} into two words
    ('"+a.h={Authorization:\'Bearer $RH_SECRET\',n:2}"', {"h": {"Authorization": "Bearer s+/k==", "n": 2}}),
    ("a.l=[$RH_SECRET,b] a.n=$RH_NODES a.p=$RH_HOME/d", {"l": ["s+/k==", "b"], "n": 2, "p": "/h/u/d"}),
]


def _through(body: str, how: str) -> str:
    if how == "variable":  # the script sets its own variables from the environment
        return ("MY_SECRET=$RH_SECRET\nexport MY_NODES=${RH_NODES}\nMY_HOME=$RH_HOME\n"
                "python3 -m verl.trainer.main_ppo " + body.replace("$RH_", "$MY_").replace("${RH_", "${MY_"))
    if how == "word list":
        return f'ARGS="{body}"\npython3 -m verl.trainer.main_ppo $ARGS'
    if how == "array":
        return "ARGS=(\n    " + body + '\n)\npython3 -m verl.trainer.main_ppo "${ARGS[@]}"'
    return "python3 -m verl.trainer.main_ppo " + body


@pytest.mark.parametrize("body,expected,how", [
    (body, expected, how) for body, expected in FROM_ENV
    for how in ("direct", "variable", "word list", "array")
    # a quoted value inside a word list is not split so by bash either; a default is the script's own
    if not (how == "word list" and '"' in body) and not (how == "variable" and ":-" in body)
])
def test_a_value_from_the_environment_is_kept_as_its_reference(monkeypatch, body, expected, how):
    """What an override takes from the environment reaches the config as ``${oc.env:NAME}`` (resolved to
    the same value when loaded), never as the secret's text; a number stays a number."""
    from omegaconf import OmegaConf

    from rewardhub.config.overrides import apply_overrides
    from rewardhub.verl.scripts import read_script

    monkeypatch.setenv("RH_SECRET", "s+/k==")
    monkeypatch.setenv("RH_NODES", "2")
    monkeypatch.setenv("RH_HOME", "/h/u")
    words = [w.text for w in read_script(_through(body, how) + "\n").words]
    assert not any("s+/k==" in w for w in words), words
    resolved = OmegaConf.to_container(OmegaConf.create(apply_overrides({}, words)), resolve=True)
    assert resolved == {"a": expected}



#: verl's examples build the command in an array (recipe/dapo, examples/*_trainer): comments, quotes,
#: continuations, a nested default, +keys, an append, an empty array, "$@"
ARRAY_SCRIPT = """\
#!/usr/bin/env bash
set -xeuo pipefail

project_name='DAPO'
n_resp_per_prompt=8
TRAIN_FILE=${TRAIN_FILE:-"${RH_DATA_HOME}/data/dapo-math-17k.parquet"}
declare -a SPEC=()

ARGS=(
    data.train_files="${TRAIN_FILE}"
    data.prompt_key=prompt  # verl's default is prompt too
    # the rollout (n responses a prompt)
    actor_rollout_ref.rollout.n=${n_resp_per_prompt} \\
    +actor_rollout_ref.model.override_config.attention_dropout=0.
    "trainer.project_name=${project_name}"
    'trainer.experiment_name=DAPO run (7b)'
    trainer.logger='["console","wandb"]'
)
ARGS+=(trainer.total_epochs=2)

python3 -m verl.trainer.main_ppo \\
    "${ARGS[@]}" "${SPEC[@]}" \\
    trainer.nnodes=1 "$@" 2>&1 | tee log.txt
"""


def test_an_array_built_command_reads_as_bash_runs_it(tmp_path, monkeypatch):
    """The words are the ones bash hands to python3 (bash runs the script with a python3 that prints its
    arguments), with what came from the environment as its reference."""
    import re
    import subprocess

    from rewardhub.verl.scripts import read_script

    monkeypatch.setenv("RH_DATA_HOME", "/data/rh")
    monkeypatch.delenv("TRAIN_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > argv.txt\n')
    (tmp_path / "bin" / "python3").chmod(0o755)
    (tmp_path / "run.sh").write_text(ARRAY_SCRIPT)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    subprocess.run(["bash", "run.sh"], env=env, check=True, capture_output=True, timeout=60)
    bash = (tmp_path / "argv.txt").read_text().splitlines()

    words = [w.text for w in read_script(ARRAY_SCRIPT).words]
    assert words[0] == "data.train_files=${oc.env:RH_DATA_HOME}/data/dapo-math-17k.parquet"
    resolved = [re.sub(r"\$\{oc\.env:(\w+)\}", lambda m: os.environ[m.group(1)], w) for w in words]
    assert ["-m", "verl.trainer.main_ppo", *resolved] == bash
    cfg = script_config(tmp_path, ARRAY_SCRIPT)
    assert cfg["actor_rollout_ref"] == {"rollout": {"n": 8},
                                        "model": {"override_config": {"attention_dropout": 0.0}}}
    assert cfg["trainer"] == {"project_name": "DAPO", "experiment_name": "DAPO run (7b)",
                              "logger": ["console", "wandb"], "total_epochs": 2, "nnodes": 1}


@pytest.mark.parametrize("body,words", [  # script_config puts a #! line first: line 1 is the body's 0th
    ('A=(a.b=1)\nif [ -n "$X" ]; then\n  A+=(a.c=2)\nfi\npython3 -m verl.trainer.main_ppo "${A[@]}"\n',
     "A is changed inside an if/for/while/case block (line 4)"),
    ('A=(a.b=1)\n[ -n "$X" ] && echo x\nfor s in 1 2; do A+=(a.c=$s); done\n'
     'python3 -m verl.trainer.main_ppo "${A[@]}"\n', "A is changed inside an if/for/while/case block"),
    ('N=2\nif [ -n "$X" ]; then\n  N=4\nfi\npython3 -m verl.trainer.main_ppo a.n=$N\n',
     "$N in line 6 is set by the script in a way that cannot be read here"),
    ('A=(a.b=$(nproc))\npython3 -m verl.trainer.main_ppo "${A[@]}"\n', "$(nproc) in line 2 cannot be run"),
    ('A=(\n  a.b=1\npython3 -m verl.trainer.main_ppo "${A[@]}"\n', "line 2: the array's '(' is never closed"),
])
def test_an_array_that_cannot_be_known_is_refused_with_its_line(tmp_path, body, words):
    from rewardhub.errors import UsageError

    with pytest.raises(UsageError) as err:
        script_config(tmp_path, body)
    assert words in str(err.value)
