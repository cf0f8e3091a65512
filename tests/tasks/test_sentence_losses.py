"""SBERT objectives: each loss equals its definition computed by hand from separately embedded sentences, and the
validation metrics equal hand-computed ones."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.config import TrainConfig
from bertkit.nn.model import Model
from bertkit.text.features import TaskEncoder
from bertkit.tasks.sentence import SentenceObjective
from bertkit.tasks.sentence_losses import ranking_scores
from conftest import tiny, heads

A = ["the cat sat", "a dog ran far away", "birds", "the river is wide and slow"]
B = ["a cat was sitting", "the dog runs", "many birds fly south", "a slow river"]
N = ["an engine", "taxes are due", "a red car", "the meeting is at noon"]


def _embed(model, encoder, texts, pooling="mean"):
    """Each sentence alone (no padding at all): the reference the batched objective must match."""
    out = []
    for enc in encoder.texts(texts):
        ids = torch.tensor([enc.input_ids])
        out.append(model(ids, pool=pooling).pooled[0])
    return torch.stack(out)


@pytest.fixture
def setup(sample_tokenizer):
    torch.manual_seed(0)
    encoder = TaskEncoder(sample_tokenizer, 32)
    return encoder, TrainConfig(batch_size=4, seed=0)


def _objective(loss, encoder, train, sides, targets, labels=None):
    encoded = [encoder.texts(s) for s in sides]
    return SentenceObjective(loss, encoded, targets, encoded, targets if loss != "softmax" else
                             [labels[t] for t in targets], "mean", 20.0, 0, train, 1, labels)


def test_cosine_loss_is_the_squared_error_of_cosines(setup):
    encoder, train = setup
    model = Model(tiny(vocab_size=400)).eval()
    scores = [0.9, 0.1, 0.5, 0.0]
    objective = _objective("cosine", encoder, train, [A, B], scores)
    batch = objective.batch(0)
    loss, _ = objective.loss(model, batch)
    order = objective.sampler.rows(0)
    u, v = _embed(model, encoder, [A[i] for i in order]), _embed(model, encoder, [B[i] for i in order])
    expected = ((F.cosine_similarity(u, v) - torch.tensor([scores[i] for i in order])) ** 2).sum()
    assert loss.item() == pytest.approx(expected.item(), abs=1e-5)


@pytest.mark.parametrize("negatives", [False, True])
def test_mnrl_is_cross_entropy_over_in_batch_candidates(setup, negatives):
    encoder, train = setup
    model = Model(tiny(vocab_size=400)).eval()
    sides = [A, B, N] if negatives else [A, B]
    objective = _objective("mnrl", encoder, train, sides, None)
    loss, stats = objective.loss(model, objective.batch(0))
    order = objective.sampler.rows(0)
    anchors = F.normalize(_embed(model, encoder, [A[i] for i in order]), dim=-1)
    candidates = F.normalize(torch.cat([_embed(model, encoder, [s[i] for i in order]) for s in sides[1:]]), dim=-1)
    scores = 20.0 * anchors @ candidates.T  # (4, 4 or 8)
    assert scores.shape[1] == 4 * (len(sides) - 1)
    expected = F.cross_entropy(scores, torch.arange(4), reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), abs=1e-4)
    assert stats["accuracy"].item() == int((scores.argmax(-1) == torch.arange(4)).sum())


def test_softmax_classifies_u_v_and_their_difference(setup):
    encoder, train = setup
    labels = ["contradiction", "entailment"]
    model = Model(tiny(vocab_size=400), heads("pair_classifier", num_labels=2)).eval()
    objective = _objective("softmax", encoder, train, [A, B], [1, 0, 1, 0], labels)
    loss, _ = objective.loss(model, objective.batch(0))
    order = objective.sampler.rows(0)
    u, v = _embed(model, encoder, [A[i] for i in order]), _embed(model, encoder, [B[i] for i in order])
    head = model.heads["pair_classifier"].out
    logits = head(torch.cat([u, v, (u - v).abs()], dim=-1))
    expected = F.cross_entropy(logits, torch.tensor([[1, 0, 1, 0][i] for i in order]), reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), abs=1e-5)
    metrics = objective.evaluate(model)
    assert set(metrics) == {"val_loss", "accuracy"} and 0 <= metrics["accuracy"] <= 1


def test_cosine_evaluation_is_spearman_of_cosines(setup):
    from scipy.stats import spearmanr

    encoder, train = setup
    model = Model(tiny(vocab_size=400)).eval()
    scores = [0.9, 0.1, 0.5, 0.0]
    metrics = _objective("cosine", encoder, train, [A, B], scores).evaluate(model)
    cos = F.cosine_similarity(_embed(model, encoder, A), _embed(model, encoder, B)).detach().numpy()
    assert metrics["spearman"] == pytest.approx(spearmanr(scores, cos).statistic, abs=1e-6)
    assert metrics["val_loss"] == pytest.approx(float(np.mean((cos - scores) ** 2)), abs=1e-5)


def test_ranking_scores_by_hand():
    anchors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    candidates = np.array([[0.9, 0.1], [1.0, 0.0], [0.6, 0.8]])
    # scores per anchor: [0.9, 1.0, 0.6] (own ranked 2nd), [0.1, 0.0, 0.8] (3rd), [0.62, 0.6, 1.0] (1st)
    result = ranking_scores(anchors, candidates, scale=1.0, chunk=2)
    assert result["accuracy"] == pytest.approx(1 / 3)
    assert result["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)


def test_validation_masks_what_training_masks():
    """Symmetrised validation pairs (a, b), (b, a): each row's anchor text is another row's positive and outranked
    the true one, so validation accuracy was capped below what the model did (a review, 2026-11-28)."""
    from bertkit.tasks.sentence_losses import MNRLoss
    from bertkit.text.tasks import SentencePair

    pairs = [SentencePair("a dog runs", "a dog is running"), SentencePair("a dog is running", "a dog runs"),
             SentencePair("rain today", "it rains")]
    keys = np.asarray(MNRLoss(scale=1.0).targets(pairs, 5.0, True), dtype=np.int64)
    vectors = {"a dog runs": [1.0, 0.0], "a dog is running": [0.95, 0.31], "rain today": [0.0, 1.0],
               "it rains": [0.1, 0.99]}
    anchors = np.array([vectors[p.text] for p in pairs])
    candidates = np.array([vectors[p.pair] for p in pairs])
    assert ranking_scores(anchors, candidates, scale=20.0)["accuracy"] == pytest.approx(1 / 3)  # unmasked
    masked = ranking_scores(anchors, candidates, scale=20.0, keys=keys, chunk=2)
    assert masked["accuracy"] == 1.0 and masked["mrr"] == 1.0


def test_mnrl_masks_a_duplicate_of_the_rows_positive_instead_of_ranking_it_as_a_negative():
    """Two rows with the same pair (or one row an epoch's wrap repeated): each row's positive is also the other
    row's candidate, which is no negative. Unmasked, the loss could not fall below 2 log 2 and accuracy read 1/2."""
    from types import SimpleNamespace

    from bertkit.tasks.sentence_losses import MNRLoss
    from bertkit.text.tasks import SentencePair

    loss = MNRLoss(scale=20.0)
    pairs = [SentencePair("a dog runs", "a dog is running"), SentencePair("a dog runs", "a dog is running"),
             SentencePair("rain today", "it rains")]
    keys = torch.tensor(loss.targets(pairs, 5.0, False))  # (B, 2): anchor, positive
    anchor = F.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]), dim=-1)
    out = SimpleNamespace(pooled=torch.cat([anchor, anchor]))  # every positive equals its anchor
    total, stats = loss.loss(out, keys, 3)
    # each duplicate row ranks its own positive against the third row's only: log(1 + e^-20) per row
    assert total.item() == pytest.approx(3 * np.log1p(np.exp(-20.0)), abs=1e-6) and stats["accuracy"].item() == 3
    unmasked, stats = loss.loss(out, None, 3)
    assert unmasked.item() > 2 * np.log(2) - 1e-6 and stats["accuracy"].item() == 2


def test_mnrl_masks_a_candidate_that_is_the_rows_own_anchor():
    """Symmetrised pairs (a, b) and (b, a) in one batch: row (a, b) met "a" among the candidates, scored 1 against
    itself, above its true positive; the loss could not fall (1.31 on a review's probe, 2026-11-28)."""
    from types import SimpleNamespace

    from bertkit.tasks.sentence_losses import MNRLoss
    from bertkit.text.tasks import SentencePair

    loss = MNRLoss(scale=20.0)
    pairs = [SentencePair("a dog runs", "a dog is running"), SentencePair("a dog is running", "a dog runs"),
             SentencePair("rain today", "it rains")]
    keys = torch.tensor(loss.targets(pairs, 5.0, False))
    anchors = F.normalize(torch.tensor([[1.0, 0.0], [0.95, 0.31], [0.0, 1.0]]), dim=-1)
    positives = anchors[[1, 0, 2]]  # each row's positive is the other's anchor: the same texts, the same vectors
    out = SimpleNamespace(pooled=torch.cat([anchors, positives]))
    total, stats = loss.loss(out, keys, 3)
    # rows 0 and 1 rank their positive against row 2's only, the third against rows 0 and 1's (far off)
    scores = 20.0 * anchors @ positives.T
    kept = {0: [0, 2], 1: [1, 2], 2: [0, 1, 2]}  # each row's candidates, its own positive first where it can be
    expected = sum(-torch.log_softmax(scores[i][kept[i]], 0)[kept[i].index(i)] for i in range(3))
    assert total.item() == pytest.approx(float(expected), abs=1e-5) and stats["accuracy"].item() == 3
