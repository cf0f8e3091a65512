"""`bertkit demo`: the main job on defaults, in a few minutes on 2 CPU cores.

1. every bundled recipe's model builds and takes a forward/backward pass (the architecture table);
2-3. a BPE tokenizer and a small BERT pretrained with the masked-LM objective on IMDB reviews;
4. fill-mask with it;
5. a sentiment classifier finetuned from it on a slice of SST-2;
6. predictions for two sentences;
7. SBERT training of the pretrained encoder on STS-B train (STS-B test Spearman before and after);
8. an index over a few thousand sentences, and two searches.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from bertkit.config import means_none, parse_duration
from bertkit.errors import BertkitError
from bertkit.inference import TaskModel
from bertkit.jobs import evaluate as evaluate_job
from bertkit.jobs import fill_mask, finetune, pretrain
from bertkit.jobs import search as search_job
from bertkit.jobs import sts as sts_job
from bertkit.jobs.evaluate import EvaluateResult
from bertkit.jobs.fill_mask import Guess
from bertkit.jobs.predict import predict
from bertkit.jobs.pretrain import PretrainResult
from bertkit.jobs.search import SearchResult
from bertkit.jobs.sts import StsResult
from bertkit.nn.model import Model
from bertkit.paths import resolve_data_path
from bertkit.recipes import load_recipe, model_recipes, with_values
from bertkit.text.corpus import find_files
from bertkit.text.pair_files import sts_columns
from bertkit.text.tasks import read_pairs
from bertkit.train.results import FinetuneResult

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
SAMPLE_CORPUS = SAMPLES / "corpus.txt"


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
    for name in model_recipes():
        cfg = load_recipe(name).model
        model = Model(cfg).train()
        step = smoke_step(model, batch_size, seq_len)
        params = model.parameter_counts()["total"]
        layers = str(cfg.n_layers) if cfg.architecture != "encoder-decoder" else \
            f"{cfg.n_layers}+{cfg.n_decoder_layers}"
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
REVIEWS = ("a gripping , beautifully acted film with a wonderful ending .",
           "a dull , lifeless mess that drags on far too long .")
SENTIMENT = {"0": "negative", "1": "positive"}  # SST-2's labels (the bundled sample spells them out)
INDEX_SENTENCES = 3000  # STS-B dev + test sentences the demo indexes
QUERIES = ("A man is playing a guitar.", "Stock markets fell sharply.")


@dataclasses.dataclass(frozen=True)
class DemoJob:
    """What `bertkit demo` is asked: where its runs go (a previous demo there is replaced) and, optionally, the
    budget of every training stage instead of its own (2 minutes of pretraining, 1 of finetuning, 1 of SBERT)."""

    out: Path = Path("runs/demo")
    max_time: str | None = None


@dataclasses.dataclass(frozen=True)
class DemoResult:
    """What the demo did, stage by stage: every recipe's smoke step, the pretraining, fill-mask's guesses per
    sentence, the classifier and its dev scores, its predictions for the two reviews, the SBERT run with STS-B test
    Spearman before and after, and the search hits per query."""

    architectures: list[dict[str, Any]]
    pretrain: PretrainResult
    fill_mask: dict[str, list[Guess]]
    classifier: FinetuneResult
    dev: EvaluateResult
    predictions: list[dict]
    sentence: FinetuneResult
    sts_before: StsResult
    sts_after: StsResult
    search: SearchResult


def run(job: DemoJob, console: Console | None = None) -> DemoResult:
    """The main job on defaults: architectures → tokenizer → pretraining → fill-mask → finetuning → predict →
    SBERT → index → search, on IMDB reviews, SST-2 and STS-B from the data root (or the bundled samples where the
    data is absent)."""
    console = console or Console()
    out, max_time = Path(job.out), job.max_time
    if max_time is not None:  # checked before an earlier demo is replaced: a typo must not cost the user its runs
        if means_none(max_time):
            raise BertkitError("--max-time: the demo's stages end by their budgets; give a duration such as 30s "
                               "(default: 2m pretraining, 1m finetuning, 1m SBERT)")
        parse_duration(max_time, "--max-time")
    if out.exists() and any(out.iterdir()):
        if not (out / DEMO_MARKER).is_file():
            raise BertkitError(f"{out}: exists and is not a previous demo run (choose another --out)")
        shutil.rmtree(out)  # the demo's own earlier output
    out.mkdir(parents=True)
    (out / DEMO_MARKER).write_text("written by `bertkit demo`; the next demo replaces this directory\n")
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
    pretrained = out / "pretrain"
    console.rule(f"2-3. tokenizer + masked-LM pretraining on {source}, {config.train.max_time} budget")
    result = pretrain.run(pretrain.PretrainJob(config, pretrained, progress=console.is_terminal), console=console)

    console.rule("4. fill-mask with the pretrained model")
    filled = {}
    for sentence in SENTENCES:
        options = fill_mask.run(fill_mask.FillMaskJob(pretrained, sentence, top_k=5)).masks[0]
        filled[sentence] = options
        guesses = ", ".join(f"{o.token!r} {o.score:.2f}" for o in options)
        console.print(f"{sentence:50s} → {guesses}", markup=False, highlight=False)
    evaluation = result.evaluation
    console.print(f"\nvalidation masked-token accuracy {evaluation.get('val_accuracy', float('nan')):.3f} "
                  f"(loss {evaluation.get('val_loss', float('nan')):.3f}) after {result.step} steps")

    classifier = out / "classifier"
    tuned, dev = _finetune(pretrained, classifier, config.model.max_len, max_time, console)
    console.rule("6. predict with the classifier")
    records, _ = predict(TaskModel(classifier), [(text, None) for text in REVIEWS])
    for record in records:
        label = record["label"] + (f" ({SENTIMENT[record['label']]})" if record["label"] in SENTIMENT else "")
        console.print(f"{label:>14s} {record['score']:.2f}  {record['text']}", markup=False, highlight=False)
    sentence_run = out / "sentence"
    sentence, before, after = _sentence(pretrained, sentence_run, config.model.max_len, max_time, console)
    console.rule("8. index a few thousand sentences, then search them")
    corpus = _index_corpus(out / "sentences.txt")
    search_job.build(search_job.IndexBuildJob(sentence_run, (str(corpus),), out / "index",
                                              progress=console.is_terminal), console=console)
    found_hits = search_job.search(search_job.SearchJob(out / "index", QUERIES, k=3))
    for query, found in zip(QUERIES, found_hits.hits):
        console.print(f"{query}", markup=False, highlight=False)
        for hit in found:
            console.print(f"   {hit.score:.3f}  {hit.text}", markup=False, highlight=False)
    console.print(f"\nThe runs are in {out}. Next: `bertkit plot {pretrained}`, `bertkit evaluate --model "
                  f"{classifier} --data sst2/dev.tsv`, `bertkit search {out / 'index'} \"your query\"`, "
                  "`bertkit pretrain --recipe pretrain-budget-imdb` for the 30-minute model, then "
                  "`python benchmarks/finetune_table.py` and `python benchmarks/sts_table.py`.", markup=False)
    return DemoResult(built, result, filled, tuned, dev, records, sentence, before, after, found_hits)


def _sentence(pretrained: Path, out: Path, max_len: int, max_time: str | None,
              console: Console) -> tuple[FinetuneResult, StsResult, StsResult]:
    """Step 7: SBERT (cosine loss) from the demo's encoder on STS-B train (or the bundled sample pairs)."""
    config = load_recipe("finetune-stsb")
    # the budget ends the stage: the epochs (the recipe's 4 ended 2 cores' minute at 68%) only cap a fast machine
    values = {"sentence.max_seq_length": max_len, "train.max_time": max_time or "1m", "train.eval_every": 100,
              "train.log_every": 25, "train.save_every": 1000, "train.epochs": 12.0}
    test = "stsb/sts-test.csv"
    try:
        find_files([config.task.train_file, test])
        source = "STS-B train"
    except BertkitError:
        sample = str(SAMPLES / "sts.tsv")
        values.update({"task.train_file": sample, "task.validation_file": sample, "task.text_column": "sentence1",
                       "task.text_pair_column": "sentence2", "task.label_column": "score",
                       "train.batch_size": 4, "train.eval_every": 5})
        source, test = "the bundled sample sts.tsv (STS-B not found: set BERTKIT_DATA for the real demo)", sample
    config = with_values(config, values)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, learning_rate=None))  # auto
    console.rule(f"7. sentence embeddings: SBERT on {source}, {config.train.max_time} budget")
    quiet = Console(quiet=True)
    before = sts_job.run(sts_job.StsJob(pretrained, Path(test)), console=quiet)
    tuned = finetune.run(finetune.FinetuneJob(config, pretrained, out, progress=console.is_terminal), console=console)
    after = sts_job.run(sts_job.StsJob(out, Path(test)), console=quiet)
    console.print(f"STS-B test Spearman (cosine similarity): {100 * before.spearman:.1f} before SBERT training, "
                  f"{100 * after.spearman:.1f} after" if source == "STS-B train" else
                  f"sample Spearman: {100 * before.spearman:.1f} before, {100 * after.spearman:.1f} after")
    return tuned, before, after


def _index_corpus(path: Path) -> Path:
    """A few thousand distinct sentences to index: STS-B dev + test, or the bundled samples without them."""
    files = [f for f in (resolve_data_path(f"stsb/sts-{split}.csv") for split in ("dev", "test")) if f.is_file()]
    sentences: dict[str, None] = {}
    for file in files or [SAMPLES / "sts.tsv"]:
        for pair in read_pairs(file, *sts_columns(file)[:2]):  # the STS benchmark layout or sentence1/sentence2
            sentences.update(dict.fromkeys((pair.text, pair.pair)))
    if not files:
        sentences.update(dict.fromkeys(SAMPLE_CORPUS.read_text(encoding="utf-8").splitlines()))
    path.write_text("\n".join(s for s in list(sentences)[:INDEX_SENTENCES] if s) + "\n", encoding="utf-8")
    return path


def _finetune(pretrained: Path, out: Path, max_len: int, max_time: str | None,
              console: Console) -> tuple[FinetuneResult, EvaluateResult]:
    """Step 5: a sentiment classifier from the demo's encoder on SST-2 train (or the bundled sample) for the time
    budget, at the automatic learning rate for its width; then its SST-2 dev accuracy."""
    config = load_recipe("finetune-sst2")
    # the budget ends the stage: the epochs (the recipe's 1 ended 2 cores' minute at 92%) only cap a fast machine
    values = {"task.max_length": max_len, "train.max_time": max_time or "1m", "train.eval_every": 300,
              "train.log_every": 50, "train.save_every": 1000, "train.epochs": 3.0}
    dev = "sst2/dev.tsv"
    try:
        find_files([config.task.train_file, dev])
        source = "SST-2 train"
    except BertkitError:
        dev = str(SAMPLES / "sentiment.tsv")
        values.update({"task.train_file": dev, "train.batch_size": 4, "train.eval_every": 5})
        source = "the bundled sample sentiment.tsv (SST-2 not found: set BERTKIT_DATA for the real demo)"
    config = with_values(config, values)
    # the recipe's rate is the README table's, fixed for every model; the demo takes the automatic one for its width
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, learning_rate=None))
    console.rule(f"5. finetune a sentiment classifier on {source}, {config.train.max_time} budget")
    tuned = finetune.run(finetune.FinetuneJob(config, pretrained, out, progress=console.is_terminal), console=console)
    dev_result = evaluate_job.run(evaluate_job.EvaluateJob(out, Path(dev)), console=Console(quiet=True))
    scores = dev_result.scores
    gold = [sum(row) for row in scores["confusion"]["matrix"]]  # examples per gold label
    console.print(f"{'SST-2 dev' if source == 'SST-2 train' else 'sample'} accuracy {100 * scores['accuracy']:.1f}% "
                  f"on {scores['examples']:,} sentences (always the majority label: "
                  f"{100 * max(gold) / max(1, sum(gold)):.1f}%)")
    return tuned, dev_result
