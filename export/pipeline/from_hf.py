"""`attnserve-export from-hf HF_DIR --out BUNDLE`: a Hugging Face seq2seq checkpoint -> a verified model bundle.

Steps: check the folder (a known family, its tokenizer files, weights whose shapes match its config), load it with
transformers, convert the tokenizers (export/pipeline/hf_tokenizers.py), write the v1 fp32 graphs through the same
writer as a trained run (export/graphs/hf.py gives the checkpoint the writer's interface), write bundle.json with
the checkpoint's generation rules and search defaults, then prove parity with transformers' `generate` on the
service's own engine (export/checks/hf_parity.py): greedy ids equal on every source of the corpus, beam search on
at least BEAM_AGREEMENT of them. Only then is the bundle moved into place (built in `BUNDLE.partial`, as `build`).
The int8 variant is kept only where its greedy answers agree with fp32's on at least INT8_AGREEMENT of the corpus;
one that does not is left out with a warning.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from tokenizers import Tokenizer

from attnserve.export.checks.hf_parity import hf_parity, synthetic_sources, variant_agreement
from attnserve.export.errors import BuildError
from attnserve.export.graphs.format import OPSET, graph_io
from attnserve.export.graphs.hf import HFSeq2Seq, PortConfig
from attnserve.export.graphs.hf_t5 import T5Seq2Seq
from attnserve.export.graphs.v1 import export_decoder, export_encoder
from attnserve.export.graphs.variants import INT8_QUANTIZATION
from attnserve.export.pipeline.build import elapsed_log, partial_dir
from attnserve.export.pipeline.calibration import write_int8
from attnserve.export.pipeline.hf_tokenizers import (
    MARIAN_FILES,
    fast_tokenizers,
    marian_tokenizers,
    source_template,
    special_ids,
)
from attnserve.export.pipeline.manifest import BUNDLE_JSON, PARITY_CORPUS, TOKENIZERS, VARIANT_FILES, write_manifest
from attnserve.service.engine.bundle import FORMAT_VERSION, load_bundle
from attnserve.service.engine.rules import GenerationRules

FAMILIES = {"marian": "translation", "bart": "summarization", "mbart": "translation", "t5": "text2text"}
TOKENIZER_FILES = {"marian": [MARIAN_FILES], "bart": [("tokenizer.json",), ("vocab.json", "merges.txt")]}
TOKENIZER_FILES["mbart"] = [("tokenizer.json",)]
TOKENIZER_FILES["t5"] = [("spiece.model",), ("tokenizer.json",)]
T5_POSITIONS = 512  # relative positions set no limit; this bounds a source and an answer as T5's tokenizer does
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
GENERATION_FIELDS = (
    "decoder_start_token_id",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "bad_words_ids",
    "suppress_tokens",
    "begin_suppress_tokens",
    "no_repeat_ngram_size",
    "min_length",
    "length_penalty",
    "early_stopping",
    "num_beams",
    "max_length",
)
PARITY_SOURCES = 50
PARITY_MAX_NEW_TOKENS = 24
BEAM_AGREEMENT = 0.9  # beam answers equal to transformers' on at least this share of the corpus
INT8_AGREEMENT = 0.9  # int8 greedy answers equal to fp32's on at least this share, or int8 is left out


def check_folder(hf_dir: Path) -> tuple[dict, str]:
    """(config.json, family) of a checkpoint folder; BuildError, one line, for a folder that cannot be imported."""
    if not (hf_dir / "config.json").is_file():
        raise BuildError(f"{hf_dir}: no config.json (is it a Hugging Face checkpoint folder?)")
    config = json.loads((hf_dir / "config.json").read_text())
    family = config.get("model_type")
    if family not in FAMILIES:
        known = ", ".join(FAMILIES)
        raise BuildError(f"{hf_dir / 'config.json'}: model_type {family!r} is not a family from-hf imports ({known})")
    if not any((hf_dir / w).is_file() for w in WEIGHT_FILES):
        raise BuildError(f"{hf_dir}: no weights ({' or '.join(WEIGHT_FILES)})")
    choices = TOKENIZER_FILES[family]
    if not any(all((hf_dir / f).is_file() for f in files) for files in choices):
        missing = [f for f in choices[0] if not (hf_dir / f).is_file()]
        raise BuildError(f"{hf_dir}: tokenizer file {missing[0]} missing (a {family} checkpoint needs {' + '.join(choices[0])})")
    return config, family


def load_checkpoint(hf_dir: Path, family: str):
    """(model, tokenizer) through transformers; a weight whose shape does not match config.json is one BuildError line."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its load report and progress bars: the import logs its own steps
    hf_logging.disable_progress_bar()
    check_shapes(hf_dir)
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(hf_dir)
    except (RuntimeError, ValueError, OSError) as e:
        raise BuildError(
            f"{hf_dir}: weights do not load as its config.json says: {str(e).strip().splitlines()[0][:300]}"
        ) from None
    return model.eval(), AutoTokenizer.from_pretrained(hf_dir)


def check_shapes(hf_dir: Path) -> None:
    """BuildError naming the first weight whose shape differs from the one config.json gives it (the model is built
    on the meta device: no memory for its weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    with torch.device("meta"):
        expected = {
            k: tuple(v.shape)
            for k, v in AutoModelForSeq2SeqLM.from_config(AutoConfig.from_pretrained(hf_dir)).state_dict().items()
        }
    if (hf_dir / WEIGHT_FILES[0]).is_file():
        from safetensors import safe_open

        with safe_open(str(hf_dir / WEIGHT_FILES[0]), "pt") as f:
            found = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    else:
        state = torch.load(hf_dir / WEIGHT_FILES[1], map_location="meta", weights_only=True)
        found = {k: tuple(v.shape) for k, v in state.items()}
    for name, shape in found.items():
        key = next((k for k in (name, name.removeprefix("model."), f"model.{name}") if k in expected), None)
        if key is not None and expected[key] != shape:
            raise BuildError(f"{hf_dir}: weight {name} has shape {list(shape)}, but config.json gives it {list(expected[key])}")


def port_config(model, hf_tok, family: str) -> PortConfig:
    hc, gc = model.config, model.generation_config
    eos = gc.eos_token_id if gc.eos_token_id is not None else hc.eos_token_id
    if family == "t5":
        positions = T5_POSITIONS
        heads, enc_layers, dec_layers = int(hc.num_heads), int(hc.num_layers), int(hc.num_decoder_layers)
        if hc.d_kv * heads != hc.d_model:
            raise BuildError(f"T5 with num_heads x d_kv ({heads} x {hc.d_kv}) != d_model ({hc.d_model}) is not supported")
    else:
        positions = int(hc.max_position_embeddings)
        heads, enc_layers, dec_layers = int(hc.decoder_attention_heads), int(hc.encoder_layers), int(hc.decoder_layers)
    return PortConfig(
        family=family,
        d_model=int(hc.d_model),
        n_heads=heads,
        n_encoder_layers=enc_layers,
        n_decoder_layers=dec_layers,
        src_vocab_size=int(model.get_encoder().embed_tokens.weight.shape[0]),
        tgt_vocab_size=int(model.lm_head.weight.shape[0]),
        max_source_len=positions,
        max_target_len=positions - 1,
        pad_id=int(hc.pad_token_id),
        bos_id=int(gc.decoder_start_token_id if gc.decoder_start_token_id is not None else hc.decoder_start_token_id),
        eos_id=int(eos[0] if isinstance(eos, list) else eos),
        unk_id=int(hf_tok.unk_token_id if hf_tok.unk_token_id is not None else hc.pad_token_id),
    )


def generation_rules(model) -> dict:
    """The checkpoint's generation_config fields the engine honours (service/engine/rules.py) and its search defaults."""
    gc = model.generation_config.to_dict()
    out = {k: gc.get(k) for k in GENERATION_FIELDS if gc.get(k) is not None}
    out.setdefault("length_penalty", 1.0)
    out.setdefault("early_stopping", False)
    out.setdefault("num_beams", 1)
    return out


def from_hf(
    hf_dir: Path,
    out_dir: Path,
    *,
    model_id: str | None = None,
    parity_sources: int = PARITY_SOURCES,
    threads=None,
    keep_partial=False,
    log=print,
) -> dict:
    """Import and verify; returns the bundle.json written. Raises BuildError (one line) on any failed step.
    `parity_sources`: the size of the corpus the proofs run on."""
    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    config, family = check_folder(hf_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / BUNDLE_JSON).is_file():
        raise BuildError(f"{out_dir} exists and is not a bundle: choose an empty or new --out")
    steps: list[str] = []
    timed = elapsed_log(log, time.perf_counter())

    def log(msg: str) -> None:  # noqa: F811 - the caller's log, timed, with each step remembered for a failure's line
        if "[from-hf] " in msg:
            steps.append(msg.partition("[from-hf] ")[2][:80])
        timed(msg)

    work = out_dir.with_name(out_dir.name + ".partial")
    with partial_dir(work, keep_partial, steps):
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        log(f"[from-hf] loading the {family} checkpoint {hf_dir}")
        model, hf_tok = load_checkpoint(hf_dir, family)
        meta = write_graphs_and_meta(hf_dir, model, hf_tok, family, work, model_id or out_dir.resolve().name, log)
        sources = synthetic_sources(
            Tokenizer.from_file(str(work / TOKENIZERS["source"])), set(meta["special_tokens"]), parity_sources
        )
        # the sources the proofs ran on, as every bundle keeps them: `GET /samples` and the load testers send them
        (work / PARITY_CORPUS).write_text(json.dumps({"sources": sources}, ensure_ascii=False), encoding="utf-8")
        meta["parity_corpus"] = PARITY_CORPUS
        meta = prove(work, meta, model, hf_tok, sources, threads, log)
        load_bundle(work)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        work.rename(out_dir)
    log(f"[from-hf] bundle written to {out_dir} (default cpu variant: {meta['default_variant']['cpu']})")
    return meta


def write_graphs_and_meta(hf_dir: Path, model, hf_tok, family: str, work: Path, model_id: str, log) -> dict:
    """The tokenizers, the fp32 graphs and bundle.json (parity still empty); returns bundle.json."""
    import onnx
    import onnxruntime
    import torch
    import transformers

    cfg = port_config(model, hf_tok, family)
    src_tok, tgt_tok = marian_tokenizers(hf_dir, hf_tok) if family == "marian" else fast_tokenizers(hf_tok)
    src_tok.save(str(work / TOKENIZERS["source"]))
    tgt_tok.save(str(work / TOKENIZERS["target"]))
    special = special_ids(hf_tok)
    log(f"[from-hf] graphs (opset {OPSET}): encoder and one-step decoder, fp32")
    port = T5Seq2Seq(model, cfg) if family == "t5" else HFSeq2Seq(model, cfg)
    export_encoder(port, work / VARIANT_FILES["fp32"]["encoder"])
    generation = generation_rules(model)
    # the engine chooses a checkpoint's tokens after its rules mask the logits (service/engine/rules.py), so an
    # in-graph argmax would go unread: a [B, V] pass a step (a tenth of a batch-32 Marian step) left out of the graph
    next_token = GenerationRules.of(generation, cfg.tgt_vocab_size, cfg.bos_id, cfg.eos_id) is None
    export_decoder(port, work / VARIANT_FILES["fp32"]["decoder"], next_token=next_token)
    meta = {
        "format_version": FORMAT_VERSION,
        "model_id": model_id,
        "family": family,
        "task": FAMILIES[family],
        "source_checkpoint": getattr(model.config, "_name_or_path", "") or model_id,
        "config": cfg.to_dict(),
        "special_ids": {"pad": cfg.pad_id, "bos": cfg.bos_id, "eos": cfg.eos_id, "unk": cfg.unk_id},
        "special_tokens": special,
        "source_template": source_template(hf_tok, src_tok),
        "keep_unknown_source_tokens": True,
        "max_source_len": cfg.max_source_len,
        "max_target_len": cfg.max_target_len,
        "opset": OPSET,
        "io": {g: graph_io(work / VARIANT_FILES["fp32"][g]) for g in ("encoder", "decoder")},
        "decoder_extra_outputs": ["next_token"] if next_token else [],
        "variants": {"fp32": {**VARIANT_FILES["fp32"], "kv_cache": "concat"}},
        "default_variant": {"cpu": "fp32", "cuda": "fp32"},
        "tokenizers": dict(TOKENIZERS),
        "generation": generation,
        "word_level_source": False,
        "parity": {},
        "built_with": {
            "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
    }
    write_manifest(work, meta)
    return meta


def prove(work: Path, meta: dict, model, hf_tok, sources: list[str], threads, log) -> dict:
    """Parity with transformers (fp32), then int8 behind its gate; writes the figures into bundle.json."""
    configured = int(meta["generation"].get("num_beams") or 1)
    width = configured if configured > 1 else 4  # the checkpoint's beam width, or 4
    n = min(PARITY_MAX_NEW_TOKENS, meta["max_target_len"])
    log(f"[from-hf] parity with transformers generate: {len(sources)} sources, greedy and beam {width}")
    figures = hf_parity(work, model, hf_tok, sources, n, width, threads=threads, log=log)
    failures = []
    if figures["tokenizer_equal"] != f"{len(sources)}/{len(sources)}":
        failures.append(f"tokenizer ids differ from transformers' on {figures['tokenizer_equal']} equal")
    if figures["greedy"]["equal"] != len(sources):
        failures.append(f"greedy ids equal on {figures['greedy']['equal']}/{len(sources)} sources (need all)")
    beam = figures[f"beam{width}"]
    if beam["equal"] < BEAM_AGREEMENT * len(sources):
        failures.append(f"beam {width} ids equal on {beam['equal']}/{len(sources)} (need {BEAM_AGREEMENT:.0%})")
    meta["parity"] = {"ok": not failures, "fp32": figures}
    write_manifest(work, meta)
    if failures:
        raise BuildError("parity with transformers failed: " + "; ".join(failures))
    return add_int8(work, meta, sources, n, threads, log)


def add_int8(work: Path, meta: dict, sources: list[str], max_new_tokens: int, threads, log) -> dict:
    """The int8 variant, calibrated on the corpus with fp32's answers, kept only where it passes its gate."""
    from attnserve.service.engine.bundle import load_bundle as load
    from attnserve.service.engine.engine import Engine
    from attnserve.service.engine.options import DecodingOptions

    log("[from-hf] int8 variant, calibrated on the parity corpus")
    engine = Engine(load(work), variant="fp32", provider="cpu", threads=threads)
    answers = engine.generate(sources, DecodingOptions(max_new_tokens=max_new_tokens))
    pairs = [(s, r.text) for s, r in zip(sources, answers)]
    src_tok = Tokenizer.from_file(str(work / TOKENIZERS["source"]))
    tgt_tok = Tokenizer.from_file(str(work / TOKENIZERS["target"]))
    calibration = write_int8(work, VARIANT_FILES["fp32"], VARIANT_FILES["int8"], src_tok, tgt_tok, meta["config"], pairs, log)
    meta["variants"]["int8"] = {
        **VARIANT_FILES["int8"],
        "kv_cache": "concat",
        "quantization": INT8_QUANTIZATION,
        "calibration": calibration,
    }
    write_manifest(work, meta)
    agreement = variant_agreement(work, "int8", sources, max_new_tokens, threads)
    gate = {"greedy_equal_to_fp32": round(agreement, 4), "threshold": INT8_AGREEMENT, "sources": len(sources)}
    if agreement < INT8_AGREEMENT:
        log(f"[from-hf] WARNING: int8 greedy answers equal fp32's on {agreement:.0%} (< {INT8_AGREEMENT:.0%}): int8 left out")
        for g in ("encoder", "decoder"):
            (work / VARIANT_FILES["int8"][g]).unlink(missing_ok=True)
        del meta["variants"]["int8"]
        meta["omitted_variants"] = {"int8": {"reason": "failed its accuracy gate", **gate}}
    else:
        meta["variants"]["int8"]["gate"] = gate
        meta["default_variant"] = {"cpu": "int8", "cuda": "fp32"}
        log(f"[from-hf] int8 greedy answers equal fp32's on {agreement:.0%}: int8 is the CPU default")
    meta["parity"]["int8"] = gate
    write_manifest(work, meta)
    return meta
