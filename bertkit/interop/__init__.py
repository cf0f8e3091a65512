"""Interoperability with the Hugging Face ecosystem: `hf` (BERT folders, both directions), `sentence_transformers`
(their folders: an HF BERT folder plus pooling and normalisation modules), and `import_hf`, which reads either into
a bertkit run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bertkit.config import Config, SentenceConfig, TaskConfig
from bertkit.interop.hf import copy_tokenizer, read_hf_model
from bertkit.interop.hf_tasks import imported_task
from bertkit.interop.sentence_transformers import read_sentence_config, tokenizer_window
from bertkit.run.directory import write_labels, write_run_files
from bertkit.run.files import atomic_dir
from bertkit.run.lock import locked
from bertkit.run.outputs import IMPORTED_RUN, claim


def import_hf(src: str | Path, out: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """Make a bertkit run directory from an HF BERT folder, or a sentence-transformers folder (whose pooling,
    normalisation and max_seq_length become the run's `[sentence]` settings). A BertForSequenceClassification or
    BertForTokenClassification folder becomes a finetuned run (its labels.json from id2label) that `predict`,
    `evaluate` and `export` take. Returns a summary (parameters, skipped, tokenizer, sentence, task, labels)."""
    src = Path(src)
    sentence_transformers = read_sentence_config(src)
    bert_folder, sentence = sentence_transformers or (src, SentenceConfig())
    hint = "choose another OUT or pass --overwrite"
    claim(out, IMPORTED_RUN, overwrite, inputs=(src,), hint=hint)  # before the work: a refusal costs nothing
    imported = read_hf_model(bert_folder)
    model = imported.model
    kind, labels = imported.task or (None, [])
    task, extra = imported_task(imported.hf_config, kind, tokenizer_window(bert_folder, src)) if kind else \
        (TaskConfig(), {})
    with locked(out):
        # again under the lock: a run that a finetune finished at OUT while the weights were read is not replaced
        claim(out, IMPORTED_RUN, overwrite, inputs=(src,), hint=hint)
        with atomic_dir(out, overwrite=overwrite) as tmp:
            write_run_files(tmp, model, Config(model=model.config, heads=model.head_config, sentence=sentence,
                                               task=task))
            has_tokenizer = copy_tokenizer(bert_folder, tmp) or copy_tokenizer(src, tmp)
            if kind:
                write_labels(tmp, kind, labels, **extra)
    return {"out": str(out), "parameters": model.parameter_counts()["total"], "skipped": imported.skipped,
            "head_left_out": imported.head_left_out, "tokenizer": has_tokenizer,
            "sentence": sentence if sentence_transformers else None, "task": kind, "labels": labels,
            "max_length": task.max_length, "problem_type": imported.hf_config.get("problem_type")}

