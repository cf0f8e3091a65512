"""Inference glue: constrained decoding never emits an invalid span, spans carry character offsets, sorted batches
give what one-at-a-time inference gives."""

import itertools

import numpy as np
import torch

from bertkit.inference import batched_logits, decode_tags, entities, iob2_constraints, viterbi
from bertkit.nn.model import Model
from bertkit.text.features import Encoded
from conftest import tiny, heads

TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def _valid(path):
    for previous, tag in zip(["O"] + path, path):
        if tag.startswith("I-") and previous[2:] != tag[2:]:
            return False
    return True


def test_viterbi_is_the_best_valid_sequence():
    rng = np.random.default_rng(0)
    start, allowed = iob2_constraints(TAGS)
    for _ in range(30):
        log_probs = np.log(rng.dirichlet(np.ones(len(TAGS)) * 0.3, size=4))
        path = [TAGS[i] for i in viterbi(log_probs, start, allowed)]
        assert _valid(path)
        best = max((p for p in itertools.product(range(len(TAGS)), repeat=4) if _valid([TAGS[i] for i in p])),
                   key=lambda p: sum(log_probs[k, i] for k, i in enumerate(p)))
        assert path == [TAGS[i] for i in best]


def test_decoding_repairs_what_argmax_would_break():
    # argmax per word says O, I-PER, I-LOC: two invalid starts
    logits = np.log(np.array([[0.9, .025, .025, .025, .025], [0.3, 0.05, 0.05, 0.2, 0.4],
                              [0.3, 0.2, 0.4, 0.05, 0.05]]))
    encoded = Encoded(input_ids=[0, 1, 2, 3, 0], type_ids=[0] * 5, first_token=[1, 2, 3])
    token_logits = np.zeros((5, len(TAGS)))
    token_logits[1:4] = logits
    tags, scores = decode_tags(token_logits, encoded, TAGS, iob2_constraints(TAGS))
    assert _valid(tags) and tags[0] == "O"
    assert len(scores) == 3 and all(0 < s <= 1 for s in scores)


def test_a_word_sharing_the_previous_words_token_continues_its_entity():
    # "Peter \u00ad Blackburn ." with MiniLM (its normaliser deletes the soft hyphen: the word reads Peter's token),
    # a model right about every real token: decoded on Peter's logits the hyphen came out B-PER after B-PER, and the
    # entity was two (review, 2026-11-29)
    confident = {tag: np.log(np.where(np.arange(len(TAGS)) == TAGS.index(tag), 0.96, 0.01)) for tag in TAGS}
    token_logits = np.zeros((5, len(TAGS)))
    token_logits[1], token_logits[2], token_logits[3] = confident["B-PER"], confident["I-PER"], confident["O"]
    encoded = Encoded(input_ids=[0, 1, 2, 3, 0], type_ids=[0] * 5, first_token=[1, 1, 2, 3])
    tags, scores = decode_tags(token_logits, encoded, TAGS, iob2_constraints(TAGS))
    assert tags == ["B-PER", "I-PER", "I-PER", "O"] and scores[1] == scores[0]
    text, spans = "Peter \u00ad Blackburn .", [(0, 5), (6, 7), (8, 17), (18, 19)]
    assert [e["text"] for e in entities(tags, scores, spans, text)] == ["Peter \u00ad Blackburn"]
    # after an O word (one token covering "?!" split as two words) the follower is O; a first word has none to follow
    token_logits[1] = confident["O"]
    tags, _ = decode_tags(token_logits, encoded, TAGS, iob2_constraints(TAGS))
    assert tags[:2] == ["O", "O"]


def test_entities_have_character_offsets():
    text = "Peter Blackburn lives in New York ."
    spans = [(0, 5), (6, 15), (16, 21), (22, 24), (25, 28), (29, 33), (34, 35)]
    tags = ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC", "O"]
    found = entities(tags, [0.9, 0.7, 1, 1, 0.8, 0.6, 1], spans, text)
    assert [(e["label"], e["text"], e["start"], e["end"]) for e in found] == [
        ("PER", "Peter Blackburn", 0, 15), ("LOC", "New York", 25, 33)]
    assert found[0]["score"] == 0.8


def test_sorted_batches_restore_order_and_match_single_examples():
    model = Model(tiny(), heads("classifier", num_labels=3)).eval()
    rng = np.random.default_rng(1)
    examples = [Encoded(rng.integers(5, 100, n).tolist(), [0] * n) for n in (9, 3, 17, 5, 12)]
    batched = batched_logits(model, examples, "classifier", pad_id=0, batch_size=2)
    for example, logits in zip(examples, batched):
        single = batched_logits(model, [example], "classifier", pad_id=0)[0]
        np.testing.assert_allclose(logits, single, atol=1e-5)
    tagger = Model(tiny(), heads("tagger", num_labels=5)).eval()
    tagged = batched_logits(tagger, examples, "tagger", pad_id=0, batch_size=3)
    assert [t.shape for t in tagged] == [(len(e.input_ids), 5) for e in examples]
    with torch.no_grad():
        ids = torch.tensor([examples[2].input_ids])
        np.testing.assert_allclose(tagged[2], tagger(ids, head="tagger").logits[0].numpy(), atol=1e-5)
