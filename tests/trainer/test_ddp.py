"""Data-parallel learners (trainer.num_learners): two gloo ranks compute what one process computes.

The two-rank numerics run in two fresh Python processes (``torch.distributed`` is per process);
the run test starts rank 0 as the learner actor and its second rank as an actor of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from rewardhub_trainer.config import ModelConfig

if TYPE_CHECKING:
    import torch

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
#: fp32 on the CPU: the ranks pad their micro-batches differently from the single process, which
#: changes the matmul shapes and so the rounding, nothing else (the losses, metrics and gradients)
RTOL, ATOL = 1e-4, 1e-6
#: fp32's machine epsilon (one unit in the last place of 1.0)
FP32_EPS = 2.0**-23

WORKER = """
import sys
sys.path.insert(0, {here!r})
import torch
from test_ddp import measure
from rewardhub_trainer.ddp import Group, split_groups
job = torch.load(sys.argv[1], weights_only=False)
rank = int(sys.argv[2])
group = Group("127.0.0.1", job["port"], rank, 2, timeout_s=120)
out = dict()
for case, (groups, modes, kl_coef) in job["cases"].items():
    out[case] = measure(job["path"], split_groups(groups, 2)[rank], group, modes, kl_coef)
torch.save(out, sys.argv[3])
"""


def measure(path: str, samples: list, group=None, modes=MODES, kl_coef: float = 0.0) -> dict:
    """Per loss mode: the loss, the gradients and the weights after one step (fp32, on the CPU).

    With ``kl_coef``, every rank moves its policy away from the reference by the same seeded noise
    (so that the KL term and its gradient are not zero)."""
    import torch

    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings

    torch.set_num_threads(1)
    out = {}
    for mode in modes:
        # micro-batches of 2: the ranks run different numbers of them; the bonus makes entropy count
        settings = LearnerSettings(lr=1e-2, micro_batch_size=2, loss_agg_mode=mode, entropy_coeff=0.01,
                                   max_grad_norm=1e9, kl_coef=kl_coef)
        learner = GRPOLearner(path, settings, group=group)
        if kl_coef:
            gen = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for p in learner.model.parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=gen))
        learner.optimizer.zero_grad(set_to_none=True)
        assert learner.gradients(samples)
        grads = {n: p.grad.detach().clone() for n, p in learner.model.named_parameters()}
        stats = learner.train_step(samples)
        adam = learner.optimizer.param_groups[0]
        # the parameters (tied weights once), not the state dict: the step's bound needs each one's gradient
        out[mode] = {"grads": grads, "stats": stats, "version": learner.version,
                     "lr": adam["lr"], "eps": adam["eps"], "weight_decay": adam["weight_decay"],
                     "weights": {n: p.detach().clone() for n, p in learner.model.named_parameters()}}
    return out


@pytest.fixture(scope="module")
def tiny_path(model_cache):
    from rewardhub_trainer.models import materialize

    return materialize(ModelConfig(tiny={"arch": "qwen2", "seed": 3}))


def _groups(path: str) -> list[list]:
    """Three groups of two responses, of unequal lengths, with log-probs off the policy's (ratios != 1)."""
    import torch

    from rewardhub_trainer.learner import GRPOLearner
    from rewardhub_trainer.learner import LearnerSettings
    from rewardhub_trainer.learner import TrainSample
    from rewardhub_trainer.learner import response_logprobs

    lengths = [(7, 9), (2, 3), (1, 1)]  # split by whole groups: rank 0 gets 16 tokens, rank 1 gets 7
    advantages = [(1.0, -1.0), (0.7, -0.7), (-1.2, 1.2)]
    gen = torch.Generator().manual_seed(0)
    groups = []
    for g, (lens, advs) in enumerate(zip(lengths, advantages)):
        group = []
        for k, (n, a) in enumerate(zip(lens, advs)):
            prompt = [40 + g, 41 + k, 42][: 2 + (g + k) % 2]  # prompts of 2 or 3 tokens
            response = torch.randint(50, 200, (n,), generator=gen).tolist()
            group.append(TrainSample(prompt, response, [], a))
        groups.append(group)
    learner = GRPOLearner(path, LearnerSettings())
    flat = [s for g in groups for s in g]
    with torch.no_grad():
        lp, _ = response_logprobs(learner.model, flat, 1.0)
    for i, s in enumerate(flat):
        noise = 0.3 * torch.randn(len(s.response_ids), generator=gen)
        s.old_logprobs = (lp[i, : len(s.response_ids)] + noise).tolist()
    return groups


@pytest.mark.timeout(300)
def test_two_gloo_ranks_give_the_loss_gradients_and_step_of_one_process(tiny_path, tmp_path):
    import torch

    from rewardhub_trainer.ddp import rendezvous
    from rewardhub_trainer.ddp import split_groups

    groups = _groups(tiny_path)
    shares = split_groups(groups, 2)
    tokens = [sum(len(s.response_ids) for s in share) for share in shares]
    # whole groups; unequal sequences and tokens; rank 1 runs two micro-batches, rank 0 one
    assert [len(s) for s in shares] == [2, 4] and tokens == [16, 7]
    job = tmp_path / "job.pt"
    # and a batch of one group: rank 0 gets nothing, and still takes part in every collective;
    # and KL on with the entropy bonus: both terms aggregated by the mode, whatever the split
    cases = {"three": (groups, MODES, 0.0), "one": (groups[:1], MODES[:1], 0.0), "kl": (groups, MODES, 0.5)}
    torch.save({"path": tiny_path, "cases": cases, "port": rendezvous()[1]}, job)
    script = WORKER.format(here=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script, str(job), str(r), str(tmp_path / f"rank{r}.pt")],
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    runs = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for case, (batch, modes, kl_coef) in cases.items():
        _compare(
            measure(tiny_path, [s for g in batch for s in g], None, modes, kl_coef), [r[case] for r in runs]
        )
        if kl_coef:
            assert all(runs[0][case][m]["stats"]["kl"] > 1e-4 for m in modes)


def _compare(one: dict, ranks: list[dict]) -> None:
    import torch

    for mode, want in one.items():
        for got in (r[mode] for r in ranks):
            for key in (
                "loss/policy",
                "loss/total",
                "entropy",
                "kl",
                "clip_frac",
                "clip_frac/dual",
                "ratio/mean",
                "grad_norm",
                "response_len/mean",
            ):
                assert got["stats"][key] == pytest.approx(want["stats"][key], rel=RTOL, abs=ATOL), (mode, key)
            assert got["version"] == want["version"] == 1
            for name, grad in want["grads"].items():
                torch.testing.assert_close(got["grads"][name], grad, rtol=RTOL, atol=ATOL)
            assert want["weight_decay"] == 0.0 and got["lr"] == want["lr"] and got["eps"] == want["eps"]
            for name, weight in want["weights"].items():
                assert_first_adam_steps_close(got["weights"][name], weight, got["grads"][name],
                                              want["grads"][name], want["lr"], want["eps"], name)
        # the ranks end bit-for-bit equal: they applied the same reduced gradient
        for name, weight in ranks[0][mode]["weights"].items():
            assert torch.equal(weight, ranks[1][mode]["weights"][name]), name
        assert want["stats"]["loss/policy"] != 0.0 and want["stats"]["clip_frac"] > 0.0
        assert any(float(g.abs().max()) > 0 for g in want["grads"].values())


def adam_step_bound(weight: torch.Tensor, g1: torch.Tensor, g2: torch.Tensor, lr: float,
                    eps: float) -> torch.Tensor:
    """How far apart two first Adam(W) steps (no weight decay) from the same ``weight`` may land when
    their gradients are ``g1`` and ``g2``, element by element.

    On the first step Adam's moments are ``m = (1 - b1) g`` and ``v = (1 - b2) g**2``; their bias
    corrections divide those factors out, so the update is ``u(g) = lr * g / (|g| + eps)`` whatever the
    betas: about ``lr * sign(g)``. Its slope is ``u'(g) = lr * eps / (|g| + eps)**2``: flat where
    ``|g| >> eps``, and as steep as ``lr / eps`` (1e6 at lr 1e-2) at ``g = 0``. So two gradients that
    agree to fp32 rounding but lie within a few ``eps`` of zero (1e-11 apart, say) give updates up to
    1e-11 x 1e6 = 1e-5 apart: the 1.5e-5 an AVX2 CPU showed, with the gradients well within 1e-6.

    * same sign: by the mean value theorem ``|u(g1) - u(g2)| <= |g1 - g2| * lr * eps / (m + eps)**2``,
      ``m = min(|g1|, |g2|)`` (the slope is largest at the smaller magnitude);
    * opposite signs (or a zero): the slope is at most ``lr / eps`` on the way, and ``|u| < lr``, so
      ``|u(g1) - u(g2)| <= lr * min(2, |g1 - g2| / eps)``;
    * plus fp32 rounding: the update is a handful of fp32 operations (a relative error of a few
      ``FP32_EPS`` each, on a value below ``lr``: ``8 * FP32_EPS * lr`` covers them) and ``w - u`` is
      rounded to half an ulp of the result on each side (``FP32_EPS * (|w| + lr)``).
    """
    import torch

    diff = (g1.double() - g2.double()).abs()
    same_sign = torch.sign(g1) * torch.sign(g2) > 0
    smaller = torch.minimum(g1.double().abs(), g2.double().abs())
    analytic = torch.where(same_sign, diff * lr * eps / (smaller + eps) ** 2,
                           lr * torch.clamp(diff / eps, max=2.0))
    return analytic + 8 * FP32_EPS * lr + FP32_EPS * (weight.double().abs() + lr)


def assert_first_adam_steps_close(got: torch.Tensor, want: torch.Tensor, got_grad: torch.Tensor,
                                  want_grad: torch.Tensor, lr: float, eps: float, name: str = "") -> None:
    """``got`` and ``want`` (weights after one Adam step each) are within :func:`adam_step_bound` of their
    gradients."""
    bound = adam_step_bound(want, got_grad, want_grad, lr, eps)
    excess = (got.double() - want.double()).abs() - bound
    worst = int(excess.argmax())
    assert float(excess.max()) <= 0.0, (
        f"{name}: element {worst} differs by {float((got - want).abs().flatten()[worst]):.3g}, over its "
        f"bound {float(bound.flatten()[worst]):.3g} (gradients {float(got_grad.flatten()[worst]):.3g} and "
        f"{float(want_grad.flatten()[worst]):.3g})")


def _adam_step(weight: torch.Tensor, grad: torch.Tensor, lr: float) -> tuple[torch.Tensor, float]:
    import torch

    p = torch.nn.Parameter(weight.clone())
    opt = torch.optim.AdamW([p], lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    p.grad = grad.clone()
    opt.step()
    return p.detach(), opt.param_groups[0]["eps"]


def test_the_adam_step_bound_admits_rounding_near_a_zero_gradient_and_nothing_else():
    """The bound the two-rank test uses, on real AdamW steps: gradients that differ by fp32 rounding
    near zero move the weights apart by far more than 1e-6 (the bound admits it); a weight off by
    1e-5 where the gradient is large, or stepped the other way, is caught."""
    import torch

    lr = 1e-2
    weight = torch.full((4,), 0.084)
    g1 = torch.tensor([3e-9, -2e-8, 0.5, 1e-3])
    g2 = g1 + torch.tensor([2e-9, 3e-10, 3e-8, 0.0])  # within the rtol/atol the gradients are held to
    torch.testing.assert_close(g1, g2, rtol=RTOL, atol=ATOL)
    w1, eps = _adam_step(weight, g1, lr)
    w2, _ = _adam_step(weight, g2, lr)
    assert float((w1 - w2).abs().max()) > 1e-4  # what atol 1e-6 refused on an AVX2 CPU, and more
    assert_first_adam_steps_close(w1, w2, g1, g2, lr, eps)
    off = w2.clone()
    off[2] += 1e-5  # a gradient of 0.5: the update is lr to fp32 rounding, so 1e-5 is a wrong step
    with pytest.raises(AssertionError, match="element 2 differs"):
        assert_first_adam_steps_close(w1, off, g1, g2, lr, eps)
    flipped = g2.clone()
    flipped[3] = -1e-3  # the same magnitude, the other sign: the weights are 2 lr apart
    w3, _ = _adam_step(weight, flipped, lr)
    with pytest.raises(AssertionError, match="element 3 differs"):
        assert_first_adam_steps_close(w1, w3, g1, g2, lr, eps)


def test_split_keeps_groups_whole_and_is_deterministic():
    from rewardhub_trainer.ddp import split_groups

    groups = [[f"g{i}s{j}" for j in range(2)] for i in range(5)]
    assert split_groups(groups, 2) == [["g0s0", "g0s1", "g1s0", "g1s1"],
                                       ["g2s0", "g2s1", "g3s0", "g3s1", "g4s0", "g4s1"]]
    assert split_groups(groups[:1], 2) == [[], ["g0s0", "g0s1"]]  # fewer groups than ranks: one gets none
    assert split_groups(groups, 1) == [[s for g in groups for s in g]]


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_a_run_with_two_learners_finishes_with_exact_accounting(ray_session, tiny_config, tmp_path):
    from rewardhub_trainer.cli import train

    out = tmp_path / "run"
    summary = train(tiny_config(trainer={"mode": "sync", "total_steps": 3, "num_learners": 2,
                                         "checkpoint_every": 2}), output=str(out))
    assert summary["steps"] == 3 and summary["samples_trained"] == 3 * 8
    assert summary["accounting_exact"] is True
    assert summary["samples_generated"] == summary["samples_trained"] + summary["samples_unused_at_end"]
    learners = [w for w in summary["workers"] if w["role"] == "learner"]
    assert [w["rank"] for w in learners] == [0, 1]
    assert len({w["pid"] for w in learners}) == 2 and summary["driver_pid"] not in {
        w["pid"] for w in learners
    }
    for w in learners:
        assert w["device"] == "cpu" and w["dtype"].startswith("float32") and w["gpu_ids"] == [] and w["node"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["policy_version"] for r in rows] == [0, 1, 2]
    assert (out / "checkpoints" / "step_000003" / "model.safetensors").exists()


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_a_learner_rank_that_dies_restarts_the_group_from_the_latest_checkpoint(
    ray_session, tiny_config, tmp_path
):
    import os
    import signal

    from rewardhub_trainer.cli import train

    killed: list[int] = []

    def kill_rank_1(step, metrics, run):
        if step == 3 and not killed:  # the latest checkpoint is step 2
            pid = next(w["pid"] for w in run.fleet.workers if w["role"] == "learner" and w["rank"] == 1)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    out = tmp_path / "o"
    summary = train(tiny_config(trainer={"mode": "sync", "total_steps": 4, "num_learners": 2,
                                         "checkpoint_every": 2}), output=str(out), callbacks=[kill_rank_1])
    assert len(killed) == 1 and summary["steps"] == 4
    assert summary["restarts"]["learner"] == 1
    [restore] = summary["learner_restores"]
    assert (
        restore["at_step"] == 3 and restore["to_step"] == 2 and restore["checkpoint"].endswith("step_000002")
    )
    # lost: step 3's batch (trained after the checkpoint), and batch 4, generated with rank 0 still
    # alive and lost when its training found rank 1 gone
    assert summary["samples_lost_on_restart"] == 16 and summary["samples_generated"] == 6 * 8
    assert summary["accounting_exact"] is True
    learners = [w for w in summary["workers"] if w["role"] == "learner"]
    assert [w["rank"] for w in learners] == [0, 1] and killed[0] not in {w["pid"] for w in learners}
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["batch_index"] for r in rows] == list(range(4))
    assert [r["policy_version"] for r in rows] == [0, 1, 2, 3]


def test_each_learner_rank_gets_a_bundle_and_the_count_is_checked():
    from rewardhub.errors import UsageError
    from rewardhub_trainer.config import parse_config
    from rewardhub_trainer.placement import bundles
    from rewardhub_trainer.placement import parse_resources
    from rewardhub_trainer.placement import plan
    from rewardhub_trainer.placement_doctor import doctor_lines

    res = parse_resources({"learner": {"num_gpus": 1}, "rollouter": {"num_gpus": 1}, "placement": "spread"})
    items = bundles(res, 1, num_learners=2)
    assert [b.name for b in items] == ["learner 0", "learner 1", "rollouter 0"]
    nodes = [{"NodeID": c * 40, "Alive": True, "Resources": {"CPU": 4.0, "GPU": 2.0}} for c in "ab"]
    assert plan(items, nodes, "spread") == ["a" * 40, "b" * 40, "a" * 40]
    with pytest.raises(UsageError, match=r"(?s)4 GPU asked in all, the cluster has 2.*trainer.num_learners"):
        plan(bundles(res, 1, num_learners=3), nodes[:1], "pack")
    cfg = {"model": {"tiny": {"arch": "qwen2"}}, "reward": {"rewards": [{"name": "exact_match"}]},
           "trainer": {"num_learners": 2}, "resources": {"learner": {"num_cpus": 1}}}
    lines = doctor_lines(cfg, [{"node_id": "a" * 40, "ip": "10.0.0.1", "resources": {"CPU": 4.0}}])
    assert any(line.strip().startswith("learner 1: CPU=1") for line in lines), lines
    assert parse_config(cfg).trainer.num_learners == 2
    cfg["trainer"] = {"num_learners": 0}
    with pytest.raises(UsageError, match=r"trainer.num_learners=0 is not valid\nallowed: a value >= 1"):
        parse_config(cfg)
