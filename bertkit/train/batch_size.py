"""`train.batch_size = "auto"`: the micro-batch a pretraining run takes, chosen by measured memory on a GPU.

On a GPU, throughput grows with the tokens a step holds long after the batch a CPU recipe uses: BERT-base in bf16 on
an H200, compiled, measured MFU 27% at 128 rows of 128 tokens, 34% at 256 and 38% at 512 (docs/results.md), because
at small batches the step is bound by the host's kernel launches. So on CUDA `auto` measures what a row costs: two
probe steps (forward on 15% of the tokens through the MLM head and the loss, backward; eager) at PROBE_ROWS and
twice that, after one that pays the one-off allocations, and the peak memory of each above the weights; the
difference is one row's activations, the rest is fixed (gradients, the head). With AdamW's two moments added, the
largest power of two of rows that fits in FREE_SHARE of the free memory is taken, up to MAX_TOKENS a step (the
largest measured; beyond it the gain was not measured). Every process measures its own device and the smallest
answer is everyone's. The probes measure the whole model on each process: under FSDP they
over-count (safe), and a model that fits only sharded may not fit them (give a number then).

Elsewhere (a CPU, whose tokens/s does not grow with the batch the way a GPU's does) `auto` is CPU_ROWS, the
dataclass default. The chosen number replaces "auto" in the run's config.json, so a resume takes the same batch.
The batch is also the optimisation's: a larger one may want a larger learning rate and more warm-up steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from bertkit.config import Config
from bertkit.errors import BertkitError, ConfigError
from bertkit.hardware import autocast
from bertkit.nn.model import Model

PROBE_ROWS = 8  # the first probe's rows; the second takes twice as many
FREE_SHARE = 0.85  # of the device's free memory (the allocator's fragmentation, evaluation, compile workspaces)
MAX_TOKENS = 65_536  # per micro-step: 512 rows of 128 tokens, the largest batch measured (MFU 38% on an H200)
CPU_ROWS = 32
_ADAM_BYTES = 8  # AdamW's exp_avg and exp_avg_sq, fp32, per parameter (allocated at the first update)


@dataclass(frozen=True)
class Fit:
    """What `auto` chose and why (`fit_rows`' answer)."""

    rows: int
    per_row: float  # bytes of activations one row adds (measured)
    fixed: float  # bytes the step needs whatever the batch (gradients, AdamW moments; the weights are out of `free`)
    free: float  # bytes free on the device before the run
    largest: int  # rows that would fit (before the power of two and the token cap)
    capped: bool  # MAX_TOKENS, not memory, set the batch


def fit_rows(peaks: tuple[float, float], probe_rows: int, params: int, free: float, block_size: int,
             even: bool = False) -> Fit:
    """The rows to take from two probe peaks (bytes at `probe_rows` and at twice that), the parameter count, the
    free bytes and the block length: the largest power of two that fits, capped at MAX_TOKENS a step (at least 2
    when `even`: a contrastive run's rows come in pairs)."""
    per_row = max((peaks[1] - peaks[0]) / probe_rows, 1.0)
    fixed = peaks[0] - probe_rows * per_row + _ADAM_BYTES * params
    largest = int((FREE_SHARE * free - fixed) // per_row)
    if largest < (2 if even else 1):
        raise BertkitError(f"train.batch_size auto: not even {2 if even else 1} row(s) of {block_size} tokens fit "
                           f"({per_row / 2**20:,.0f} MiB a row, {fixed / 2**30:,.1f} GiB fixed, {free / 2**30:,.1f} "
                           "GiB free); make the model or data.block_size smaller")
    cap = max(1, MAX_TOKENS // block_size)
    rows = 1 << (min(largest, cap).bit_length() - 1)  # the largest power of two <= both
    return Fit(max(rows, 2) if even else rows, per_row, fixed, free, largest, cap < largest)


def probe_peaks(model: Model, block_size: int, precision: str, device: torch.device,
                rows: int = PROBE_ROWS) -> tuple[float, float]:
    """Peak bytes above the model's own of one MLM training forward and backward at `rows` and 2 × `rows` random
    rows of `block_size` tokens (15% of them through the head and the loss, as the objective selects them), after
    one unmeasured step that pays the one-off allocations (cuBLAS workspaces, the caching allocator's first blocks)."""
    peaks = []
    vocab = model.config.vocab_size
    for n in (rows, rows, 2 * rows):  # the first is the warm-up
        model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        ids = torch.randint(vocab, (n, block_size), device=device)
        positions = torch.randperm(n * block_size, device=device)[: max(1, n * block_size * 15 // 100)]
        with autocast(device, precision):
            logits = model(ids, mlm_select=positions).logits  # (N, V)
        F.cross_entropy(logits.float(), ids.reshape(-1)[positions], reduction="sum").backward()
        peaks.append(float(torch.cuda.max_memory_allocated(device) - before))
        del ids, positions, logits
    model.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()
    return peaks[1], peaks[2]


def resolve_batch_size(config: Config, device: torch.device, precision: str, say: Callable[[str], None],
                       agree: Callable[[int], int] = lambda rows: rows) -> int:
    """The rows `train.batch_size = "auto"` stands for on `device` (see the module docstring); `say` gets one line
    saying what was chosen and why; `agree` makes the processes' answers one (the smallest; 0 from a process that
    could not measure or fit a row, so that every process stops alike instead of waiting for it)."""
    even = config.train.contrastive_weight > 0
    block = config.data.block_size
    if device.type != "cuda":
        say(f"train.batch_size auto: {CPU_ROWS} rows (on a {device.type.upper()}: a GPU's is measured from its "
            "memory)")
        return CPU_ROWS
    if config.train.objective != "mlm":
        raise BertkitError(f"train.batch_size auto: measured for the mlm objective, not {config.train.objective!r}; "
                           "give a number")
    failure, fit = None, None
    try:
        fit = _measure(config, device, precision, even)
    except (BertkitError, torch.cuda.OutOfMemoryError) as exc:
        failure = exc
    rows = agree(0 if fit is None else fit.rows)
    if rows == 0:
        if isinstance(failure, BertkitError):
            raise failure
        raise BertkitError("train.batch_size auto: " + ("the probe step ran out of GPU memory at "
                                                        f"{2 * PROBE_ROWS} rows of {block} tokens; give a number"
                                                        if failure is not None else "another process could not fit "
                                                        "a row (its error says why); give a number"))
    why = f"capped at {MAX_TOKENS:,} tokens a step" if fit.capped else f"{fit.largest:,} rows would fit"
    say(f"train.batch_size auto: {rows} rows of {block} tokens ({rows * block:,} a step; measured "
        f"{fit.per_row / 2**20:,.1f} MiB a row and {fit.fixed / 2**30:,.1f} GiB fixed against "
        f"{fit.free / 2**30:,.1f} GiB free: {why})")
    return rows


def _measure(config: Config, device: torch.device, precision: str, even: bool) -> Fit:
    """Build the run's model on `device`, probe it and fit the rows, leaving the random streams as they were (the
    run's weights are then the same as with the number given) and the device's memory as it found it."""
    with torch.random.fork_rng(devices=[device]):
        model = Model(config.model, config.heads).to(device).train()
        try:
            params = sum(p.numel() for p in model.parameters())
            peaks = probe_peaks(model, config.data.block_size, precision, device)
            free = float(torch.cuda.mem_get_info(device)[0])  # the model still allocated: the run's weights too
        finally:
            del model
            torch.cuda.empty_cache()
    return fit_rows(peaks, PROBE_ROWS, params, free, config.data.block_size, even)


def require_number(config: Config, job: str) -> None:
    """Refuse `train.batch_size = "auto"` in a job that does not size batches by memory (finetuning: its batch is
    part of the recipe's learning-rate choice, and its rows differ in length)."""
    if config.train.batch_size == "auto":
        raise ConfigError(f"train.batch_size: auto sizes pretraining batches only; {job} takes a number (its "
                          "recipe's, or --set train.batch_size=N)")
