"""MLM masking: 15% of non-special tokens, split 80/10/10; never specials; whole words together; reproducible."""

import torch

from bertkit.text.collate import IGNORE_INDEX, mlm_mask, step_generator

SPECIAL = (0, 1, 2, 3, 4)
VOCAB = 1000


def _batch(rows=400, length=128):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, VOCAB, (rows, length), generator=g)
    ids[:, 0] = 2
    ids[:, 50] = 3  # a document boundary inside each block
    return ids


def test_80_10_10_statistics_and_specials_untouched():
    ids = _batch()
    inputs, labels = mlm_mask(ids, SPECIAL, 4, VOCAB, 0.15, step_generator(0, 0))
    selected = labels != IGNORE_INDEX
    candidates = ~torch.isin(ids, torch.tensor(SPECIAL))
    rate = selected.sum() / candidates.sum()
    assert abs(rate - 0.15) < 0.005
    assert not selected[~candidates].any()  # [CLS]/[SEP] never chosen
    assert torch.equal(inputs[~candidates], ids[~candidates])
    assert torch.equal(labels[selected], ids[selected])
    n = selected.sum().item()
    masked = (inputs[selected] == 4).sum().item() / n
    kept = (inputs[selected] == ids[selected]).sum().item() / n
    randomised = 1 - masked - kept
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1) < 0.01 and abs(randomised - 0.1) < 0.01
    assert not torch.isin(inputs[selected & (inputs != 4)], torch.tensor(SPECIAL)).any()  # no random specials
    assert torch.equal(inputs[~selected], ids[~selected])


def test_same_seed_and_step_same_masks_other_step_other_masks():
    ids = _batch(rows=8)
    a = mlm_mask(ids, SPECIAL, 4, VOCAB, 0.15, step_generator(3, 7))
    b = mlm_mask(ids, SPECIAL, 4, VOCAB, 0.15, step_generator(3, 7))
    c = mlm_mask(ids, SPECIAL, 4, VOCAB, 0.15, step_generator(3, 8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and not torch.equal(a[1], c[1])


def test_whole_word_masking_selects_words_together():
    ids = _batch(rows=200)
    word_start = torch.zeros_like(ids, dtype=torch.bool)
    word_start[:, ::3] = True  # words of three pieces
    word_start[:, 50] = True
    word_start[:, 51] = True
    _, labels = mlm_mask(ids, SPECIAL, 4, VOCAB, 0.15, step_generator(0, 0), word_start)
    selected = labels != IGNORE_INDEX
    candidates = ~torch.isin(ids, torch.tensor(SPECIAL))
    word_id = word_start.long().cumsum(1)
    for row in range(20):
        for w in word_id[row].unique():
            members = (word_id[row] == w) & candidates[row]
            picked = selected[row][members]
            assert picked.all() or not picked.any()  # all pieces of a word, or none
    assert abs(selected.sum() / candidates.sum() - 0.15) < 0.02
