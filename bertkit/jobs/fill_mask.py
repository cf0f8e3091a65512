"""`bertkit fill-mask`: the pretrained MLM head's (or an ELECTRA run's generator's) top-k guesses for each [MASK]
in a text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.errors import BertkitError, a_or_an
from bertkit.run.directory import load_run
from bertkit.text.tokenizer import MASK, continuation, load_run_tokenizer, special_ids


@dataclass(frozen=True)
class FillMaskJob:
    """What `bertkit fill-mask` is asked: a run with an MLM head (or an ELECTRA generator), a text with [MASK]s."""

    model: Path
    text: str
    top_k: int = 5


@dataclass(frozen=True)
class Guess:
    """One candidate for a [MASK]: the token, its id, its probability and the text with it filled in."""

    token: str
    token_id: int
    score: float
    sequence: str


@dataclass(frozen=True)
class FillMaskResult:
    """For each [MASK] of the text, left to right, its `top_k` guesses, most probable first."""

    masks: list[list[Guess]]


def run(job: FillMaskJob) -> FillMaskResult:
    """The model's top-k guesses for every [MASK] in the text."""
    model_dir, top_k = job.model, job.top_k
    if top_k < 1:  # the command's min=1; from Python it returned no guesses
        raise BertkitError(f"--top-k {top_k}: must be >= 1")
    config, model = load_run(model_dir)
    if config.model.architecture != "encoder":
        hint = "`bertkit generate` continues a decoder's text" if config.model.architecture == "decoder" else \
            "`bertkit translate` runs an encoder-decoder"
        raise BertkitError(f"{model_dir}: fill-mask needs an encoder with an MLM head; this is "
                           f"{a_or_an(config.model.architecture)} ({hint})")
    if "mlm" not in config.heads.names and "generator" not in config.heads.names:
        raise BertkitError(f"{model_dir}: this model has no MLM head (pretrain one with `bertkit pretrain`, or import "
                           "a BertForMaskedLM checkpoint)")
    tokenizer = load_run_tokenizer(model_dir, config)
    ids = special_ids(tokenizer)
    encoding = tokenizer.encode(job.text)
    input_ids = torch.tensor([encoding.ids])
    if input_ids.shape[1] > config.model.max_len:
        raise BertkitError(f"the text is {input_ids.shape[1]} tokens long; this model reads at most "
                           f"{config.model.max_len}")
    selected = input_ids == ids.mask
    if not selected.any():
        lower = MASK.lower() in job.text.lower()  # "[mask]": the tokenizer's special token is case-sensitive
        written = f" ('{MASK.lower()}' is text: write it {MASK}, in capitals)" if lower else ""
        raise BertkitError(f"the text has no {MASK} token to fill{written}")
    with torch.no_grad():
        # an ELECTRA run (objective rtd) fills masks with its generator: the MLM it trained beside the encoder
        logits = model(input_ids, mlm_select=selected).logits if "mlm" in config.heads.names else \
            model.generator_logits(input_ids, selected)
        probs = logits.float().softmax(-1)  # (n_masks, V)
    # a special token is no word to fill in (it decodes to ""), nor is an id past the tokenizer's vocabulary (an
    # imported model's embedding table may be padded beyond it): never offered; the scores stay the model's own
    specials = sorted(set(ids.all))
    probs[:, specials] = -1.0
    known = min(tokenizer.get_vocab_size(), probs.shape[-1])
    probs[:, known:] = -1.0
    words = known - len(specials)
    if top_k > words:
        raise BertkitError(f"--top-k {top_k}: the vocabulary has {words:,} tokens that can fill a mask (special tokens "
                           "are never offered)")
    scores, candidates = probs.topk(top_k, dim=-1)
    positions = selected[0].nonzero().flatten().tolist()
    results = []
    for mask_index, position in enumerate(positions):
        # a guess's sequence is the text with this mask's span (its offsets: a space before it included) replaced by
        # the token as it reads after the text before it, every other character as given. Decoding the filled ids
        # skipped the other masks, so '[MASK] Citizen: [MASK] will go.' read ', Citizen: will go.'
        start, end = encoding.offsets[position]
        options = []
        for score, token_id in zip(scores[mask_index].tolist(), candidates[mask_index].tolist()):
            word = continuation(tokenizer, encoding.ids[:position], [token_id])
            if job.text[:start][-1:].isspace() and word[:1].isspace():  # WordPiece's [MASK] leaves the space
                word = word.lstrip()  # before it out of its span, and the word brings its own: "the  capital"
            sequence = (job.text[:start] + word + job.text[end:]).strip()
            options.append(Guess(tokenizer.decode([token_id]).strip(), token_id, score, sequence))
        results.append(options)
    return FillMaskResult(results)
