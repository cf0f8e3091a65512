"""Collectives that autograd can differentiate, for losses that need other processes' rows (plain torch.distributed:
whatever launched the processes — torchrun, `accelerate launch` — set up the process group).

`gather_rows` is the cross-process in-batch-negatives primitive (SimCLR's and sentence-transformers' GatherLayer): every
process sees every process's rows, and the gradient of a gathered row returns to the process that computed it, summed
over every process's loss, so N processes holding B rows each compute what one process holding N × B would.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(this process's rank, the number of processes): (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class _GatherRows(torch.autograd.Function):
    """all_gather forward; backward: the gathered gradient summed over processes (all_reduce), this process's slice.
    An all_reduce of the whole gradient (a reduce_scatter would move less; all_reduce is the one collective every
    backend and torch version has)."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor) -> torch.Tensor:
        rank, size = world()
        ctx.rank, ctx.count = rank, rows.shape[0]
        parts = [torch.empty_like(rows) for _ in range(size)]
        dist.all_gather(parts, rows.contiguous())
        return torch.cat(parts)  # (size * N, …), process 0's rows first

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad)  # every process's loss reached every row: sum them
        return grad[ctx.rank * ctx.count:(ctx.rank + 1) * ctx.count]


def gather_rows(rows: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Every process's `rows` (N, …) concatenated in rank order, differentiable, and where this process's rows start.
    Every process must pass the same N. Without a process group (or with one process) it is `rows` itself, at 0."""
    rank, size = world()
    if size == 1:
        return rows, 0
    return _GatherRows.apply(rows), rank * rows.shape[0]
