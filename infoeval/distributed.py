"""Data parallelism through torch.distributed: one model replica per rank, the windows' batches split across ranks,
the per-position columns gathered so that every rank holds the whole run.

infoeval runs data-parallel when a launcher starts it with ``WORLD_SIZE`` > 1 (``torchrun``, ``accelerate launch``;
both set RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT). Then

    rank r evaluates batches r, r + W, r + 2W, …        (``shard``: deterministic, no scheduler)
    columns  = all ranks' rows, gathered on every rank   (``gather``: each batch's rows, bit for bit)
    rank 0   writes the outputs and prints; the others print only errors

A batch is evaluated exactly as in one process (same inputs, same shapes), so the columns do not depend on the
number of ranks when every rank uses the thread count of the single process (bit for bit), and agree within
float32 rounding otherwise (a matmul's blocking depends on the thread count). Backends: gloo for CPU tensors,
NCCL for CUDA ones; each rank computes on ``cuda:LOCAL_RANK``, or on its own group of GPUs with ``--device-map``
(``replica_gpus``). A rank that fails while evaluating tells the others at the gather, so every rank exits
non-zero with the same one-line reason; a rank that dies outright is stopped by the launcher with the rest.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from infoeval.errors import RankFailure, RuntimeFailure

if TYPE_CHECKING:
    import torch


@dataclass
class Group:
    """This process's place among the ranks, and how much the gathers moved."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    backend: str | None = None
    gathered_bytes: int = 0
    gathered_rows: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def to_json(self) -> dict:
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "gathered_bytes": self.gathered_bytes,
            "gathered_rows": self.gathered_rows,
        }


_GROUP: Group | None = None


def launched() -> bool:
    """True under a launcher that started more than one process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def group() -> Group:
    """This process's group; the process group is initialised on first use under a launcher (gloo, plus NCCL for
    CUDA tensors when CUDA is available)."""
    global _GROUP
    if _GROUP is not None:
        return _GROUP
    if not launched():
        _GROUP = Group()
        return _GROUP
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    local_rank = _env_int("LOCAL_RANK", 0)
    if cuda:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
    if not dist.is_initialized():
        timeout = timedelta(seconds=_env_int("INFOEVAL_DIST_TIMEOUT", 1800))
        dist.init_process_group(backend=backend, timeout=timeout)
    _GROUP = Group(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        local_world_size=_env_int("LOCAL_WORLD_SIZE", 1),
        backend=backend,
    )
    return _GROUP


def close() -> None:
    """Leave the process group (if one was started), as torch asks before a process exits."""
    global _GROUP
    if _GROUP is not None and _GROUP.world_size > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    _GROUP = None


def is_main() -> bool:
    """Whether this process writes outputs and prints (rank 0, or no launcher). Never initialises anything."""
    return not launched() or _env_int("RANK", 0) == 0


def shard(items: list) -> list:
    """This rank's share: items r, r + W, r + 2W, …"""
    g = group()
    return list(items)[g.rank :: g.world_size]


def share(total: int) -> int:
    """How many of ``total`` round-robin units rank 0 gets (for its progress bar)."""
    w = group().world_size if launched() else 1
    return -(-total // w)


def gather(payload: list, error: BaseException | None, rows: int = 0, counted: bool = True) -> list[list]:
    """Every rank's ``payload`` (a list of picklable items), in rank order, on every rank. When any rank reports an
    ``error``, every rank raises the same RuntimeFailure naming the first failing rank. ``rows``: how many
    per-position rows the gather completes (counted, with the bytes rank 0 received, for the provenance, unless
    ``counted`` is False: what is not columns)."""
    import torch.distributed as dist

    g = group()
    mine = (None if error is None else f"{type(error).__name__}: {error}", payload if error is None else [])
    everyone: list = [None] * g.world_size
    dist.all_gather_object(everyone, mine)
    failed = [(r, msg) for r, (msg, _) in enumerate(everyone) if msg is not None]
    if failed:
        r, msg = failed[0]
        raise RankFailure(f"rank {r} of {g.world_size} failed: {msg}")
    if g.main and counted:
        g.gathered_bytes += sum(len(pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL)) for e in everyone[1:])
        g.gathered_rows += rows
    return [p for _, p in everyone]


def local_device(device: torch.device) -> torch.device:
    """Under a launcher, a plain ``cuda`` becomes this rank's ``cuda:LOCAL_RANK``; anything else is kept."""
    import torch

    if launched() and device.type == "cuda" and device.index is None:
        return torch.device("cuda", _env_int("LOCAL_RANK", 0) % max(1, torch.cuda.device_count()))
    return device


def replica_gpus(n_gpus: int, local_rank: int, local_world_size: int) -> list[int]:
    """The GPUs of one replica when each of ``local_world_size`` ranks on a node holds the model across its own
    group of GPUs (``--device-map`` under a launcher): consecutive groups of ⌊n / ranks⌋.

    >>> [replica_gpus(8, r, 2) for r in range(2)]
    [[0, 1, 2, 3], [4, 5, 6, 7]]
    """
    per = n_gpus // max(1, local_world_size)
    if per < 1:
        raise RuntimeFailure(
            f"{local_world_size} ranks on this node but only {n_gpus} GPUs: one replica needs at least one"
        )
    return list(range(local_rank * per, (local_rank + 1) * per))


def replica_max_memory() -> dict | None:
    """accelerate's ``max_memory`` limiting ``device_map`` to this rank's GPUs under a launcher (None otherwise)."""
    import torch

    if not launched() or not torch.cuda.is_available():
        return None
    gpus = replica_gpus(torch.cuda.device_count(), _env_int("LOCAL_RANK", 0), _env_int("LOCAL_WORLD_SIZE", 1))
    return {i: torch.cuda.get_device_properties(i).total_memory for i in gpus}
