"""Load and check a model bundle (Contract 2) without torch.

A bundle is a directory with `bundle.json` at its root. Every file it lists in
`files` is checked against its sha256 before anything is loaded, and every
file it refers to (graphs of each variant, tokenizers) must be listed, so a
tampered, truncated, missing or mismatched file stops start-up with ONE line
naming it. Other files in the directory (a model card, plots) are ignored.

Contract 2 version 2: a variant whose `kv_cache` is "in_place" has the fused v2 decoder (export/graphs/v2.py),
fed by service/engine/slots.py; its io is `io.decoder_v2`, its `fallback` the v1 variant served instead
where the runtime lacks its kernels. Such a bundle has `format_version` 2.

`manifest_sha256` is the sha256 of bundle.json's own content less that field (`manifest_sha256` below: the
fields as canonical JSON, so indentation does not count and every value does), written by `write_bundle_json`,
which every command that writes bundle.json goes through, and checked here like every file: an edited
bundle.json stops start-up with one line. A bundle without the field (one written before it existed) loads
unchecked, so every bundle built so far still loads.

Optional fields read here: `lexicon` {`file`, ...} names the bundle's lexicon
(service/text/lexicon.py), listed in `files` like every file; `word_level_source`
(bool) says the source is one word, so running text is split into words first
(service/text/reader.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

FORMAT_VERSION = 1  # a bundle whose variants all have v1 graphs (`kv_cache` "concat")
V2_FORMAT_VERSION = 2  # a bundle with a v2 variant: a fused decoder over an in-place cache (`kv_cache` "in_place")
SUPPORTED_FORMAT_VERSIONS = (1, 2)
KV_CACHE_LAYOUTS = ("concat", "in_place")  # bundle.json `variants.<name>.kv_cache`; absent: "concat"
REQUIRED_FIELDS = (
    "format_version",
    "model_id",
    "config",
    "special_ids",
    "max_source_len",
    "max_target_len",
    "opset",
    "io",
    "variants",
    "default_variant",
    "tokenizers",
    "files",
)
# The precision of each variant's weights (the variant names are Contract 2's). int8: MatMul weights int8,
# activations quantized to 8 bits (with fixed scales calibrated at export, per row inside the graph, or per batch
# tensor by ONNX Runtime's dynamic quantization: bundle.json `variants.int8.quantization` says which, and the
# service loads each), the graph's inputs, outputs and KV cache float32. fp16 keeps a few ops and the graph
# boundary in float32.
VARIANT_WEIGHT_DTYPES = {"fp32": "float32", "fp16": "float16", "int8": "int8"}
MANIFEST_FIELD = "manifest_sha256"  # bundle.json's hash of its own content, less this field


# The default model, inside the installed package: the wheel carries it at attnserve/models/g2p-en (pyproject.toml's
# package-data), and a checkout's attnserve/models links to its models/, so both find it from any directory.
DEFAULT_MODEL = "g2p-en"
PACKAGED_BUNDLE = Path(__file__).parents[2] / "models" / DEFAULT_MODEL


class BundleError(Exception):
    """The bundle cannot be used; the message is one line naming the file or field."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_sha256(meta: dict) -> str:
    """The sha256 of bundle.json's content `meta` without its `manifest_sha256` field: of the fields as canonical
    JSON (keys sorted, no whitespace, UTF-8), so re-indenting the file keeps it and changing any value does not."""
    content = {k: v for k, v in meta.items() if k != MANIFEST_FIELD}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_bundle_json(bundle_dir: str | Path, meta: dict) -> None:
    """Write `bundle_dir/bundle.json` from `meta`, its `manifest_sha256` computed last (and set in `meta` too).
    Every command that writes bundle.json writes it through here, so the loader's check holds after each."""
    meta.pop(MANIFEST_FIELD, None)
    meta[MANIFEST_FIELD] = manifest_sha256(meta)
    (Path(bundle_dir) / "bundle.json").write_text(json.dumps(meta, indent=2) + "\n")


def _check_manifest(manifest: Path, meta: dict) -> None:
    """BundleError when bundle.json's `manifest_sha256` is malformed or does not match its content; a bundle
    without the field passes (one written before the field existed)."""
    if MANIFEST_FIELD not in meta:
        return
    recorded = meta[MANIFEST_FIELD]
    if not isinstance(recorded, str) or not re.fullmatch(r"[0-9a-f]{64}", recorded):
        raise BundleError(f"{manifest}: {MANIFEST_FIELD} must be a sha256 (64 lower-case hex digits)")
    if manifest_sha256(meta) != recorded:
        raise BundleError(
            f"{manifest}: content does not match its {MANIFEST_FIELD} (edited after export); "
            "rebuild the bundle, or restore the file"
        )


def bounded_length(length_bound: dict | None, max_target_len: int, source_len: int) -> int | None:
    """bundle.json's `length_bound` applied: the longest target seen in training for this source
    length (longer sources than the table use its last entry; a source shorter than any seen in training,
    whose entry is 0, the nearest longer length's) plus the margin, within max_target_len. None when the
    bundle records no bound."""
    if not length_bound:
        return None
    table = length_bound["by_source_len"]
    at = min(source_len, len(table) - 1)
    longest = int(table[at]) or next((int(x) for x in table[at:] if x), max_target_len)
    return min(max_target_len, longest + int(length_bound["margin"]))


@dataclass(frozen=True)
class LoadedBundle:
    dir: Path
    meta: dict  # bundle.json as read
    sha256: str  # of bundle.json: identifies this exact bundle

    @property
    def model_id(self) -> str:
        return self.meta["model_id"]

    @property
    def config(self) -> dict:
        return self.meta["config"]

    @property
    def special_ids(self) -> dict[str, int]:
        return self.meta["special_ids"]

    @property
    def max_source_len(self) -> int:
        return int(self.meta["max_source_len"])

    @property
    def max_target_len(self) -> int:
        return int(self.meta["max_target_len"])

    def length_bound(self, source_len: int) -> int | None:
        """Most tokens worth generating for a source of `source_len` tokens; None: no bound recorded."""
        return bounded_length(self.meta.get("length_bound"), self.max_target_len, source_len)

    @property
    def guess_threshold(self) -> float | None:
        """The score below which a model answer is a guess (bundle.json `confidence`, chosen on the dev split by
        `attnserve-export add-confidence`); None: the bundle has none, and no answer is flagged."""
        confidence = self.meta.get("confidence")
        return float(confidence["threshold"]) if confidence else None

    @property
    def n_layers(self) -> int:
        return int(self.config["n_decoder_layers"])

    @property
    def variants(self) -> dict[str, dict]:
        return self.meta["variants"]

    @property
    def default_variant(self) -> dict[str, str]:
        return self.meta["default_variant"]

    @property
    def src_tokenizer_path(self) -> Path:
        return self.dir / self.meta["tokenizers"]["source"]

    @property
    def tgt_tokenizer_path(self) -> Path:
        return self.dir / self.meta["tokenizers"]["target"]

    @property
    def lexicon_path(self) -> Path | None:
        """The bundle's lexicon file (known answers before the model), or None."""
        lexicon = self.meta.get("lexicon")
        return self.dir / lexicon["file"] if lexicon else None

    @property
    def context_path(self) -> Path | None:
        """The bundle's context component (heteronyms chosen by the sentence, service/text/context.py), or None."""
        context = self.meta.get("context")
        return self.dir / context["file"] if context else None

    @property
    def word_level_source(self) -> bool:
        """True when the model reads one word (G2P): running text is split into words first."""
        return bool(self.meta.get("word_level_source", False))

    def graph_paths(self, variant: str) -> tuple[Path, Path]:
        """(encoder, decoder) paths of a variant."""
        if variant not in self.variants:
            raise BundleError(f"{self.dir / 'bundle.json'}: no variant {variant!r} (has {', '.join(self.variants)})")
        v = self.variants[variant]
        return self.dir / v["encoder"], self.dir / v["decoder"]

    def kv_cache(self, variant: str) -> str:
        """The variant's cache layout: "concat" (v1 graphs) or "in_place" (the v2 decoder)."""
        return self.variants[variant].get("kv_cache", "concat")

    def fallback(self, variant: str) -> str | None:
        """The v1 variant `--variant auto` serves instead of a v2 one the runtime cannot run."""
        return self.variants[variant].get("fallback")

    def decoder_io(self, variant: str) -> dict:
        """bundle.json `io` of the variant's decoder: {"inputs": [...], "outputs": [...]}."""
        return self.meta["io"].get("decoder_v2" if self.kv_cache(variant) == "in_place" else "decoder", {})

    def resolve_variant(self, variant: str, device: str) -> str:
        """ "auto" -> the bundle's default for `device` ("cpu" or "cuda"); a name is checked."""
        name = self.default_variant.get(device, "fp32") if variant == "auto" else variant
        self.graph_paths(name)
        return name


def _variant_files(manifest: Path, meta: dict) -> list[str]:
    """The graph files bundle.json's variants name, encoder then decoder per variant; BundleError for a variant
    without both, or whose cache layout (and, for an in-place one, its format version, io and fallback) is wrong."""
    files = []
    for name, v in meta["variants"].items():
        if not isinstance(v, dict) or "encoder" not in v or "decoder" not in v:
            raise BundleError(f"{manifest}: variant {name!r} must name its 'encoder' and 'decoder' files")
        files += [v["encoder"], v["decoder"]]
        layout = v.get("kv_cache", "concat")
        if layout not in KV_CACHE_LAYOUTS:
            raise BundleError(
                f"{manifest}: variants.{name}.kv_cache must be one of {', '.join(KV_CACHE_LAYOUTS)}, not {layout!r}"
            )
        if layout == "in_place":
            if meta["format_version"] < V2_FORMAT_VERSION:
                raise BundleError(f"{manifest}: variant {name!r} has an in-place cache, which needs format_version 2")
            if "decoder_v2" not in meta["io"]:
                raise BundleError(f"{manifest}: variant {name!r} has an in-place cache but 'io' has no 'decoder_v2'")
            fallback = v.get("fallback")
            if fallback is not None and meta["variants"].get(fallback, {}).get("kv_cache", "concat") != "concat":
                raise BundleError(f"{manifest}: variants.{name}.fallback {fallback!r} is not a v1 variant of this bundle")
    return files


def load_bundle(bundle_dir: str | Path, check_hashes: bool = True) -> LoadedBundle:
    """Read and validate `bundle_dir/bundle.json` and the files it lists; raises BundleError."""
    d = Path(bundle_dir)
    manifest = d / "bundle.json"
    if not d.is_dir():
        raise BundleError(f"bundle directory not found: {d}")
    if not manifest.is_file():
        raise BundleError(f"{manifest}: missing (is {d} a model bundle? build one with attnserve-export build)")
    raw = manifest.read_bytes()
    try:
        meta = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"{manifest}: not valid JSON ({e})") from None
    if not isinstance(meta, dict):
        raise BundleError(f"{manifest}: expected a JSON object")
    if check_hashes:
        _check_manifest(manifest, meta)
    missing = [k for k in REQUIRED_FIELDS if k not in meta]
    if missing:
        raise BundleError(f"{manifest}: missing field(s) {', '.join(missing)}")
    if meta["format_version"] not in SUPPORTED_FORMAT_VERSIONS:
        raise BundleError(
            f"{manifest}: format_version {meta['format_version']!r} is not supported "
            f"(this attnserve reads {', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))})"
        )
    ids = meta["special_ids"]
    if not isinstance(ids, dict) or any(not isinstance(ids.get(k), int) for k in ("pad", "bos", "eos", "unk")):
        raise BundleError(f"{manifest}: special_ids must give integer pad, bos, eos and unk")
    cfg = meta["config"]
    needed = ("d_model", "n_heads", "n_decoder_layers", "src_vocab_size", "tgt_vocab_size")
    if not isinstance(cfg, dict) or any(not isinstance(cfg.get(k), int) for k in needed):
        raise BundleError(f"{manifest}: config must give integer {', '.join(needed)}")
    files = meta["files"]
    if not isinstance(files, dict) or not files:
        raise BundleError(f"{manifest}: field 'files' must map file names to sha256")
    referenced = [meta["tokenizers"].get("source"), meta["tokenizers"].get("target"), *_variant_files(manifest, meta)]
    lexicon = meta.get("lexicon")
    if lexicon is not None:
        if not isinstance(lexicon, dict) or not isinstance(lexicon.get("file"), str) or not lexicon["file"]:
            raise BundleError(f"{manifest}: field 'lexicon' must name its 'file'")
        referenced.append(lexicon["file"])
    context = meta.get("context")
    if context is not None:
        if not isinstance(context, dict) or not isinstance(context.get("file"), str) or not context["file"]:
            raise BundleError(f"{manifest}: field 'context' must name its 'file'")
        if not isinstance(context.get("homographs"), list):
            raise BundleError(f"{manifest}: field 'context' must list the 'homographs' it covers")
        referenced.append(context["file"])
    if not isinstance(meta.get("word_level_source", False), bool):
        raise BundleError(f"{manifest}: field 'word_level_source' must be true or false")
    for name in referenced:
        if not name:
            raise BundleError(f"{manifest}: field 'tokenizers' must name 'source' and 'target'")
        if name not in files:
            raise BundleError(f"{manifest}: {name} is referenced but not listed in 'files' (unverifiable)")
    for device, name in meta["default_variant"].items():
        if name not in meta["variants"]:
            raise BundleError(f"{manifest}: default_variant.{device} = {name!r} is not a listed variant")
    for name, digest in files.items():
        path = d / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise BundleError(f"{manifest}: file name {name!r} must be relative to the bundle directory")
        if not path.is_file():
            raise BundleError(f"{path}: listed in bundle.json but missing")
        if check_hashes and sha256_file(path) != digest:
            raise BundleError(f"{path}: sha256 does not match bundle.json (changed, truncated or corrupted)")
    return LoadedBundle(dir=d, meta=meta, sha256=hashlib.sha256(raw).hexdigest())
