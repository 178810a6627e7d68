"""`rewardhub score --address` on a 3-node Ray cluster vs local `rewardhub score`, same rows (issue 45 §6).

N rows (default 1,000,000) of math answers, written as 8 JSONL files, scored with two rule rewards
(``exact_match`` and a ``regex_match`` format reward): once by local ``score`` (one process, a glob of the
files), once by ``score --address`` on a ``ray.cluster_utils.Cluster`` of a head (0 CPUs) and 3 nodes of
``--cpus-per-node`` CPUs, the files streamed through Ray Data to the reward actors. Both runs are timed
whole (start-up, reading, scoring, writing) and their outputs compared byte for byte.

The nodes of the cluster are processes of this machine: on a host with fewer cores than the nodes' CPUs
the "cluster" shares the same cores as the local run, so the ratio says what the Ray Data path costs over
local scoring, not what 3 real machines give.

    python bench/fleet_data.py            # 1,000,000 rows
    python bench/fleet_data.py -n 100000
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time

CONFIG = """reward:
  rewards:
    - name: exact_match
    - name: regex_match
      alias: boxed_format
      weight: 0.1
      kwargs:
        pattern: '\\\\boxed\\{.+\\}'
"""
FILES = 8


def write_data(folder: str, n: int) -> None:
    per = -(-n // FILES)
    for k in range(FILES):
        with open(os.path.join(folder, f"part-{k:02d}.jsonl"), "w", encoding="utf-8") as f:
            for i in range(k * per, min(n, (k + 1) * per)):
                f.write(json.dumps({"id": i, "prompt": f"What is {i} mod 7?",
                                    "response": f"The remainder is \\boxed{{{(i * 3) % 7}}}.",
                                    "ground_truth": str(i % 7)}) + "\n")


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
    return took


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="rows (default 1,000,000)")
    parser.add_argument("--cpus-per-node", type=int, default=1,
                        help="CPUs of each of the 3 nodes (default 1)")
    args = parser.parse_args(argv)

    import ray
    from ray.cluster_utils import Cluster

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") or k.startswith("RAY_AUTH")}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    with tempfile.TemporaryDirectory(prefix="fleet_data_") as tmp:
        data = os.path.join(tmp, "data")
        os.mkdir(data)
        write_data(data, args.n)
        cfg = os.path.join(tmp, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write(CONFIG)
        base = [sys.executable, "-m", "rewardhub", "score", cfg]
        local_out, cluster_out = os.path.join(tmp, "local.jsonl"), os.path.join(tmp, "cluster.jsonl")
        local_s = timed([*base, os.path.join(data, "*.jsonl"), "--no-progress", "-o", local_out], env)
        print(f"local score:      {args.n:>9,} rows in {local_s:7.1f} s  {args.n / local_s:>9,.0f} rows/s",
              flush=True)
        assert not ray.is_initialized()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            for _ in range(3):
                cluster.add_node(num_cpus=args.cpus_per_node)
            cluster.wait_for_nodes()
            cluster_s = timed([*base, data, "--no-progress", "-o", cluster_out, "--address", cluster.address],
                              env)
        finally:
            cluster.shutdown()
        same = filecmp.cmp(local_out, cluster_out, shallow=False)
    print(f"score --address:  {args.n:>9,} rows in {cluster_s:7.1f} s  {args.n / cluster_s:>9,.0f} rows/s "
          f"(3 nodes x {args.cpus_per_node} CPU, {os.cpu_count()} cores on this host)")
    print(f"ratio (--address / local rows/s): {local_s / cluster_s:.2f}x; outputs identical: {same}")
    if not same:
        sys.exit("the outputs differ")
    return {"rows": float(args.n), "local_s": local_s, "cluster_s": cluster_s, "ratio": local_s / cluster_s}


if __name__ == "__main__":
    main()
