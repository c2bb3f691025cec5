"""The library (service/phonemizer.py, attnserve.phonemize): sentences of words with spans, phonemes and sources from
the default model on ONNX Runtime; the stream yields the whole text's sentences once each; Piper's ids; languages."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import piper_phonemize
import pytest
from test_sentences import pieces, written_forms_text

from attnserve.service.phonemizer import Phonemizer, Sentence, to_piper_ids
from attnserve.service.text.context import DeferredChooser

ROOT = Path(__file__).resolve().parents[2]
PIPER_MAP = piper_phonemize.get_espeak_map()
TEXT = "Dr. Smith arrived at 5 p.m. He paid $5."
SOURCES = {"lexicon", "model", "context", "parts", "punctuation"}


@pytest.fixture(scope="module")
def phonemizer():
    with Phonemizer(threads=1) as p:
        yield p


def test_sentences_carry_their_span_phonemes_and_words(phonemizer):
    first, second = phonemizer.phonemize(TEXT)
    assert (first.text, first.start, first.end) == ("Dr. Smith arrived at 5 p.m.", 0, 27)
    assert (second.text, second.start, second.end) == ("He paid $5.", 28, 39)
    assert first.phonemes.startswith("dˈɑːktɚ smˈɪθ") and first.phonemes.endswith(".")  # the stop p.m. took, kept
    assert second.phonemes.endswith("dˈɑːlɚz.")
    for s in (first, second):
        assert TEXT[s.start : s.end] == s.text and set(s.phonemes) <= set(PIPER_MAP)
        assert all(w.source in SOURCES and w.phonemes for w in s.words)
        assert all(s.start <= w.start < w.end <= s.end for w in s.words)
    doctor = first.words[0]
    assert (doctor.text, TEXT[doctor.start : doctor.end], doctor.phonemes, doctor.source) == (
        "doctor",
        "Dr",
        "dˈɑːktɚ",
        "lexicon",
    )
    assert first.words[-1].text == "." and first.words[-1].source == "punctuation" and TEXT[first.words[-1].start] == "."
    assert [w.text for w in second.words] == ["he", "paid", "five", "dollars", "."]


def test_a_word_the_lexicon_lacks_is_the_models_with_its_score(phonemizer):
    (s,) = phonemizer.phonemize("The zyxoplat wobbled.")
    word = next(w for w in s.words if w.text == "zyxoplat")
    assert word.source == "model" and word.score is not None and word.score < 0
    assert s.phonemes.endswith(".") and set(s.phonemes) <= set(PIPER_MAP)


def test_the_options_are_the_request_layers(phonemizer):
    (plain,) = phonemizer.phonemize("Hello, world.", punctuation=False)
    assert plain.phonemes == "həlˈoʊ wˈɜːld"
    (arpabet,) = phonemizer.phonemize("Hello, world.", alphabet="arpabet")  # marks off by default outside espeak
    assert arpabet.phonemes == "HH AH0 L OW1 | W ER1 L D"
    (own,) = phonemizer.phonemize("Run nginx.", pronunciations={"nginx": "EH1 N JH IH0 N EH1 K S"}, alphabet="arpabet")
    assert "EH1 N JH IH0 N EH1 K S" in own.phonemes and own.words[1].source == "lexicon"
    (dmy,) = phonemizer.phonemize("On 3/4/2024.", date_order="dmy", punctuation=False)
    assert "ˈeɪpɹəl" in dmy.phonemes or "ɑːpɹɪl" in dmy.phonemes or "eɪpɹɪl" in dmy.phonemes, dmy.phonemes


def test_number_and_reads_numbers_with_the_british_and(phonemizer):
    (us,) = phonemizer.phonemize("105 people.", punctuation=False)
    (gb,) = phonemizer.phonemize("105 people.", number_and=True, punctuation=False)
    assert [w.text for w in us.words] == ["one", "hundred", "five", "people"]
    assert [w.text for w in gb.words] == ["one", "hundred", "and", "five", "people"]
    assert {(w.start, w.end) for w in gb.words[:4]} == {(0, 3)}  # every word of the number has its span


@pytest.mark.parametrize("language", [None, "en", "en-us", "en_US", "EN-US"])
def test_en_us_by_any_of_its_names_is_read(phonemizer, language):
    assert phonemizer.phonemize("Hello.", language=language)[0].phonemes == "həlˈoʊ."


@pytest.mark.parametrize("language", ["en-gb", "de", "fr-fr", ""])
def test_another_language_is_a_value_error_naming_the_one_read(phonemizer, language):
    with pytest.raises(ValueError, match=r"language: .* is not supported: this model reads en-us"):
        phonemizer.phonemize("Hello.", language=language)
    with pytest.raises(ValueError, match="en-us"):
        phonemizer.phonemize_stream(["Hello."], language=language)  # refused at the call, before any chunk is read


@pytest.mark.parametrize("options", [{"alphabet": "klingon"}, {"date_order": "yyyy"}, {"pronunciations": {"x": "qqq!"}}])
def test_a_bad_option_is_a_value_error(phonemizer, options):
    with pytest.raises(ValueError):
        phonemizer.phonemize("Hello.", **options)


def test_the_stream_yields_the_whole_texts_sentences_once_each_the_last_at_the_end(phonemizer):
    text = written_forms_text()
    whole = phonemizer.phonemize(text)
    assert len(whole) >= 200
    seen: list[Sentence] = []
    fed = 0

    def chunks():
        nonlocal fed
        for chunk in pieces(text, 3):
            fed += len(chunk)
            yield chunk
            # a sentence yielded now is complete in the text fed so far, and never again
            assert all(s.end <= fed for s in seen)

    for s in phonemizer.phonemize_stream(chunks()):
        assert s.end <= fed
        seen.append(s)
    assert seen == whole  # the same sentences, offsets, phonemes and words; none twice
    assert len({(s.start, s.end) for s in seen}) == len(seen)


def test_a_sentence_comes_out_of_the_stream_as_soon_as_the_next_word_decides_it(phonemizer):
    got = []
    for s in phonemizer.phonemize_stream(iter(["Dr. Smith came at 5 p.m. ", "He paid ", "$5. And left"])):
        got.append(s.text)
    assert got == ["Dr. Smith came at 5 p.m.", "He paid $5.", "And left"]
    stream = phonemizer.phonemize_stream(iter(["Hello there. ", "Bye"]))
    assert next(stream).text == "Hello there."  # before "Bye" was read: "Hello there. " and nothing after it settled
    assert [s.text for s in stream] == ["Bye"]


def test_threads_share_one_phonemizer(phonemizer):
    texts = [f"Sentence number {i} is here. It ends." for i in range(8)]
    expected = [phonemizer.phonemize(t) for t in texts]
    got: dict[int, list[Sentence]] = {}
    workers = [threading.Thread(target=lambda i=i: got.__setitem__(i, phonemizer.phonemize(texts[i]))) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [got[i] for i in range(8)] == expected


def test_piper_ids_are_piper_phonemizes_own(phonemizer):
    (s,) = phonemizer.phonemize("The quick brown fox, jumping!")
    assert to_piper_ids(s, PIPER_MAP) == piper_phonemize.phoneme_ids_espeak(list(s.phonemes))
    with pytest.raises(ValueError, match="'Q'"):
        to_piper_ids("Q", PIPER_MAP)


def test_import_attnserve_loads_nothing_until_a_name_is_used():
    code = (
        "import sys, attnserve\n"
        "heavy = [m for m in sys.modules if m.startswith(('attnserve.', 'onnxruntime', 'numpy', 'tokenizers'))]\n"
        "assert not heavy, heavy\n"
        "assert attnserve.Phonemizer.__module__ == 'attnserve.service.phonemizer'\n"
        "assert 'fastapi' not in sys.modules and 'pydantic' not in sys.modules, 'the library imports no web stack'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0 and out.stdout == "ok\n", out.stderr


def test_the_default_model_is_found_from_any_directory(tmp_path):
    code = (
        "import attnserve\n"
        "print(attnserve.phonemize('Hello world.', alphabet='arpabet')[0].phonemes)\n"
        "with attnserve.Generator(threads=1) as g: print(g.generate('attention').text)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")} | {"ATTNSERVE_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["HH AH0 L OW1 | W ER1 L D", "AH0 T EH1 N SH AH0 N"]


def test_a_respelling_is_refused_not_read_as_ipa(phonemizer):
    with pytest.raises(ValueError, match=r"'nginx': 'engine x' read as no alphabet: .*ARPAbet .*IPA .*pronunciations_alphabet"):
        phonemizer.phonemize("Run nginx.", pronunciations={"nginx": "engine x"})
    (arpabet,) = phonemizer.phonemize("Run nginx.", pronunciations={"nginx": "EH1 N JH AH0 N EH1 K S"})
    assert "ɛndʒ" in arpabet.words[1].phonemes and arpabet.words[1].source == "lexicon"
    (said,) = phonemizer.phonemize("A bit.", pronunciations={"bit": "bit"}, pronunciations_alphabet="ipa")
    assert said.words[1].source == "lexicon"  # plain letters, said to be IPA, are read as IPA


def test_the_context_component_is_read_on_the_first_heteronym_not_at_start_up():
    with Phonemizer(threads=1) as p:
        chooser = p.generator.requests.context
        assert isinstance(chooser, DeferredChooser) and not chooser.read
        assert chooser.info() == {"file": "context.json.gz", "homographs": 104}  # /info's, from bundle.json
        p.phonemize("Hello world, how are you?")
        assert not chooser.read
        (past,) = p.phonemize("I read it yesterday.", alphabet="arpabet")
        (future,) = p.phonemize("I will read it tomorrow.", alphabet="arpabet")
        assert chooser.read
    read = [w for s in (past, future) for w in s.words if w.text == "read"]
    assert [(w.phonemes, w.source) for w in read] == [("R EH1 D", "context"), ("R IY1 D", "context")]


def test_a_word_the_model_guessed_at_says_so_and_a_dictionary_word_never():
    import attnserve
    from attnserve.service.engine.bundle import PACKAGED_BUNDLE, load_bundle

    threshold = load_bundle(PACKAGED_BUNDLE).guess_threshold
    (sentence,) = attnserve.phonemize("The xqzvbrt met pfzhuyle at the house.")
    by_text = {w.text: w for w in sentence.words}
    for word in ("xqzvbrt", "pfzhuyle"):
        w = by_text[word]
        assert w.source == "model" and w.guessed == (w.score < threshold), w
    assert any(by_text[word].guessed for word in ("xqzvbrt", "pfzhuyle"))
    assert by_text["house"].source == "lexicon" and by_text["house"].guessed is False


def test_a_fallback_reads_the_guessed_words_and_only_those(phonemizer):
    text = "The xqzvbrt met pfzhuyle at the house."
    (plain,) = phonemizer.phonemize(text)
    guessed = [w.text for w in plain.words if w.guessed]
    assert len(guessed) >= 2  # the case this test is for: one replaced, the last kept
    asked: list[str] = []

    def espeak_ng(word: str) -> str | None:  # a user's fallback: espeak-ng, say; here a mark to find
        asked.append(word)
        return "ZZ" if word != guessed[-1] else None  # None keeps the model's reading

    (read,) = phonemizer.phonemize(text, fallback=espeak_ng)
    assert asked == guessed
    for before, after in zip(plain.words, read.words):
        if before.guessed and before.text != guessed[-1]:
            assert (after.phonemes, after.source, after.guessed) == ("ZZ", "fallback", True)
        else:
            assert after == before
    expected = plain.phonemes
    for w in plain.words:
        if w.guessed and w.text != guessed[-1]:
            expected = expected.replace(w.phonemes, "ZZ", 1)
    assert read.phonemes == expected and read.phonemes.endswith(".")
    streamed = list(phonemizer.phonemize_stream([text[:9], text[9:]], fallback=espeak_ng))
    assert [s.phonemes for s in streamed] == [read.phonemes]


def test_a_fallback_that_returns_no_text_is_a_type_error_naming_the_word(phonemizer):
    with pytest.raises(TypeError, match="xqzvbrt"):
        phonemizer.phonemize("The xqzvbrt met pfzhuyle.", fallback=lambda word: 42)
