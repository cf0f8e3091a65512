"""Encoder-decoder runs at the text level: their tokenizers (one joint vocabulary, or one per side), how sentence
pairs become ids, and `Translator`, which loads a run and translates batches of sentences (greedy or beam search,
KV cache) — the one path `translate`, `evaluate-seq2seq` and validation BLEU during training share.

Ids: source = tokens + [SEP]; decoder input = [CLS] + tokens; decoder labels = tokens + [SEP]. [CLS] is the
beginning-of-sentence token the decoder starts from, [SEP] the end-of-sentence token it stops at.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from bertkit.errors import BertkitError, a_or_an
from bertkit.generation import beam_search
from bertkit.hardware import autocast, resolve_precision
from bertkit.nn.model import Model
from bertkit.run.directory import load_run
from bertkit.text.tokenizer import SpecialIds, check_vocab_matches, load_tokenizer, save_tokenizer, special_ids

TARGET_TOKENIZER_DIR = "target"  # run/target/tokenizer.json: the target side's own vocabulary (joint_vocab = false)


@dataclass
class PairTokenizers:
    """The source and target tokenizers of a run (the same object when the vocabulary is joint)."""

    source: Tokenizer
    target: Tokenizer

    @property
    def joint(self) -> bool:
        return self.source is self.target

    @property
    def special(self) -> SpecialIds:
        """The target side's special ids (BOS = [CLS], EOS = [SEP], [PAD]); bertkit puts them at the same ids on
        both sides."""
        return special_ids(self.target)

    def save(self, directory: Path) -> None:
        save_tokenizer(self.source, directory)
        if not self.joint:
            save_tokenizer(self.target, directory / TARGET_TOKENIZER_DIR)

    @classmethod
    def load(cls, run: str | Path) -> PairTokenizers:
        run = Path(run)
        source = load_tokenizer(run)
        target = load_tokenizer(run / TARGET_TOKENIZER_DIR) if (run / TARGET_TOKENIZER_DIR).is_dir() else source
        return cls(source, target)

    def encode_source(self, texts: list[str], max_length: int) -> tuple[list[list[int]], int]:
        """Source ids (tokens + [SEP]), cut to `max_length`; returns (ids, how many were cut)."""
        return _encode(self.source, texts, max_length, prefix=None, suffix=special_ids(self.source).sep)

    def encode_target(self, texts: list[str], max_length: int) -> tuple[list[list[int]], int]:
        """Target tokens + [SEP] (the labels; the decoder input is [CLS] + the same tokens), cut to `max_length`."""
        return _encode(self.target, texts, max_length, prefix=None, suffix=self.special.sep)

    def decode(self, ids: list[int]) -> str:
        return self.target.decode(ids, skip_special_tokens=True).strip()


def _encode(tokenizer: Tokenizer, texts: list[str], max_length: int, prefix: int | None,
            suffix: int) -> tuple[list[list[int]], int]:
    body = max_length - 1 - (prefix is not None)
    out, cut = [], 0
    for enc in tokenizer.encode_batch(texts, add_special_tokens=False):
        ids = enc.ids
        if len(ids) > body:
            ids, cut = ids[:body], cut + 1
        out.append(([prefix] if prefix is not None else []) + ids + [suffix])
    return out, cut


class Translator:
    """A trained encoder-decoder run, ready to translate: `translate(texts)` -> strings (batches sorted by source
    length, order restored)."""

    def __init__(self, run: str | Path, device: str | torch.device | None = None, batch_size: int = 64,
                 model: Model | None = None, tokenizers: PairTokenizers | None = None, max_length: int | None = None,
                 precision: str = "auto"):
        self.batch_size = batch_size
        if model is None:
            config, model = load_run(run, device)
            if config.model.architecture != "encoder-decoder":
                arch = config.model.architecture
                hint = "use `bertkit generate` for a decoder" if arch == "decoder" else \
                    "an encoder predicts masked tokens: try `bertkit fill-mask`"
                raise BertkitError(f"{run}: translation needs an encoder-decoder run, this is {a_or_an(arch)} ({hint})")
            if "lm" not in config.heads.names:
                raise BertkitError(f"{run}: has no output (lm) head; train it with `bertkit finetune seq2seq`")
        self.model = model.eval()
        if tokenizers is None:
            tokenizers = PairTokenizers.load(run)
            for side in (tokenizers.source, tokenizers.target):
                check_vocab_matches(side, model.config.vocab_size, run)
        self.tokenizers = tokenizers
        self.max_length = max_length or model.config.max_len
        self.precision = resolve_precision(precision, model.device).precision  # auto: bf16 where native

    def translate_ids(self, source: list[list[int]], beam_size: int = 1, length_penalty: float = 1.0,
                      max_new_tokens: int | None = None, use_cache: bool = True,
                      on_batch=None) -> list[list[int]]:
        """Source ids -> output ids (no BOS/EOS), in the input order; `on_batch(n)` after each batch of n."""
        special = self.tokenizers.special
        limit = min(max_new_tokens or self.max_length - 1, self.max_length - 1)
        order = np.argsort([len(s) for s in source], kind="stable")
        out: list[list[int]] = [[] for _ in source]
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size].tolist()
            with autocast(self.model.device, self.precision):
                hyps = beam_search(self.model, [source[r] for r in rows], special.cls, special.sep, special.pad,
                                   limit, beam_size, length_penalty, use_cache)
            for r, h in zip(rows, hyps):
                out[r] = h
            if on_batch is not None:
                on_batch(len(rows))
        return out

    def translate(self, texts: list[str], beam_size: int = 1, length_penalty: float = 1.0,
                  max_new_tokens: int | None = None, on_batch=None) -> tuple[list[str], int]:
        """Texts -> translations; also returns how many sources were longer than the model and cut."""
        source, cut = self.tokenizers.encode_source(texts, self.max_length)
        outputs = self.translate_ids(source, beam_size, length_penalty, max_new_tokens, on_batch=on_batch)
        return [self.tokenizers.decode(ids) for ids in outputs], cut
