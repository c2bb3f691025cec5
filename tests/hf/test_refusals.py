"""`attnserve-export from-hf` refuses a folder it cannot import in one line naming what is wrong: an unknown family,
a missing tokenizer file, weights whose shape does not match config.json. Nothing is left behind."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

sys.path.insert(0, str(Path(__file__).parent))
from checkpoints import build_marian  # noqa: E402

from attnserve.export.cli import main as export_main  # noqa: E402


@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    return build_marian(tmp_path_factory.mktemp("refusals") / "hf")


def refused(folder: Path, out: Path, capsys) -> str:
    assert export_main(["from-hf", str(folder), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()  # its progress lines, then the refusal
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [lines[-1]] and "Traceback" not in "\n".join(lines)
    err = errors[0]
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()
    return err


def test_unknown_family_is_refused_in_one_line(marian, tmp_path, capsys):
    folder = tmp_path / "gpt"
    shutil.copytree(marian, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    assert "model_type 'gpt2' is not a family from-hf imports" in refused(folder, tmp_path / "b", capsys)


def test_missing_tokenizer_file_is_refused_in_one_line(marian, tmp_path, capsys):
    folder = tmp_path / "no-spm"
    shutil.copytree(marian, folder)
    (folder / "target.spm").unlink()
    assert "tokenizer file target.spm missing" in refused(folder, tmp_path / "b", capsys)


def test_weights_of_another_shape_are_refused_in_one_line(marian, tmp_path, capsys):
    folder = tmp_path / "wide"
    shutil.copytree(marian, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "d_model": 2 * config["d_model"]}))
    err = refused(folder, tmp_path / "b", capsys)
    assert "has shape" in err and "config.json gives it" in err
