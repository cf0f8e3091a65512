"""Cross-process in-batch negatives: two gloo processes holding half of a global batch each compute the same MNRL
loss and the same gradients as one process holding all of it (the loop's scaling: sum x world / global rows, DDP
averaging); without the gather they do not (each process ranks against its own half only)."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from conftest import free_port, heads, tiny

from bertkit.config import TrainConfig
from bertkit.nn.distributed import gather_rows, world
from bertkit.nn.model import Model
from bertkit.tasks.sentence import SentenceObjective
from bertkit.text.features import Encoded

ROWS, SIDES = 8, 3  # a global batch of 8 (anchor, positive, hard negative) rows


def _objective(world_size: int, cross_process: bool) -> SentenceObjective:
    g = torch.Generator().manual_seed(3)
    sides = [[Encoded(torch.randint(5, 101, (int(n),), generator=g).tolist(), [0] * int(n))
              for n in torch.randint(3, 9, (ROWS,), generator=g)] for _ in range(SIDES)]
    train = TrainConfig(batch_size=ROWS // world_size, seed=0)
    return SentenceObjective("mnrl", sides, None, [], None, "mean", 20.0, 0, train, world_size,
                             cross_process=cross_process)


def _step(model: torch.nn.Module, objective: SentenceObjective, rank: int, world_size: int):
    """One optimiser step's loss sum and gradients, exactly as the loop computes them."""
    batch = objective.batch(0)
    micro_rows = ROWS // world_size
    micro = {k: v[rank * micro_rows:(rank + 1) * micro_rows] for k, v in batch.items()}
    loss_sum, stats = objective.loss(model, micro)
    (loss_sum * (world_size / objective.normalizer(batch))).backward()
    return loss_sum.detach(), stats["accuracy"].float()


def _measure(rank: int, world_size: int, cross_process: bool, out: str) -> None:
    torch.manual_seed(0)
    model = DistributedDataParallel(Model(tiny(), heads()))
    loss_sum, correct = _step(model, _objective(world_size, cross_process), rank, world_size)
    totals = torch.stack([loss_sum, correct])
    dist.all_reduce(totals)
    if rank == 0:
        torch.save({"totals": totals, "grads": {n: p.grad for n, p in model.module.named_parameters()
                                                if p.grad is not None}}, out)


def _worker(rank: int, world_size: int, port: int, cross_process: bool, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        _measure(rank, world_size, cross_process, out)  # the DDP model is gone before its process group
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _two_processes(tmp_path, cross_process: bool) -> dict:
    out = str(tmp_path / f"two-{cross_process}.pt")
    context = mp.spawn(_worker, args=(2, free_port(), cross_process, out), nprocs=2, join=False)
    deadline = time.monotonic() + 300  # a hung collective fails the test instead of the whole suite
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("the two processes did not finish within 300 s")
    return torch.load(out)


@pytest.fixture(scope="module")
def one_process():
    torch.manual_seed(0)
    model = Model(tiny(), heads())
    loss_sum, correct = _step(model, _objective(1, True), 0, 1)
    return {"totals": torch.stack([loss_sum, correct]),
            "grads": {n: p.grad for n, p in model.named_parameters() if p.grad is not None}}


@pytest.mark.slow
def test_two_processes_with_gathered_negatives_equal_one_holding_the_global_batch(tmp_path, one_process):
    two = _two_processes(tmp_path, cross_process=True)
    torch.testing.assert_close(two["totals"], one_process["totals"], rtol=1e-5, atol=1e-5)
    assert two["grads"].keys() == one_process["grads"].keys() and len(two["grads"]) > 10
    for name, grad in one_process["grads"].items():
        torch.testing.assert_close(two["grads"][name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.slow
def test_without_the_gather_each_process_ranks_its_own_half_only(tmp_path, one_process):
    two = _two_processes(tmp_path, cross_process=False)
    assert two["totals"][0] < one_process["totals"][0] - 1e-3  # 5 candidates per anchor instead of 16: easier


def test_gather_rows_is_the_identity_in_one_process():
    rows = torch.randn(3, 4, requires_grad=True)
    assert world() == (0, 1)
    gathered, start = gather_rows(rows)
    assert gathered is rows and start == 0
