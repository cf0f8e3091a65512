"""`bertkit demo`: the main job on defaults.

At this stage of the toolkit: build every bundled recipe's model, run one forward and backward pass on a padded
random batch, check the outputs and gradients are finite, and print an architecture summary. Later stages grow it
into tokenizer → pretrain → finetune → embed/search.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from bertkit.config import list_recipes, load_recipe
from bertkit.errors import BertkitError
from bertkit.nn.model import Model


def smoke_step(model: Model, batch_size: int = 2, seq_len: int = 32, seed: int = 0) -> dict[str, Any]:
    """One forward + backward pass on a random batch whose second row is half padding. Returns timings/shape."""
    cfg = model.config
    g = torch.Generator().manual_seed(seed)
    t = min(seq_len, cfg.max_len)
    ids = torch.randint(1, cfg.vocab_size, (batch_size, t), generator=g)
    mask = torch.ones(batch_size, t, dtype=torch.long)
    if batch_size > 1:
        mask[1, t // 2:] = 0
        ids[1, t // 2:] = cfg.pad_token_id
    start = time.perf_counter()
    if cfg.architecture == "encoder-decoder":
        out = model(ids, ids, attention_mask=mask, decoder_attention_mask=mask).last_hidden_state
    else:
        out = model(ids, mask).last_hidden_state  # (B, T, D)
    # A fixed random projection as the loss: a plain sum of normalised states has zero gradient.
    target = torch.randn(out.shape, generator=g)
    loss = (out * target).mean()
    loss.backward()
    elapsed = time.perf_counter() - start
    grads_ok = all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    return {"shape": tuple(out.shape), "loss": loss.item(), "seconds": elapsed,
            "finite": bool(torch.isfinite(out).all()) and grads_ok}


def run(recipes: list[str] | None = None, batch_size: int = 2, seq_len: int = 32,
        console: Console | None = None) -> list[dict[str, Any]]:
    """Build, step and summarise each recipe (all bundled ones by default)."""
    console = console or Console()
    names = recipes or list(list_recipes())
    if not names:
        raise BertkitError("demo: no recipes found")
    torch.manual_seed(0)
    table = Table(title="bertkit demo: one forward/backward pass per recipe", show_edge=False)
    for column in ("recipe", "stack", "switches", "params", "fwd+bwd", "ok"):
        table.add_column(column, justify="right" if column in ("params", "fwd+bwd") else "left")
    results = []
    for name in names:
        cfg = load_recipe(name).model
        model = Model(cfg).train()
        step = smoke_step(model, batch_size, seq_len)
        params = model.parameter_counts()["total"]
        layers = str(cfg.n_layers) if cfg.architecture != "encoder-decoder" else f"{cfg.n_layers}+{cfg.n_decoder_layers}"
        heads = f"{cfg.n_heads}h" + (f"/{cfg.n_kv_heads}kv" if cfg.n_kv_heads != cfg.n_heads else "")
        norm = {"layernorm": "LN", "rmsnorm": "RMS"}[cfg.norm]
        table.add_row(name, f"{cfg.architecture} {layers}×{cfg.d_model} {heads}",
                      f"{cfg.positions}, {cfg.norm_position}-{norm}, {cfg.activation}", f"{params / 1e6:.1f}M",
                      f"{step['seconds'] * 1000:.0f} ms", "[green]yes[/green]" if step["finite"] else "[red]NO[/red]")
        results.append({"recipe": name, **step, "parameters": params})
        del model
    console.print(table)
    if not all(r["finite"] for r in results):
        raise BertkitError("demo: a model produced non-finite outputs or gradients")
    console.print("Next: `bertkit info RECIPE` for one architecture in detail; `bertkit import-hf` to bring in a "
                  "Hugging Face BERT.")
    return results
