"""Running text as a TTS front end reads it, over HTTP: a real uvicorn server on 127.0.0.1 serving the default model.

Each test sends a sentence and checks the pronunciations of the words that matter, written without stress
(the answers' stress digits are dropped before comparing), so a test names what a listener would hear:
"Dr. Smith" -> `D AA K T ER | S M IH TH`. The rules are service/text/reader.py's, the words they name
service/text/rules.py's tables; docs/TEXT.md documents both.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from service_harness import serving

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BUNDLE = ROOT / "models" / "g2p-en"


@pytest.fixture(scope="module")
def url():
    with serving(DEFAULT_BUNDLE) as s:
        yield s.url


def post(url: str, inputs: str, **parameters) -> httpx.Response:
    return httpx.post(url + "/generate", json={"inputs": inputs, "parameters": {"details": True, **parameters}}, timeout=120)


def answer(url: str, inputs: str, **parameters) -> dict:
    r = post(url, inputs, **parameters)
    assert r.status_code == 200, r.text
    return r.json()


def unstressed(phonemes: str) -> str:
    return re.sub(r"[0-9]", "", phonemes)


def heard(url: str, text: str, part: str | None = None) -> str:
    """The pronunciations, without stress and joined by " | ", of the words read from `part` of `text` (its first
    occurrence; default: all of it)."""
    words = answer(url, text)["details"]["words"]
    begin = text.index(part) if part is not None else 0
    end = begin + len(part) if part is not None else len(text)
    return " | ".join(unstressed(w["text"]) for w in words if begin <= w["start"] and w["end"] <= end)


# ---- the examples that were refused or misread --------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "part", "expected"),
    [
        ("I love it 😀", "I love it", "AY | L AH V | IH T"),
        ("It is 18°C outside.", "18°C", "EY T IY N | D IH G R IY Z | S EH L S IY AH S"),
        (
            "Go to https://example.com/search?q=cats now",
            "?q=cats",
            "K W EH S CH AH N | M AA R K | K Y UW | IY K W AH L Z | K AE T S",
        ),
        ("Æ", None, "EY"),  # transliterated to AE, which the dictionary reads
        ("½ cup of milk", "½ cup", "W AH N | HH AE F | K AH P"),
        ("Dr. Smith is here.", "Dr. Smith", "D AA K T ER | S M IH TH"),
        ("We meet at 10:30 am today.", "10:30 am", "T EH N | TH ER D IY | EY EH M"),
        ("The US and the UK met.", "US", "Y UW EH S"),
        ("IT support is down.", "IT", "AY T IY"),
        ("The WHO said so.", "WHO", "D AH B AH L Y UW EY CH OW"),
        ("AI is here.", "AI", "EY AY"),
        ("Buy a GPU today.", "GPU", "JH IY P IY Y UW"),
        ("World War II ended.", "World War II", "W ER L D | W AO R | T UW"),
        ("Henry VIII had six wives.", "Henry VIII", "HH EH N R IY | DH AH | EY T TH"),
        (
            "Call 555-123-4567 now.",
            "555-123-4567",
            "F AY V | F AY V | F AY V | W AH N | T UW | TH R IY | F AO R | F AY V | S IH K S | S EH V AH N",
        ),
        ("They raised €2.5 million.", "€2.5 million", "T UW | P OY N T | F AY V | M IH L Y AH N | Y UW R OW Z"),
        ("Update to v2.0 now.", "v2.0", "V ER ZH AH N | T UW | P OY N T | Z IH R OW"),
        ("It weighs 5kg.", "5kg", "F AY V | K IH L AH G R AE M Z"),
        ("We are #1 again.", "#1", "N AH M B ER | W AH N"),
        ("Add 1/2 a cup.", "1/2", "W AH N | HH AE F"),
        (
            "Mail john.doe@example.com today.",
            "john.doe@example.com",
            "JH AA N | D AA T | D OW | AE T | IH G Z AE M P AH L | D AA T | K AA M",
        ),
        ("Send your résumé by Friday.", "résumé", "R EH Z AH M EY"),  # the noun, not the verb resume
    ],
)
def test_every_example_that_was_refused_or_misread_is_read(url, text, part, expected):
    assert heard(url, text, part) == expected


def test_a_long_paragraph_and_many_words_are_read(url):
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "  # 13 words, 65 characters
    paragraph = sentence * 31  # 2,015 characters
    words = answer(url, paragraph)["details"]["words"]
    assert len(paragraph) > 2000 and len(words) == 13 * 31
    many = "one two three four five six seven eight nine ten " * 20  # 200 words
    assert len(answer(url, many)["details"]["words"]) == 200


# ---- symbols: read where a reader says them, skipped (with a warning) where not ---------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x = 5", "EH K S | IY K W AH L Z | F AY V"),
        ("© Acme", "K AA P IY R AY T | AE K M IY"),
        ("Acme™", "AE K M IY | T R EY D M AA R K"),
        ("§ 3", "S EH K SH AH N | TH R IY"),
        ("¥500", "F AY V | HH AH N D R AH D | Y EH N"),
        ("90°", "N AY N T IY | D IH G R IY Z"),
        ("cats & dogs", "K AE T S | AH N D | D AA G Z"),
        ("⅓", "W AH N | TH ER D"),
        ("¾", "TH R IY | K W AO R T ER Z"),
        ("2½", "T UW | AH N D | AH | HH AE F"),  # a mixed fraction: "and a half"
        ("#tbt", "HH AE SH T AE G | T IY B IY T IY"),
    ],
)
def test_symbols_are_read_where_a_reader_says_them(url, text, expected):
    assert heard(url, text) == expected


def test_skipped_characters_are_warnings_with_their_offsets(url):
    text = "Hi 😀 there, Привет | friend 👍🏽"
    details = answer(url, text)["details"]
    assert [w["word"] for w in details["words"]] == ["hi", "there", "friend"]
    warnings = details["warnings"]
    assert [(w["text"], w["start"], w["end"]) for w in warnings] == [
        ("😀", 3, 4),
        ("Привет", 12, 18),
        ("|", 19, 20),
        ("👍🏽", 28, 30),
    ]
    assert all(text[w["start"] : w["end"]] == w["text"] and w["text"] in w["message"] for w in warnings)
    assert "script" in warnings[1]["message"]


def test_a_text_with_nothing_readable_is_the_only_refusal(url):
    r = post(url, "😀 日本 👍")
    assert r.status_code == 422 and r.json()["error_type"] == "validation"
    assert "no words to read" in r.json()["error"] and "'😀'" in r.json()["error"]


def test_plain_text_answers_carry_no_warnings(url):
    assert answer(url, "hello world")["details"]["warnings"] is None


def test_a_stream_ends_with_the_warnings(url):
    from service_harness import stream

    status, events = stream(url + "/generate_stream", {"inputs": "hi 😀 there", "parameters": {"details": True}})
    assert status == 200
    assert [w["text"] for w in events[-1]["details"]["warnings"]] == ["😀"]


# ---- letters outside the model's alphabet ----------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Straße", "S T R AE S"),  # ß -> ss
        ("naïve café", "N AY IY V | K AH F EY"),  # dictionary words keep their own pronunciation
        ("Ærø", "EH R OW"),  # Æ -> Ae before small letters
        ("Zoë", "Z OW IY"),
        ("exposé", "EH K S P OW Z EY"),  # the noun, not the verb expose
    ],
)
def test_latin_letters_are_transliterated(url, text, expected):
    assert heard(url, text) == expected


# ---- acronyms and case -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "part", "expected"),
    [
        ("NASA launched it.", "NASA", "N AE S AH"),  # the dictionary's word-acronym
        ("NATO met.", "NATO", "N EY T OW"),
        ("The FBI came.", "FBI", "EH F B IY AY"),  # the dictionary spells it
        ("Two GPUs ran.", "GPUs", "JH IY P IY Y UW Z"),
        ("WHO ARE US", "US", "AH S"),  # a sentence in capitals: words
        ("WHO ARE US", "WHO", "HH UW"),
        ("A cat and I sat.", "A cat and I", "AH | K AE T | AH N D | AY"),
        ("the U.S. army", "U.S.", "Y UW EH S"),
        ("it is 10 AM", "AM", "EY EH M"),
        ("It was HUGE.", "HUGE", "HH Y UW JH"),  # a dictionary word in capitals is the word
    ],
)
def test_acronyms_are_read_by_case(url, text, part, expected):
    assert heard(url, text, part) == expected


@pytest.mark.parametrize(
    ("text", "part", "expected"),
    [
        ("Read Chapter IV first.", "Chapter IV", "CH AE P T ER | F AO R"),
        ("Elizabeth I ruled.", "Elizabeth I", "IH L IH Z AH B AH TH | DH AH | F ER S T"),
        ("Louis XIV built it.", "Louis XIV", "L UW IH S | DH AH | F AO R T IY N TH"),
        ("Then I went home.", "Then I", "DH EH N | AY"),  # "I" after another word is the pronoun
        ("World War I began.", "War I", "W AO R | W AH N"),
    ],
)
def test_roman_numerals_after_a_name_or_a_counted_word(url, text, part, expected):
    assert heard(url, text, part) == expected


# ---- abbreviations and times -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "part", "expected"),
    [
        ("Mr. Brown and Mrs. Brown", "Mr.", "M IH S T ER"),
        ("Mr. Brown and Mrs. Brown", "Mrs.", "M IH S IH Z"),
        ("Ms. Lee", "Ms.", "M IH Z"),
        ("Prof. Jones", "Prof.", "P R AH F EH S ER"),
        ("St. Louis", "St.", "S EY N T"),
        ("on Main St. today", "St.", "S T R IY T"),
        ("Mt. Everest", "Mt.", "M AW N T"),
        ("Gen. Grant", "Gen.", "JH EH N ER AH L"),
        ("King Jr. spoke", "Jr.", "JH UW N Y ER"),
        ("cats, dogs, etc. are pets", "etc.", "EH T S EH T ER AH"),
        ("cats vs. dogs", "vs.", "V ER S AH S"),
        ("fruit, e.g. apples", "e.g.", "F AO R | IH G Z AE M P AH L"),
        ("one, i.e. this", "i.e.", "DH AE T | IH Z"),
        ("at 7pm", "7pm", "S EH V AH N | P IY EH M"),
        ("at 10:05 a.m.", "10:05 a.m.", "T EH N | OW | F AY V | EY EH M"),
        ("at 9:00 sharp", "9:00", "N AY N | AH K L AA K"),
    ],
)
def test_abbreviations_and_times_by_context(url, text, part, expected):
    assert heard(url, text, part) == expected


def test_a_plain_lower_case_word_reads_as_the_dictionary_has_it(url):
    assert heard(url, "dr") == "D R AY V"  # the dictionary's own entry: only "Dr" or "dr." before a word expand
    assert heard(url, "us") == "AH S"


# ---- numbers, units, addresses ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3.14", "TH R IY | P OY N T | W AH N | F AO R"),
        ("1.2.3", "W AH N | P OY N T | T UW | P OY N T | TH R IY"),
        ("$1 million", "W AH N | M IH L Y AH N | D AA L ER Z"),
        ("$3bn", "TH R IY | B IH L Y AH N | D AA L ER Z"),
        ("10k", "T EH N | TH AW Z AH N D"),
        ("10 km", "T EH N | K AH L AA M AH T ER Z"),
        ("1 km", "W AH N | K AH L AA M AH T ER"),
        ("60 km/h", "S IH K S T IY | K AH L AA M AH T ER Z | P ER | AW ER"),
        ("-5°F", "M AY N AH S | F AY V | D IH G R IY Z | F EH R AH N HH AY T"),
        ("50%", "F IH F T IY | P ER S EH N T"),
        ("30 mph", "TH ER D IY | M AY L Z | P ER | AW ER"),
        ("200 ms", "T UW | HH AH N D R AH D | M IH L IH S EH K AH N D Z"),
        ("16 GB", "S IH K S T IY N | G IH G AH B AY T S"),
        ("3/4", "TH R IY | K W AO R T ER Z"),
        ("(555) 123-4567", "F AY V | F AY V | F AY V | W AH N | T UW | TH R IY | F AO R | F AY V | S IH K S | S EH V AH N"),
        (
            "+44 20 7946 0958",
            "P L AH S | F AO R | F AO R | T UW | OW | S EH V AH N | N AY N | F AO R | S IH K S | OW | N AY N | F AY V | EY T",
        ),
        ("2-3 cups", "T UW | T UW | TH R IY | K AH P S"),  # a range: "to"
        ("100 500", "W AH N | HH AH N D R AH D | F AY V | HH AH N D R AH D"),  # numbers, not a phone number
        ("2000 km", "T UW | TH AW Z AH N D | K AH L AA M AH T ER Z"),  # a cardinal before a unit, not a year
        ("Super Bowl LIV", "S UW P ER | B OW L | F IH F T IY | F AO R"),
        ("www.example.org", " | ".join(["D AH B AH L Y UW"] * 3 + ["D AA T | IH G Z AE M P AH L | D AA T | AO R G"])),
    ],
)
def test_numbers_units_and_addresses(url, text, expected):
    assert heard(url, text) == expected


def test_words_keep_their_spans_into_the_original_text(url):
    text = "Dr. Smith paid €2.5 million 😀 for GPUs."
    words = answer(url, text)["details"]["words"]
    spans = [(w["word"], text[w["start"] : w["end"]]) for w in words]
    assert spans == [
        ("doctor", "Dr"),
        ("smith", "Smith"),
        ("paid", "paid"),
        *[(w, "€2.5 million") for w in ("two", "point", "five", "million", "euros")],
        ("for", "for"),
        ("gpus", "GPUs"),
    ]


# ---- a long mixed text -----------------------------------------------------------------------------
MIXED = [
    "Dr. Smith met Prof. Jones at 10:30 am on Main St. in the US 😀.",
    "They paid $1,250.50 for 3 GPUs, i.e. about €2.5 million less than NASA did in 1999!",
    "Call 555-123-4567 or mail info@example.com; see https://example.com/a?b=1 for more.",
    "The temperature rose to 18°C, then 21°C — 15% more than the 1990s average 👍🏽.",
    "Chapter IV: Henry VIII had six wives, e.g. Anne, and ruled from 1509 to 1547.",
    "Add ½ cup of sugar and 1/2 a spoon of salt, stir 5 min, bake at 200° for 30 min.",
    "We're #1 again & again; v2.0 ships with 16 GB of memory ™ © § 3 ✓.",
    "A cat and I sat by the river, reading a naïve café menu, Straße 5, Привет.",
    "The quick brown fox jumps over the lazy dog while the old man reads his paper slowly.",
    "It rained for 2 days; the 21st of June was dry, and 3.14 is close to pi.",
]


def test_a_3000_word_mixed_text_is_read_in_order_with_warnings_for_what_was_skipped(url):
    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.text.lexicon import Lexicon
    from attnserve.service.text.reader import read_text

    text = ""
    while len(text.split()) < 3000:
        text += " ".join(MIXED) + "\n"
    reading = read_text(text, known=Lexicon.load(load_bundle(DEFAULT_BUNDLE)))
    assert len(reading.words) > 3000
    details = answer(url, text)["details"]
    words = details["words"]
    assert [(w["word"], w["start"], w["end"]) for w in words] == [(w.text, w.start, w.end) for w in reading.words]
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)  # in text order
    skipped = [w["text"] for w in details["warnings"]]
    rounds = text.count("😀")
    assert rounds >= 20 and sorted(set(skipped)) == sorted(["😀", "👍🏽", "✓", "Привет"])
    assert len(skipped) == 4 * rounds
    assert all(w["text"] and w["source"] in ("lexicon", "model", "context") for w in words)  # context: a heteronym


def test_any_mix_of_characters_is_read_or_refused_with_a_text_error_never_a_crash():
    """Property: random mixes of letters, digits, symbols, emoji, other scripts and the rules' triggers either read as
    lower-case words (or kept marks) with spans inside the text, or raise TextError (a 422), in process."""
    import random

    from attnserve.service.engine.bundle import load_bundle
    from attnserve.service.text.lexicon import Lexicon
    from attnserve.service.text.reader import TextError, read_text

    lexicon = Lexicon.load(load_bundle(DEFAULT_BUNDLE))
    pieces = list("abcXYZ019 .,;:!?-'\"()/#@&%$€£¥°½⅞=+_~^*|\\<>é߯øПж日😀👍🏽\u200d\ufe0f\u0301\n\t")
    pieces += ["Dr.", "St.", "II", "VIII", "GPU", "US", "10:30", "am", "a.m.", "v2.0", "555-1234", "km/h", "°C", "e.g."]
    pieces += ["http://x.y/z?a=1", "a@b.co", "1/2", "#1", "1,000", "3.5", "Henry", "War", "No.", "5", "kg", "$", "bn"]
    rng = random.Random(7)
    read = 0
    for _ in range(3000):
        text = "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randint(1, 12)))
        for punctuation in (False, True):
            try:
                words = read_text(text, known=lexicon, punctuation=punctuation).words
            except TextError:
                continue
            read += 1
            for w in words:
                assert 0 <= w.start < w.end <= len(text), (text, w)
                assert w.punctuation or (w.text.replace("'", "").isalpha() and w.text.islower()), (text, w)
    assert read > 5000
