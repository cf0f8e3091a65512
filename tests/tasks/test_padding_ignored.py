"""Padded positions are undefined (`bertkit.nn.attention`), so every pooling, head, loss and prediction must read
real positions only. Proved on the unpadded path (`set_unpad(model, "always")`: the block-diagonal reference on a
CPU): the states the stack scatters back to (B, T, D) get garbage at padding instead of zeros, and every result stays
the same — pooled vectors and sentence embeddings (cls / mean / max), the MLM loss, the classifier, the NER tagger's
loss and predictions, the sentence objectives and the seq2seq loss, with their parameter gradients.

Two kinds of garbage. Large finite values (~1e4), for everything: the stacks only ever leave finite values at
padding (zeros unpadded; the padded paths open an all-padding query row to every key, so stay finite). NaN, for every
path that selects or masks before it computes: the forward results, and the gradients of pooling, the classifier,
the MLM head and the sentence objectives. Two paths weigh padding by zero rather than masking it, so need it
finite: a per-token head's weight gradient (Σ_t grad_t · state_t, zero grads at padding: 0 × NaN) and
cross-attention to an encoder's padded states (the value sum weighs them by 0) — the NER gradients and the seq2seq
loss are checked with finite garbage only.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.config import TrainConfig
from bertkit.embedding import embed_encoded
from bertkit.inference import batched_logits, decode_tags, iob2_constraints
from bertkit.nn import transformer
from bertkit.nn.model import Model
from bertkit.nn.transformer import set_unpad
from bertkit.tasks.classify import ClassifyObjective
from bertkit.tasks.ner import TagObjective
from bertkit.tasks.sentence import SentenceObjective
from bertkit.tasks.seq2seq import Seq2SeqObjective
from bertkit.text.features import Encoded
from conftest import heads, tiny

GARBAGE = {
    "large": lambda like: torch.randn(like.shape, generator=torch.Generator().manual_seed(1), dtype=like.dtype) * 1e4,
    "nan": lambda like: torch.full_like(like, float("nan")),
}
LENGTHS = [3, 9, 6, 2, 7, 5, 4, 8]  # all different: every batch of two or more carries padding
TAGS = ["O", "B-X", "I-X"]


def _compare(monkeypatch, garbage: str, compute) -> None:
    """compute() -> {name: tensor} on the unpadded path, with the padded states as the stack leaves them (zeros)
    and with them overwritten by garbage: the results must be equal (NaN never equals, so a leak fails)."""
    clean = transformer._unpack
    filled: list[int] = []

    def unpack(x: torch.Tensor, select: torch.Tensor, fill=None) -> torch.Tensor:
        states = clean(x, select)  # (B, T, D), zeros at padding
        filled.append(int((~select).sum()))
        return states if fill is None else torch.where(select[..., None], states, fill(states))

    monkeypatch.setattr(transformer, "_unpack", unpack)
    expected = compute()
    monkeypatch.setattr(transformer, "_unpack", lambda x, select: unpack(x, select, GARBAGE[garbage]))
    got = compute()
    assert filled and all(filled), "the forward did not run unpadded over padding"
    for name, value in expected.items():
        assert torch.isfinite(value).all(), name
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")


def _grads(model: Model, loss: torch.Tensor, with_grads: bool = True) -> dict[str, torch.Tensor]:
    """The loss and (when asked) every parameter's gradient of it."""
    if not with_grads:
        return {"loss": loss.detach()}
    model.zero_grad()
    loss.backward()
    return {"loss": loss.detach(), **{n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}}


def _examples(first_token: bool = False) -> list[Encoded]:
    """Tokenised examples of LENGTHS tokens ([CLS] ... [SEP]); with `first_token`, one word per inner token."""
    g = torch.Generator().manual_seed(2)
    return [Encoded([2] + torch.randint(5, 101, (n - 2,), generator=g).tolist() + [3], [0] * n,
                    list(range(1, n - 1)) if first_token else None) for n in LENGTHS]


def _model(config=None, on_top=None) -> Model:
    model = Model(config or tiny(positions="rotary"), on_top or heads())
    set_unpad(model, "always")
    return model


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("mode", ["cls", "mean", "max"])
def test_every_pooling_and_sentence_embedding_ignores_padding(mode, garbage, monkeypatch):
    model = _model()
    encoded = _examples()
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(e.input_ids) for e in encoded], batch_first=True)  # (B, T)
    mask = (ids != 0).long()
    weights = torch.randn(len(encoded), model.config.d_model)

    def compute():
        pooled = model(ids, attention_mask=mask, pool=mode).pooled  # (B, D)
        result = _grads(model, (pooled * weights).sum())
        with torch.no_grad():  # `bertkit embed`: length-sorted batches through run_sorted
            vectors = embed_encoded(model, encoded, 0, 3, mode, normalize=True)  # (N, D)
        return {"pooled": pooled.detach(), "embedded": torch.from_numpy(vectors), **result}

    _compare(monkeypatch, garbage, compute)


@pytest.mark.parametrize("garbage", GARBAGE)
def test_the_mlm_loss_ignores_padding(garbage, monkeypatch):
    model = _model(on_top=heads("mlm"))
    ids = torch.randint(5, 101, (4, 9))
    mask = (torch.arange(9)[None] < torch.tensor([[3], [9], [6], [1]])).long()  # (B, T)
    select = mask.bool() & (torch.rand(4, 9) < 0.5)  # (B, T): masked positions are real ones
    select[:, 0] = True

    def compute():
        logits = model(ids, attention_mask=mask, mlm_select=select).logits  # (N, V)
        return _grads(model, F.cross_entropy(logits.float(), ids[select], reduction="sum"))

    _compare(monkeypatch, garbage, compute)


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_the_classifier_loss_and_predictions_ignore_padding(pooling, garbage, monkeypatch):
    model = _model(on_top=heads("classifier", num_labels=3, pooling=pooling))
    examples = _examples()
    objective = ClassifyObjective(examples, [i % 3 for i in range(len(examples))], [], [], ["a", "b", "c"], 0,
                                  TrainConfig(batch_size=4))
    micro = objective.batch(0)

    def compute():
        loss, _ = objective.loss(model, micro)
        logits = batched_logits(model, examples, "classifier", 0, batch_size=3)  # `predict`, `evaluate`
        return {**_grads(model, loss), "predicted": torch.from_numpy(np.stack(logits))}

    _compare(monkeypatch, garbage, compute)


@pytest.mark.parametrize("garbage", GARBAGE)
def test_the_ner_loss_and_predictions_ignore_padding(garbage, monkeypatch):
    model = _model(on_top=heads("tagger", num_labels=len(TAGS)))
    examples = _examples(first_token=True)
    word_labels = [[(i + w) % 3 for w in range(len(e.first_token))] for i, e in enumerate(examples)]
    objective = TagObjective(examples, word_labels, [], [], TAGS, 0, TrainConfig(batch_size=4))
    micro = objective.batch(0)
    constraints = iob2_constraints(TAGS)

    def compute():
        loss, _ = objective.loss(model, micro)
        logits = batched_logits(model, examples, "tagger", 0, batch_size=3)  # one (T_i, C) per example
        predicted = [decode_tags(token_logits, e, TAGS, constraints) for token_logits, e in zip(logits, examples)]
        tags = torch.tensor([TAGS.index(t) for p in predicted for t in p[0]])
        scores = torch.tensor([s for p in predicted for s in p[1]])
        # a per-token head's weight gradient sums 0 × state over padding: finite garbage only (module docstring)
        return {**_grads(model, loss, with_grads=garbage != "nan"), "logits": torch.from_numpy(np.concatenate(logits)),
                "tags": tags, "scores": scores}

    _compare(monkeypatch, garbage, compute)


@pytest.mark.parametrize("garbage", GARBAGE)
@pytest.mark.parametrize("loss,pooling", [("mnrl", "mean"), ("cosine", "max"), ("softmax", "cls")])
def test_the_sentence_objectives_ignore_padding(loss, pooling, garbage, monkeypatch):
    examples = _examples()
    targets = {"mnrl": None, "softmax": [0, 1, 2, 0], "cosine": [0.9, 0.1, 0.5, 0.0]}[loss]
    objective = SentenceObjective(loss, [examples[:4], examples[4:]], targets, [], None, pooling, 20.0, 0,
                                  TrainConfig(batch_size=4), 1, ["a", "b", "c"])
    model = _model(on_top=heads("pair_classifier", num_labels=3) if loss == "softmax" else heads())
    micro = objective.batch(0)
    _compare(monkeypatch, garbage, lambda: _grads(model, objective.loss(model, micro)[0]))


def test_the_seq2seq_loss_ignores_the_sources_padding(monkeypatch):
    """The decoder cross-attends to the encoder's states with the source mask: padded source states get zero
    weight (finite garbage only: the value sum weighs them by 0, module docstring)."""
    model = _model(tiny(architecture="encoder-decoder", positions="rotary"), heads("lm"))
    source = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14]]
    target = [[20, 21, 22], [23, 24, 25, 26, 27], [28], [29, 30]]
    objective = Seq2SeqObjective(source, target, [], [], [], 1, 0, 0.1, TrainConfig(batch_size=4))
    micro = objective.batch(0)
    _compare(monkeypatch, "large", lambda: _grads(model, objective.loss(model, micro)[0]))
