"""Position schemes: the formulas, Shaw's relative attention by hand, rotary's shift invariance, and that only
`none` leaves an encoder permutation-equivariant."""

import math

import pytest
import torch

from bertkit.nn.attention import Attention
from bertkit.nn.model import Model
from bertkit.nn.positions import RelativePositions, Rotary, sinusoidal_table
from conftest import POSITIONS, tiny


def test_sinusoidal_table_matches_vaswani():
    table = sinusoidal_table(50, 16)
    for p, i in [(0, 0), (3, 1), (17, 5), (49, 7)]:
        angle = p / 10000 ** (2 * i / 16)
        assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
        assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_relative_buckets_are_clipped_offsets():
    rel = RelativePositions(max_distance=2, d_head=4)
    buckets = rel.bucket(torch.arange(5), torch.arange(5))
    offsets = buckets - 2  # back to clipped j - i
    assert offsets[0].tolist() == [0, 1, 2, 2, 2]
    assert offsets[4].tolist() == [-2, -2, -2, -1, 0]


def test_relative_attention_matches_hand_computed_three_tokens():
    """One head, d_head 2, identity projections, max_distance 1: Shaw et al. eqs. (3)-(5) written out by hand."""
    cfg = tiny(d_model=2, n_heads=1, d_ff=4, positions="relative", max_distance=1)
    attn = Attention(cfg).eval()
    with torch.no_grad():
        for lin in (attn.q, attn.k, attn.v, attn.o):
            lin.weight.copy_(torch.eye(2))
            lin.bias.zero_()
        # rows: offset -1, 0, +1
        attn.relative.key.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))
        attn.relative.value.weight.copy_(torch.tensor([[0.5, 0.0], [0.0, 0.0], [0.0, -1.0]]))
    x = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    a_k = {-1: [1.0, 0.0], 0: [0.0, 0.0], 1: [0.0, 2.0]}
    a_v = {-1: [0.5, 0.0], 0: [0.0, 0.0], 1: [0.0, -1.0]}
    expected = []
    for i in range(3):
        scores = []
        for j in range(3):
            off = max(-1, min(1, j - i))
            key = [x[j][d] + a_k[off][d] for d in range(2)]
            scores.append(sum(x[i][d] * key[d] for d in range(2)) / math.sqrt(2))
        total = sum(math.exp(s) for s in scores)
        alpha = [math.exp(s) / total for s in scores]
        z = [0.0, 0.0]
        for j in range(3):
            off = max(-1, min(1, j - i))
            for d in range(2):
                z[d] += alpha[j] * (x[j][d] + a_v[off][d])
        expected.append(z)
    out, _ = attn(torch.tensor([x]))
    torch.testing.assert_close(out[0], torch.tensor(expected), atol=1e-6, rtol=0)


def test_rotary_scores_depend_only_on_offset():
    rotary = Rotary(8)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m, n):
        qm = Rotary.rotate(q, *rotary.cos_sin(torch.tensor([m])))
        kn = Rotary.rotate(k, *rotary.cos_sin(torch.tensor([n])))
        return (qm * kn).sum().item()

    assert score(3, 1) == pytest.approx(score(10, 8), abs=1e-5)
    assert score(0, 5) == pytest.approx(score(20, 25), abs=1e-5)
    assert abs(score(3, 1) - score(3, 2)) > 1e-4  # but it does depend on the offset
    torch.testing.assert_close(Rotary.rotate(q, *rotary.cos_sin(torch.tensor([0]))), q)  # position 0: identity


def _encode(model, ids):
    return model(ids).last_hidden_state


@pytest.mark.parametrize("positions", POSITIONS)
def test_permutation_equivariance_only_without_positions(positions):
    model = Model(tiny(positions=positions)).eval()
    ids = torch.randint(1, 101, (2, 9))
    perm = torch.randperm(9)
    out = _encode(model, ids)
    out_perm = _encode(model, ids[:, perm])
    equivariant = torch.allclose(out_perm, out[:, perm], atol=1e-5)
    assert equivariant == (positions == "none")
