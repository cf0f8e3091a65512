"""Packing: fixed blocks of [CLS] + stream, documents ended by [SEP], word starts, split, cache, workers."""

import io

import numpy as np
import pytest
from rich.console import Console

from bertkit.errors import BertkitError
from bertkit.paths import cache_root
from bertkit.text.corpus import load_corpus
from bertkit.text.packing import pack_corpus, pack_key
from conftest import SAMPLE_CORPUS, damage_cache


def _corpus(tmp_path, copies=30):
    lines = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"{i}: {line}" for i in range(copies) for line in lines) + "\n")
    return load_corpus([str(path)])


def test_blocks_are_cls_plus_the_document_stream(tmp_path, sample_tokenizer):
    dataset, _, key = _corpus(tmp_path)
    packed = pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.1)
    blocks = np.array(packed.train["input_ids"])
    assert blocks.shape[1] == 32 and (blocks[:, 0] == 2).all()
    stream = blocks[:, 1:].reshape(-1)
    # rebuild the expected stream of the first training documents: tokens + [SEP] each (every 10th doc is validation)
    docs = [d for i, d in enumerate(dataset["text"]) if i % 10 != 9]
    expected = []
    for doc in docs[:20]:
        expected += sample_tokenizer.encode(doc, add_special_tokens=False).ids + [3]
    n = min(len(expected), 31 * 5)  # within the first batch of documents nothing is dropped
    assert stream[:n].tolist() == expected[:n]
    assert packed.stats["validation_blocks"] > 0 and packed.stats["documents"] == len(dataset)


def test_a_corpus_that_writes_special_tokens_keeps_them_as_text(tmp_path, sample_tokenizer):
    """A paper about BERT writes "[SEP]" and "[MASK]": packed as the special tokens they made a false document
    boundary and a mask with no label (a review, 2026-11-28). They are text: the only [SEP]s end documents."""
    path = tmp_path / "bert.txt"
    path.write_text("".join(f"{i}: sentence A [SEP] sentence B, and a [MASK] token [CLS] here\n" for i in range(40)))
    dataset, _, key = load_corpus([str(path)])
    packed = pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.0)
    blocks = np.array(packed.train["input_ids"])
    ids = {name: sample_tokenizer.token_to_id(name) for name in ("[SEP]", "[MASK]", "[CLS]")}
    assert not (blocks[:, 1:] == ids["[MASK]"]).any() and not (blocks[:, 1:] == ids["[CLS]"]).any()
    assert (blocks == ids["[SEP]"]).sum() <= 40  # one per document at most (the last may be left over)
    expected = sample_tokenizer.encode("0: sentence A", add_special_tokens=False).ids
    assert blocks[0, 1:1 + len(expected)].tolist() == expected and blocks[0, 1 + len(expected)] != ids["[SEP]"]


def test_the_validation_share_is_the_fraction_asked_and_every_kth_for_one_over_k():
    """0.4 held out every 2nd document (half) and 0.3 every 3rd, k being round(1 / fraction) (a review,
    2026-11-28): the share is now the fraction itself, spread evenly; 1 / k fractions keep every k-th."""
    from bertkit.text.packing import held_out, validation_share

    for fraction in (0.01, 0.05, 0.1, 0.25):
        k = round(1 / fraction)
        assert [d for d in range(1000) if held_out(d, validation_share(fraction))] == list(range(k - 1, 1000, k))
    for fraction in (0.3, 0.4, 0.37, 0.001, 0.499):
        picked = [d for d in range(10_000) if held_out(d, validation_share(fraction))]
        assert len(picked) == round(fraction * 10_000) and max(b - a for a, b in zip(picked, picked[1:])) <= \
            -(-1 // fraction) + 1  # spread evenly: no gap much over 1 / fraction
    assert validation_share(0.0) is None and not held_out(5, None)
    # small fractions of a large corpus: exact, never rounded to none (1e-5 held out nothing at a 10,000 bound)
    for fraction in (1e-5, 4e-5, 5e-5):
        share = validation_share(fraction)
        assert share[0] / share[1] == pytest.approx(fraction, rel=1e-9)
        i = np.arange(2_000_000, dtype=np.int64)
        assert int((((i + 1) * share[0]) // share[1] > (i * share[0]) // share[1]).sum()) == round(fraction * 2e6)


def test_word_starts_follow_the_pre_tokenizer(tmp_path, sample_tokenizer):
    dataset, _, key = _corpus(tmp_path, copies=5)
    packed = pack_corpus(dataset, key, sample_tokenizer, block_size=64, validation_fraction=0.0)
    ids = np.array(packed.train["input_ids"][0])
    starts = np.array(packed.train["word_start"][0])
    tokens = [sample_tokenizer.id_to_token(int(i)) for i in ids]
    for token, start, prev in zip(tokens[2:], starts[2:], tokens[1:]):
        if token.startswith("Ġ") or token in ("[SEP]",) or prev == "[SEP]":
            assert start, token  # a new word (space-led, or a document's first token)
        elif token.isalpha() and prev[-1:].isalpha():
            assert not start, token  # a piece continuing a word


def test_cache_key_and_reuse(tmp_path, sample_tokenizer, monkeypatch):
    dataset, _, key = _corpus(tmp_path)
    first = pack_corpus(dataset, key, sample_tokenizer, block_size=32)
    import bertkit.text.packing as packing

    monkeypatch.setattr(packing, "_build", lambda *a, **k: pytest.fail("cache not reused"))
    again = pack_corpus(dataset, key, sample_tokenizer, block_size=32)
    assert again.train["input_ids"] == first.train["input_ids"]
    monkeypatch.undo()
    other = pack_corpus(dataset, key, sample_tokenizer, block_size=16)
    assert len(other.train[0]["input_ids"]) == 16


def test_workers_give_identical_blocks(tmp_path, sample_tokenizer):
    dataset, _, key = _corpus(tmp_path, copies=250)  # > 2000 documents, so two processes really split the work
    one = pack_corpus(dataset, key, sample_tokenizer, block_size=32, workers=1)
    import shutil

    from bertkit.paths import cache_root

    shutil.rmtree(cache_root() / "packed")
    two = pack_corpus(dataset, key, sample_tokenizer, block_size=32, workers=2)
    assert len(one.train) == len(two.train) and one.train["input_ids"] == two.train["input_ids"]


def test_a_corpus_too_small_for_one_block(tmp_path, sample_tokenizer):
    path = tmp_path / "tiny.txt"
    path.write_text("just a few words\n")
    dataset, _, key = load_corpus([str(path)])
    with pytest.raises(BertkitError, match="corpus too small"):
        pack_corpus(dataset, key, sample_tokenizer, block_size=128)


@pytest.mark.parametrize("damage", ["truncate", "short-stream", "tail", "delete", "manifest"])
def test_a_damaged_pack_cache_is_rebuilt_with_the_same_blocks(tmp_path, sample_tokenizer, damage):
    """A truncated (or otherwise damaged) packed cache used to fail every later run until deleted by hand."""
    dataset, _, key = _corpus(tmp_path)
    first = pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.1)
    # lists, not lazy columns: the damage below must not reach a live memory map
    train, validation, stats = list(first.train["input_ids"]), list(first.validation["input_ids"]), first.stats
    del first
    folder = cache_root() / "packed" / pack_key(key, sample_tokenizer, 32, 0.1)
    damage_cache(folder, "train.arrow", damage)
    out = io.StringIO()
    again = pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.1,
                        console=Console(file=out, width=300))
    assert list(again.train["input_ids"]) == train and list(again.validation["input_ids"]) == validation
    assert again.stats == stats and len(train) > 10
    warning = out.getvalue()
    assert warning.count("\n") == 1 and "the packed corpus cache" in warning and "rebuilding it" in warning, warning
