"""fully_async vs sync: samples trained per second at the same config and the same trained samples.

    python bench/bench_trainer.py                       # tiny, io (200 ms HTTP judge), demo
    python bench/bench_trainer.py --cases tiny,io --steps 12

Cases: ``tiny`` (examples/tiny.yaml), ``demo`` (examples/arithmetic.yaml, SmolLM2-135M), and ``io``:
the tiny config whose reward asks a local HTTP judge on 127.0.0.1 that takes 200 ms per call
(started here). Goals: fully_async >= 1.3x sync on tiny/demo, >= 1.5x with the I/O-bound reward.
Prints one line per case with both throughputs, the ratio, and the rollouter and learner idle ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS = {"tiny": 1.3, "demo": 1.3, "io": 1.5}

JUDGE_REWARD = '''
import json
import urllib.request

URL = {url!r}


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """Ask the HTTP judge (200 ms per call) whether the response contains the answer."""
    body = json.dumps({{"response": solution_str, "answer": ground_truth}}).encode()
    with urllib.request.urlopen(URL, data=body, timeout=30) as resp:
        return float(json.loads(resp.read())["score"])
'''


class _Judge(BaseHTTPRequestHandler):
    delay_s = 0.2

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        time.sleep(self.delay_s)
        score = 1.0 if any(ch.isdigit() for ch in data["response"]) else 0.0
        out = json.dumps({"score": score}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: object) -> None:
        pass


def start_judge() -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Judge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/score"


def run_case(case: str, steps: int, workdir: Path, judge_url: str | None) -> dict[str, dict]:
    from rewardhub_trainer.cli import train

    config = ROOT / "examples" / ("arithmetic.yaml" if case == "demo" else "tiny.yaml")
    overrides = [f"trainer.total_steps={steps}", "trainer.checkpoint_every=0"]
    if case == "io":
        reward_file = workdir / "judge_reward.py"
        reward_file.write_text(JUDGE_REWARD.format(url=judge_url))
        overrides += [f"reward.rewards=[{{path: '{reward_file}', function: compute_score}}]"]
    results = {}
    for mode in ("sync", "fully_async"):
        s = train(str(config), [*overrides, f"trainer.mode={mode}"], output=str(workdir / f"{case}-{mode}"))
        results[mode] = s
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="tiny,io,demo")
    parser.add_argument("--steps", type=int, default=20, help="steps per run (tiny and io)")
    parser.add_argument("--demo-steps", type=int, default=10)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import ray

    ray.init(num_cpus=max(4, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False)
    server, url = start_judge()
    report = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
            for case in args.cases.split(","):
                steps = args.demo_steps if case == "demo" else args.steps
                res = run_case(case, steps, Path(tmp), url)
                sync, fa = res["sync"], res["fully_async"]
                assert sync["samples_trained"] == fa["samples_trained"]
                ratio = fa["throughput_samples_per_s"] / sync["throughput_samples_per_s"]
                report[case] = {
                    "samples_trained": fa["samples_trained"],
                    "sync_samples_per_s": sync["throughput_samples_per_s"],
                    "fully_async_samples_per_s": fa["throughput_samples_per_s"],
                    "ratio": ratio,
                    "goal": GOALS[case],
                    "idle": {"sync": sync["idle_ratio"], "fully_async": fa["idle_ratio"]},
                    "dropped_stale": fa["samples_dropped_stale"],
                }
                print(f"{case:5s} trained {fa['samples_trained']:5d} samples: sync "
                      f"{sync['throughput_samples_per_s']:7.2f}/s, fully_async {fa['throughput_samples_per_s']:7.2f}/s"
                      f"  ratio {ratio:.2f}x (goal {GOALS[case]}x)"
                      f"  idle rollouter/learner: sync {sync['idle_ratio']['rollouter']:.2f}/"
                      f"{sync['idle_ratio']['learner']:.2f}, fully_async {fa['idle_ratio']['rollouter']:.2f}/"
                      f"{fa['idle_ratio']['learner']:.2f}", flush=True)
    finally:
        server.shutdown()
        ray.shutdown()
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
