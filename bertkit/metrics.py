"""Task metrics from well-kept libraries: scikit-learn for classification, seqeval (strict IOB2) for entities,
scipy for correlations, sacrebleu for translation.

`evaluate.load` would fetch metric code from the Hub at run time; these run offline.
"""

from __future__ import annotations

import warnings

import numpy as np


def classification_metrics(gold: list[str], predicted: list[str], labels: list[str] | None = None) -> dict:
    """Accuracy, macro-F1 and MCC over string labels, plus the confusion matrix (rows gold, columns predicted).

    A gold label the model never saw cannot be predicted: it counts as an error and appears as its own row.
    """
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, matthews_corrcoef

    order = list(dict.fromkeys(list(labels or []) + sorted(set(gold) | set(predicted))))
    with warnings.catch_warnings():  # a label never predicted makes its F1 0 (what we want), not a warning
        warnings.simplefilter("ignore")
        result = {
            "accuracy": float(accuracy_score(gold, predicted)),
            # over gold and predicted labels alike (scikit-learn's default): a class the model predicts that this
            # split lacks has F1 0 and counts, as it does in HF evaluate's f1
            "macro_f1": float(f1_score(gold, predicted, labels=sorted(set(gold) | set(predicted)), average="macro",
                                       zero_division=0)),
            "mcc": float(matthews_corrcoef(gold, predicted)) if len(set(gold) | set(predicted)) > 1 else 0.0,
        }
    result["confusion"] = {"labels": order, "matrix": confusion_matrix(gold, predicted, labels=order).tolist()}
    result["examples"] = len(gold)
    return result


def entity_metrics(gold: list[list[str]], predicted: list[list[str]]) -> dict:
    """Entity-level precision / recall / F1 (seqeval, strict IOB2: an entity counts only with exact type and
    boundaries), overall (micro), per type, and the types' macro-averaged F1."""
    from seqeval.metrics import classification_report, f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    kwargs = {"mode": "strict", "scheme": IOB2, "zero_division": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = classification_report(gold, predicted, output_dict=True, **kwargs)
        result = {"precision": float(precision_score(gold, predicted, **kwargs)),
                  "recall": float(recall_score(gold, predicted, **kwargs)),
                  "f1": float(f1_score(gold, predicted, **kwargs))}
    result["per_type"] = {kind: {"precision": float(v["precision"]), "recall": float(v["recall"]),
                                 "f1": float(v["f1-score"]), "support": int(v["support"])}
                          for kind, v in report.items() if not kind.endswith(" avg")}
    # the unweighted mean over entity types (a rare type counts as much as a common one), as seqeval's report has it
    # (no type in gold or prediction: 0.0 as zero_division=0 makes the micro figures; seqeval's row says nan)
    per_type = result["per_type"]
    result["macro_f1"] = float(np.mean([v["f1"] for v in per_type.values()])) if per_type else 0.0
    result["sentences"] = len(gold)
    return result


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (scores for JSON output)."""
    z = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def correlation_metrics(gold: list[float] | np.ndarray, predicted: list[float] | np.ndarray) -> dict:
    """Spearman and Pearson correlation of predicted similarities with gold scores (scipy), as in SBERT's STS
    evaluation; NaN when either side is constant."""
    from scipy.stats import pearsonr, spearmanr

    gold, predicted = np.asarray(gold, dtype=np.float64), np.asarray(predicted, dtype=np.float64)
    if len(gold) < 2 or np.ptp(gold) == 0 or np.ptp(predicted) == 0:
        return {"spearman": float("nan"), "pearson": float("nan"), "pairs": len(gold)}
    return {"spearman": float(spearmanr(gold, predicted).statistic), "pearson": float(pearsonr(gold, predicted)[0]),
            "pairs": len(gold)}


def translation_metrics(hypotheses: list[str], references: list[str], lowercase: bool = False) -> dict:
    """Corpus BLEU and chrF (sacrebleu, its default 13a tokenisation: comparable with published scores) of
    detokenised outputs against one reference each. `lowercase`: case-insensitive (the signature says case:lc),
    for a model whose tokenizer lowercases: it cannot write a capital, and cased scoring counts each one a miss."""
    import sacrebleu

    bleu_metric = sacrebleu.metrics.BLEU(lowercase=lowercase)
    chrf_metric = sacrebleu.metrics.CHRF(lowercase=lowercase)
    bleu = bleu_metric.corpus_score(hypotheses, [references])
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    return {"bleu": float(bleu.score), "chrf": float(chrf.score), "bleu_detail": str(bleu),
            "bleu_signature": str(bleu_metric.get_signature()), "sentences": len(hypotheses)}
