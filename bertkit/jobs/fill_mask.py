"""`bertkit fill-mask`: the pretrained MLM head's (or an ELECTRA run's generator's) top-k guesses for each [MASK]
in a text."""

from __future__ import annotations

from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.run.directory import load_run, load_run_tokenizer
from bertkit.text.tokenizer import MASK, special_ids


def run(model_dir: Path, text: str, top_k: int = 5) -> list[list[dict]]:
    """For each [MASK] (left to right): top_k candidates as {"token", "score", "sequence"}."""
    config, model = load_run(model_dir)
    if "mlm" not in config.model.heads and "generator" not in config.model.heads:
        raise BertkitError(f"{model_dir}: this model has no MLM head (pretrain one with `bertkit pretrain`, or import "
                           "a BertForMaskedLM checkpoint)")
    tokenizer = load_run_tokenizer(model_dir, config)
    ids = special_ids(tokenizer)
    encoding = tokenizer.encode(text)
    input_ids = torch.tensor([encoding.ids])
    if input_ids.shape[1] > config.model.max_len:
        raise BertkitError(f"the text is {input_ids.shape[1]} tokens long; this model reads at most "
                           f"{config.model.max_len}")
    selected = input_ids == ids.mask
    if not selected.any():
        raise BertkitError(f"the text has no {MASK} token to fill")
    with torch.no_grad():
        # an ELECTRA run (objective rtd) fills masks with its generator: the MLM it trained beside the encoder
        logits = model(input_ids, mlm_select=selected).logits if "mlm" in config.model.heads else \
            model.generator_logits(input_ids, selected)
        probs = logits.float().softmax(-1)  # (n_masks, V)
    scores, candidates = probs.topk(min(top_k, probs.shape[-1]), dim=-1)
    positions = selected[0].nonzero().flatten().tolist()
    results = []
    for mask_index, position in enumerate(positions):
        options = []
        for score, token_id in zip(scores[mask_index].tolist(), candidates[mask_index].tolist()):
            filled = list(encoding.ids)
            filled[position] = token_id
            options.append({"token": tokenizer.decode([token_id]).strip(), "token_id": token_id,
                            "score": score, "sequence": tokenizer.decode(filled).strip()})
        results.append(options)
    return results
