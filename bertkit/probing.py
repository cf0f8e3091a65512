"""Layer-wise linear probes: what does each layer of a frozen model encode about words?

For every word of a tagged corpus, the representation is its first subword's state at each layer (the embeddings
output is layer 0). A multinomial logistic regression (scikit-learn, on standardised features) is trained per layer
on the training words and scored on held-out words: accuracy (POS), or entity / chunk F1 (seqeval, IOB2 spans).

The control task (Hewitt & Liang, 2019, "Designing and Interpreting Probes with Control Tasks") gives every word
type a fixed random label drawn from the task's label distribution. A probe can score well on it only by memorising
word identities, so `selectivity = task accuracy − control accuracy` says how much of a layer's score is the
linguistic property rather than the probe's own capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from seqeval.metrics import f1_score

from bertkit.inference import run_sorted
from bertkit.nn.model import Model
from bertkit.text.features import TaskEncoder, join_words

# task -> (CoNLL-2003 column, how it is scored, tag scheme): columns are token POS chunk NER
TASKS = {"pos": (1, "accuracy", "raw"), "chunk": (2, "f1", "iob"), "ner": (-1, "f1", "iob")}


@dataclass
class WordFeatures:
    """Per-word states of every layer: `states` (N_words, L + 1, D) float32; `kept[s]` the words of sentence s that
    have a state (a word cut off by max_length has none)."""

    states: np.ndarray
    kept: list[list[bool]]
    truncated: int  # sentences that did not fit max_length


def word_features(model: Model, encoder: TaskEncoder, sentences: list[tuple[str, ...]], pad_id: int,
                  batch_size: int = 32, chunk: int = 256) -> WordFeatures:
    """First-subword states of every layer for every word of `sentences` (words pre-split, e.g. CoNLL). Sentences
    run `chunk` at a time and only the first subwords' states are kept, so memory holds one chunk's token states
    plus the word states."""
    rows, kept, truncated = [], [], 0
    for start in range(0, len(sentences), chunk):
        joined = [join_words(words) for words in sentences[start:start + chunk]]
        encoded = encoder.words([text for text, _ in joined], [spans for _, spans in joined])
        truncated += sum(e.truncated for e in encoded)
        states = run_sorted(model, encoded, pad_id, batch_size,
                            lambda ids, mask, types: model.layer_states(ids, mask, types),
                            per_token=True)  # [(T, L+1, D)]
        for token_states, enc in zip(states, encoded):
            positions = enc.first_token or []
            kept.append([p >= 0 for p in positions])
            keep = [p for p in positions if p >= 0]
            if keep:
                rows.append(token_states[keep])  # (W, L+1, D)
    shape = (0, model.layer_count, model.config.d_model)
    states = np.concatenate(rows) if rows else np.zeros(shape, dtype=np.float32)
    return WordFeatures(states.astype(np.float32, copy=False), kept, truncated)


def kept_items(items: list[list], kept: list[list[bool]]) -> list:
    """The per-word items (tags, words) of the words that have a state, flattened in order."""
    return [item for sentence, mask in zip(items, kept) for item, has in zip(sentence, mask) if has]


def control_labels(words: list[str], labels: list[str], seed: int) -> dict[str, str]:
    """Hewitt & Liang's control task: each word type -> one label drawn from the empirical label distribution."""
    values, counts = np.unique(np.array(labels, dtype=object), return_counts=True)
    types = sorted(set(words))
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(values), size=len(types), p=counts / counts.sum())
    return {word: str(values[i]) for word, i in zip(types, picks)}


class LinearProbe:
    """Multinomial logistic regression on standardised features (mean and scale from the training words)."""

    def __init__(self, max_iter: int = 300, C: float = 1.0, seed: int = 0):
        self.max_iter, self.C, self.seed = max_iter, C, seed

    def fit(self, x: np.ndarray, y: list[str]) -> LinearProbe:
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        self.mean, self.scale = x.mean(0), x.std(0) + 1e-6
        self.model = LogisticRegression(max_iter=self.max_iter, C=self.C, random_state=self.seed)
        with warnings.catch_warnings():  # a capped probe is still a probe: its iterations are reported instead
            warnings.simplefilter("ignore", ConvergenceWarning)
            if len(set(y)) == 1:  # one class: predict it (LogisticRegression refuses a single class)
                self.constant = y[0]
                return self
            self.constant = None
            self.model.fit((x - self.mean) / self.scale, y)
        return self

    def predict(self, x: np.ndarray) -> list[str]:
        if self.constant is not None:
            return [self.constant] * len(x)
        return list(self.model.predict((x - self.mean) / self.scale))


def split_by_sentence(flat: list[str], kept: list[list[bool]]) -> list[list[str]]:
    """Flat per-word predictions back into sentences (for span F1); a word without a state is tagged O."""
    out, position = [], 0
    for mask in kept:
        sentence = []
        for has_state in mask:
            sentence.append(flat[position] if has_state else "O")
            position += has_state
        out.append(sentence)
    return out


def score(task: str, gold: list[list[str]], predicted_flat: list[str], kept: list[list[bool]]) -> dict[str, float]:
    """accuracy over words with a state; for span tasks also F1 over entities / chunks (seqeval's default,
    conlleval-style mode: a probe's unconstrained I-X after O starts an entity, as conlleval counts it; finetuned
    taggers are scored strict IOB2 after constrained decoding, so the two F1s are not on one scale)."""
    gold_flat = kept_items(gold, kept)
    result = {"accuracy": float(np.mean(np.array(gold_flat, dtype=object) == np.array(predicted_flat, dtype=object)))}
    if TASKS[task][1] == "f1":
        result["f1"] = float(f1_score(gold, split_by_sentence(predicted_flat, kept)))
    return result
