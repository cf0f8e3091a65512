"""Every objective's FLOP count (what the loop's TFLOP/s and MFU are made of) equals what torch's FlopCounterMode
counts for its own loss and backward on a real batch (eager attention: the CPU's fused SDPA kernel is invisible to
the counter); the loop logs the rates."""

import json

import pytest
from torch.utils.flop_counter import FlopCounterMode

from bertkit.config import Config, DataConfig, SentenceLossConfig, TaskConfig, TrainConfig
from bertkit.hardware import Peak
from bertkit.nn.attention import set_attention_impl
from bertkit.nn.model import Model
from bertkit.text.features import TaskEncoder
from bertkit.text.tokenizer import special_ids
from bertkit.train.accelerator import make_accelerator
from bertkit.train.loop import TrainState, train
from bertkit.train.window import log_record as _log_record
from bertkit.tasks.classify import ClassifyObjective
from bertkit.tasks.clm import CLMObjective
from bertkit.tasks.mlm import MLMObjective
from bertkit.tasks.ner import TagObjective
from bertkit.tasks.registry import FINETUNING
from bertkit.tasks.regress import RegressObjective
from bertkit.tasks.rtd import RTDObjective
from bertkit.tasks.sentence import SentenceObjective
from bertkit.tasks.seq2seq import Seq2SeqObjective
from conftest import tiny, heads

TEXTS = ["the cat sat", "a dog ran far away", "birds", "the river is wide and slow", "a cat was sitting",
         "the dog runs", "many birds fly south", "a slow river"]


def counted(objective, model: Model, micro: dict) -> int:
    """FLOPs of the objective's loss and its backward, as FlopCounterMode counts them."""
    set_attention_impl(model, "eager")
    with FlopCounterMode(display=False) as counter:
        loss, _ = objective.loss(model, micro)
        loss.backward()
    return counter.get_total_flops()


@pytest.mark.parametrize("kind", ["mlm", "rtd", "clm"])
def test_pretraining_objectives(packed, sample_tokenizer, kind):
    train_cfg = TrainConfig(batch_size=4)
    cls = {"mlm": MLMObjective, "rtd": RTDObjective, "clm": CLMObjective}[kind]
    objective = cls(packed, special_ids(sample_tokenizer), 400, DataConfig(block_size=32), train_cfg)
    on_top = heads(*{"mlm": ("mlm",), "rtd": ("rtd", "generator"), "clm": ("lm",)}[kind])
    cfg = tiny(vocab_size=400, **({"architecture": "decoder"} if kind == "clm" else {}))
    micro = objective.batch(0)
    assert objective.flops(cfg, micro) == counted(objective, Model(cfg, on_top), micro)


def test_classify_and_tag_objectives(sample_tokenizer):
    encoder = TaskEncoder(sample_tokenizer, 32)
    train_cfg = TrainConfig(batch_size=4)
    cfg = tiny(vocab_size=400)
    objective = ClassifyObjective(encoder.texts(TEXTS), [i % 3 for i in range(8)], [], [], ["a", "b", "c"], 0,
                                  train_cfg)
    micro = objective.batch(0)
    assert objective.flops(cfg, micro) == counted(objective, Model(cfg, heads("classifier", num_labels=3)), micro)

    spans = [[(i, i + 1) for i in range(0, len(t), 4)] for t in TEXTS]
    examples = encoder.words(TEXTS, spans)
    objective = TagObjective(examples, [[j % 5 for j in range(len(s))] for s in spans], [], [], list("OBIXY"), 0,
                             train_cfg)
    micro = objective.batch(0)
    assert objective.flops(cfg, micro) == counted(objective, Model(cfg, heads("tagger", num_labels=5)), micro)


@pytest.mark.parametrize("loss,sides", [("mnrl", 2), ("mnrl", 3), ("softmax", 2), ("cosine", 2)])
def test_sentence_objectives(sample_tokenizer, loss, sides):
    encoder = TaskEncoder(sample_tokenizer, 32)
    texts = [TEXTS[:4], TEXTS[4:], TEXTS[2:6]][:sides]
    targets = {"mnrl": None, "softmax": [0, 1, 2, 0], "cosine": [0.9, 0.1, 0.5, 0.0]}[loss]
    objective = SentenceObjective(loss, [encoder.texts(t) for t in texts], targets, [], None, "mean", 20.0, 0,
                                  TrainConfig(batch_size=4), 1, ["a", "b", "c"])
    cfg = tiny(vocab_size=400)
    on_top = heads("pair_classifier", num_labels=3) if loss == "softmax" else heads()
    micro = objective.batch(0)
    assert objective.flops(cfg, micro) == counted(objective, Model(cfg, on_top), micro)


def test_a_task_counts_a_step_as_its_objective_does(sample_tokenizer):
    """`bertkit info` on a finetuned run asks the task (`FinetuneTask.step_flops`) what the loop's objective counts:
    the same FLOPs for the same (rows, width) batch, for every task kind and sentence loss."""
    encoder = TaskEncoder(sample_tokenizer, 32)
    cfg, train_cfg = tiny(vocab_size=400), TrainConfig(batch_size=4)
    spans = [[(i, i + 1) for i in range(0, len(t), 4)] for t in TEXTS]
    labelled = {
        "classify": (ClassifyObjective(encoder.texts(TEXTS), [i % 3 for i in range(8)], [], [], ["a", "b", "c"], 0,
                                       train_cfg), heads("classifier", num_labels=3)),
        "regress": (RegressObjective(encoder.texts(TEXTS), [0.5] * 8, [], [], 0, train_cfg),
                    heads("classifier", num_labels=1)),
        "ner": (TagObjective(encoder.words(TEXTS, spans), [[j % 5 for j in range(len(s))] for s in spans], [], [],
                             list("OBIXY"), 0, train_cfg), heads("tagger", num_labels=5))}
    for kind, (objective, on_top) in labelled.items():
        micro = objective.batch(0)
        rows, t = micro["input_ids"].shape
        config = Config(model=cfg, heads=on_top, task=TaskConfig(kind=kind))
        assert FINETUNING[kind].step_flops(config, rows, t) == (objective.flops(cfg, micro), rows * t), kind
    for loss, sides in [("mnrl", 2), ("mnrl", 3), ("softmax", 2), ("cosine", 2)]:
        targets = {"mnrl": None, "softmax": [0, 1, 2, 0], "cosine": [0.9, 0.1, 0.5, 0.0]}[loss]
        objective = SentenceObjective(loss, [encoder.texts(t) for t in [TEXTS[:4], TEXTS[4:], TEXTS[2:6]][:sides]],
                                      targets, [], None, "mean", 20.0, 0, train_cfg, 1, ["a", "b", "c"])
        micro = objective.batch(0)
        width = max(micro[f"ids_{s}"].shape[1] for s in range(sides))
        config = Config(model=cfg, heads=heads("pair_classifier", num_labels=3) if loss == "softmax" else heads(),
                        task=TaskConfig(kind="sentence"),
                        sentence_loss=SentenceLossConfig(loss=loss, negative_column="neg" if sides == 3 else None))
        assert FINETUNING["sentence"].step_flops(config, 4, width) == (objective.flops(cfg, micro),
                                                                       sides * 4 * width), (loss, sides)


def test_seq2seq_objective():
    source = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14]]
    target = [[20, 21, 22], [23, 24, 25, 26, 27], [28], [29, 30]]
    objective = Seq2SeqObjective(source, target, [], [], [], 1, 0, 0.1, TrainConfig(batch_size=4))
    cfg = tiny(architecture="encoder-decoder")
    micro = objective.batch(0)
    assert objective.flops(cfg, micro) == counted(objective, Model(cfg, heads("lm")), micro)


def test_the_loop_logs_model_tflops_and_mfu(tmp_path, packed, sample_tokenizer):
    cfg = TrainConfig(batch_size=8, accumulation_steps=2, max_steps=4, log_every=2, eval_every=100,
                      save_every=100)
    objective = MLMObjective(packed, special_ids(sample_tokenizer), 400, DataConfig(block_size=32), cfg)
    model = Model(tiny(vocab_size=400), heads("mlm"))
    expected = sum(objective.flops(model.config, {k: v[i * 8:(i + 1) * 8] for k, v in objective.batch(s).items()})
                   for s in (2, 3) for i in range(2))  # the last window: steps 3 and 4 (0-based 2, 3), 2 micro each
    train(model, objective, cfg, tmp_path, make_accelerator("fp32"), progress=False)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in records if r["kind"] == "train"][-1]
    assert last["step"] == 4
    seconds = 2 * 16 * 32 / last["tokens_per_s"]  # the window's step time: 2 steps of 16 rows x 32 tokens
    assert last["tflops"] * 1e12 * seconds == pytest.approx(expected, rel=1e-3)
    assert 0 < last["mfu"] < 1


def test_a_window_resumed_from_an_older_checkpoint_logs_without_flops():
    window = {"loss": 4.0, "norm": 2.0, "tokens": 100.0, "time": 1.0, "grad_norm": 2.0, "steps": 2}  # no "flops"
    record = _log_record(TrainState(step=2, window=window), 1e-3, Peak(1e9, "measured: test"), 1)
    assert record["loss"] == 2.0 and record["tflops"] == 0.0 and record["mfu"] == 0.0


def test_an_evaluations_guessed_cost_is_one_processs_whatever_the_world(sample_tokenizer):
    # every process scores the whole validation set, so before one is timed the planner's guess (in steps) is the
    # same under N processes: it was divided by the global batch, N x short, and a run whose only evaluation was the
    # final one kept 1/N of its time
    encoder = TaskEncoder(sample_tokenizer, 32)
    train_cfg = TrainConfig(batch_size=4, accumulation_steps=2)
    for world in (1, 2, 4):
        classify = ClassifyObjective(encoder.texts(TEXTS), [i % 3 for i in range(8)], encoder.texts(TEXTS * 4),
                                     ["a"] * 32, ["a", "b", "c"], 0, train_cfg, world)
        assert classify.eval_cost_steps == pytest.approx(32 / 8 * 0.35)  # 32 rows, 8 of them a step per process
        sentence = SentenceObjective("mnrl", [encoder.texts(TEXTS[:4]), encoder.texts(TEXTS[4:])], None,
                                     [encoder.texts(TEXTS[:4]), encoder.texts(TEXTS[4:])], None, "mean", 20.0, 0,
                                     train_cfg, world)
        assert sentence.eval_cost_steps == pytest.approx(8 / (8 * 2) * 0.35)
        seq2seq = Seq2SeqObjective([[7, 8, 3]] * 8, [[9, 3]] * 8, [[7, 3]] * 16, [[9, 3]] * 16, [], 2, 0, 0.0,
                                   train_cfg, world)
        assert seq2seq.eval_cost_steps == pytest.approx(16 * 0.35 / 8)
