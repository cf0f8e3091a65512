"""Decoding for the two generative stacks: sampling / greedy continuation of prompts (decoder, GPT) and greedy /
beam search translation (encoder-decoder), with or without a KV cache.

Both run on `Stepper`, which gives the next-token logits of a batch of growing sequences: with the cache it feeds
only the new tokens (keys/values of earlier positions and the encoder's cross-attention keys/values are reused);
without it, the whole prefix every step. The two are tested to pick exactly the same tokens in fp32 (in bf16 a
near-tie may fall either way with the shapes, as with the batch size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.nn.attention import KVCache
from bertkit.nn.model import Model


DEFAULT_TOP_K, DEFAULT_TOP_P = 50, 0.95  # `bertkit generate`'s sampling, and GenerateJob's


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: greedy (argmax), or a sample at `temperature` from the `top_k` most likely
    tokens (0: all) that together hold `top_p` of the probability (1.0: all). `Sampling()` samples from every token;
    `bertkit generate` (and `GenerateJob` by default) from the top DEFAULT_TOP_K holding DEFAULT_TOP_P."""

    greedy: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature > 0):  # nan / inf: a nan or uniform softmax
            raise BertkitError(f"temperature must be a finite number > 0 (use greedy decoding for argmax), got "
                             f"{self.temperature}")
        if self.top_k < 0:
            raise BertkitError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise BertkitError(f"top_p must be in (0, 1], got {self.top_p}")


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Set every logit outside the top-k and outside the nucleus (the smallest set of most likely tokens whose
    probability reaches top_p) to -inf. (N, V) -> (N, V); the most likely token always survives. Tokens tied with
    the k-th all survive (so more than k may; as in transformers); among tokens tied at the nucleus's edge, those
    the sort puts first survive."""
    if top_k and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)  # (N, V)
        # drop a token when the tokens before it already reach top_p
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def pick(logits: torch.Tensor, sampling: Sampling, generators: list[torch.Generator] | None) -> torch.Tensor:
    """Next token per row: (N, V) float logits -> (N,) ids; each row draws from its own generator (None: torch's
    global one), so a row's sample does not depend on the rows beside it."""
    if sampling.greedy:
        return logits.argmax(-1)
    logits = logits.float()
    # shifted by each row's largest first (softmax, top-k and top-p do not change): a temperature like 1e-40 would
    # make the logits inf and the probabilities NaN; shifted, the largest stays 0 and the draw is all but argmax
    scaled = (logits - logits.amax(-1, keepdim=True)) / sampling.temperature  # (N, V)
    filtered = filter_logits(scaled, sampling.top_k, sampling.top_p)
    probs = filtered.softmax(-1).cpu()  # (N, V)
    if generators is None:
        return torch.multinomial(probs, 1).squeeze(-1).to(logits.device)
    drawn = [torch.multinomial(row, 1, generator=g) for row, g in zip(probs, generators)]  # N x (1,)
    return torch.cat(drawn).to(logits.device)


def row_seed(seed: int, row: int) -> int:
    """The seed of prompt `row` under `seed`: mixed (numpy's SeedSequence), so that no (seed, row) pair shares
    another's random stream, as `seed + row` would (seed 1's first prompt = seed 0's second)."""
    return int(np.random.SeedSequence((seed, row)).generate_state(1)[0])


class Stepper:
    """Next-token logits of growing sequences (N, T) -> (N, V), for a decoder or the decoder of an encoder-decoder.

    With `use_cache`, each call feeds only the tokens not seen yet and a KVCache keeps the rest; `reorder`
    follows beam search's surviving rows (cache, encoder states and source mask alike).
    """

    def __init__(self, model: Model, use_cache: bool = True, memory: torch.Tensor | None = None,
                 memory_mask: torch.Tensor | None = None):
        self.model, self.use_cache = model, use_cache
        self.memory, self.memory_mask = memory, memory_mask  # (N, S, D), (N, S) for an encoder-decoder
        stack = model.backbone.decoder if memory is not None else model.backbone
        self.stack = stack
        self.cache = KVCache(len(stack.blocks)) if use_cache else None
        self.seen = 0

    @torch.no_grad()
    def __call__(self, ids: torch.Tensor, mask: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> torch.Tensor:
        """ids (N, T) every token so far; mask (N, T) 1 at real tokens (left padding), positions (N, T)."""
        start = self.seen if self.use_cache else 0
        new = ids[:, start:]
        new_positions = None if positions is None else positions[:, start:]
        kwargs = {"memory": self.memory, "memory_mask": self.memory_mask} if self.memory is not None else {}
        out = self.stack(new, mask, position_ids=new_positions, cache=self.cache, **kwargs)
        self.seen = ids.shape[1]
        # the last position's logits in fp32 whatever the autocast: in bf16 two tokens' logits tied exactly (5.09375
        # both), and --greedy took another token than fp32 greedy (a review, 2026-11-28); one row of V, no cost
        with torch.autocast(ids.device.type, enabled=False):
            return self.model.lm_logits(out.last_hidden_state[:, -1].float()).float()  # (N, V)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (N',) in that order."""
        if self.cache is not None:
            self.cache.reorder(index)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, index)
            if self.memory_mask is not None:
                self.memory_mask = self.memory_mask.index_select(0, index)


@torch.no_grad()
def generate(model: Model, prompts: list[list[int]], max_new_tokens: int, eos_id: int | None, pad_id: int,
             sampling: Sampling = Sampling(), seed: int | list[int] | None = 0,
             use_cache: bool = True, banned: list[int] = ()) -> list[list[int]]:
    """Continue each prompt (token ids, at least one each) by up to `max_new_tokens` tokens, stopping a row at
    `eos_id` (not returned). Prompts of different lengths run as one left-padded batch: each row's positions
    count from its first real token, so a prompt continues the same way alone or in a batch. A sampled row draws
    from its own generator, seeded `row_seed(seed, i)` for row i (or by `seed[i]`, a list: the caller's rows in a
    longer list), so its sample does not depend on the other rows. `banned` ids are never chosen. Returns the new
    ids.
    """
    if any(not p for p in prompts):
        raise ValueError("every prompt needs at least one token")
    model.eval()
    device = model.device
    n, longest = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((n, longest), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((n, longest), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):
        ids[i, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[i, longest - len(p):] = 1
    padded = bool((mask == 0).any())
    seeds = None if seed is None else seed if isinstance(seed, list) else [row_seed(seed, i) for i in range(n)]
    if seeds is not None and len(seeds) != n:
        raise ValueError(f"{len(seeds)} seeds for {n} prompts")
    generators = None if seeds is None else [torch.Generator().manual_seed(s) for s in seeds]
    stepper = Stepper(model, use_cache)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    out: list[list[int]] = [[] for _ in range(n)]
    for _ in range(max_new_tokens):
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (N, T): 0 at each row's first real token
        logits = stepper(ids, mask if padded else None, positions if padded else None)
        if banned:
            logits[:, list(banned)] = float("-inf")
        token = pick(logits, sampling, generators)  # (N,)
        token = torch.where(done, torch.full_like(token, pad_id), token)
        for i in (~done).nonzero().flatten().tolist():
            if eos_id is not None and int(token[i]) == eos_id:
                done[i] = True
            else:
                out[i].append(int(token[i]))
        ids = torch.cat([ids, token[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # finished rows run on, ignored
        if bool(done.all()):
            break
    return out


@torch.no_grad()
def encode_source(model: Model, source: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad source ids and run the encoder once: -> encoder states (N, S, D), source mask (N, S)."""
    device = model.device
    longest = max(len(s) for s in source)
    ids = torch.full((len(source), longest), pad_id, dtype=torch.long, device=device)
    for i, s in enumerate(source):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
    lengths = torch.tensor([len(s) for s in source], device=device)
    mask = (torch.arange(longest, device=device)[None, :] < lengths[:, None]).long()  # (N, S)
    return model.backbone.encode(ids, mask).last_hidden_state, mask


def _length_penalty(length: int, alpha: float) -> float:
    return length ** alpha


@torch.no_grad()
def beam_search(model: Model, source: list[list[int]], bos_id: int, eos_id: int, pad_id: int, max_new_tokens: int,
                beam_size: int = 4, length_penalty: float = 1.0, use_cache: bool = True) -> list[list[int]]:
    """Translate a batch of source sentences (ids) with beam search: per sentence keep the `beam_size` best
    prefixes by summed log-probability; a hypothesis ends at `eos_id` and is scored sum / length^length_penalty
    (length counts the tokens after BOS, EOS included; 0 compares raw sums, > 0 favours longer outputs).
    `beam_size` 1 is greedy decoding. Returns the best output per sentence (ids without BOS/EOS)."""
    model.eval()
    n, k = len(source), beam_size
    memory, memory_mask = encode_source(model, source, pad_id)
    device = memory.device
    rows = torch.arange(n, device=device).repeat_interleave(k)  # (N*K,) each beam's sentence
    stepper = Stepper(model, use_cache, memory.index_select(0, rows), memory_mask.index_select(0, rows))
    tokens = torch.full((n * k, 1), bos_id, dtype=torch.long, device=device)
    scores = torch.full((n, k), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: only the first is live at step 0
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(n)]
    active = [True] * n
    for step in range(1, max_new_tokens + 1):
        log_probs = stepper(tokens).log_softmax(-1)  # (N*K, V)
        vocab = log_probs.shape[-1]
        candidates = (scores[:, :, None] + log_probs.view(n, k, vocab)).view(n, k * vocab)  # (N, K*V)
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (N, 2K): enough to refill K after EOS picks
        new_scores = torch.full((n, k), float("-inf"), device=device)
        origin = torch.arange(n * k, device=device)  # which old row each new row continues
        next_token = torch.full((n * k,), pad_id, dtype=torch.long, device=device)
        for i in range(n):
            if not active[i]:
                continue
            filled = 0
            for rank, (score, index) in enumerate(zip(top_scores[i].tolist(), top_index[i].tolist())):
                if score == float("-inf"):
                    break
                beam, token = divmod(index, vocab)
                if token == eos_id:
                    if rank >= k:  # an EOS outside the K best is no hypothesis (so beam size 1 is greedy)
                        continue
                    prefix = tokens[i * k + beam, 1:].tolist()
                    finished[i].append((score / _length_penalty(step, length_penalty), prefix))
                    continue
                new_scores[i, filled] = score
                origin[i * k + filled] = i * k + beam
                next_token[i * k + filled] = token
                filled += 1
                if filled == k:
                    break
            # done when K hypotheses ended and no live one can still beat the worst of them (HF's heuristic)
            if len(finished[i]) >= k:
                finished[i].sort(key=lambda h: -h[0])
                finished[i] = finished[i][:k]
                best_live = float(new_scores[i, 0]) / _length_penalty(step, length_penalty)
                if filled == 0 or finished[i][-1][0] >= best_live:
                    active[i] = False
        if not any(active):
            break
        scores = new_scores
        stepper.reorder(origin)
        tokens = torch.cat([tokens.index_select(0, origin), next_token[:, None]], dim=1)
    for i in range(n):  # out of steps: live beams compete as they are
        if active[i]:
            for b in range(k):
                if math.isfinite(float(scores[i, b])):
                    finished[i].append((float(scores[i, b]) / _length_penalty(tokens.shape[1] - 1, length_penalty),
                                        tokens[i * k + b, 1:].tolist()))
    return [max(f, key=lambda h: h[0])[1] if f else [] for f in finished]
