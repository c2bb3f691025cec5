"""The lexicon: known answers before the model, shipped in a bundle and overridden by an operator.

Torch-free and fast: the default model's lexicon is read as shipped; the other tests use a
small bundle whose graph files are placeholders (the loader checks hashes, it runs nothing).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from attnserve.export.pipeline.lexicon import add_lexicon
from attnserve.service.engine.bundle import BundleError, load_bundle, sha256_file, write_bundle_json
from attnserve.service.text.lexicon import LEXICON_FILE, Lexicon, LexiconError, read_lexicon_entries, read_lexicon_file
from attnserve.service.text.pronounced import SERVED
from attnserve.training.data import cmudict_path, parse_cmudict

DEFAULT_BUNDLE = Path(__file__).resolve().parents[2] / "models" / "g2p-en"


@pytest.fixture(scope="module")
def default_lexicon() -> Lexicon:
    return Lexicon.load(load_bundle(DEFAULT_BUNDLE))


@pytest.mark.parametrize("word", ["python", "hello", "don't", "Hello"])
def test_default_lexicon_answers_dictionary_words_with_cmudict_pronunciations(default_lexicon, word):
    expected = parse_cmudict(cmudict_path())[word.lower()]  # every pronunciation, CMUdict's order
    answers = default_lexicon.lookup(word)
    assert [a.text for a in answers] == expected
    tgt = Tokenizer.from_file(str(DEFAULT_BUNDLE / "tgt_tokenizer.json"))
    for answer in answers:  # real target ids, which decode back to the text
        assert tgt.decode(list(answer.ids), skip_special_tokens=True) == answer.text
        assert tgt.token_to_id("<unk>") not in answer.ids and len(answer.ids) == len(answer.text.split())


def test_default_lexicon_holds_all_of_cmudict_and_the_pronounced_table(default_lexicon):
    cmudict = parse_cmudict(cmudict_path())
    added = set(SERVED) - set(cmudict)  # tables/pronounced.tsv's words CMUdict lacks
    assert added and len(default_lexicon) == len(cmudict) + len(added)
    info = default_lexicon.info()
    readings = {w: set(cmudict.get(w, ())) | set(SERVED.get(w, ())) for w in set(cmudict) | added}
    assert info["targets"] == sum(len(r) for r in readings.values())
    assert info["bundle_file"] == LEXICON_FILE and info["override_file"] is None
    assert default_lexicon.lookup("qzxv") == [] and "qzxv" not in default_lexicon


def test_default_bundle_declares_word_level_source_and_its_lexicon():
    bundle = load_bundle(DEFAULT_BUNDLE)
    assert bundle.word_level_source is True
    assert bundle.lexicon_path == DEFAULT_BUNDLE / LEXICON_FILE
    assert LEXICON_FILE in bundle.meta["files"]


# ---- a small bundle: placeholder graphs, the default model's tokenizers -------------------------
def make_bundle(root: Path, lexicon_rows: str | None = None, word_level: bool = True) -> Path:
    d = root / "bundle"
    d.mkdir()
    for name in ("src_tokenizer.json", "tgt_tokenizer.json"):
        shutil.copy(DEFAULT_BUNDLE / name, d / name)
    for name in ("encoder.onnx", "decoder.onnx"):
        (d / name).write_bytes(b"placeholder " + name.encode())
    meta = json.loads((DEFAULT_BUNDLE / "bundle.json").read_text())
    meta = {k: meta[k] for k in ("format_version", "config", "special_ids", "max_source_len", "max_target_len", "opset", "io")}
    meta |= {
        "model_id": "g2p-small",
        "variants": {"fp32": {"encoder": "encoder.onnx", "decoder": "decoder.onnx"}},
        "default_variant": {"cpu": "fp32"},
        "tokenizers": {"source": "src_tokenizer.json", "target": "tgt_tokenizer.json"},
        "task": "g2p",
        "strip_stress": False,
        "word_level_source": word_level,
    }
    if lexicon_rows is not None:
        from attnserve.service.text.lexicon import write_lexicon_file

        entries: dict[str, list[str]] = {}
        for row in lexicon_rows.strip().splitlines():
            source, target = row.split("\t")
            entries.setdefault(source, []).append(target)
        write_lexicon_file(d / LEXICON_FILE, entries)
        meta["lexicon"] = {"file": LEXICON_FILE}
    files = ["src_tokenizer.json", "tgt_tokenizer.json", "encoder.onnx", "decoder.onnx"]
    files += [LEXICON_FILE] if lexicon_rows is not None else []
    meta["files"] = {name: sha256_file(d / name) for name in files}
    write_bundle_json(d, meta)
    return d


ROWS = "hello\tHH AH0 L OW1\nhello\tHH EH0 L OW1\nworld\tW ER1 L D\n"


def test_override_file_replaces_a_words_entries_and_adds_new_words(tmp_path):
    bundle = load_bundle(make_bundle(tmp_path, ROWS))
    override = tmp_path / "mine.tsv"
    override.write_text("# an operator's corrections\n\nHello\tHH EH1 L OW0\nhello\tHH AH1 L OW0\nattnserve\tAE1 T N S ER0 V\n")
    lexicon = Lexicon.load(bundle, override)
    assert [a.text for a in lexicon.lookup("hello")] == ["HH EH1 L OW0", "HH AH1 L OW0"]  # file order, bundle's gone
    assert [a.text for a in lexicon.lookup("world")] == ["W ER1 L D"]  # untouched
    assert [a.text for a in lexicon.lookup("ATTNSERVE")] == ["AE1 T N S ER0 V"]
    # the bundle's two words, the operator's new one, and tables/pronounced.tsv's words, served with a word-level lexicon
    assert lexicon.info()["overridden_sources"] == 2 and len(lexicon) == 3 + len(SERVED)


def test_override_alone_makes_a_lexicon_and_no_lexicon_is_none(tmp_path):
    bundle = load_bundle(make_bundle(tmp_path))
    assert Lexicon.load(bundle) is None
    override = tmp_path / "mine.tsv"
    override.write_text("attnserve\tAE1 T N S ER0 V\n")
    assert [a.text for a in Lexicon.load(bundle, override).lookup("attnserve")] == ["AE1 T N S ER0 V"]


@pytest.mark.parametrize(
    ("content", "line", "expected"),
    [
        ("hello\tHH AH0 L OW1\nno tab here\n", 2, "expected 'source<TAB>target', found 1 column(s)"),
        ("# comment\nhello\tHH AH0\tL OW1\n", 2, "found 3 column(s)"),
        ("hello\tHH AH0 L OW1\n\nworld\tW ER1 L DX\n", 3, "not in the model's target vocabulary: 'DX'"),
        ("naïve\tN AY2 IY1 V\n", 1, "cannot read: 'ï'"),
        ("new york\tN UW1 Y AO1 R K\n", 1, "more than one word"),
        ("hello\t \n", 1, "empty source or target"),
    ],
)
def test_bad_override_line_is_refused_with_its_file_and_line_number(tmp_path, content, line, expected):
    bundle = load_bundle(make_bundle(tmp_path, ROWS))
    override = tmp_path / "mine.tsv"
    override.write_text(content)
    with pytest.raises(LexiconError) as info:
        Lexicon.load(bundle, override)
    msg = str(info.value)
    assert msg.startswith(f"{override}:{line}: ") and expected in msg and "\n" not in msg


def test_missing_override_file_is_refused_naming_it(tmp_path):
    bundle = load_bundle(make_bundle(tmp_path, ROWS))
    with pytest.raises(LexiconError, match="lexicon file not found: .*gone.tsv"):
        Lexicon.load(bundle, tmp_path / "gone.tsv")


def test_loader_refuses_a_tampered_or_missing_lexicon(tmp_path):
    d = make_bundle(tmp_path, ROWS)
    load_bundle(d)
    original = (d / LEXICON_FILE).read_bytes()
    from attnserve.service.text.lexicon import write_lexicon_file

    write_lexicon_file(d / LEXICON_FILE, {"hello": ["W ER1 L D"]})  # a well-formed file, other answers
    with pytest.raises(BundleError, match=f"{LEXICON_FILE}: sha256 does not match") as info:
        load_bundle(d)
    assert "\n" not in str(info.value)
    (d / LEXICON_FILE).unlink()
    with pytest.raises(BundleError, match=f"{LEXICON_FILE}: listed in bundle.json but missing"):
        load_bundle(d)
    (d / LEXICON_FILE).write_bytes(original)
    meta = json.loads((d / "bundle.json").read_text())
    del meta["files"][LEXICON_FILE]
    write_bundle_json(d, meta)
    with pytest.raises(BundleError, match=f"{LEXICON_FILE} is referenced but not listed"):
        load_bundle(d)


def test_add_lexicon_ships_the_dictionary_without_touching_other_fields(tmp_path):
    d = make_bundle(tmp_path, word_level=False)
    data = tmp_path / "pairs.tsv"
    data.write_text("Hello\tHH AH0 L OW1\nhello\tHH EH0 L OW1\nworld\tW ER1 L D\nbadword\tXX YY\n")
    before = json.loads((d / "bundle.json").read_text())
    meta = add_lexicon(d, dataset=str(data), word_level_source=True, log=lambda _msg: None)
    assert meta["lexicon"] | {"dataset": None} == {
        "file": LEXICON_FILE,
        "format": "tsv.gz",
        "dataset": None,
        "sources": 2,
        "targets": 3,
        "dropped": 1,  # a phoneme the model's vocabulary lacks
    }
    assert meta["word_level_source"] is True
    changed = ("lexicon", "word_level_source", "files", "manifest_sha256")  # the manifest's own hash is written anew
    assert {k: v for k, v in meta.items() if k not in changed} == {k: v for k, v in before.items() if k not in changed}
    assert meta["manifest_sha256"] != before["manifest_sha256"]
    assert meta["files"] == {**before["files"], LEXICON_FILE: sha256_file(d / LEXICON_FILE)}
    lexicon = Lexicon.load(load_bundle(d))
    assert [a.text for a in lexicon.lookup("HELLO")] == ["HH AH0 L OW1", "HH EH0 L OW1"]  # sources normalised, merged
    first = (d / LEXICON_FILE).read_bytes()
    add_lexicon(d, dataset=str(data), log=lambda _msg: None)
    assert (d / LEXICON_FILE).read_bytes() == first  # same entries, same bytes, same hash


def test_evaluation_scores_the_model_alone_whatever_the_lexicon_says(tmp_path):
    from attnserve.service.text.lexicon import write_lexicon_file
    from attnserve.training.data import load_examples
    from attnserve.training.evaluate import evaluate_bundle

    # The default bundle with a lexicon that answers every scored word wrongly: the figures must not move.
    d = tmp_path / "g2p-en"
    d.mkdir()
    for path in DEFAULT_BUNDLE.iterdir():
        if path.name not in ("bundle.json", LEXICON_FILE):
            (d / path.name).symlink_to(path)
    words = [e.source for e in load_examples("cmudict", "test", limit=24)]
    write_lexicon_file(d / LEXICON_FILE, {w: ["ZH ZH ZH"] for w in words})
    meta = json.loads((DEFAULT_BUNDLE / "bundle.json").read_text())
    meta["files"][LEXICON_FILE] = sha256_file(d / LEXICON_FILE)
    write_bundle_json(d, meta)
    assert [a.text for a in Lexicon.load(load_bundle(d)).lookup(words[0])] == ["ZH ZH ZH"]
    shipped = evaluate_bundle(DEFAULT_BUNDLE, "test", 24, None, 24)
    wrong = evaluate_bundle(d, "test", 24, None, 24)
    assert wrong["wer"] == shipped["wer"] < 100 and wrong["per"] == shipped["per"]


def _by_lines(path: Path) -> tuple:
    """A lexicon file read line by line (`read_lexicon_file`): its entries, or its error."""
    entries: dict[str, list[str]] = {}
    try:
        for _, source, target in read_lexicon_file(path):
            entries.setdefault(source, []).append(target)
    except LexiconError as e:
        return "error", str(e)
    return "entries", entries


def _at_once(path: Path) -> tuple:
    try:
        return "entries", read_lexicon_entries(path)
    except LexiconError as e:
        return "error", str(e)


@pytest.mark.parametrize(
    "content",
    [
        "a\tB\nc\tD\na\tE\n",  # tidy: the tight loop's own case, a second target kept in order
        "a\tB\nc\tD",  # no newline at the end
        "a\tB\n\nc\tD\n",  # a blank line: refused, naming line 2
        "a \tB\n",  # spaces around the tab or at the ends: stripped
        "a\t B\n",
        "a\tB \n",
        " a\tB\n",
        "a\tB\r\nc\tD\r\n",  # Windows line ends
        "a\u00a0\tB\n",  # a space other than ASCII's
        "a\tB\tC\n",  # three columns: refused
        "a\t\n",  # an empty target: refused
        "\tB\n",
        "a\tB\nc\n",  # one column: refused, naming line 2
    ],
)
def test_a_bundle_lexicon_read_at_once_is_read_as_line_by_line(tmp_path, content):
    path = tmp_path / "lexicon.tsv"
    path.write_text(content, encoding="utf-8")
    assert _at_once(path) == _by_lines(path)


def test_the_default_lexicon_read_at_once_is_read_as_line_by_line():
    path = DEFAULT_BUNDLE / LEXICON_FILE
    assert _at_once(path) == _by_lines(path)
    assert len(_at_once(path)[1]) > 100_000
