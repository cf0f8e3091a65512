"""`bertkit info`: the architecture, parameter counts and training FLOPs of a recipe or a run directory (and a run's
measured throughput and MFU)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bertkit.paths import one_is_one
from bertkit.config import Config, HeadsConfig, ModelConfig
from bertkit.errors import BertkitError, a_or_an
from bertkit.nn.flops import train_flops
from bertkit.nn.model import meta_model
from bertkit.recipes import is_model_recipe, load_recipe
from bertkit.run.directory import LABELS_FILE, RESULTS_FILE, is_run_dir, load_config, read_json
from bertkit.run.metrics import read_metrics
from bertkit.tasks.registry import FINETUNING, PRETRAINING, with_pretraining_heads


def load_target(target: str, overrides: list[str] | tuple[str, ...] = ()) -> tuple[Config, str]:
    """A run directory's config or a recipe's (with overrides); returns (config, what it is)."""
    if Path(target).is_dir():
        if overrides:
            raise BertkitError("--set applies to recipes, not to an existing run directory")
        kind = "run" if is_run_dir(target) else "directory"
        return load_config(target), kind
    config = load_recipe(target, overrides)  # its own errors first (an empty recipe, a moved key)
    if not is_model_recipe(target):  # it described the default ModelConfig, a model the recipe does not have
        raise BertkitError(f"{target}: a finetuning recipe (no [model]: its model comes from the run given as "
                           "--model); run `bertkit info` on that run, or on a model recipe (`bertkit recipes`)")
    return config, "recipe"


def describe(cfg: ModelConfig, heads: HeadsConfig = HeadsConfig()) -> list[str]:
    """Human-readable lines for the stack: embeddings, one block, the stack shape, and the heads on it."""
    attn = ("MHA" if cfg.n_kv_heads == cfg.n_heads else "MQA" if cfg.n_kv_heads == 1 else "GQA")
    kv = "" if cfg.n_kv_heads == cfg.n_heads else f", {cfg.n_kv_heads} kv heads"
    inside = {"relative": f" + relative positions (Shaw, clip ±{cfg.max_distance})",
              "rotary": f" + rotary positions (base {cfg.rotary_base:g})"}.get(cfg.positions, "")
    absolute = {"learned": "learned positions", "sinusoidal": "sinusoidal positions"}.get(cfg.positions)
    emb = ["token" + (" × √d_model" if cfg.scale_embeddings else "")]
    emb += [absolute] if absolute else []
    emb += [f"token type ({cfg.type_vocab_size})"] if cfg.type_vocab_size else []
    norm = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[cfg.norm]
    lines = [f"embeddings: {' + '.join(emb)}" + (f" → {norm}" if cfg.embedding_norm else "") +
             f" → dropout {cfg.dropout:g}"]
    block = (f"self-attention {attn} ({cfg.n_heads} heads × {cfg.d_head}{kv}){inside}, attention dropout "
             f"{cfg.attention_dropout:g} → FFN {cfg.activation} {cfg.d_model}→{cfg.d_ff}→{cfg.d_model}; "
             f"{cfg.norm_position}-norm {norm}, {'biases' if cfg.bias else 'no biases'}")
    if cfg.architecture == "encoder":
        lines.append(f"encoder: {cfg.n_layers} × [{block}] (bidirectional)")
    elif cfg.architecture == "decoder":
        lines.append(f"decoder: {cfg.n_layers} × [{block}] (causal)")
    else:
        lines.append(f"encoder: {cfg.n_layers} × [{block}] (bidirectional)")
        lines.append(f"decoder: {cfg.n_decoder_layers} × [causal {block.replace('FFN', 'cross-attention → FFN')}]")
        lines.append("token embeddings " + ("shared by source and target" if cfg.share_embeddings else "separate"))
    if cfg.norm_position == "pre":
        lines.append(f"final {norm} after the last block")
    names = {"mlm": "MLM (dense + gelu + norm, decoder tied to the token embeddings)",
             "lm": "LM (next token: the final states projected onto the tied token embeddings)",
             "pair_classifier": f"pair classifier (linear over u, v, |u - v|; {heads.num_labels} labels)",
             "pooler": "pooler (dense + tanh over [CLS])",
             "classifier": f"classifier ({heads.classifier_pooling} pooling, dense + tanh, {heads.num_labels} labels)",
             "tagger": f"tagger (linear per token, {heads.num_labels} tags)",
             "rtd": "replaced-token detection (dense + gelu, one logit per token)",
             "generator": f"generator (ELECTRA: {cfg.n_layers} × {cfg.generator_width} wide, tied to the token "
                          "embeddings)"}
    if heads.names:
        lines.append("heads: " + "; ".join(names[h] for h in heads.names))
    return lines


def parameter_counts(cfg: ModelConfig, heads: HeadsConfig = HeadsConfig()) -> dict[str, int]:
    """Parameter counts by part, without allocating the weights (built on the meta device)."""
    return meta_model(cfg, heads).parameter_counts()


@dataclass(frozen=True)
class InfoJob:
    """What `bertkit info` is asked: a recipe name, a recipe .toml or a run directory, and `--set` overrides."""

    target: str
    overrides: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        one_is_one(self, "overrides")  # one given as a str is one item


@dataclass(frozen=True)
class InfoResult:
    """The target's kind (recipe or run), its config, parameter counts by part (embeddings, blocks, heads, total),
    training FLOPs per token (None where the objective does not fit the stack) and, for a run that logged them,
    its measured tokens/s, TFLOP/s and MFU."""

    kind: str
    config: Config
    parameters: dict[str, int]
    flops: dict[str, Any] | None
    measured: dict[str, Any] | None


def run(job: InfoJob, console: Console | None = None) -> InfoResult:
    """Print the architecture summary of a recipe or run and return it."""
    console = console or Console()
    target = job.target
    config, kind = load_target(target, list(job.overrides))
    if kind == "recipe" and is_model_recipe(target):
        config = with_pretraining_heads(config)  # a model recipe (a finetuning one's heads come from its labels)
    cfg = config.model
    counts = parameter_counts(cfg, config.heads)
    console.print(f"[bold]{target}[/bold] ({kind}): {cfg.architecture}, vocab {cfg.vocab_size:,}, "
                  f"d_model {cfg.d_model}, max_len {cfg.max_len}")
    for line in describe(cfg, config.heads):
        console.print(f"  {line}", markup=False, highlight=False)
    table = Table(title="parameters", show_edge=False)
    table.add_column("part")
    table.add_column("count", justify="right")
    table.add_column("share", justify="right")
    for part in ("embeddings", "blocks", "heads", "total"):
        share = counts[part] / counts["total"] if counts["total"] else 0.0
        table.add_row(part, f"{counts[part]:,}", f"{share:.1%}")
    console.print(table)
    flops = step_flops(config, kind != "recipe" and (Path(target) / LABELS_FILE).is_file())
    if flops:
        console.print(f"training FLOPs per token ({flops['tokens_per_row']}-token rows, "
                      f"{flops['objective']}): {flops['per_token'] / 1e6:,.1f} M (model FLOPs: forward + backward)")
    else:  # the line was left out without a word: `--set objective=clm` on an encoder, which pretrain refuses
        objective = config.train.objective
        wanted = PRETRAINING[objective].architecture if objective in PRETRAINING else "another stack"
        console.print(f"training FLOPs per token: none (train.objective {objective} trains {a_or_an(wanted)}, "
                      f"this is {a_or_an(cfg.architecture)}: `bertkit pretrain` refuses the pair)")
    measured = measured_throughput(target) if kind == "run" else None
    if measured:
        console.print(f"measured: {measured['tokens_per_s']:,.0f} tokens/s, {measured['tflops']:.3g} TFLOP/s"
                      + (f", MFU {measured['mfu']:.1%}" if measured.get("mfu") is not None else "")
                      + f" (mean of {measured['windows']} logged window{'s' if measured['windows'] != 1 else ''}"
                      + (f", {measured['precision']}" if measured.get("precision") else "") + ")")
    elif kind == "run":  # said, not left out without a word (a review, 2026-11-28)
        why = "it logged no training window: fewer steps than train.log_every" if read_metrics(target) else \
            "no metrics.jsonl: not trained here (an imported run?)"
        console.print(f"measured: no throughput ({why})")
    return InfoResult(kind, config, counts, flops, measured)


def step_flops(config: Config, finetuned: bool = False) -> dict[str, Any] | None:
    """Model FLOPs per trained token, or None for a stack the objective does not fit.

    A pretraining recipe or run: its objective on full rows of `data.block_size` tokens (half that under
    `train.contrastive_views = "halves"`; an MLM's head runs on its masked share only). A finetuned run (`finetuned`:
    it has labels.json): its task (`task.kind`) on micro-batches of `train.batch_size` examples as long as the task
    lets them be (`task.max_length`, a sentence model's `sentence.max_seq_length`; else the model's `max_len`), the
    encoder and the task's head or loss — what the finetuning's logged MFU counts."""
    cfg, objective, t = config.model, config.train.objective, min(config.data.block_size, config.model.max_len)
    if finetuned and cfg.architecture == "encoder" and config.task.kind in FINETUNING:
        task = FINETUNING[config.task.kind]
        t = min(task.max_length(config, config), cfg.max_len)
        total, tokens = task.step_flops(config, config.train.batch_size, t)
        name = config.task.kind + (f", {config.sentence_loss.loss} loss" if config.task.kind == "sentence" else "")
        return {"objective": name, "tokens_per_row": t, "per_token": total / tokens}
    if config.train.halves:
        t //= 2
    if cfg.architecture == "encoder-decoder":
        objective = "seq2seq"
    elif objective not in PRETRAINING or PRETRAINING[objective].architecture != cfg.architecture:
        return None
    masked = round(config.data.mlm_probability * t) if objective in ("mlm", "rtd") else 0
    total = train_flops(cfg, objective, 1, t, masked=masked, source=t if objective == "seq2seq" else None)
    return {"objective": objective, "tokens_per_row": t, "per_token": total / t}


def measured_throughput(run: str) -> dict[str, Any] | None:
    """Mean tokens/s, model TFLOP/s and MFU over a run's logged training windows (None without any)."""
    windows = [r for r in read_metrics(run) if r.get("kind") == "train" and "tflops" in r]
    if not windows:
        return None
    mean = {key: sum(r[key] for r in windows) / len(windows) for key in ("tokens_per_s", "tflops")}
    mfus = [r["mfu"] for r in windows if "mfu" in r]
    results = Path(run) / RESULTS_FILE
    precision = read_json(results, "results file").get("precision") if results.is_file() else None
    return {**mean, "mfu": sum(mfus) / len(mfus) if mfus else None, "windows": len(windows),
            "precision": precision}
