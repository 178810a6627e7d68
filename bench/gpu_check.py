"""GPU check (issue 27 §1): every GPU-node guarantee of the trainer, then the demo with a CUDA learner and
vLLM.

    python bench/gpu_check.py [--steps 10] [--config examples/arithmetic.yaml] [KEY=VALUE ...]

CPU-side checks (run everywhere, also without a GPU; each prints ``ok``/``FAIL``):

- ``auto`` dtypes are decided by the hardware's capability alone (two choices agree; the timing only warns),
- an actor whose ``CUDA_VISIBLE_DEVICES`` is empty chooses the CPU; a CUDA learner rank that does not
  see exactly one GPU is refused,
- ``trainer.device`` survives the verl key map; ``rollout.max_model_len / gpu_memory_utilization /
  enforce_eager / tensor_parallel_size`` and verl's spellings reach ``vllm.LLM``'s arguments;
  ``tensor_parallel_size: 2`` makes each rollouter (and the evaluator) ask for 2 GPUs.

GPU checks (where ``torch.cuda.is_available()``; else it says so and exits 0 after the CPU checks):

- visibility: actors started with the run's Ray options, one asking for no GPU and one for one GPU,
  report ``CUDA_VISIBLE_DEVICES`` and the device they choose (none/cpu, and exactly one/cuda),
- vLLM (when it imports): an engine built through ``make_engine`` runs with the ``rollout.*`` values,
- the demo config trained once in ``sync`` mode (the baseline) and once in ``fully_async`` mode, with
  ``trainer.device=cuda``, a validation set (evaluator placed by ``resources.evaluator``), GPUs asked
  through ``resources:`` (with three or more GPUs the learner, the rollouter and the evaluator get
  one each, else a third of one each, vLLM taking ``rollout.gpu_memory_utilization`` 0.25). Rollouts
  use vLLM when it imports, else the transformers engine on the GPU (said in the output). Prints
  rollout tokens/s, the learner's median step time, throughput and the fully-async vs sync ratio,
  peak GPU memory (``nvidia-smi``), the device, dtypes, ``CUDA_VISIBLE_DEVICES`` and GPU ids of
  every actor, exact accounting and weight syncs.

The figures are printed as one JSON object on the last line as well (a GPU session pastes them into
its note). Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _gpu() -> str | None:
    """The GPU's name, or None without one (torch missing counts as none)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def _gpu_count() -> int:
    import torch

    return int(torch.cuda.device_count())


class _GpuMemory:
    """Peak memory used on the GPUs while the block runs, from nvidia-smi (None without it)."""

    def __enter__(self) -> _GpuMemory:
        import shutil
        import threading

        self.peak_mib: int | None = None
        self._stop = threading.Event()
        self._smi = shutil.which("nvidia-smi")
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        import subprocess

        while self._smi and not self._stop.wait(0.5):
            try:
                out = subprocess.run([self._smi, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                used = sum(int(x) for x in out.split() if x.strip().isdigit())
            except (OSError, subprocess.SubprocessError):
                return
            self.peak_mib = max(self.peak_mib or 0, used)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]


def _figures(summary: dict, rows: list[dict], samples_per_step: int) -> dict:
    gen_s = sum(r["time/gen_s"] for r in rows if r.get("time/gen_s"))
    tokens = sum(r["response_len/mean"] * samples_per_step for r in rows if "response_len/mean" in r)
    train_s = [r["train_s"] for r in rows if r.get("train_s")]
    return {
        "rollout_tokens_per_s": tokens / gen_s if gen_s else float("nan"),
        "learner_step_s": statistics.median(train_s) if train_s else float("nan"),
        "throughput_samples_per_s": summary["throughput_samples_per_s"],
        "wall_s": summary["wall_s"],
        "steps": summary["steps"],
        "weight_syncs": summary["weight_syncs"],
        "accounting_exact": summary["accounting_exact"],
        "samples_dropped_stale": summary["samples_dropped_stale"],
    }


def _check(results: list[tuple[str, bool, str]], name: str, fn: Any) -> None:
    try:
        detail = fn()
        results.append((name, True, str(detail or "")))
    except Exception as exc:  # noqa: BLE001 - a failed check is reported, the others still run
        results.append((name, False, f"{type(exc).__name__}: {exc}"))


def cpu_checks() -> list[tuple[str, bool, str]]:
    """The checks that need no GPU: (name, ok, detail) each."""
    import warnings

    from rewardhub.config import load_config
    from rewardhub.errors import UsageError
    from rewardhub_trainer import devices
    from rewardhub_trainer.config import parse_config
    from rewardhub_trainer.placement import bundles
    from rewardhub_trainer.vllm_engine import llm_arguments

    base = ["model.tiny.arch=qwen2", "reward.rewards=[{name: exact_match}]"]
    out: list[tuple[str, bool, str]] = []

    def deterministic() -> str:
        a, b = devices.choose(), devices.choose()
        assert (a.device, a.autocast, a.rollout_dtype) == (b.device, b.autocast, b.rollout_dtype), (a, b)
        return f"{a.device} autocast={a.autocast} rollout={a.rollout_dtype}: {a.reason}"

    def hidden() -> str:
        old = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        try:
            assert devices.gpus_seen() == 0 and devices.choose().device == "cpu"
        finally:
            os.environ.pop("CUDA_VISIBLE_DEVICES") if old is None else os.environ.update(
                CUDA_VISIBLE_DEVICES=old
            )
        assert devices.check_learner_gpus("cuda", 2) and devices.check_learner_gpus("cuda", 1) is None
        return "CUDA_VISIBLE_DEVICES='' -> cpu; a CUDA rank seeing 2 GPUs is refused"

    def config() -> str:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = parse_config(load_config(None, [*base, "trainer.device=cpu", "rollout.engine=vllm",
                                                  "actor_rollout_ref.rollout.max_model_len=512",
                                                  "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
                                                  "actor_rollout_ref.rollout.enforce_eager=False",
                                                  "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]))
        r = cfg.rollout
        assert cfg.trainer.device == "cpu"
        args = llm_arguments("/m", {}, on_cpu=False, max_model_len=r.max_model_len,
                             gpu_memory_utilization=r.gpu_memory_utilization, enforce_eager=r.enforce_eager,
                             tensor_parallel_size=r.tensor_parallel_size)
        assert (args["max_model_len"], args["gpu_memory_utilization"], args["enforce_eager"],
                args["tensor_parallel_size"]) == (512, 0.4, False, 2), args
        needs = {b.name: dict(b.needs) for b in bundles(cfg.resources, 1, evaluators=1)}
        assert needs == {"rollouter 0": {"GPU": 2.0}, "evaluator 0": {"GPU": 2.0}}, needs
        try:
            parse_config(load_config(None, [*base, "resources.learner.num_gpus=2"]))
            raise AssertionError("resources.learner.num_gpus=2 was accepted")
        except UsageError:
            pass
        return "verl spellings -> rollout.* -> vllm.LLM arguments; tp=2 asks 2 GPUs per rollouter"

    _check(out, "dtype auto is deterministic", deterministic)
    _check(out, "no GPU given -> none seen", hidden)
    _check(out, "GPU config keys", config)
    return out


_PROBE = """
import json, os, sys
import ray
from rewardhub_trainer import devices
from rewardhub_trainer.placement import Placement, parse_resources

@ray.remote
class Probe:
    def report(self):
        devices.hide_gpus_not_given()
        choice = devices.choose()
        return {"cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": choice.device,
                "seen": devices.gpus_seen()}

ray.init(include_dashboard=False, log_to_driver=False)
placement = Placement(parse_resources({"rollouter": {"num_gpus": 1}}), 1)
given = Probe.options(**placement.options("rollouter", 0)).remote()
none = Probe.options(**placement.options("learner", 0)).remote()
print("PROBE " + json.dumps({"given": ray.get(given.report.remote()), "none": ray.get(none.report.remote())}))
"""


def gpu_visibility() -> str:
    """Actors with the run's options: the one given no GPU sees none and is on the CPU; the other sees one."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "CUDA_VISIBLE_DEVICES")}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300, env=env
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("PROBE ")), None)
    assert line is not None, proc.stderr[-2000:]
    got = json.loads(line[len("PROBE "):])
    assert got["none"]["cuda_visible"] == "" and got["none"]["device"] == "cpu", got
    assert got["given"]["seen"] == 1 and got["given"]["device"] == "cuda", got
    return json.dumps(got)


def vllm_settings() -> str:
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.engine import make_engine
    from rewardhub_trainer.models import materialize

    path = materialize(ModelConfig(builtin="smollm2-135m"))
    eng = make_engine(
        "vllm",
        path,
        dtype="bfloat16",
        rollout={
            "max_model_len": 512,
            "gpu_memory_utilization": 0.2,
            "enforce_eager": False,
            "tensor_parallel_size": 1,
        },
    )
    config = eng.llm.llm_engine.vllm_config
    got = (config.model_config.max_model_len, config.cache_config.gpu_memory_utilization,
           config.model_config.enforce_eager, config.parallel_config.tensor_parallel_size)
    assert got == (512, 0.2, False, 1), got
    del eng
    return f"max_model_len, gpu_memory_utilization, enforce_eager, tensor_parallel_size = {got}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--config", default=str(ROOT / "examples" / "arithmetic.yaml"))
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        help="run the training part on the CPU vLLM backend when there is no GPU (checks this script)",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    checks = cpu_checks()
    gpu = _gpu()
    from rewardhub_trainer.vllm_engine import vllm_available

    missing = vllm_available()
    if gpu is not None:
        _check(checks, "GPU visibility in actors", gpu_visibility)
        if not missing:
            _check(checks, "vLLM runs with the rollout.* values", vllm_settings)
    for name, ok, detail in checks:
        print(f"gpu_check: {'ok  ' if ok else 'FAIL'} {name}: {detail}")
    failed = [name for name, ok, _ in checks if not ok]
    if gpu is None and not args.allow_cpu:
        print(
            "gpu_check: no GPU on this machine (torch.cuda.is_available() is False): the GPU checks "
            "(visibility "
            "in actors, vLLM on a GPU, the CUDA training runs) did not run; run it on a GPU machine"
        )
        return 1 if failed else 0
    gpu = gpu or "CPU (--allow-cpu)"
    engine = "vllm" if not missing else "transformers"
    if missing:
        print(f"gpu_check: {missing}; rollouts use the transformers engine on the GPU instead "
              "(VLLM_PACKAGE=vllm bash scripts/install-vllm.sh VENV for vLLM)")
    gpus = _gpu_count() if _gpu() else 0
    share = 1 if gpus >= 3 else 0.33 if gpus else 0
    import yaml

    from rewardhub_trainer.cli import train

    cfg = yaml.safe_load(Path(args.config).read_text())
    samples_per_step = int(cfg["rollout"].get("n", 4)) * int(cfg["rollout"].get("prompts_per_step", 4))
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        val = Path(tmp) / "val.jsonl"
        val.write_text("".join(json.dumps({"question": f"{a} + {b} =", "answer": str(a + b)}) + "\n"
                               for a in range(1, 5) for b in range(3, 5)))
        common = [
            f"rollout.engine={engine}",
            f"trainer.total_steps={args.steps}",
            "trainer.checkpoint_every=0",
            *([] if gpus == 0 else ["trainer.device=cuda"]),
            f"++data.val_files={val}",
            "++rollout.gpu_memory_utilization=0.25",
            f"++resources.learner.num_gpus={share}",
            f"++resources.rollouter.num_gpus={share}",
            f"++resources.evaluator.num_gpus={share}",
            *args.overrides,
        ]
        for mode in ("sync", "fully_async"):
            out = Path(tmp) / mode
            t0 = time.perf_counter()
            with _GpuMemory() as memory:
                summary = train(args.config, [*common, f"trainer.mode={mode}"], output=str(out))
            results[mode] = _figures(summary, _rows(out), samples_per_step)
            results[mode]["run_s"] = time.perf_counter() - t0
            results[mode]["peak_gpu_memory_mib"] = memory.peak_mib
            results[mode]["devices"] = {
                role: f"{d['device']} autocast={d['autocast']} rollout={d['rollout_dtype']}"
                for role, d in summary.get("devices", {}).items()
            }
            results[mode]["gpus"] = {f"{w['role']} {w['pid']}": (w.get("gpu_ids"), w.get("cuda_visible"))
                                     for w in summary["workers"]}
            for w in summary["workers"]:  # an actor given no GPU sees none; one given a GPU sees it only
                want = ",".join(w.get("gpu_ids") or [])
                if "cuda_visible" in w and w["cuda_visible"] != want:
                    failed.append(f"{mode}: {w['role']} pid {w['pid']} sees CUDA_VISIBLE_DEVICES="
                                  f"{w['cuda_visible']!r}, given {want!r}")
    sync, fully = results["sync"], results["fully_async"]
    ratio = fully["throughput_samples_per_s"] / sync["throughput_samples_per_s"]
    print(
        f"gpu_check on {gpu} ({gpus} GPU(s), {share} per role): {args.config} with rollout.engine={engine}, "
        f"{args.steps} steps per mode"
    )
    for mode, r in results.items():
        print(f"  {mode:11s} rollout tokens/s {r['rollout_tokens_per_s']:.1f}")
        print(f"  {mode:11s} learner step s {r['learner_step_s']:.3f}")
        print(f"  {mode:11s} throughput samples/s {r['throughput_samples_per_s']:.2f}")
        print(f"  {mode:11s} peak GPU memory MiB {r['peak_gpu_memory_mib']}")
        print(f"  {mode:11s} devices {r['devices']}; (GPU ids, CUDA_VISIBLE_DEVICES) {r['gpus']}")
        print(f"  {mode:11s} weight syncs {r['weight_syncs']}, accounting exact {r['accounting_exact']}")
    print(f"  fully_async vs sync throughput: {ratio:.2f}x (goal >= 1.3x)")
    for problem in failed:
        print(f"gpu_check: FAIL {problem}")
    print(
        json.dumps(
            {"gpu": gpu, "ratio_fully_async_vs_sync": ratio, "checks": checks, **results}, sort_keys=True
        )
    )
    return 0 if sync["accounting_exact"] and fully["accounting_exact"] and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
