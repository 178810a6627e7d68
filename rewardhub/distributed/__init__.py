"""Reward workers on Ray: every worker rebuilds the driver's registry from names, and proves it.

Ray is imported only inside this package, and only when a pool starts: importing
``rewardhub.distributed`` is as light as importing ``rewardhub``.
"""

from __future__ import annotations

from .._netprobe import connect_bounded
from .._netprobe import probe_ray_address
from .._specs import reward_facts
from ._data import AnsweredScorer
from ._data import cluster_files
from ._data import scored_batches
from ._doctor import check_cluster
from ._errors import DriverOnlyRewardError
from ._errors import RegistryMismatchError
from ._errors import WorkerFailedError
from ._executor import RayExecutor
from ._executor import RayExecutors
from ._executor import runner_from_config
from ._figures import figure_metrics
from ._fingerprint import diff_items
from ._pool import RewardWorkerPool
from ._ray import ensure_ray
from ._ray import process_location
from ._reward_worker import RewardWorker
from ._settings import PoolSettings
from ._setup import ShippedFile
from ._setup import WorkerSetup
from ._setup import prepare_setup

__all__ = [
    "AnsweredScorer",
    "DriverOnlyRewardError",
    "PoolSettings",
    "RayExecutor",
    "RayExecutors",
    "RegistryMismatchError",
    "RewardWorker",
    "RewardWorkerPool",
    "ShippedFile",
    "WorkerFailedError",
    "WorkerSetup",
    "check_cluster",
    "cluster_files",
    "connect_bounded",
    "diff_items",
    "ensure_ray",
    "figure_metrics",
    "prepare_setup",
    "probe_ray_address",
    "process_location",
    "reward_facts",
    "runner_from_config",
    "scored_batches",
]
