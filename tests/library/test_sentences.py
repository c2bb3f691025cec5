"""Where sentences end (service/text/sentences.py): abbreviations, titles, initials and decimals keep a sentence going,
an abbreviation before a word that starts sentences ends one, and text that arrives in pieces is cut as the whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnserve.service.text.sentences import sentence_spans

ROOT = Path(__file__).resolve().parents[2]

CASES = [
    ("Dr. Smith arrived at 5 p.m. He paid $5.", ["Dr. Smith arrived at 5 p.m.", "He paid $5."]),
    ("We met at 9 a.m. at the station.", ["We met at 9 a.m. at the station."]),
    ("I live in the U.S. It is big.", ["I live in the U.S.", "It is big."]),
    ("The U.S. Army won.", ["The U.S. Army won."]),
    ("Bring fruit, e.g. apples. Then go.", ["Bring fruit, e.g. apples.", "Then go."]),
    ("Pi is 3.14 today. Tomorrow too.", ["Pi is 3.14 today.", "Tomorrow too."]),
    ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
    ("Mr. Jones met Prof. Lee at Main St. The end", ["Mr. Jones met Prof. Lee at Main St.", "The end"]),
    ("Apples, pears, etc. The rest.", ["Apples, pears, etc.", "The rest."]),
    ("Go to St. Louis now.", ["Go to St. Louis now."]),
    ("What?... Really.", ["What?...", "Really."]),
    ('"Yes!" she said. "No?" He left.', ['"Yes!" she said.', '"No?"', "He left."]),
    ("I think... maybe. Wait... What?", ["I think... maybe.", "Wait...", "What?"]),
    ("See No. 5 for it. I said No. Then I left", ["See No. 5 for it.", "I said No.", "Then I left"]),
    ("He said (quietly.) Then left.", ["He said (quietly.)", "Then left."]),
    ("A heading\n\nThe text under it.", ["A heading", "The text under it."]),
    ("  Hello world  ", ["Hello world"]),
    ("Visit example.com today. OK!", ["Visit example.com today.", "OK!"]),
    ("... 😀 ... Hi.", ["Hi."]),
    ("", []),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_sentences_end_where_a_reader_would_end_them(text, expected):
    spans, settled = sentence_spans(text)
    assert [text[a:b] for a, b in spans] == expected
    assert settled == len(text)


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_spans(chunks: list[str]) -> list[tuple[int, int]]:
    """The spans sentence_spans settles as the chunks arrive, in the whole text's offsets, then the rest's at the end."""
    out, pending, offset = [], "", 0
    for chunk in chunks:
        pending += chunk
        spans, settled = sentence_spans(pending, final=False)
        out += [(offset + a, offset + b) for a, b in spans]
        pending, offset = pending[settled:], offset + settled
    out += [(offset + a, offset + b) for a, b in sentence_spans(pending)[0]]
    return out


def written_forms_text() -> str:
    """Every written form of tests/text/written_forms.tsv as a sentence of its own, in one text."""
    rows = [line.split("\t") for line in (ROOT / "tests" / "text" / "written_forms.tsv").read_text().splitlines()]
    forms = [row[1] for row in rows if row and not row[0].startswith("#")]
    return " ".join(f if f.endswith((".", "!", "?")) else f + "." for f in forms)


@pytest.mark.parametrize("size", [1, 3, 7])
def test_text_in_pieces_is_cut_as_the_whole_text(size):
    texts = [text for text, _ in CASES] + [written_forms_text(), " ".join(text for text, _ in CASES)]
    for text in texts:
        assert stream_spans(pieces(text, size)) == sentence_spans(text)[0], text[:80]


def test_an_end_waits_for_the_word_after_it():
    # "p.m." before "He" ends the sentence, before "at" it does not: nothing is settled until the next word is whole
    assert sentence_spans("at 5 p.m. H", final=False) == ([], 0)
    spans, settled = sentence_spans("at 5 p.m. He ", final=False)
    assert spans == [(0, 9)] and settled == 9
    assert sentence_spans("at 5 p.m. at ", final=False) == ([], 0)
