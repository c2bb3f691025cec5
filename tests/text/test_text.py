"""Running text -> words for a word-level bundle: accents, case, punctuation, numbers (torch-free, fast)."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from attnserve.service.engine.bundle import load_bundle
from attnserve.service.requests.frontend import word_reader
from attnserve.service.text.lexicon import Lexicon
from attnserve.service.text.reader import MAX_WORDS, WORD_SEPARATOR, CharIds, TextError, TextReader, check_separator, split_words

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


def bundle_reader(bundle_dir: Path) -> TextReader | None:
    """The reader the request layer builds for a bundle (None: its model reads inputs whole)."""
    bundle = load_bundle(bundle_dir)
    src, tgt = (Tokenizer.from_file(str(p)) for p in (bundle.src_tokenizer_path, bundle.tgt_tokenizer_path))
    return word_reader(bundle, src, tgt)


@pytest.fixture(scope="module")
def reader() -> TextReader:
    return bundle_reader(DEFAULT_BUNDLE)


def texts(text: str) -> list[str]:
    return [w.text for w in split_words(text)]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hello, world! I have 2 cats.", ["hello", "world", "i", "have", "two", "cats"]),
        ("naïve café", ["naive", "cafe"]),
        ("nai\u0308ve", ["naive"]),  # a combining diaeresis, not a precomposed ï
        ("cat.", ["cat"]),
        ("  hello  ", ["hello"]),
        ("b2b", ["b", "two", "b"]),
        ("$5", ["five", "dollars"]),
        ("$1", ["one", "dollar"]),
        ("$5.50", ["five", "dollars", "and", "fifty", "cents"]),
        ("$0.01", ["one", "cent"]),
        ("$1.01", ["one", "dollar", "and", "one", "cent"]),
        ("$5.00", ["five", "dollars"]),
        ("$1,000,000", ["one", "million", "dollars"]),
        ("£5", ["five", "pounds"]),
        ("£1", ["one", "pound"]),
        ("£3.50", ["three", "pounds", "and", "fifty", "pence"]),
        ("£0.01", ["one", "penny"]),
        ("€20", ["twenty", "euros"]),
        ("€0.99", ["ninety", "nine", "cents"]),
        ("¥500", ["five", "hundred", "yen"]),
        ("₹10", ["ten", "rupees"]),
        ("$1.005", ["one", "point", "zero", "zero", "five", "dollars"]),  # not dollars and cents: a number of dollars
        ("the 1990s", ["the", "nineteen", "nineties"]),
        ("the 1990's", ["the", "nineteen", "nineties"]),
        ("the 1900s", ["the", "nineteen", "hundreds"]),
        ("the 2000s", ["the", "two", "thousands"]),
        ("the 2010s", ["the", "twenty", "tens"]),
        ("the '80s and 70s", ["the", "eighties", "and", "seventies"]),
        ("2nd", ["second"]),
        ("the 21st century", ["the", "twenty", "first", "century"]),
        ("don't", ["don't"]),
        ("I DON’T know", ["i", "don't", "know"]),  # a typographic apostrophe is a plain one
        ("'quoted' words", ["quoted", "words"]),  # apostrophes around a word are quotes
        ("well-known", ["well", "known"]),
        ("1,000 people", ["one", "thousand", "people"]),
        ("in 1999", ["in", "nineteen", "ninety", "nine"]),
        ("3.5 -4 5%", ["three", "point", "five", "minus", "four", "five", "percent"]),
        ("Straße", ["strasse"]),
    ],
)
def test_running_text_is_read_as_words(text, words):
    assert texts(text) == words


def test_each_word_keeps_the_span_it_came_from():
    text = "I have $5, naïve!"
    assert [(w.text, text[w.start : w.end]) for w in split_words(text)] == [
        ("i", "I"),
        ("have", "have"),
        ("five", "$5"),
        ("dollars", "$5"),
        ("naive", "naïve"),
    ]


def test_a_plain_word_is_read_as_the_rules_read_it_in_running_text():
    """A request of one plain ASCII word takes a short cut; it must give what the full rules give the same word
    followed by a full stop (which the rules drop)."""
    rng = random.Random(5)
    letters = string.ascii_letters
    for _ in range(2000):
        word = "".join(rng.choice(letters) for _ in range(rng.randint(1, 20)))
        assert split_words(word) == split_words(word + ".")
    with pytest.raises(TextError, match="at most 10 are read"):
        split_words("x" * 11, max_chars=10)  # the limit still holds on the short cut


def test_limits_are_stated_and_overridable():
    with pytest.raises(TextError, match="at most 10 are read"):
        split_words("x" * 11, max_chars=10)
    with pytest.raises(TextError, match=f"at most {MAX_WORDS}"):
        split_words("a " * (MAX_WORDS + 1), max_chars=10 * MAX_WORDS)
    with pytest.raises(TextError, match="more than 3 words"):
        split_words("1234567", max_words=3)  # numbers count as the words they are read as
    assert split_words(" ... !") == []  # punctuation alone: no words, not an error


def test_a_character_the_model_cannot_read_is_skipped_and_named(reader):
    reading = reader.read("hello 日本")
    assert [w.text for w in reading.words] == ["hello"]
    assert [(k.start, k.end, k.text) for k in reading.skipped] == [(6, 8, "日本")]
    assert [k.text for k in reader.read("hello 😀").skipped] == ["😀"]
    with pytest.raises(TextError, match="no words to read") as info:
        reader.words("日本 😀")  # nothing readable is left: refused, naming what was skipped
    assert "'日本'" in str(info.value) and "\n" not in str(info.value)
    assert [w.text for w in reader.words("Naïve, I have 2 cats.")] == ["naive", "i", "have", "two", "cats"]


def test_a_word_longer_than_the_model_reads_is_read_in_parts():
    """The request layer checks each word's length against the server's limit: a longer word is read in parts
    (service/requests/parts.py), named in the warnings, and the text is not refused."""
    from attnserve.service.engine.engine import Engine
    from attnserve.service.engine.scheduler import Scheduler
    from attnserve.service.metrics import ServiceMetrics
    from attnserve.service.requests.frontend import RequestLayer

    engine = Engine(load_bundle(DEFAULT_BUNDLE), threads=1)
    front = RequestLayer(engine, Scheduler(engine, ServiceMetrics("t")))
    assert front.max_input_tokens == 48 and [u.text for u in front.units("a" * 48 + " b", None)] == ["a" * 48, "b"]
    assert front.units("a" * 48, None)[0].parts is None
    (unit,), (warning,) = front.read("a" * 49, None)
    assert "".join(unit.parts) == "a" * 49 and all(len(p) <= 48 for p in unit.parts) and len(unit.parts) > 1
    assert "49 tokens long; this model reads at most 48" in warning.message


def test_word_separator_is_in_no_target_token_and_joins_answers(reader):
    tgt = Tokenizer.from_file(str(DEFAULT_BUNDLE / "tgt_tokenizer.json"))
    check_separator(tgt)
    assert not any("|" in token for token in tgt.get_vocab())
    assert reader.join(["HH AH0 L OW1", "W ER1 L D"]) == "HH AH0 L OW1" + WORD_SEPARATOR + "W ER1 L D"
    with pytest.raises(ValueError, match="cannot be told apart"):
        check_separator(tgt, " L ")


def test_sentence_words_answer_from_the_default_lexicon(reader):
    lexicon = Lexicon.load(load_bundle(DEFAULT_BUNDLE))
    words = reader.words("Hello, world! I have 2 cats.")
    answers = [lexicon.lookup(w.text)[0].text for w in words]
    assert answers == ["HH AH0 L OW1", "W ER1 L D", "AY1", "HH AE1 V", "T UW1", "K AE1 T S"]


def test_a_bundle_without_the_word_level_flag_gets_no_reader(tmp_path):
    from test_lexicon import make_bundle

    assert bundle_reader(make_bundle(tmp_path, word_level=False)) is None
    (tmp_path / "word-level").mkdir()
    assert bundle_reader(make_bundle(tmp_path / "word-level", word_level=True)) is not None


def _char_tokenizer(lowercase: bool) -> Tokenizer:
    import string

    from attnserve.training.tokenize import build_tokenizer

    return build_tokenizer([string.ascii_letters + "'-.", "naïve", "<tag>"], "char", lowercase=lowercase)


@pytest.mark.parametrize("source", ["default bundle", "char lowercase", "char cased"])
def test_character_ids_without_the_tokenizer_equal_the_tokenizers(source):
    """CharIds (what TextReader reads plain ASCII words with) gives the tokenizer's ids wherever it answers:
    every ASCII character, random ASCII strings, added tokens' text; and it declines what it cannot be sure of."""
    import random
    import string

    if source == "default bundle":
        tok = Tokenizer.from_file(str(load_bundle(DEFAULT_BUNDLE).src_tokenizer_path))
    else:
        tok = _char_tokenizer(lowercase=source == "char lowercase")
    char_ids = CharIds.of(tok)
    assert char_ids is not None
    rng = random.Random(0)
    alphabet = string.printable + "\x00\x7f"
    samples = list(alphabet) + ["<s>", "a<s>b", "</s>", "<unk>", "<pad>", "Don't", "HELLO", "naïve", "ﬁne", "x\ny"]
    samples += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    samples += ["".join(rng.choice(string.ascii_letters + "'") for _ in range(rng.randint(1, 12))) for _ in range(3000)]
    answered = 0
    for text in samples:
        got = char_ids.ids(text)
        if got is not None:
            answered += 1
            assert got == tok.encode(text, add_special_tokens=False).ids, text
    assert answered > 3000  # the plain words are answered, not handed back
    assert char_ids.ids("a<s>b") is None and char_ids.ids("naïve") is None  # an added token's start; not ASCII


def test_only_a_character_pipeline_gets_character_ids():
    from attnserve.training.tokenize import build_tokenizer

    assert CharIds.of(build_tokenizer(["hello world"], "whitespace")) is None
    assert CharIds.of(build_tokenizer(["hello world"] * 10, "bpe", vocab_size=60)) is None


def test_an_initial_is_a_letter_whose_stop_ends_no_sentence():
    from attnserve.service.text.reader import read_text

    def marks(text: str) -> list[str]:
        return [w.text for w in read_text(text, punctuation=True).words if w.punctuation]

    words = read_text("Richard M. Stallman and John D. Rockefeller.").words
    assert [(w.text, w.pronunciation) for w in words][1:2] == [("m", "EH1 M")]
    assert [w.text for w in words] == ["richard", "m", "stallman", "and", "john", "d", "rockefeller"]
    assert marks("Richard M. Stallman and J. K. Rowling.") == ["."]  # only the sentence's own stop
    assert marks("I took vitamin C. It helps.") == [".", "."]  # a sentence opens after the letter: its stop ends one
    assert [w.text for w in read_text("Elizabeth I. She ruled.").words][:3] == ["elizabeth", "the", "first"]


def test_a_dash_between_times_is_read_to_not_kept_as_a_pause():
    from attnserve.service.text.reader import read_text

    for punctuation in (False, True):
        words = [w.text for w in read_text("Open 9 am - 5 pm daily.", punctuation=punctuation).words]
        assert words[:6] == ["open", "nine", "am", "to", "five", "pm"], words
    assert "to" not in [w.text for w in read_text("It was late - very late.", punctuation=True).words]


def test_number_and_reads_every_spelt_number_with_the_british_and_and_only_for_its_text():
    from attnserve.service.text.reader import read_text
    from attnserve.service.text.spoken import NUMBER_AND

    text = "105 cats, $2,340 and the 101st in 2005"
    us = [w.text for w in read_text(text).words]
    gb = [w.text for w in read_text(text, number_and=True).words]
    assert " ".join(us) == (
        "one hundred five cats two thousand three hundred forty dollars and the one hundred first in two thousand five"
    )
    assert " ".join(gb) == (
        "one hundred and five cats two thousand three hundred and forty dollars and the one hundred and first "
        "in two thousand and five"
    )
    assert NUMBER_AND.get() is False  # the convention is the one text's: the next reads as US English again
    assert [w.text for w in read_text(text).words] == us
