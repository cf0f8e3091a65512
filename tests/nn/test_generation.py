"""KV cache and decoding: cached == uncached, batched == alone, beam search against brute force."""

import itertools

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.generation import row_seed, Sampling, beam_search, filter_logits, generate, pick
from bertkit.nn.attention import KVCache
from bertkit.nn.model import Model
from tests.conftest import POSITIONS, heads, tiny

EOS, PAD, BOS = 3, 0, 2


def _decoder(positions: str, **overrides) -> Model:
    cfg = tiny(architecture="decoder", positions=positions, n_kv_heads=2, type_vocab_size=0, **overrides)
    return Model(cfg, heads("lm")).eval()


def _seq2seq(positions: str = "sinusoidal", vocab_size: int = 101, **overrides) -> Model:
    cfg = tiny(architecture="encoder-decoder", positions=positions, type_vocab_size=0, vocab_size=vocab_size,
               **overrides)
    return Model(cfg, heads("lm")).eval()


@pytest.mark.parametrize("positions", POSITIONS)
def test_incremental_decoding_with_a_cache_equals_the_full_forward(positions):
    model = _decoder(positions)
    ids = torch.randint(5, 101, (2, 9))
    full = model(ids, head="lm").logits  # (2, 9, V)
    cache = KVCache(len(model.backbone.blocks))
    steps = [model(ids[:, :4], cache=cache, head="lm").logits]  # a prefix, then one token at a time
    for t in range(4, 9):
        steps.append(model(ids[:, t:t + 1], cache=cache, head="lm").logits)
    assert cache.length == 9
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_generation_gives_exactly_the_tokens_of_uncached_generation(positions):
    model = _decoder(positions)
    prompts = [[BOS, 7, 9, 11, 12], [BOS, 8], [BOS, 13, 14]]  # different lengths: one left-padded batch
    for sampling in (Sampling(greedy=True), Sampling(temperature=1.3, top_k=20, top_p=0.9)):
        cached = generate(model, prompts, 12, EOS, PAD, sampling, seed=5, use_cache=True)
        uncached = generate(model, prompts, 12, EOS, PAD, sampling, seed=5, use_cache=False)
        assert cached == uncached
        assert all(len(c) == 12 or EOS not in c for c in cached)


@pytest.mark.parametrize("positions", ["learned", "rotary", "relative"])
def test_a_prompt_continues_the_same_alone_and_in_a_left_padded_batch(positions):
    model = _decoder(positions)
    prompts = [[BOS, 7, 9, 11, 12, 40, 41], [BOS, 8], [BOS, 13, 14]]
    batched = generate(model, prompts, 10, None, PAD, Sampling(greedy=True))
    alone = [generate(model, [p], 10, None, PAD, Sampling(greedy=True))[0] for p in prompts]
    assert batched == alone and all(len(b) == 10 for b in batched)


def test_next_token_logits_are_fp32_under_bf16_autocast():
    """The last position's logits are computed in fp32 whatever the autocast: in bf16 two tokens' logits tied
    exactly, and --greedy took another token than fp32 greedy (a review, 2026-11-28)."""
    from bertkit.generation import Stepper

    model = _decoder("rotary")
    ids = torch.randint(5, 101, (2, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = Stepper(model, use_cache=False)(ids)  # (2, V)
        hidden = model.backbone(ids).last_hidden_state[:, -1]
    assert logits.dtype == torch.float32
    assert not torch.equal(logits, logits.to(torch.bfloat16).float())  # not bf16 values cast up
    torch.testing.assert_close(logits, model.lm_logits(hidden.float()).float())


def test_generation_stops_at_eos_and_the_seed_reproduces_samples():
    model = _decoder("rotary")
    hot = Sampling(temperature=2.0)
    free = generate(model, [[BOS, 9]], 12, None, PAD, hot, seed=7)[0]
    stop = next(i for i, t in enumerate(free) if t not in free[:i] and i > 0)  # a token seen first at step i
    assert generate(model, [[BOS, 9]], 12, free[stop], PAD, hot, seed=7) == [free[:stop]]
    a = generate(model, [[BOS, 9]] * 3, 15, None, PAD, Sampling(temperature=2.0), seed=1)
    b = generate(model, [[BOS, 9]] * 3, 15, None, PAD, Sampling(temperature=2.0), seed=1)
    c = generate(model, [[BOS, 9]] * 3, 15, None, PAD, Sampling(temperature=2.0), seed=2)
    assert a == b and a != c and a[0] != a[1]  # rows of one batch draw their own samples
    # a row's sample is its own: the same with other rows beside it, alone, or in a batch of another size
    prompts = [[BOS, 9], [BOS, 4, 5, 6], [BOS, 7]]
    together = generate(model, prompts, 15, None, PAD, hot, seed=3)
    assert [generate(model, [p], 15, None, PAD, hot, seed=[row_seed(3, i)])[0]
            for i, p in enumerate(prompts)] == together
    assert generate(model, prompts[:2], 15, None, PAD, hot, seed=3) == together[:2]  # the third left out


def test_top_k_and_top_p_keep_the_right_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]]))
    kept = lambda out: torch.isfinite(out[0]).nonzero().flatten().tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [0, 1]
    assert kept(filter_logits(logits, top_p=0.5)) == [0]  # 0.5 alone reaches 0.5
    assert kept(filter_logits(logits, top_p=0.7)) == [0, 1]
    assert kept(filter_logits(logits, top_p=0.71)) == [0, 1, 2]
    assert kept(filter_logits(logits, top_k=2, top_p=0.9)) == [0, 1]
    for temperature in (0, float("nan"), float("inf")):  # nan: a nan softmax; inf: uniform noise
        with pytest.raises(BertkitError, match="temperature must be a finite number > 0"):
            Sampling(temperature=temperature)
    # a tiny temperature made the scaled logits inf and the probabilities NaN (multinomial raised): now all but argmax
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.5, -1.0, 0.0]])
    assert pick(logits, Sampling(temperature=1e-40), None).tolist() == [1, 0]


def test_a_cached_forward_that_raises_leaves_the_cache_as_it_was():
    """A step past max_len raised after the cache had counted its position (a review, 2026-11-28): a caller that
    went on decoding was one position off without a word. The cache is now left as it was before the call."""
    model = _decoder("learned", max_len=8)
    ids = torch.randint(5, 101, (1, 8))
    cache = KVCache(len(model.backbone.blocks))
    model(ids[:, :7], cache=cache, head="lm")
    with pytest.raises(ValueError):
        model(ids[:, 7:8].repeat(1, 2), cache=cache, head="lm")  # two more: position 8 is past max_len
    assert cache.length == 7 and all(layer["self"]["k"].shape[2] == 7 for layer in cache.layers)
    last = model(ids[:, 7:8], cache=cache, head="lm").logits[:, -1]
    torch.testing.assert_close(last, model(ids, head="lm").logits[:, -1], atol=1e-5, rtol=1e-4)


def _greedy_reference(model, source, max_new):
    """Greedy decoding written plainly: full forward of the whole prefix, argmax, until EOS."""
    out = []
    for s in source:
        prefix = [BOS]
        for _ in range(max_new):
            logits = model(torch.tensor([s]), torch.tensor([prefix]), head="lm").logits[0, -1]
            token = int(logits.argmax())
            if token == EOS:
                break
            prefix.append(token)
        out.append(prefix[1:])
    return out


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary", "relative"])
def test_beam_search_cached_equals_uncached_and_beam_one_is_greedy(positions):
    model = _seq2seq(positions)
    source = [[6, 7, 8, EOS], [9, 10, EOS], [11, 12, 13, 14, 15, 16, EOS]]
    with torch.no_grad():
        for beam in (1, 3):
            cached = beam_search(model, source, BOS, EOS, PAD, 10, beam_size=beam, use_cache=True)
            assert cached == beam_search(model, source, BOS, EOS, PAD, 10, beam_size=beam, use_cache=False)
        assert beam_search(model, source, BOS, EOS, PAD, 10, beam_size=1) == _greedy_reference(model, source, 10)


def _log_prob(model, source, output, eos):
    target = output + ([EOS] if eos else [])
    logits = model(torch.tensor([source]), torch.tensor([[BOS] + target[:-1]]), head="lm").logits[0]
    return float(logits.log_softmax(-1)[torch.arange(len(target)), torch.tensor(target)].sum())


def test_a_wide_beam_finds_the_best_sequence_found_by_brute_force():
    torch.manual_seed(3)
    model = _seq2seq(vocab_size=6)  # tiny vocabulary: every output of up to 3 tokens can be enumerated
    with torch.no_grad():  # sharpen the random model so that scores differ clearly
        model.backbone.decoder.embeddings.token.weight.mul_(40)
    source = [4, 5, 1, EOS]
    with torch.no_grad():
        found = beam_search(model, [source], BOS, EOS, PAD, 3, beam_size=36, length_penalty=0.0)[0]
        candidates = [([], True)]  # (tokens, ends with EOS)
        for n in (1, 2, 3):
            for seq in itertools.product([t for t in range(6) if t != EOS], repeat=n):
                candidates.append((list(seq), n < 3))
        scored = {(tuple(c), e): _log_prob(model, source, c, e) for c, e in candidates}
    best = max(scored, key=scored.get)
    assert tuple(found) == best[0]


def test_the_cache_follows_beam_reordering():
    model = _seq2seq("rotary")
    cache = KVCache(2)
    memory = torch.randn(3, 4, 32)
    ids = torch.randint(5, 101, (3, 5))
    model.backbone.decoder(ids, memory=memory, cache=cache)
    order = torch.tensor([2, 0, 0])
    cache.reorder(order)
    nxt = torch.randint(5, 101, (3, 1))
    stepped = model.backbone.decoder(nxt, memory=memory[order], cache=cache).last_hidden_state
    full = model.backbone.decoder(torch.cat([ids[order], nxt], 1), memory=memory[order]).last_hidden_state
    torch.testing.assert_close(stepped[:, -1], full[:, -1], atol=1e-5, rtol=1e-4)


def test_the_lm_head_is_tied_and_refused_on_an_encoder():
    from bertkit.errors import ConfigError

    model = _decoder("rotary")
    hidden = torch.randn(2, 3, 32)
    torch.testing.assert_close(model.lm_logits(hidden), hidden @ model.backbone.embeddings.token.weight.T)
    with pytest.raises(ConfigError, match="'lm'"):
        Model(tiny(), heads("lm"))
