"""Local code sandbox: programs per second on 2 cores, against plain ``subprocess.run`` of the same programs.

Two workloads, each run by 2 threads at once (the machine's 2 cores): trivial programs (``print``)
and programs that burn about 1 s of CPU. The baseline runs the same interpreter on the same file
with ``subprocess.run`` and a timeout (in a new session and the same clean environment as the
sandbox's runs), without any isolation; both start the interpreter with ``-I -S``. Baseline and
sandbox alternate over a few rounds; each figure is the median round. Then the latency of one
trivial program, alternating program by program, and last HumanEval-style samples through the
``code_tests`` reward on the execution engine (process executor, 2 workers).
Timings are noisy on a shared machine; the ratios are what to read.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from rewardhub_code import sandbox

#: both sides start the interpreter without ``site``: the base installation's ``.pth`` files do
#: more at start-up when the sandbox's hidden directories are visible, which would flatter the sandbox
FLAGS = ("-I", "-S")
TRIVIAL = "print(sum(range(100)))\n"
ONE_SECOND = ("import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end:\n    pass\n"
              "print('done')\n")


def _latency(fn, code: str) -> float:
    t = time.perf_counter()
    fn(code, 1, 1)
    return time.perf_counter() - t


def _plain(code: str, n: int, workers: int) -> float:
    python, _ = sandbox._interpreter(sandbox.SandboxLimits())
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "main.py")
        with open(path, "w") as fh:
            fh.write(code)

        # the sandbox's clean environment: an inherited one can make start-up do more (a .pth
        # file that reads variables, say), which is not what is being compared
        env = dict(sandbox._clean_env(), HOME=d, TMPDIR=d)

        def one(_: int) -> bool:
            # its own session like the sandbox's runs: with the kernel's autogroup scheduling a
            # session is a scheduling group, and sharing ours would halve its CPU share under load
            res = subprocess.run([python, *FLAGS, path], capture_output=True, timeout=30, cwd=d, env=env,
                                 start_new_session=True)
            return res.returncode == 0

        return _rate(one, n, workers)


def _sandboxed(code: str, n: int, workers: int) -> float:
    cfg = sandbox.SandboxLimits(timeout_s=30.0, python_flags=FLAGS)

    def one(_: int) -> bool:
        return sandbox.run_python({"main.py": code}, "main.py", config=cfg).status == "ok"

    return _rate(one, n, workers)


def _rate(one, n: int, workers: int) -> float:
    """Programs per second: ``one(i)`` for ``i < n``, ``workers`` at a time; every run must succeed."""
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        ok = list(ex.map(one, range(n)))
    elapsed = time.perf_counter() - t
    assert all(ok)
    return n / elapsed


def _reward_through_engine(n: int) -> float:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "plugins", "rewardhub-code", "tests"))
    from code_tasks import TASKS
    from code_tasks import fenced

    from rewardhub.execution import Runner

    samples = [{"response": fenced(good), "ground_truth": gt} for name, gt, good, _ in TASKS
               if not name.endswith("_io")]
    samples = (samples * (n // len(samples) + 1))[:n]
    cfg = {"rewards": [{"name": "code_tests", "executor": "process", "max_concurrency": 2}]}
    with Runner.from_config(cfg, process_workers=2) as runner:
        runner.score(samples[:2])
        t = time.perf_counter()
        res = runner.score(samples)
        elapsed = time.perf_counter() - t
    assert res.scores == [1.0] * n, res.errors
    return n / elapsed


def main(n_trivial: int = 40, n_long: int = 4, workers: int = 2) -> None:
    rounds_of = {"trivial programs": 3, "1 s CPU programs": 2}
    report = sandbox.isolation_report()
    print(f"sandbox mode {report['mode']!r}; enforced: "
          f"{', '.join(k for k, v in report['enforced'].items() if v)}")
    missing = [k for k, v in report["enforced"].items() if not v]
    if missing:
        print(f"not enforced here: {', '.join(missing)}")
    sandbox.run_python({"main.py": TRIVIAL}, "main.py")  # probes and caches warm
    for name, code, n in (("trivial programs", TRIVIAL, n_trivial), ("1 s CPU programs", ONE_SECOND, n_long)):
        rounds = [(_plain(code, n, workers), _sandboxed(code, n, workers)) for _ in range(rounds_of[name])]
        base = statistics.median(r[0] for r in rounds)
        boxed = statistics.median(r[1] for r in rounds)
        print(f"{name}: sandbox {boxed:.2f} programs/s vs subprocess.run {base:.2f} programs/s "
              f"({workers} at a time) -> throughput ratio {boxed / base:.2f}x, "
              f"overhead {1000 * (1 / boxed - 1 / base) * workers:.0f} ms per program")
    # one at a time, alternating program by program, so that load drifting on a shared machine
    # hits both sides alike
    pairs = [(_latency(_plain, TRIVIAL), _latency(_sandboxed, TRIVIAL)) for _ in range(30)]
    lat_plain = statistics.median(p[0] for p in pairs)
    lat_box = statistics.median(p[1] for p in pairs)
    print(f"latency of one trivial program, alternating: sandbox {1000 * lat_box:.1f} ms vs subprocess.run "
          f"{1000 * lat_plain:.1f} ms -> ratio {lat_box / lat_plain:.2f}x")
    rate = _reward_through_engine(40)
    print(f"code_tests reward via process executor (2 workers, assert-style tasks): {rate:.2f} samples/s")


if __name__ == "__main__":
    main()
