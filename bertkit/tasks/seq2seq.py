"""The sequence-to-sequence objective: teacher forcing with label smoothing on an encoder-decoder; validation loss,
perplexity, token accuracy and (greedy, KV-cached) BLEU through `bertkit.translation`, the path `translate` uses."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from bertkit.config import ModelConfig, TrainConfig
from bertkit.errors import BertkitError
from bertkit.metrics import translation_metrics
from bertkit.text.tokenizer import lowercases
from bertkit.nn.flops import train_flops
from bertkit.nn.model import Model
from bertkit.text.collate import IGNORE_INDEX, EpochSampler, pad_sequences


class Seq2SeqObjective:
    """Batches of (source, target) id pairs: source padded right with its mask; decoder input [CLS] + target
    tokens; labels target tokens + [SEP] (padding ignored). The decoder needs no padding mask: its padding is at the
    end, and a causal mask already keeps every real position from seeing it."""

    default_metric = "bleu"
    metric_names = ("val_loss", "val_ppl", "accuracy", "bleu")

    def __init__(self, source: list[list[int]], target: list[list[int]], validation_source: list[list[int]],
                 validation_target: list[list[int]], validation_references: list[str], bos_id: int, pad_id: int,
                 label_smoothing: float, train: TrainConfig, world: int = 1, bleu_examples: int = 0,
                 translator=None):
        if not source:
            raise BertkitError("no training pairs")
        self.source, self.target = source, target
        self.bos_id, self.pad_id, self.label_smoothing = bos_id, pad_id, label_smoothing
        self.global_batch = train.batch_size * train.accumulation_steps * world
        self.sampler = EpochSampler(len(source), self.global_batch, train.seed)
        self.eval_batch = max(train.batch_size, 64)
        self.validation = (validation_source, validation_target)
        self.references = validation_references[:bleu_examples]
        self.translator = translator  # a Translator on the training model, for validation BLEU
        # a tokenizer that lowercases cannot write a capital: its BLEU is case-insensitive (read once, not per eval)
        self.lowercase = translator is not None and lowercases(translator.tokenizers.target)
        self.last_bleu: dict | None = None  # the last evaluation's full sacrebleu result
        if bleu_examples == 0:
            self.default_metric = "val_loss"
        # an evaluation in training-step units: forward passes (~1/3 of a step) plus decoding for BLEU, over the
        # whole validation set in every process, against one process's rows a step
        n_val = len(validation_source)
        self.eval_cost_steps = (n_val * 0.35 + len(self.references) * 3) / (train.batch_size * train.accumulation_steps)

    @property
    def steps_per_epoch(self) -> float:
        return len(self.source) / self.global_batch

    def _inputs(self, source: list[list[int]], target: list[list[int]]) -> dict[str, torch.Tensor]:
        src = pad_sequences(source, self.pad_id)  # (B, S)
        lengths = torch.tensor([len(s) for s in source])
        decoder_in = pad_sequences([[self.bos_id] + t[:-1] for t in target], self.pad_id)  # (B, T)
        labels = pad_sequences(target, IGNORE_INDEX, decoder_in.shape[1])  # (B, T)
        return {"input_ids": src, "attention_mask": (torch.arange(src.shape[1])[None, :] < lengths[:, None]).long(),
                "decoder_input_ids": decoder_in, "labels": labels}

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.sampler.rows(step).tolist()
        return self._inputs([self.source[r] for r in rows], [self.target[r] for r in rows])

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        return float(max(1, int((batch["labels"] != IGNORE_INDEX).sum())))

    @staticmethod
    def tokens(batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum()) + int((batch["labels"] != IGNORE_INDEX).sum())

    @staticmethod
    def flops(config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on `micro` (padded lengths: what the kernels multiply): the encoder over
        the sources, the decoder over the targets cross-attending to them, the LM head on every target position."""
        rows, source = micro["input_ids"].shape
        return train_flops(config, "seq2seq", rows, micro["decoder_input_ids"].shape[1], source=source)

    def _logits(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(micro["input_ids"], micro["decoder_input_ids"], attention_mask=micro["attention_mask"],
                     head="lm").logits  # (B, T, V)

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        logits = self._logits(model, micro).float()
        labels = micro["labels"]  # (B, T)
        loss_sum = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                   reduction="sum", label_smoothing=self.label_smoothing)
        real = labels != IGNORE_INDEX
        return loss_sum, {"accuracy": ((logits.argmax(-1) == labels) & real).sum()}

    @torch.no_grad()
    def evaluate(self, model: Model) -> dict[str, float]:
        """Validation loss and perplexity without label smoothing (the model's real likelihood), token accuracy
        under teacher forcing, and greedy BLEU on the first `bleu_examples` validation pairs."""
        source, target = self.validation
        if not source:
            return {}
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        loss, correct, count = 0.0, 0, 0
        for start in range(0, len(source), self.eval_batch):
            micro = {k: v.to(device) for k, v in self._inputs(source[start:start + self.eval_batch],
                                                              target[start:start + self.eval_batch]).items()}
            logits = self._logits(model, micro).float()
            labels = micro["labels"]
            loss += float(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX,
                                          reduction="sum"))
            real = labels != IGNORE_INDEX
            correct += int(((logits.argmax(-1) == labels) & real).sum())
            count += int(real.sum())
        mean = loss / max(1, count)
        result = {"val_loss": mean, "val_ppl": math.exp(min(mean, 50.0)), "accuracy": correct / max(1, count)}
        if self.references and self.translator is not None:
            self.translator.model = model
            hyps = self.translator.translate_ids(source[:len(self.references)])
            texts = [self.translator.tokenizers.decode(h) for h in hyps]
            self.last_bleu = translation_metrics(texts, self.references, lowercase=self.lowercase)
            result["bleu"] = self.last_bleu["bleu"]
        model.train(was_training)
        return result
