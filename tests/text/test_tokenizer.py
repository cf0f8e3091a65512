"""BPE tokenizers: special tokens and templates, byte-level coverage, transformers compatibility, bad sizes."""

import json

import pytest
from tokenizers import Tokenizer

from bertkit.errors import BertkitError
from bertkit.text.bpe import sample_indices
from bertkit.text.tokenizer import (SPECIAL_TOKENS, check_vocab_matches, continuation, load_tokenizer, save_tokenizer,
                                    special_ids, train_bpe, vocab_span)
from conftest import SAMPLE_CORPUS

LINES = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]


def test_special_tokens_and_bert_templates(sample_tokenizer):
    tok = sample_tokenizer
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]
    single = tok.encode("The decoder reads.")
    assert single.tokens[0] == "[CLS]" and single.tokens[-1] == "[SEP]" and set(single.type_ids) == {0}
    pair = tok.encode("First part.", "Second part.")
    sep = pair.tokens.index("[SEP]")
    assert pair.tokens[-1] == "[SEP]" and pair.tokens.count("[SEP]") == 2
    assert set(pair.type_ids[:sep + 1]) == {0} and set(pair.type_ids[sep + 1:]) == {1}


def test_byte_level_never_produces_unk(sample_tokenizer):
    text = "Émoji 🤖, 中文, and ünïcödé never seen in training"
    ids = sample_tokenizer.encode(text).ids
    assert special_ids(sample_tokenizer).unk not in ids
    assert sample_tokenizer.decode(ids) == text


def test_metaspace_bpe_falls_back_to_unk():
    tok = train_bpe(LINES * 3, vocab_size=300, byte_level=False, min_frequency=1)
    assert special_ids(tok).unk in tok.encode("🤖").ids


def test_a_continuation_keeps_the_space_a_metaspace_decoder_drops_from_a_first_token(sample_tokenizer):
    """`generate` decoded only the new ids; a Metaspace decoder drops the space of the first token it decodes, so
    'to this' + ' be' printed 'to thisbe' (review, 2026-11-28). Decoded after the prompt, the space stays; a
    byte-level tokenizer reads the same either way."""
    meta = train_bpe(LINES * 3, vocab_size=300, byte_level=False, min_frequency=1)
    for tok in (meta, sample_tokenizer):
        head, new = tok.encode("the decoder", add_special_tokens=False).ids, \
            tok.encode(" reads words", add_special_tokens=False).ids
        whole = tok.decode(head + new)
        assert continuation(tok, head, new) == whole[len(tok.decode(head)):] and whole.endswith(" reads words")
        assert (tok.decode(head) + continuation(tok, head, new)).endswith("decoder reads words")
    alone = meta.decode(meta.encode(" reads words", add_special_tokens=False).ids)
    assert alone == "reads words"  # decoded alone, the first token's space is gone: why `continuation` exists


def test_mask_absorbs_the_space_before_it(sample_tokenizer):
    tokens = sample_tokenizer.encode("The decoder [MASK] words.").tokens
    assert tokens.count("Ġ") == 0 and any(t.strip() == "[MASK]" for t in tokens)


def test_lowercase_and_nfkc_options():
    tok = train_bpe(LINES * 3, vocab_size=300, lowercase=True, min_frequency=1)
    assert tok.encode("THE Decoder").ids == tok.encode("the decoder").ids
    assert tok.encode("ﬁ").ids == tok.encode("fi").ids  # NFKC folds the ligature


def test_transformers_loads_and_encodes_identically(tmp_path, sample_tokenizer):
    transformers = pytest.importorskip("transformers")
    save_tokenizer(sample_tokenizer, tmp_path)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for args in (("A small encoder learns.",), ("A small encoder learns.", "It fills gaps, 🤖!")):
        ours = sample_tokenizer.encode(*args)
        for theirs in (hf(*args), auto(*args)):
            assert theirs["input_ids"] == ours.ids
        assert auto(*args)["token_type_ids"] == ours.type_ids
    assert auto.mask_token == "[MASK]" and auto.mask_token_id == 4 and auto.pad_token_id == 0


def test_vocab_sizes_the_corpus_cannot_support():
    with pytest.raises(BertkitError, match="vocab size 100 is too small: .* alone take 261 .at least 262: "
                       r"--vocab-size for `bertkit tokenizer train`, --set model.vocab_size=N elsewhere\)$"):
        train_bpe(LINES, vocab_size=100)
    with pytest.raises(BertkitError, match=r"corpus supports only [\d,]+ tokens"):
        train_bpe(LINES, vocab_size=50_000)
    # a caller that knows its user's option names only that one
    with pytest.raises(BertkitError, match=r"^--vocab-size=100 is too small: .* \(--vocab-size=N with N at least "
                       r"262\)$"):
        train_bpe(LINES, vocab_size=100, option="--vocab-size")
    with pytest.raises(BertkitError, match=r"fewer than --set model.vocab_size=50000: .*\(--set model.vocab_size=N "
                       r"with N [\d]+ or less\)$"):
        train_bpe(LINES, vocab_size=50_000, option="--set model.vocab_size")


def test_load_errors_and_vocab_check(tmp_path, sample_tokenizer):
    with pytest.raises(BertkitError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(BertkitError, match="not a valid tokenizer"):
        load_tokenizer(tmp_path)
    check_vocab_matches(sample_tokenizer, 400, "runs/x")
    check_vocab_matches(sample_tokenizer, 512, "runs/x")  # a larger table is fine: some rows are never used


def test_a_replaced_tokenizer_larger_than_the_model_is_one_line_naming_run_and_sizes(tmp_path, sample_tokenizer):
    """A run directory whose tokenizer.json was replaced by a bigger one: the check names the run, the tokenizer's
    vocab size and the model's vocab_size, in one line, instead of an IndexError in the embedding."""
    run = tmp_path / "run"
    save_tokenizer(sample_tokenizer, run)  # 400 tokens; the run's model was built for 300
    with pytest.raises(BertkitError) as caught:
        check_vocab_matches(load_tokenizer(run), 300, run)
    message = str(caught.value)
    assert message == (f"{run}: the tokenizer's vocab size is 400 but the model's vocab_size is 300 (ids from 300 up "
                       "have no embedding); use the tokenizer the model was trained with")
    assert "\n" not in message


def test_vocab_span_counts_ids_beyond_the_vocab_size(sample_tokenizer):
    """A hand-edited tokenizer.json can hold an id past its token count: the embedding needs that many rows."""
    assert vocab_span(sample_tokenizer) == sample_tokenizer.get_vocab_size() == 400
    data = json.loads(sample_tokenizer.to_str())
    data["model"]["vocab"]["Ġzzz"] = 999
    gappy = Tokenizer.from_str(json.dumps(data))
    assert gappy.get_vocab_size() == 401 and vocab_span(gappy) == 1000
    with pytest.raises(BertkitError, match="vocab size is 1,000 but the model's vocab_size is 401"):
        check_vocab_matches(gappy, 401, "runs/x")


def test_loaded_tokenizers_neither_pad_nor_truncate(tmp_path, sample_tokenizer):
    """A Hugging Face tokenizer.json with fixed padding and truncation (as all-MiniLM-L6-v2 ships) loads without
    either: packing and fill-mask read every token of a text and no [PAD] they did not ask for."""
    shipped = Tokenizer.from_str(sample_tokenizer.to_str())  # a copy: the fixture is shared
    shipped.enable_padding(length=16, pad_id=special_ids(shipped).pad, pad_token="[PAD]")
    shipped.enable_truncation(8)
    save_tokenizer(shipped, tmp_path)
    text = " ".join(LINES[:3])
    assert len(shipped.encode(text).ids) == 16  # truncated to 8, padded to 16
    loaded = load_tokenizer(tmp_path)
    ids = loaded.encode(text).ids
    assert len(ids) > 16 and special_ids(loaded).pad not in ids
    assert loaded.padding is None and loaded.truncation is None


def test_tokenizer_train_takes_max_documents_and_names_its_own_size_option(tmp_path):
    # the recipe key had no option in `tokenizer train`, and its size errors named both commands' ways
    from conftest import cli_error, cli_ok

    # a corpus in order (IMDB's train file is its negative reviews, then its positive ones): the documents are
    # spread over it, where the first N gave a vocabulary of one part (2026-11-29)
    corpus = tmp_path / "c.txt"
    corpus.write_text("alpha beta gamma\n" * 100 + "omega sigma delta\n" * 100)
    said = " ".join(cli_ok("tokenizer", "train", corpus, "-o", tmp_path / "first", "--vocab-size", "270",
                           "--min-frequency", "1", "--max-documents", "4").output.split())
    assert "training a 270-token BPE on 4 of the corpus's 200 documents, spread evenly (tokenizer.max_documents)" \
        in said
    vocab = json.loads((tmp_path / "first" / "tokenizer.json").read_text())["model"]["vocab"]
    assert {"ha", "gma"} <= set(vocab)  # merges of both halves (alpha's, sigma's)
    assert sample_indices(200, 4) == [0, 50, 100, 150] and sample_indices(5, 5) == [0, 1, 2, 3, 4]
    assert sample_indices(7, 3) == [0, 2, 4]
    # a vocabulary the whole corpus supports but the sample does not: the error names the option that cut it
    line = cli_error("tokenizer", "train", corpus, "-o", tmp_path / "few", "--vocab-size", "290", "--min-frequency",
                     "1", "--max-documents", "2")
    assert "or raise --max-documents, which took 2 documents of 200" in line
    line = cli_error("tokenizer", "train", corpus, "-o", tmp_path / "tiny", "--vocab-size", "100")
    assert "--vocab-size" in line and "model.vocab_size" not in line
