"""BPE tokenizers (HF `tokenizers`): train, save as one tokenizer.json, load, check against a model.

The saved file loads unchanged in `transformers.PreTrainedTokenizerFast(tokenizer_file=...)`: same ids, same
special tokens, same `[CLS] A [SEP]` / `[CLS] A [SEP] B [SEP]` templates with token types.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertkit.config import Config
from bertkit.errors import BertkitError

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)  # ids 0..4, in this order, in every bertkit tokenizer


@dataclass(frozen=True)
class SpecialIds:
    """The ids of the five special tokens in one tokenizer."""

    pad: int
    unk: int
    cls: int
    sep: int
    mask: int

    @property
    def all(self) -> tuple[int, ...]:
        return (self.pad, self.unk, self.cls, self.sep, self.mask)


def special_ids(tokenizer: Tokenizer) -> SpecialIds:
    """Look up the special tokens; a tokenizer without them cannot serve a BERT."""
    ids = {}
    for name, token in zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS):
        idx = tokenizer.token_to_id(token)
        if idx is None:
            raise BertkitError(f"tokenizer has no {token} token (bertkit tokenizers need {', '.join(SPECIAL_TOKENS)})")
        ids[name] = idx
    return SpecialIds(**ids)


def continuation(tokenizer: Tokenizer, head: list[int], new: list[int]) -> str:
    """The text the ids `new` add after the ids `head`: the decoded whole less the decoded head. Decoding `new`
    alone loses a space: a Metaspace decoder (tokenizer.byte_level = false) drops the ▁ of the first token it
    decodes, taking it for the start of a text ('to this' + 'be', not ' be'). Where the whole does not begin with
    the head's text (a byte sequence split between them), `new` alone."""
    before, whole = tokenizer.decode(list(head)), tokenizer.decode(list(head) + list(new))
    return whole[len(before):] if whole.startswith(before) else tokenizer.decode(list(new))


def lowercases(tokenizer: Tokenizer) -> bool:
    """Whether `tokenizer` lowercases its input (a Lowercase normaliser, or BERT's with lowercase on): what it
    decodes is lowercase, so scoring it against cased references counts every capital as a miss."""
    def lowering(step) -> bool:
        if not isinstance(step, dict):
            return False
        if step.get("type") == "Lowercase" or (step.get("type") == "BertNormalizer" and step.get("lowercase")):
            return True
        return any(lowering(inner) for inner in step.get("normalizers") or [])

    return lowering(json.loads(tokenizer.to_str()).get("normalizer"))


def build_untrained(byte_level: bool = True, lowercase: bool = False, nfkc: bool = True) -> Tokenizer:
    """An empty BPE pipeline: normalizer, pre-tokenizer and decoder for byte-level or Metaspace BPE."""
    tok = Tokenizer(models.BPE(unk_token=None if byte_level else UNK))
    steps = ([normalizers.NFKC()] if nfkc else []) + ([normalizers.Lowercase()] if lowercase else [])
    if steps:
        tok.normalizer = normalizers.Sequence(steps)
    if byte_level:  # every byte is in the alphabet: nothing is ever [UNK]
        # No prefix space (as GPT-2 and RoBERTa): text around an added token like [MASK] tokenises as it
        # did in training ("was [MASK]." -> 'Ġwas' '[MASK]' '.').
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tok


def add_bert_template(tok: Tokenizer) -> None:
    """`[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]` (B and its [SEP] with token type 1)."""
    ids = special_ids(tok)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{CLS} $A {SEP}", pair=f"{CLS} $A {SEP} $B:1 {SEP}:1",
        special_tokens=[(CLS, ids.cls), (SEP, ids.sep)])


def train_bpe(texts: Iterable[str], vocab_size: int, byte_level: bool = True, lowercase: bool = False,
              nfkc: bool = True, min_frequency: int = 2, length: int | None = None,
              show_progress: bool = False, option: str | None = None) -> Tokenizer:
    """Train BPE on an iterator of texts. Refuses a vocab size the corpus cannot support, naming the limit and
    `option`, how the caller's user sets the size (e.g. "--vocab-size"; None: every command's way)."""
    floor = len(SPECIAL_TOKENS) + (256 if byte_level else 1)
    if vocab_size <= floor:
        raise BertkitError(f"{_vocab_setting(option, vocab_size)} is too small: the special tokens and the "
                           f"{'256-byte alphabet' if byte_level else 'alphabet'} alone take {floor} "
                           f"({_vocab_hint(option, f'at least {floor + 1}')})")
    tok = build_untrained(byte_level, lowercase, nfkc)
    # [MASK] absorbs the space before it ("was [MASK]." -> 'Ġwas' '[MASK]' '.'), as a masked word did in training.
    specials = [AddedToken(t, special=True, lstrip=(t == MASK), normalized=False) for t in SPECIAL_TOKENS]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_level else [], show_progress=show_progress)
    tok.train_from_iterator(texts, trainer=trainer, length=length)
    got = tok.get_vocab_size()
    if got < vocab_size:
        raise VocabularyTooLarge(f"the corpus supports only {got:,} tokens at min_frequency={min_frequency}, fewer "
                                 f"than {_vocab_setting(option, vocab_size)}: use a larger corpus or a smaller vocab "
                                 f"size ({_vocab_hint(option, f'{got} or less')})")
    add_bert_template(tok)
    return tok


class VocabularyTooLarge(BertkitError):
    """The corpus read supports fewer tokens than the vocabulary size asked for."""


def _vocab_setting(option: str | None, vocab_size: int) -> str:
    return f"{option}={vocab_size}" if option else f"vocab size {vocab_size:,}"


def _vocab_hint(option: str | None, wanted: str) -> str:
    """How to ask for another vocab size: the caller's option, or every command's way (only `tokenizer train` has
    --vocab-size; pretrain, ablate and finetune seq2seq take model.vocab_size from the recipe or --set)."""
    if option:
        return f"{option}=N with N {wanted}"
    return f"{wanted}: --vocab-size for `bertkit tokenizer train`, --set model.vocab_size=N elsewhere"


def save_tokenizer(tok: Tokenizer, directory: str | Path) -> Path:
    """Write tokenizer.json (+ a tokenizer_config.json so `AutoTokenizer` knows the special tokens)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    write_hf_tokenizer_config(directory)
    return directory / "tokenizer.json"


def write_hf_tokenizer_config(directory: Path, model_max_length: int | None = None) -> None:
    """tokenizer_config.json for transformers: the fast class and which token is which."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": PAD, "unk_token": UNK, "cls_token": CLS,
              "sep_token": SEP, "mask_token": MASK,
              "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}  # BERT reads segments
    if model_max_length:
        config["model_max_length"] = model_max_length
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load tokenizer.json, or the one inside a directory (a tokenizer dir or a run dir), without padding or
    truncation: Hugging Face files often carry fixed ones (all-MiniLM-L6-v2 pads and truncates to 128), which would
    put [PAD] tokens into packed pretraining blocks and cut documents; bertkit pads per batch and truncates where
    a task needs it (`TaskEncoder`)."""
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise BertkitError(f"{path}: no tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise BertkitError(f"{file}: not a valid tokenizer ({exc})") from None
    tok.no_padding()
    tok.no_truncation()
    special_ids(tok)
    return tok


def vocab_span(tok: Tokenizer) -> int:
    """How many embedding rows the tokenizer's ids need: its largest id + 1 (its vocab size, unless ids have gaps,
    as a hand-edited or converted file can)."""
    return max(tok.get_vocab_size(with_added_tokens=True),
               max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1)


def check_vocab_matches(tok: Tokenizer, vocab_size: int, run: str | Path) -> None:
    """The one check where a tokenizer meets a model: the model's embedding table (`vocab_size` rows) must cover
    every id the tokenizer can produce, else a text with a high id is an IndexError deep in the embedding. `run`
    names the run (its directory) whose model and tokenizer these are."""
    need = vocab_span(tok)
    if need > vocab_size:
        raise BertkitError(f"{run}: the tokenizer's vocab size is {need:,} but the model's vocab_size is "
                           f"{vocab_size:,} (ids from {vocab_size:,} up have no embedding); use the tokenizer the "
                           "model was trained with")


def iter_texts_batched(texts: Iterable[str], size: int = 1000) -> Iterator[list[str]]:
    """Group an iterator of texts into lists (the shape `train_from_iterator` reads fastest)."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def load_run_tokenizer(run: str | Path, config: Config, folder: str | Path | None = None):
    """The tokenizer of the run directory `run` (or the one in `folder` of it), checked against the model's
    embedding table (`config`, the run's): a tokenizer whose ids the model cannot embed is a user error, not an
    IndexError mid-batch. Here, not in `run.directory`: the run layer knows the file, the text layer reads it."""
    tokenizer = load_tokenizer(Path(folder) if folder is not None else Path(run))
    check_vocab_matches(tokenizer, config.model.vocab_size, run)
    return tokenizer
