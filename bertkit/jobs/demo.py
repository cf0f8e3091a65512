"""`bertkit demo`: the main job on defaults, in a few minutes on 2 CPU cores.

1. every bundled recipe's model builds and takes a forward/backward pass (the architecture table);
2-3. a BPE tokenizer and a small BERT pretrained with the masked-LM objective on IMDB reviews;
4. fill-mask with it. Later stages grow it: → finetune → embed/search.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from bertkit.config import list_recipes, load_recipe, with_values
from bertkit.errors import BertkitError
from bertkit.jobs import fill_mask, pretrain
from bertkit.nn.model import Model
from bertkit.text.corpus import find_files

SAMPLE_CORPUS = Path(__file__).resolve().parents[2] / "data" / "samples" / "corpus.txt"


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


def architectures(console: Console, batch_size: int = 2, seq_len: int = 32) -> list[dict[str, Any]]:
    """Build, step and summarise every bundled recipe's model."""
    torch.manual_seed(0)
    table = Table(title="every recipe builds: one forward/backward pass each", show_edge=False)
    for column in ("recipe", "stack", "switches", "params", "fwd+bwd", "ok"):
        table.add_column(column, justify="right" if column in ("params", "fwd+bwd") else "left")
    results = []
    for name in list_recipes():
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
    return results


DEMO_MARKER = ".bertkit-demo"
SENTENCES = ("This movie was [MASK].", "The acting was [MASK] and the plot was boring.", "I [MASK] this film.")


def run(out: Path = Path("runs/demo"), max_time: str | None = None, console: Console | None = None) -> dict:
    """The main job on defaults: architectures → tokenizer → pretraining → fill-mask, on IMDB reviews from the data
    root (or the bundled sample corpus where the data is absent)."""
    console = console or Console()
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        if not (out / DEMO_MARKER).is_file():
            raise BertkitError(f"{out}: exists and is not a previous demo run (choose another --out)")
        shutil.rmtree(out)  # the demo's own earlier output
    console.rule("1. the transformer: every recipe")
    built = architectures(console)

    config = load_recipe("demo")
    try:
        find_files(config.data.corpus)
        source = "IMDB train reviews from the data root"
    except BertkitError:
        config = with_values(config, {"data.corpus": (str(SAMPLE_CORPUS),), "data.block_size": 32,
                                      "model.vocab_size": 400, "tokenizer.min_frequency": 1,
                                      "train.batch_size": 8})
        source = f"the bundled sample {SAMPLE_CORPUS.name} (IMDB not found: set BERTKIT_DATA for the real demo)"
    if max_time:
        config = with_values(config, {"train.max_time": max_time})
    console.rule(f"2-3. tokenizer + masked-LM pretraining on {source}, {config.train.max_time} budget")
    result = pretrain.run(config, out, progress=console.is_terminal, console=console)
    (out / DEMO_MARKER).write_text("written by `bertkit demo`; the next demo replaces this directory\n")

    console.rule("4. fill-mask with the pretrained model")
    filled = {}
    for sentence in SENTENCES:
        options = fill_mask.run(out, sentence, top_k=5)[0]
        filled[sentence] = options
        guesses = ", ".join(f"{o['token']!r} {o['score']:.2f}" for o in options)
        console.print(f"{sentence:50s} → {guesses}", markup=False, highlight=False)
    evaluation = result["evaluation"]
    console.print(f"\nvalidation masked-token accuracy {evaluation.get('val_accuracy', float('nan')):.3f} "
                  f"(loss {evaluation.get('val_loss', float('nan')):.3f}) after {result['state']['step']} steps; "
                  f"the run is in {out}.")
    console.print(f"Next: `bertkit plot {out}`, `bertkit info {out}`, `bertkit export {out} --format hf -o hf-demo`, "
                  "or `bertkit pretrain --recipe pretrain-mini-imdb` for the 30-minute model.", markup=False)
    return {"architectures": built, "pretrain": result, "fill_mask": filled}
