"""ELECTRA's replaced-token detection (`train.objective = "rtd"`) on the packed blocks MLM uses.

Per step: the MLM masks (the same collator, rate and seed stream as `mlm`), the generator's MLM loss on the masked
positions, its seeded samples in their place, and the discriminator's binary loss on every token. The step's loss
is ELECTRA's  mean generator MLM loss + rtd_weight × mean discriminator loss  over the whole global batch: the
loop divides the summed loss by the global number of masked tokens, so each row carries the global batch's masked
share, which turns the summed per-token discriminator loss into that mean.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import DataConfig, TrainConfig
from bertkit.nn.model import Model
from bertkit.tasks.base import PretrainTask
from bertkit.tasks.mlm import MLMObjective
from bertkit.text.collate import IGNORE_INDEX, step_generator
from bertkit.text.packing import Packed
from bertkit.text.tokenizer import SpecialIds

_SAMPLE_STREAM = 2  # the generator's sampling seeds, apart from the masking streams
_EVAL_SEED = 7919  # validation samples use fixed seeds: the discriminator's accuracy is comparable across steps


def _row_seeds(seed: int, step: int, rows: int) -> torch.Tensor:
    """One sampling seed per row of a step's global batch (a micro-batch seeds its sampler with its first row's)."""
    generator = step_generator(seed, step, _SAMPLE_STREAM)
    return torch.randint(0, 2 ** 62, (rows,), generator=generator)


@dataclass
class _Pass:
    """One RTD forward, reduced: the generator's targets (N,), summed MLM loss and correct guesses; the
    discriminator's per-token loss, correct calls and the replaced mask, each (B, T)."""

    targets: torch.Tensor
    gen_sum: torch.Tensor
    gen_correct: torch.Tensor
    disc: torch.Tensor
    detected: torch.Tensor
    replaced: torch.Tensor


def _rtd_pass(model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> _Pass:
    labels = micro["labels"]  # (B, T): the original token where masked, else IGNORE_INDEX
    out = model(micro["input_ids"], rtd_labels=labels, rtd_seed=int(micro["seed"][0]))
    targets = labels[labels != IGNORE_INDEX]  # (N,)
    replaced = out.replaced.float()  # (B, T)
    # ELECTRA sums the discriminator's loss over all (real) tokens; packed blocks have no padding
    disc = F.binary_cross_entropy_with_logits(out.rtd_logits.float(), replaced, reduction="none")  # (B, T)
    return _Pass(targets, F.cross_entropy(out.logits.float(), targets, reduction="sum"),
                 (out.logits.argmax(-1) == targets).sum(), disc,
                 ((out.rtd_logits > 0).float() == replaced).float(), replaced)


def rtd_loss(model: torch.nn.Module, micro: dict[str, torch.Tensor], weight: float) -> tuple[torch.Tensor, dict]:
    """A micro-batch's summed loss and statistics, in the loop's contract (divided by the global batch's masked
    tokens): generator MLM sum + weight × masked share × discriminator sum, which becomes ELECTRA's
    gen mean + weight × disc mean."""
    p = _rtd_pass(model, micro)
    per_token = micro["masked_share"][:, None]  # (B, 1): so that "/ masked tokens" becomes "/ tokens"
    loss_sum = p.gen_sum + weight * (per_token * p.disc).sum()
    return loss_sum, {"accuracy": p.gen_correct, "gen_loss": p.gen_sum.detach(),
                      "rtd_loss": (p.disc.detach() * per_token).sum(),
                      "rtd_accuracy": (p.detected * per_token).sum(),
                      "replaced": (p.replaced * per_token).sum()}


class RTDObjective(MLMObjective):
    """Generator MLM + discriminator replaced-token detection; the normaliser is the masked-token count (as MLM),
    statistics: generator accuracy per masked token, discriminator accuracy and replaced share per token."""

    kind = "rtd"  # the FLOP count: generator, discriminator and its per-token head (nn/flops.py)

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        super().__init__(packed, special, vocab_size, data, train, world)
        self.weight = train.rtd_weight
        # generator + discriminator forward: about 1.3 MLM evaluations per batch
        self.eval_cost_steps *= 1.3
        for i, batch in enumerate(self.validation):
            self._weigh(batch)
            batch["seed"] = torch.full((len(batch["input_ids"]),), _EVAL_SEED + i)

    @staticmethod
    def _weigh(batch: dict[str, torch.Tensor]) -> None:
        """Each row carries its whole batch's masked share (masked tokens / tokens): a micro-batch alone cannot
        know it, and it turns the loop's "/ masked tokens" into "/ tokens" for the per-token terms."""
        masked = (batch["labels"] != IGNORE_INDEX).sum()
        batch["masked_share"] = torch.full((len(batch["input_ids"]),), float(masked) / batch["input_ids"].numel())

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        batch = super().batch(step)
        self._weigh(batch)
        batch["seed"] = _row_seeds(self.seed, step, len(batch["input_ids"]))
        return batch

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        return rtd_loss(model, micro, self.weight)

    @torch.no_grad()
    def evaluate(self, model: Model) -> dict[str, float]:
        """The generator's MLM loss and accuracy on the fixed validation masks (`val_loss`, `val_accuracy`), the
        discriminator's replaced-token accuracy and loss, and the accuracy of calling every token original
        (`val_rtd_baseline`: 1 - the share replaced; fixed sample seeds)."""
        if not self.validation:
            return {}
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        totals = np.zeros(7)
        for batch in self.validation:
            p = _rtd_pass(model, {k: v.to(device) for k, v in batch.items()})
            totals += [float(p.gen_sum), int(p.gen_correct), len(p.targets), float(p.disc.sum()),
                       int(p.detected.sum()), p.replaced.numel(), float(p.replaced.sum())]
        model.train(was_training)
        loss, correct, masked, disc, detected, tokens, replaced = totals
        # val_rtd_baseline: the accuracy of calling every token original (1 - the replaced share), which a young
        # discriminator reaches by doing just that: 0.856 read as skill beside nothing to compare it with
        return {"val_loss": loss / max(1, masked), "val_accuracy": correct / max(1, masked),
                "val_rtd_loss": disc / max(1, tokens), "val_rtd_accuracy": detected / max(1, tokens),
                "val_rtd_baseline": 1 - replaced / max(1, tokens)}


TASK = PretrainTask("rtd", "encoder", ("rtd", "generator"), "replaced-token detection (ELECTRA)", RTDObjective)
