"""`tokenize` takes plain words by a pattern of their own and skips spaces without trying every rule: it must cut
every text exactly as TOKENS' rules alone do (`TOKENS.finditer`), rule names, spans and groups included."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from attnserve.service.text import rules
from attnserve.service.text.normalize import prepare
from attnserve.service.text.tokens import _RULED_WORDS, TOKENS, tokenize

HERE = Path(__file__).parent
NEWS = HERE.parents[1] / "benchmarks" / "data" / "news_2000.txt"


def groups(m) -> dict:
    """A match's groups that took part (a plain word's match has no others: the readers ask a token only for the
    groups of its own rule)."""
    return {k: v for k, v in m.groupdict().items() if v is not None}


def by_rules_alone(text: str) -> list[tuple]:
    prepared, origin = prepare(text)
    return [(m.lastgroup, m.group(), origin[m.start()], origin[m.end() - 1] + 1, groups(m)) for m in TOKENS.finditer(prepared)]


def by_tokenize(text: str) -> list[tuple]:
    prepared, origin = prepare(text)
    return [(t.kind, t.text, t.start, t.end, groups(t.match)) for t in tokenize(prepared, origin)]


def written_forms() -> list[str]:
    rows = [line.split("\t") for line in (HERE / "written_forms.tsv").read_text(encoding="utf-8").splitlines()]
    return [r[1] for r in rows if len(r) > 1 and not r[0].startswith("#")]


def test_every_written_form_and_the_news_text_cut_as_by_the_rules_alone():
    texts = [*written_forms(), *NEWS.read_text(encoding="utf-8").splitlines()]
    assert len(texts) > 300
    for text in texts:
        assert by_tokenize(text) == by_rules_alone(text), text


def test_words_that_start_a_rule_are_left_to_the_rules():
    # a month before a day, a state before a ZIP code, a currency code or US before an amount, a range of days
    for text in ("March 5", "May 5", "IL 60601", "IL, 60601", "USD 5", "US $5", "March the 5th", "Sept 9", "Mon - Fri"):
        assert by_tokenize(text) == by_rules_alone(text), text
        assert by_tokenize(text)[0][0] != "word", text
    assert {"march", "IL", "USD", "US"} <= _RULED_WORDS
    # no currency symbol is a letter: a plain word never starts an amount
    assert not any(c.isascii() and c.isalpha() for c in rules.CURRENCIES)


PIECES = st.sampled_from(
    ["word", "Word", "March", "may", "IL", "US", "USD", "EUR", "the", "www", "v", "x", "a", "co", "com", "io", "e", "p"]
    + list("0123456789 .,;:!?'\"-/\\@#$€£^()[]{}~_+*=%&\n\t")
    + ["1990", "s", "am", "pm", "st", "th", "http://", "ftp", "½", "×", "Mon", "Fri", "FRI", " - ", "w/o", "401(k)"]
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(PIECES, max_size=24).map("".join))
def test_any_text_cuts_as_by_the_rules_alone(text):
    assert by_tokenize(text) == by_rules_alone(text)
