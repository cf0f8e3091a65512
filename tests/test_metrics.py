"""Task metrics: the numbers scikit-learn / seqeval define, unseen labels counted as errors, strict entities."""

import pytest

from bertkit.metrics import classification_metrics, entity_metrics


def test_classification_metrics_and_confusion_matrix():
    gold = ["pos", "pos", "neg", "neg", "neu"]
    predicted = ["pos", "neg", "neg", "neg", "pos"]
    result = classification_metrics(gold, predicted, ["neg", "neu", "pos"])
    assert result["accuracy"] == pytest.approx(3 / 5)
    # per-class F1: neg 2*(2/3*1)/(2/3+1)=0.8, neu 0, pos 2*(.5*.5)/1=0.5
    assert result["macro_f1"] == pytest.approx((0.8 + 0 + 0.5) / 3)
    assert result["confusion"]["labels"] == ["neg", "neu", "pos"]
    assert result["confusion"]["matrix"] == [[2, 0, 0], [0, 0, 1], [1, 0, 1]]
    assert -1 <= result["mcc"] <= 1
    # a class the model predicts that the split lacks counts (F1 0), as in scikit-learn's and HF evaluate's f1:
    # a: 2/3, b: 2/3, c: 0
    assert classification_metrics(["a", "a", "b", "b"], ["a", "c", "b", "c"], ["a", "b", "c"])["macro_f1"] == \
        pytest.approx((2 / 3 + 2 / 3 + 0) / 3)


def test_an_unseen_gold_label_is_an_error_with_its_own_row():
    result = classification_metrics(["a", "b", "new"], ["a", "b", "a"], ["a", "b"])
    assert result["accuracy"] == pytest.approx(2 / 3)
    assert result["confusion"]["labels"] == ["a", "b", "new"]
    assert result["confusion"]["matrix"][2] == [1, 0, 0]


def test_entity_metrics_are_strict():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    exact = entity_metrics(gold, gold)
    assert exact["f1"] == 1.0 and exact["per_type"]["PER"]["support"] == 1
    # a boundary error (PER one word short) is a miss and a false positive, not half right
    short = entity_metrics(gold, [["B-PER", "O", "O", "B-LOC"]])
    assert short["precision"] == pytest.approx(0.5) and short["recall"] == pytest.approx(0.5)
    assert short["per_type"]["PER"]["f1"] == 0.0 and short["per_type"]["LOC"]["f1"] == 1.0
    # macro: the types' mean, a rare type counting as much as a common one (micro F1 is 0.5 here too, by chance)
    assert short["macro_f1"] == pytest.approx(0.5)
    skewed = entity_metrics([["B-LOC", "O", "B-LOC", "O", "B-LOC", "B-PER"]], [["B-LOC", "O", "B-LOC", "O", "B-LOC",
                                                                                "O"]])
    assert skewed["f1"] == pytest.approx(2 * 3 / (3 + 4)) and skewed["macro_f1"] == pytest.approx(0.5)
    # no entity type anywhere: 0.0, as the micro figures are (seqeval's macro row is nan; it was printed as such)
    assert entity_metrics([["O", "O"]], [["O", "O"]])["macro_f1"] == 0.0


def test_a_lowercasing_tokenizers_translations_are_scored_without_case():
    """A run whose tokenizer lowercases cannot write a capital: scored against cased references, every capital was a
    miss and the signature said case:mixed (noticed 2026-11-28). Its BLEU and chrF are case-insensitive now, and
    the signature says so."""
    from bertkit.metrics import translation_metrics
    from bertkit.text.tokenizer import build_untrained, lowercases

    assert lowercases(build_untrained(lowercase=True)) and not lowercases(build_untrained())
    hypotheses, references = ["two men are playing guitars ."], ["Two men are playing Guitars ."]
    cased, folded = translation_metrics(hypotheses, references), translation_metrics(hypotheses, references, True)
    assert folded["bleu"] == pytest.approx(100.0) and cased["bleu"] < 60 and folded["chrf"] > cased["chrf"]
    assert "case:lc" in folded["bleu_signature"] and "case:mixed" in cased["bleu_signature"]
