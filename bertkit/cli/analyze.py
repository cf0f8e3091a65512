"""`bertkit ablate`, `probe`, `glue`: understanding models — which components matter, what each layer encodes, and
how good an encoder is on GLUE."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bertkit.cli.common import ProgressOption, SetOption, app, user_errors
from bertkit.config import means_none


@app.command()
@user_errors
def ablate(recipe: Annotated[str, typer.Option(help="The base pretraining recipe (name or .toml).")],
           vary: Annotated[list[str], typer.Option(
               help="KEY=V1,V2,…: a config key (as for --set: positions or model.positions) and the values to try; "
                    "repeat for several keys.")],
           budget: Annotated[str, typer.Option(
               help="Each variant's pretraining budget: a time (90s, 5m: slower variants see fewer tokens), tokens "
                    "(2Mtok, 500ktok: every variant sees the same data) or steps (300steps).")],
           out: Annotated[Path, typer.Option("--out", "-o", help="The ablation directory (re-running it resumes: "
                                                                 "finished variants are reused).")]
           = Path("runs/ablate"),
           grid: Annotated[bool, typer.Option(help="Every combination of the varied values (default: change one "
                                                   "key at a time from the base recipe).")] = False,
           seed: Annotated[list[int] | None, typer.Option(
               help="Seed(s); repeat for several (the table shows mean ± std). Default: the recipe's.")] = None,
           task: Annotated[str, typer.Option(
               help="pretrain: validation MLM loss/accuracy; classify: also finetune each variant and report the "
                    "downstream metric.")] = "pretrain",
           corpus: Annotated[list[str] | None, typer.Option(help="Corpus file(s) instead of the recipe's.")] = None,
           finetune_recipe: Annotated[str, typer.Option(help="--task classify: the finetuning recipe.")]
           = "finetune-sst2",
           finetune_set: Annotated[list[str] | None, typer.Option(
               help="--task classify: key=value override of the finetuning recipe (repeatable), e.g. "
                    "task.max_train_examples=5000.")] = None,
           finetune_budget: Annotated[str, typer.Option(help="--task classify: each finetune's budget (time or "
                                                              "steps).")] = "2m",
           progress: ProgressOption = True,
           set_: SetOption = None) -> None:
    """Train a base recipe and its variants under the same budget, seed(s) and data; write ablation.csv,
    ablation.md (the table) and ablation.png. Invalid combinations are listed, not fatal."""
    from bertkit.jobs import ablate as job

    job.run(job.AblationJob(recipe=recipe, vary=tuple(vary), budget=budget, out=out, sets=tuple(set_ or ()), grid=grid,
                            seeds=tuple(seed or ()), task=task, corpus=tuple(corpus or ()),
                            finetune_recipe=finetune_recipe, finetune_sets=tuple(finetune_set or ()),
                            finetune_budget=finetune_budget, progress=progress))
    typer.echo((out / "ablation.md").read_text(encoding="utf-8"))


@app.command()
@user_errors
def probe(model: Annotated[list[Path], typer.Option(
              "--model", "-m", help="A run directory (any bertkit run, imported Hugging Face models included); "
                                    "repeat to compare models in one table and plot.")],
          task: Annotated[list[str], typer.Option(
              help="pos (accuracy), chunk or ner (span F1); repeat for several. Tags come from CoNLL-2003's "
                   "columns (token POS chunk NER) unless --column says otherwise.")],
          data: Annotated[str, typer.Option(help="A CoNLL column file (data-root relative is fine, e.g. "
                                                 "conll2003/train.txt).")],
          out: Annotated[Path, typer.Option("--out", "-o", help="Directory for probe.csv and probe.png.")]
          = Path("runs/probe"),
          eval_data: Annotated[str | None, typer.Option(help="Score on this CoNLL file (default: a 20% hold-out "
                                                             "of --data's sentences).")] = None,
          column: Annotated[int | None, typer.Option(help="The tag column (0-based, -1 the last) for a single "
                                                          "--task in a file laid out differently.")] = None,
          control: Annotated[bool, typer.Option(help="Also probe a control task (a random label per word type) "
                                                     "and report selectivity = accuracy − control accuracy.")]
          = False,
          max_train_sentences: Annotated[int, typer.Option(min=1, help="Training sentences for the probes.")]
          = 4000,
          max_eval_sentences: Annotated[int, typer.Option(min=1, help="Evaluation sentences.")] = 1000,
          max_iter: Annotated[int, typer.Option(min=1, help="L-BFGS iterations per probe.")] = 300,
          batch_size: Annotated[int, typer.Option(min=1, help="Sentences per forward batch.")] = 32,
          seed: Annotated[int, typer.Option(help="Seed of the hold-out split and the control labels.")] = 0,
          overwrite: Annotated[bool, typer.Option(help="Replace OUT if it is a probe folder bertkit wrote "
                                                        "(never anything else).")] = False,
          progress: ProgressOption = True) -> None:
    """Freeze the model(s), take every layer's word representations (layer 0 = embeddings), train a linear probe
    per layer and write per-layer scores (probe.csv) and a line plot (probe.png)."""
    from bertkit.jobs import probe as job

    job.run(job.ProbeJob(models=tuple(model), tasks=tuple(task), data=data, out=out, eval_data=eval_data, column=column,
                         control=control, max_train_sentences=max_train_sentences,
                         max_eval_sentences=max_eval_sentences, batch_size=batch_size, max_iter=max_iter, seed=seed,
                         overwrite=overwrite, progress=progress))


@app.command()
@user_errors
def glue(model: Annotated[list[Path], typer.Option(
             "--model", "-m", help="An encoder run directory (pretrained, imported with import-hf, or an rtd run's "
                                   "discriminator); repeat to put several side by side.")],
         tasks: Annotated[str, typer.Option(help="Comma-separated GLUE tasks: cola, sst2, stsb, mrpc, rte, wnli.")]
         = "cola,sst2,stsb,mrpc,rte,wnli",
         seeds: Annotated[int, typer.Option(help="Finetuning seeds per task (0..N-1); a larger N later trains only "
                                                 "the new seeds.")] = 3,
         budget: Annotated[str, typer.Option(help="Wall-clock budget of each (task, seed) cell, e.g. 5m, or none "
                                                  "(no clock); a cell ends at 5 epochs, --steps or its budget, "
                                                  "whichever comes first.")] = "5m",
         steps: Annotated[Optional[int], typer.Option(min=1, help="Optimiser steps per cell at most: unlike a "
                                                             "budget, what a cell trains does not depend on how "
                                                             "busy the machine is.")] = None,
         init: Annotated[str, typer.Option(help="pretrained (the runs' weights) or random: the same architecture "
                                                "and tokenizer from random weights, the control a pretraining "
                                                "claim needs.")] = "pretrained",
         out: Annotated[Path, typer.Option("--out", "-o", help="The glue folder: cells/ (one finetune run per "
                                                               "model, task and seed), glue.md, glue.json; "
                                                               "re-running it resumes.")] = Path("runs/glue"),
         progress: ProgressOption = True,
         set_: SetOption = None) -> None:
    """Score encoders on the GLUE tasks available offline: every (task, seed) cell finetuned under one setting
    (recipe `glue`), scored on GLUE dev with each task's metric; prints and writes the table with medians, spreads,
    the majority-class baseline and the average over the tasks run."""
    from bertkit.jobs import glue as job

    job.run(job.GlueJob(models=tuple(model), out=out, tasks=tuple(t for t in tasks.split(",") if t.strip()),
                        seeds=seeds, budget=None if means_none(budget) else budget, init=init,
                        overrides=tuple(set_ or ()), progress=progress, steps=steps))
