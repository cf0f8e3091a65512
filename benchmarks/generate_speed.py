"""Greedy generation speed: bertkit's decoder with and without its KV cache vs transformers' GPT2LMHeadModel
(with its cache) of the same shape and the same weights, in one run.

bertkit is configured as GPT-2 (pre-norm LayerNorm, learned positions, GELU, MHA, biases, tied LM head); GPT-2's
weights are copied in, the two are checked to pick the same greedy tokens, then both generate `--new` tokens for
`--batch` prompts of `--prompt` tokens. Prints new tokens/s for each and the ratios.

    python benchmarks/generate_speed.py [--layers 4 --d-model 256 --vocab 16000] [--batch 8] [--prompt 32] [--new 96]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from bertkit.config import HeadsConfig, ModelConfig  # noqa: E402
from bertkit.generation import Sampling, generate  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from common import best_time  # noqa: E402


def gpt2_into_bertkit(hf: GPT2LMHeadModel, cfg: ModelConfig) -> Model:
    """A bertkit decoder holding GPT-2's weights (GPT-2's Conv1D stores W transposed; c_attn packs q, k, v)."""
    model = Model(cfg, HeadsConfig(names=("lm",))).eval()
    sd, d = hf.transformer.state_dict(), cfg.d_model
    ours = {"backbone.embeddings.token.weight": sd["wte.weight"], "backbone.embeddings.position.weight": sd["wpe.weight"],
            "backbone.final_norm.weight": sd["ln_f.weight"], "backbone.final_norm.bias": sd["ln_f.bias"]}
    for i in range(cfg.n_layers):
        h, b = f"h.{i}.", f"backbone.blocks.{i}."
        w, bias = sd[h + "attn.c_attn.weight"].T, sd[h + "attn.c_attn.bias"]  # (3D, D), (3D,)
        for j, name in enumerate("qkv"):
            ours[b + f"self_attn.{name}.weight"] = w[j * d:(j + 1) * d]
            ours[b + f"self_attn.{name}.bias"] = bias[j * d:(j + 1) * d]
        ours[b + "self_attn.o.weight"], ours[b + "self_attn.o.bias"] = sd[h + "attn.c_proj.weight"].T, sd[h + "attn.c_proj.bias"]
        ours[b + "ffn.w_in.weight"], ours[b + "ffn.w_in.bias"] = sd[h + "mlp.c_fc.weight"].T, sd[h + "mlp.c_fc.bias"]
        ours[b + "ffn.w_out.weight"], ours[b + "ffn.w_out.bias"] = sd[h + "mlp.c_proj.weight"].T, sd[h + "mlp.c_proj.bias"]
        for ln, norm in (("ln_1", "self_attn_norm"), ("ln_2", "ffn_norm")):
            ours[b + f"{norm}.weight"], ours[b + f"{norm}.bias"] = sd[h + f"{ln}.weight"], sd[h + f"{ln}.bias"]
    model.load_state_dict(ours, strict=True)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=16000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=96)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    max_len = args.prompt + args.new
    hf = GPT2LMHeadModel(GPT2Config(vocab_size=args.vocab, n_positions=max_len, n_embd=args.d_model,
                                    n_layer=args.layers, n_head=args.heads, activation_function="gelu",
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                    layer_norm_epsilon=1e-5)).eval()
    cfg = ModelConfig(architecture="decoder", vocab_size=args.vocab, d_model=args.d_model, n_layers=args.layers,
                      n_heads=args.heads, max_len=max_len, type_vocab_size=0, dropout=0.0, attention_dropout=0.0,
                      norm_position="pre", norm_eps=1e-5, embedding_norm=False, activation="gelu",
                      positions="learned")
    ours = gpt2_into_bertkit(hf, cfg)
    prompts = torch.randint(5, args.vocab, (args.batch, args.prompt))

    def run_hf():
        with torch.inference_mode():
            out = hf.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=args.new,
                              min_new_tokens=args.new, do_sample=False, use_cache=True, pad_token_id=0)
        return out[:, args.prompt:].tolist()

    def run_ours(cache: bool):
        with torch.inference_mode():
            return generate(ours, prompts.tolist(), args.new, None, 0, Sampling(greedy=True), use_cache=cache)

    same = run_hf() == run_ours(True)
    results = {}
    for name, fn in (("transformers GPT2 (cache)", run_hf), ("bertkit (KV cache)", lambda: run_ours(True)),
                     ("bertkit (no cache)", lambda: run_ours(False))):
        results[name] = args.batch * args.new / best_time(fn, args.repeats)
    print(f"{args.layers} x {args.d_model}, vocab {args.vocab}, {args.batch} prompts of {args.prompt} tokens, "
          f"{args.new} new tokens, greedy; same tokens as GPT-2: {same}")
    for name, rate in results.items():
        print(f"  {name:28s} {rate:8.1f} new tokens/s")
    print(f"  bertkit / transformers (both cached): {results['bertkit (KV cache)'] / results['transformers GPT2 (cache)']:.2f}x")
    print(f"  KV cache speed-up in bertkit:         {results['bertkit (KV cache)'] / results['bertkit (no cache)']:.2f}x")


if __name__ == "__main__":
    main()
