"""One weight sync, learner actor -> rollouter actor, as a dict of torch tensors vs packed numpy arrays.

    python bench/bench_weight_sync.py [--repeats 5]

SmolLM2-135M-Instruct (converted once into ~/.cache/rewardhub, as `make demo` does): the learner
holds fp32 weights, the rollouter a bf16 copy (the dtype it takes where the CPU has native bf16).
Each sync is the learner's ``state_dict`` returned through Ray and loaded into the rollouter's
model, timed from the driver; median of ``--repeats`` after one warm-up each. Prints the ratio
(packed / tensors: lower is better).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import torch

    from rewardhub_trainer.config import ModelConfig
    from rewardhub_trainer.models import materialize
    from rewardhub_trainer.weights import pack
    from rewardhub_trainer.weights import unpack

    path = materialize(ModelConfig(builtin="smollm2-135m"))

    @ray.remote(num_cpus=0)
    class Learner:
        def __init__(self) -> None:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)

        def state(self, copy: bool = True) -> dict:  # as GRPOLearner.state_dict
            return {k: v.detach().to("cpu", copy=copy) for k, v in self.model.state_dict().items()
                    if not k.endswith("lm_head.weight")}

        def packed(self) -> object:  # as Learner.get_weights: Ray's copy is the only one
            return pack(self.state(copy=False))

    @ray.remote(num_cpus=0)
    class Rollouter:
        def __init__(self) -> None:
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)

        def load(self, weights: object) -> int:
            with torch.no_grad():
                self.model.load_state_dict(unpack(weights), strict=False)
            return 0

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        learner, rollouter = Learner.remote(), Rollouter.remote()
        size = sum(v.numel() * v.element_size() for v in ray.get(learner.state.remote()).values())
        times: dict[str, list[float]] = {"tensors": [], "packed": []}
        for _ in range(args.repeats + 1):  # alternate, so that load from elsewhere hits both alike
            for name, method in (("tensors", learner.state), ("packed", learner.packed)):
                t0 = time.perf_counter()
                ray.get(rollouter.load.remote(method.remote()))
                times[name].append(time.perf_counter() - t0)
        tensors, packed = (statistics.median(times[k][1:]) for k in ("tensors", "packed"))
        print(
            f"weight sync of {size / 2**20:.0f} MiB (fp32 learner -> bf16 rollouter), median of "
            f"{args.repeats}: "
            f"tensors {tensors:.3f}s, packed arrays {packed:.3f}s -> ratio {packed / tensors:.2f}x "
            f"({tensors / packed:.1f}x faster); load average {os.getloadavg()[0]:.1f}"
        )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
