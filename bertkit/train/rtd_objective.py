"""ELECTRA's replaced-token detection (`train.objective = "rtd"`) on the packed blocks MLM uses.

Per step: the MLM masks (the same collator, rate and seed stream as `mlm`), the generator's MLM loss on the masked
positions, its seeded samples in their place, and the discriminator's binary loss on every token. The step's loss
is ELECTRA's  mean generator MLM loss + rtd_weight × mean discriminator loss  over the whole global batch: the
loop divides the summed loss by the global number of masked tokens, so each row carries the weight that turns
its summed per-token discriminator loss into that mean (the global batch's masked share × rtd_weight).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import DataConfig, TrainConfig
from bertkit.nn.model import Model
from bertkit.text.collate import IGNORE_INDEX, step_generator
from bertkit.text.packing import Packed
from bertkit.text.tokenizer import SpecialIds
from bertkit.train.objectives import MLMObjective

_SAMPLE_STREAM = 2  # the generator's sampling seeds, apart from the masking streams
_EVAL_SEED = 7919  # validation samples use fixed seeds: the discriminator's accuracy is comparable across steps


def _row_seeds(seed: int, step: int, rows: int) -> torch.Tensor:
    """One sampling seed per row of a step's global batch (a micro-batch seeds its sampler with its first row's)."""
    generator = step_generator(seed, step, _SAMPLE_STREAM)
    return torch.randint(0, 2 ** 62, (rows,), generator=generator)


class RTDObjective(MLMObjective):
    """Generator MLM + discriminator replaced-token detection; the normaliser is the masked-token count (as MLM),
    statistics: generator accuracy per masked token, discriminator accuracy and replaced share per token."""

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        self.weight = train.rtd_weight
        super().__init__(packed, special, vocab_size, data, train, world)
        # generator + discriminator forward: about 1.3 MLM evaluations per batch
        self.eval_cost_steps *= 1.3
        for i, batch in enumerate(self.validation):
            self._weigh(batch)
            batch["seed"] = torch.full((len(batch["input_ids"]),), _EVAL_SEED + i)

    def _weigh(self, batch: dict[str, torch.Tensor]) -> None:
        """Each row's discriminator weight: rtd_weight × masked tokens / tokens, of the whole batch."""
        masked = (batch["labels"] != IGNORE_INDEX).sum()
        share = float(masked) / batch["input_ids"].numel()
        batch["masked_share"] = torch.full((len(batch["input_ids"]),), share)
        batch["disc_weight"] = self.weight * batch["masked_share"]

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        batch = super().batch(step)
        self._weigh(batch)
        batch["seed"] = _row_seeds(self.seed, step, len(batch["input_ids"]))
        return batch

    @staticmethod
    def loss(model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        labels = micro["labels"]  # (B, T): the original token where masked, else IGNORE_INDEX
        out = model(micro["input_ids"], rtd_labels=labels, rtd_seed=int(micro["seed"][0]))
        targets = labels[labels != IGNORE_INDEX]  # (N,)
        gen_sum = F.cross_entropy(out.logits.float(), targets, reduction="sum")
        replaced = out.replaced.float()  # (B, T)
        # ELECTRA sums the discriminator's loss over all (real) tokens; packed blocks have no padding
        disc = F.binary_cross_entropy_with_logits(out.rtd_logits.float(), replaced, reduction="none")  # (B, T)
        loss_sum = gen_sum + (micro["disc_weight"][:, None] * disc).sum()  # weight: rtd_weight × masked share
        per_token = micro["masked_share"][:, None]  # (B, 1): so that "/ masked tokens" becomes "/ tokens"
        detected = ((out.rtd_logits > 0).float() == replaced).float()
        return loss_sum, {"accuracy": (out.logits.argmax(-1) == targets).sum(),
                          "gen_loss": gen_sum.detach(),
                          # per-token statistics, weighted so that the loop's division by masked tokens gives
                          # per-token means
                          "rtd_loss": (disc.detach() * per_token).sum(),
                          "rtd_accuracy": (detected * per_token).sum(),
                          "replaced": (replaced * per_token).sum()}

    @torch.no_grad()
    def evaluate(self, model: Model) -> dict[str, float]:
        """The generator's MLM loss and accuracy on the fixed validation masks (`val_loss`, `val_accuracy`), the
        discriminator's replaced-token accuracy and loss, and the share of tokens replaced (fixed sample seeds)."""
        if not self.validation:
            return {}
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        totals = np.zeros(6)
        for batch in self.validation:
            micro = {k: v.to(device) for k, v in batch.items()}
            out = model(micro["input_ids"], rtd_labels=micro["labels"], rtd_seed=int(micro["seed"][0]))
            targets = micro["labels"][micro["labels"] != IGNORE_INDEX]
            replaced = out.replaced.float()
            totals += [float(F.cross_entropy(out.logits.float(), targets, reduction="sum")),
                       int((out.logits.argmax(-1) == targets).sum()), len(targets),
                       float(F.binary_cross_entropy_with_logits(out.rtd_logits.float(), replaced, reduction="sum")),
                       int(((out.rtd_logits > 0).float() == replaced).sum()), replaced.numel()]
        model.train(was_training)
        loss, correct, masked, disc, detected, tokens = totals
        return {"val_loss": loss / max(1, masked), "val_accuracy": correct / max(1, masked),
                "val_rtd_loss": disc / max(1, tokens), "val_rtd_accuracy": detected / max(1, tokens)}
