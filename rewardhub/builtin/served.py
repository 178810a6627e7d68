"""Served judges: ``llm_judge``'s ``serve:`` setting names a model that rewardhub runs itself, as a pool of
vLLM replicas on the Ray cluster (a Ray Serve application), instead of an endpoint (``base_url``).

Ray Serve routes each call to the less loaded of two replicas, health-checks them and replaces one that
dies (:mod:`._served_replica`); its HTTP proxy, on ``127.0.0.1``, is the judge's ``base_url``, so the
judge's own HTTP path (retries, verdicts, cache, key redaction) is the same as for any endpoint. A
:class:`~rewardhub.execution.Runner` starts the pools its terms name when it is built and stops them
when it is closed (:func:`start_for_terms`); a judge called outside a runner starts its pool on first use
and stops it when the process exits. Ray and Ray Serve are imported only when a pool starts.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

__all__ = ["SERVE_DEFAULTS", "ServedModel", "app_name", "check_serve", "served_endpoint", "start_for_config",
           "start_for_terms", "start_served"]

#: the keys of ``serve:`` and their defaults (``model`` has none: it is required)
SERVE_DEFAULTS: dict[str, Any] = {
    "model": None,  # a local folder or a Hugging Face model name
    "replicas": 2,  # vLLM replicas (each one a Ray Serve replica)
    "num_gpus": 0,  # GPUs per replica: 0 runs vLLM's CPU build
    "num_cpus": 1,  # CPUs Ray reserves per replica
    "share_gpus": False,  # a fractional num_gpus (a GPU shared with another actor) needs this
    "max_model_len": 2048,
    "vllm_args": [],  # more arguments of `vllm serve`, e.g. [--dtype, float32, --enforce-eager]
    "env": {},  # environment of the replicas' vLLM servers
    "max_ongoing_requests": 8,  # requests one replica holds at a time; more wait in Serve's queue
    "start_timeout_s": 900,  # the longest a replica's vLLM server may take to answer
    "port": 0,  # Ray Serve's HTTP port on 127.0.0.1 (0: a free one; a running Serve keeps its own)
    "log_dir": None,  # where each replica writes its server's log (default: a folder under the temp dir)
}


def _fail(key: str, value: Any, fix: str) -> UsageError:
    return UsageError(f"llm_judge serve.{key}={value!r} is not valid\n{fix}")


def check_serve(serve: Any) -> dict[str, Any]:
    """``serve`` checked and completed with :data:`SERVE_DEFAULTS`.

    :raises UsageError: naming the key and the fix.
    """
    if not isinstance(serve, Mapping):
        raise UsageError(f"llm_judge serve={serve!r} is not a mapping\nuse serve: {{model: PATH_OR_NAME, "
                         "replicas: 2}}")
    unknown = sorted(set(map(str, serve)) - set(SERVE_DEFAULTS))
    if unknown:
        raise UsageError(f"llm_judge serve has no key {unknown[0]!r}\nits keys: {', '.join(SERVE_DEFAULTS)}")
    spec = {**SERVE_DEFAULTS, **serve}
    if not isinstance(spec["model"], str) or not spec["model"]:
        raise UsageError("llm_judge serve needs a model\nset serve.model to a model folder or a Hugging Face "
                         "model name")
    for key in ("replicas", "max_ongoing_requests"):
        if isinstance(spec[key], bool) or not isinstance(spec[key], int) or spec[key] < 1:
            raise _fail(key, spec[key], "use a whole number of 1 or more")
    for key in ("num_cpus", "num_gpus", "start_timeout_s"):
        v = spec[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _fail(key, v, "use a number of 0 or more")
    gpus = spec["num_gpus"]
    if gpus and gpus != int(gpus) and not spec["share_gpus"]:
        raise _fail("num_gpus", gpus, "a fraction of a GPU shares it with another actor (the trainer's "
                    "rollout engine, say): use a whole number, or set serve.share_gpus: true to share")
    if not isinstance(spec["port"], int) or isinstance(spec["port"], bool) or not 0 <= spec["port"] < 65536:
        raise _fail("port", spec["port"], "use a port number, or 0 for a free one")
    args = spec["vllm_args"]
    if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
        raise _fail("vllm_args", spec["vllm_args"], "use a list of strings, e.g. [--dtype, float32]")
    if not isinstance(spec["env"], Mapping) or not all(isinstance(v, str) for v in spec["env"].values()):
        raise _fail("env", spec["env"], "use a mapping of names to strings")
    return spec


def app_name(serve: Mapping[str, Any]) -> str:
    """The Ray Serve application of ``serve`` (checked): one name per set of settings."""
    spec = check_serve(serve)
    text = json.dumps(spec, sort_keys=True, default=str)
    return "rewardhub-" + hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class ServedModel:
    """One served model's pool: its Serve application, the ``base_url`` and ``model`` a judge calls."""

    app: str
    base_url: str
    model: str
    log_dir: str
    owns_serve: bool
    #: False: another process started it (this one found it running): closing leaves it be
    owned: bool = True
    #: the runners (and judges called outside one) of this process that use it; the last close stops it
    users: int = 1

    def close(self) -> None:
        """Delete the application (its replicas stop their vLLM servers) when its last user closes;
        Serve too when it was started for it and holds nothing else."""
        with _LOCK:
            self.users -= 1
            if self.users > 0:
                return
            _LIVE.pop(self.app, None)
        import ray

        if not self.owned or not ray.is_initialized():  # Ray down: its actors went with it
            return
        from ray import serve

        try:
            serve.delete(self.app)
            if self.owns_serve and not serve.status().applications:
                serve.shutdown()  # type: ignore[no-untyped-call]
        except Exception:  # Ray already down: its actors went with it
            pass


_LIVE: dict[str, ServedModel] = {}  # app name -> the pool this process started
_LOCK = threading.Lock()


def _serve_port(port: int) -> tuple[int, bool]:
    """Start Ray Serve's HTTP proxy on 127.0.0.1 unless it runs; (its port, whether it was started).

    A free port is found by binding and closing it, so another process may take it before the proxy binds
    it: Serve is then shut down and started on another one (three tries). A given port that is taken is a
    :class:`UsageError` naming it."""
    from ray import serve
    from ray.serve.context import _get_global_client

    client = _get_global_client(raise_if_no_controller_running=False)
    if client is not None:
        return int(client.http_config.port), False
    from . import _served_replica

    tries = 3
    while True:
        chosen = port or _served_replica.free_port()
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": chosen})
            return chosen, True
        except Exception as e:
            if "Failed to bind" not in str(e):
                raise
            serve.shutdown()  # type: ignore[no-untyped-call]  # the controller it started, and its proxy
            tries -= 1
            if port:
                raise UsageError(f"llm_judge serve.port={port}: another process listens on 127.0.0.1:{port}\n"
                                 "use a free port, or 0 for a free one") from None
            if not tries:
                raise


def start_served(serve: Mapping[str, Any]) -> ServedModel:
    """The pool of ``serve`` (checked): this process's if it started one, else started now (blocks until
    every replica answers). Ray is started locally unless it runs (or ``RAY_ADDRESS`` names a cluster)."""
    spec = check_serve(serve)
    app = app_name(spec)
    with _LOCK:
        if app in _LIVE:
            _LIVE[app].users += 1
            return _LIVE[app]
        import ray
        from ray import serve as ray_serve

        from ._served_replica import VLLMReplica

        if not ray.is_initialized():  # with no address, ray.init() would join the cluster started here last
            ray.init(address=os.environ.get("RAY_ADDRESS") or "local", log_to_driver=False)
        port, owns = _serve_port(int(spec["port"]))
        log_dir = str(spec["log_dir"] or os.path.join(tempfile.gettempdir(), "rewardhub-served", app))
        gpus = spec["num_gpus"]
        args = ["--max-model-len", str(spec["max_model_len"]), *spec["vllm_args"]]
        deployment: Any = ray_serve.deployment(
            VLLMReplica, name="vllm", num_replicas=spec["replicas"],
            max_ongoing_requests=spec["max_ongoing_requests"], health_check_period_s=2,
            health_check_timeout_s=60, graceful_shutdown_timeout_s=5, graceful_shutdown_wait_loop_s=1,
            ray_actor_options={"num_cpus": spec["num_cpus"], "num_gpus": gpus})
        app_ = deployment.bind(spec["model"], spec["model"], args, dict(spec["env"]), log_dir,
                               float(spec["start_timeout_s"]), bool(gpus))
        running = not owns and app in ray_serve.status().applications  # another process's pool
        if not running:
            ray_serve.run(app_, name=app, route_prefix=f"/{app}", blocking=False)
        served = ServedModel(app, f"http://127.0.0.1:{port}/{app}/v1", spec["model"], log_dir, owns,
                             owned=not running)
        _LIVE[app] = served
        return served


_AT_EXIT: list[ServedModel] = []


def _close_at_exit() -> None:
    for m in list(_AT_EXIT):
        m.close()


def served_endpoint(serve: Mapping[str, Any]) -> tuple[str, str]:
    """(base_url, model) of ``serve``'s pool; a pool no runner started is started now and stopped at exit."""
    served = _LIVE.get(app_name(serve))
    if served is None:
        served = start_served(serve)
        if not _AT_EXIT:
            atexit.register(_close_at_exit)
        _AT_EXIT.append(served)
    return served.base_url, served.model


#: the rewards whose ``serve:`` kwarg names a model the runner serves
SERVED_JUDGES = frozenset({"llm_judge", "llm_judge_group"})


def start_for_terms(terms: Iterable[Any]) -> list[ServedModel]:
    """Start the pool of each judge term whose kwargs hold ``serve`` (what a runner owns and closes)."""
    return _start_all(t.kwargs.get("serve") if t.spec.name in SERVED_JUDGES else None for t in terms)


def start_for_config(reward: Any) -> list[ServedModel]:
    """Start the pool of each judge of a ``reward:`` section (its terms as configured) whose kwargs hold
    ``serve``: what a driver holds for a whole run whose workers each build a runner (the trainer's
    reward workers, ``score --address``'s actors). Started first, it is found running by every worker,
    which attaches to it (and leaves it running when it closes); the driver closes it at the end."""
    if getattr(reward, "remote", None) is not None:  # scored by a `rewardhub serve` server: its own judges
        return []
    return _start_all((t.kwargs or {}).get("serve") if t.name in SERVED_JUDGES else None
                      for t in reward.rewards)


def _start_all(serves: Iterable[Any]) -> list[ServedModel]:
    started: list[ServedModel] = []
    try:
        for serve in serves:
            if serve and all(m.app != app_name(serve) for m in started):
                started.append(start_served(serve))
    except BaseException:
        for m in started:
            m.close()
        raise
    return started
