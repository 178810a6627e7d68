"""The run folder (``--output``): one run per folder, checked before Ray starts, and no secret in it.

:func:`check_output` (a folder this process can create and write), :class:`RunLock` (no second run
writing it), :func:`claim` (a folder holding a run is refused unless ``--resume`` names it or
``--overwrite`` is given; ``--resume`` needs the same :func:`fingerprint`; nothing is deleted before
:func:`begin`), :func:`check_resume_model` and :func:`check_resume_rewards` (a checkpoint of another
model shape, or whose rewards' code changed), and :func:`public_config` (values from ``${oc.env:NAME}``
written as that interpolation, never resolved).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import json
import operator
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rewardhub.errors import UsageError

__all__ = ["RUN_FILE", "RunFolder", "RunLock", "begin", "check_output", "check_resume_model",
           "check_resume_rewards", "claim", "env_paths", "fingerprint", "holds_run", "public_config"]

RUN_FILE = "run.json"
#: what a run writes into its folder (what ``--overwrite`` removes, once the new run has started)
RUN_ENTRIES = (RUN_FILE, "metrics.jsonl", "summary.json", "checkpoints", "tensorboard", "metrics.png",
               "mlflow.db", "mlruns", "wandb")
#: the sections whose difference makes a checkpoint another run's
FINGERPRINTED = ("model", "data", "reward")
#: the keys of a model's config.json that fix the shape of its weights
SHAPE_KEYS = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings")
_SPECIAL = ("/proc", "/sys", "/dev")
#: how a term runs, not what it gives (a resumed run may change these)
_RUNTIME_TERM_KEYS = ("executor", "timeout_s", "max_concurrency", "retries", "memory_limit_mb", "cache",
                      "max_rpm")
#: how the client of ``reward.remote`` waits and retries (its ``url`` is fingerprinted)
_RUNTIME_REMOTE_KEYS = ("timeout_s", "connect_timeout_s", "retry_for_s")


def check_output(output: str) -> Path:
    """``output`` as an absolute folder, created, and shown to be writable (one error line otherwise)."""
    path = Path(os.path.abspath(output))
    real = os.path.realpath(path)
    if any(real == s or real.startswith(s + "/") for s in _SPECIAL):
        raise UsageError(f"--output {output}: not a place for a run folder ({real} is a kernel file system)\n"
                         "choose a folder on a disk, e.g. --output runs/my-run")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--output {output}: is a file, not a folder\n"
                         "name a folder (it is created if missing), e.g. --output runs/my-run")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(f"--output {output}: cannot write there ({reason})\n"
                         "choose a folder you can write, e.g. --output runs/my-run") from None
    return path


LOCK_FILE = ".rewardhub-run.lock"


class RunLock:
    """One run at a time in a folder, from the moment it is chosen: an exclusive ``flock`` on
    ``LOCK_FILE`` (taken atomically; the kernel lets it go when the process ends, however it ends, so a
    killed run leaves no stale lock). A second run is refused while the first is still starting,
    before it has written anything there. The file is removed when the run lets the folder go, so a
    refused run leaves the folder as it was."""

    def __init__(self, out: Path) -> None:
        import fcntl

        self.path = out / LOCK_FILE
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                try:
                    holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
                finally:
                    os.close(fd)
                raise UsageError(f"--output {out}: another run is writing there ({holder})\n"
                                 "wait for it to end, or choose another --output") from None
            try:  # the file locked is still the folder's (not one its last holder removed meanwhile)
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        holder = f"pid {os.getpid()} on {os.uname().nodename}, since {time.strftime('%H:%M:%S')}"
        os.ftruncate(fd, 0)
        os.write(fd, holder.encode())
        self._fd: int | None = fd

    def release(self) -> None:
        """Let the folder go (idempotent): the file is removed while still locked, then closed."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()
            os.close(self._fd)  # closing the file drops its flock
            self._fd = None


class RunFolder:
    """``--output``, chosen: checked (:func:`check_output`), created where missing and locked
    (:class:`RunLock`), before the config's slow parts (the model, the data) and long before Ray: a
    second run into a folder a starting run holds is refused at once."""

    def __init__(self, output: str) -> None:
        made = not os.path.isdir(os.path.abspath(output))
        self.path = check_output(output)
        self.made = made  #: created here (an earlier run's folder is never removed)
        try:
            self.lock = RunLock(self.path)
        except BaseException:
            self.release(discard=True)
            raise

    def release(self, *, discard: bool = False) -> None:
        """Let the folder go (idempotent); ``discard``: the run was refused, so a folder created for it
        goes too, if nothing was written there."""
        lock = getattr(self, "lock", None)
        if lock is not None:
            lock.release()
        if discard and self.made:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only an empty one


def holds_run(path: Path) -> bool:
    """Does folder ``path`` hold (part of) a run's output?"""
    return any((path / name).exists() for name in RUN_ENTRIES[:5])


@functools.lru_cache(maxsize=1)
def _defaults() -> dict[str, Any]:
    """The default of every fingerprinted key (as JSON writes it), and of a reward term's (``"term"``)."""
    from rewardhub.config.schema import RewardConfig
    from rewardhub.config.schema import TermConfig
    from rewardhub.config.schema import as_dict

    from .config import DataConfig
    from .config import ModelConfig

    term = as_dict(RewardConfig(rewards=(TermConfig(),)))["rewards"][0]
    out: dict[str, Any] = _plain({"model": dataclasses.asdict(ModelConfig()),
                                  "data": dataclasses.asdict(DataConfig()),
                                  "reward": as_dict(RewardConfig()), "term": term})
    return out


def _plain(value: Any) -> Any:
    """``value`` as JSON has it (tuples are lists), so a config read back from ``run.json`` compares
    equal to one built now."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _set(value: Any, default: Any) -> Any:
    """The keys of mapping ``value`` that differ from ``default``'s (recursively); a key ``default`` lacks
    is kept. Not a mapping: ``value``."""
    if not (isinstance(value, dict) and isinstance(default, dict)):
        return value
    return {k: _set(v, default[k]) if k in default else v
            for k, v in value.items() if k not in default or v != default[k]}


def _what_is_learned(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``model``, ``data`` and ``reward`` sections as far as they differ from the defaults (what the
    user set: a key added by a later release, at its default, is no difference), less how the rewards run
    (``reward.workers``; each term's executor, timeout, concurrency, retries, cache and rate limit;
    ``reward.remote``'s waits: a resumed run may change those)."""
    defaults = _defaults()
    part = {k: _plain(config.get(k)) for k in FINGERPRINTED}
    reward = part.get("reward")
    if isinstance(reward, dict):
        reward.pop("workers", None)
        terms = reward.pop("rewards", None)
        if isinstance(reward.get("remote"), dict):
            for key in _RUNTIME_REMOTE_KEYS:
                reward["remote"].pop(key, None)
        if isinstance(terms, list):
            kept = []
            for term in terms:
                if isinstance(term, dict):
                    term = {k: v for k, v in term.items() if k not in _RUNTIME_TERM_KEYS}
                    term = _set(term, defaults["term"])
                kept.append(term)
            if kept:
                reward["rewards"] = kept
    return {k: _set(v, defaults[k]) for k, v in part.items()}


def fingerprint(config: Mapping[str, Any]) -> str:
    """The sha256 of what the run learns from (:func:`_what_is_learned`, as :func:`public_config` writes
    it)."""
    return hashlib.sha256(
        json.dumps(_what_is_learned(config), sort_keys=True, default=str).encode()
    ).hexdigest()


def _recorded_fingerprint(path: Path) -> tuple[str | None, dict[str, Any] | None]:
    """The fingerprint of the run in ``path`` and its config (from ``run.json``, else its latest
    checkpoint)."""
    from .checkpoint import latest_checkpoint
    from .checkpoint import read_state

    try:
        if (path / RUN_FILE).exists():
            info = json.loads((path / RUN_FILE).read_text())
            return info.get("fingerprint"), info.get("config")
        ckpt = latest_checkpoint(path)
        if ckpt is not None:
            config = read_state(ckpt).get("config") or {}
            return fingerprint(config), config
    except (OSError, ValueError):
        pass
    return None, None


def claim(out: Path, config: Mapping[str, Any], *, resume: str | None, overwrite: bool,
          allow_config_change: bool = False) -> None:
    """Refuse ``out`` when it holds another run, and ``resume`` when the run there learned from another
    config (unless ``allow_config_change``: a warning), wherever the new run writes (see the module's
    docstring); deletes nothing."""
    here = bool(resume) and Path(os.path.abspath(str(resume))) == out
    if resume:
        _check_resume_config(Path(os.path.abspath(resume)), config, resume, here=here,
                             allow=allow_config_change)
    if overwrite or here or not holds_run(out):
        return
    hint = f"--resume {out} to continue it (same config)" if not resume else "another --output for this run"
    raise UsageError(
        f"--output {out}: holds another run (metrics, checkpoints or summary)\n"
        f"use {hint}, or --overwrite to replace it (its files are removed once the new run starts)"
    )


def _check_resume_config(path: Path, config: Mapping[str, Any], resume: str, *, here: bool,
                         allow: bool = False) -> None:
    """The run in ``path`` learned from the config's ``model``, ``data`` and ``reward`` sections (as
    :func:`_what_is_learned` reads them: the config that run recorded is compared, so a run written by
    an earlier release, before some key existed, is the same run), or one error line naming the sections
    that differ; with ``allow`` (``--allow-config-change``) a warning. A resumed run goes on from that
    run's data cursor and weights: with another data or reward section they would be another run's."""
    recorded, old = _recorded_fingerprint(path)
    if isinstance(old, dict):
        was, now = _what_is_learned(old), _what_is_learned(config)
        differ = [k for k in FINGERPRINTED if was.get(k) != now.get(k)]
        if not differ:
            return
    elif recorded is None or recorded == fingerprint(config):
        return
    else:
        differ = []
    what = (f"the run in that folder has another config "
            f"({', '.join(differ) or 'its fingerprint'} differ{'s' if len(differ) == 1 else ''})")
    fix = ("another --output, or --overwrite" if here
           else "without --resume (its --output may stay)")
    _refuse(resume, what, f"resume it with its own config, or start a new run: {fix}; or pass "
            "--allow-config-change to go on from its checkpoint with this config",
            allowed="--allow-config-change: going on with this config" if allow else "")


def _refuse(resume: str, what: str, fix: str, *, allowed: str) -> None:
    """``--resume``'s error line ``what`` (and ``fix``), or only a warning where its flag ``allowed`` it."""
    if not allowed:
        raise UsageError(f"--resume {resume}: {what}\n{fix}")
    print(f"WARNING: --resume {resume}: {what} ({allowed})", file=sys.stderr)


def check_resume_rewards(ckpt: Path, now: Mapping[str, str], resume: str, *, allow: bool) -> None:
    """The rewards of checkpoint ``ckpt``'s run have the code they have now (each used reward's
    ``dist==version``, or its file's sha256), or one error line naming each that changed; with
    ``allow`` (``--allow-reward-change``) a change is accepted, with a warning. A checkpoint from before
    this record is not checked."""
    from .checkpoint import read_state

    try:
        was = read_state(ckpt).get("rewards")
    except (OSError, ValueError):
        was = None
    if not isinstance(was, dict):
        return
    changed = [f"{name!r} {was[name]} -> {now[name]}" for name in sorted(set(was) & set(now))
               if was[name] != now[name]]
    if not changed:
        return
    _refuse(resume, f"reward code changed since its checkpoint {ckpt.name}: {', '.join(changed)}",
            "restore the reward as it was, or pass --allow-reward-change to go on with the new code",
            allowed="--allow-reward-change: going on with the new code" if allow else "")


def begin(out: Path, config: Mapping[str, Any], *, overwrite: bool, resumed_here: bool,
          rewards: Mapping[str, str] | None = None) -> None:
    """The run has started for real: with ``--overwrite`` the earlier run's files go now; ``run.json`` is
    written (``rewards``: each used reward's identity, :meth:`.prepare.Prepared.reward_identities`)."""
    if overwrite and not resumed_here:
        for name in RUN_ENTRIES:
            p = out / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists() or p.is_symlink():
                p.unlink()
    info = {"fingerprint": fingerprint(config), "config": dict(config), "started": time.time(),
            "driver_pid": os.getpid(), "rewards": dict(rewards or {})}
    tmp = out / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, out / RUN_FILE)


def _shape(folder: Path) -> dict[str, Any] | None:
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    return {k: text.get(k, cfg.get(k)) for k in SHAPE_KEYS if k in text or k in cfg}


def check_resume_model(ckpt: Path, model_path: str, resume: str) -> None:
    """The checkpoint's model has the shape of the config's model (``config.json`` of each), or one error
    line."""
    old, new = _shape(ckpt), _shape(Path(model_path))
    if old is None or new is None:
        return
    differ = [f"{k} {old.get(k)} -> {new.get(k)}" for k in SHAPE_KEYS if old.get(k) != new.get(k)]
    if differ:
        raise UsageError(f"--resume {resume}: its checkpoint {ckpt.name} holds a model of another shape "
                         f"({', '.join(differ)})\n"
                         "resume with the model: section that run used, or start a new run without --resume")


# -- secrets -----------------------------------------------------------------------------------------

def env_paths(raw: Any) -> dict[tuple[Any, ...], str]:
    """Where the unresolved config ``raw`` (an OmegaConf node) takes a value from the environment:
    path (keys and list indices) -> the interpolation as written (``${oc.env:NAME}``)."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(raw):
        return {}
    out: dict[tuple[Any, ...], str] = {}

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))
        elif isinstance(node, str) and "${" in node and ("env:" in node or "oc.decode:" in node):
            out[path] = node

    walk(OmegaConf.to_container(raw, resolve=False), ())
    return out


def public_config(config: Mapping[str, Any], paths: Mapping[tuple[Any, ...], str]) -> dict[str, Any]:
    """A copy of ``config`` with each value taken from the environment written as its interpolation."""
    out = copy.deepcopy(dict(config))
    for path, text in paths.items():
        *parents, last = path
        with contextlib.suppress(KeyError, IndexError, TypeError):  # a path the config does not have
            node = functools.reduce(operator.getitem, parents, out)
            node[last]  # noqa: B018 - only a value that is there is replaced
            node[last] = text
    return out
