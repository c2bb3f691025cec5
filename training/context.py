"""The context component: fit, measure and write the heteronym chooser (`attnserve-train context`).

Data: WikipediaHomographData's train split, vendored under training/wikipedia_homographs/ (its README
says where it came from; its eval split is not in the repository and nothing here reads it), plus the
sentences written for everyday readings in training/context_written.tsv (fitted on, never held out). Each
sentence's label (a `wordid`) is mapped to a CMUdict pronunciation by `training/wikipedia_homographs/
wordid_cmudict.tsv` (written by `write_label_map`, checked by hand where two wordids fell on one
pronunciation). The homographs covered are those with two or more different stress-free CMUdict
pronunciations.

Model: per homograph, a logistic regression over `attnserve.service.text.context.context_features` (the serving side's
own extractor, so training and serving see the same features), with one more input, the score of a shared
verb-or-noun model fitted on every homograph's sentences at once (`cfg.shared`; cross-fitted, so each
homograph learns how far to trust it on sentences the shared model has not seen).

Measure: 10% of the train split, stratified by homograph (each homograph's sentences ordered by the sha1 of
"sentence<TAB>start", every tenth held out), scored per homograph against the most frequent label of the
rest. The shipped weights are then fitted on the whole train split with the settings measured
(`fit_whole_split: false` ships the nine-tenths fit instead, to score a server on the held-out tenth).

    attnserve-train context --config configs/context.yaml --out runs/context
    attnserve-export add-context models/g2p-en runs/context
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import json
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from attnserve.service.text.context import CONTEXT_FILE, FORMAT, context_features

DATA_DIR = Path(__file__).resolve().parent / "wikipedia_homographs"
LABEL_MAP = DATA_DIR / "wordid_cmudict.tsv"
WRITTEN = Path(__file__).resolve().parent / "context_written.tsv"
HELD_OUT_EVERY = 10  # every tenth sentence of each homograph (by sha1 order) is held out


@dataclass(frozen=True)
class ContextConfig:
    """The recipe (configs/context.yaml); every key is a field here."""

    data: str = str(DATA_DIR / "data" / "train")
    label_map: str = str(LABEL_MAP)
    l2: float = 0.3  # L2 penalty per homograph, on the summed log-loss
    iterations: int = 300
    learning_rate: float = 0.5
    min_count: int = 1  # features seen fewer times in a homograph's sentences are dropped
    # false: ship the weights fitted without the held-out tenth, so a server can be scored on that tenth from
    # outside (benchmarks/score_heteronyms.py --split train --held-out) and match the figure measured here
    fit_whole_split: bool = True
    shared: bool = True  # one verb-or-noun model over every homograph's sentences, an input of each homograph's
    # sentences written for the project (everyday readings the Wikipedia sentences rarely show), fitted on but
    # never held out; "" for none
    written: str = str(WRITTEN)


# ---- labels -> CMUdict ----------------------------------------------------------------------------------
_IPA = [
    ("aɪ", "AY"), ("aʊ", "AW"), ("eɪ", "EY"), ("oʊ", "OW"), ("ɔɪ", "OY"), ("ɑ", "AA"), ("æ", "AE"), ("ə", "AH"),
    ("ɚ", "ER"), ("ʌ", "AH"), ("ɛ", "EH"), ("ɪ", "IH"), ("i", "IY"), ("u", "UW"), ("ʊ", "UH"), ("ɔ", "AO"),
    ("ʤ", "JH"), ("ʧ", "CH"), ("ʃ", "SH"), ("ʒ", "ZH"), ("θ", "TH"), ("ð", "DH"), ("ŋ", "NG"), ("j", "Y"),
    ("ɡ", "G"), ("g", "G"), ("ɹ", "R"), ("r", "R"), ("a", "AA"), ("o", "OW"), ("e", "EH"),
]  # fmt: skip
VOWELS = {"AA", "AE", "AH", "AO", "AW", "AY", "EH", "ER", "EY", "IH", "IY", "OW", "OY", "UH", "UW"}
_NEAR = [{"AH", "IH", "EH", "ER"}, {"AA", "AO"}, {"IH", "IY"}]  # vowels the rough IPA and CMUdict tell apart loosely


def ipa_to_arpabet(ipa: str) -> list[str]:
    """wordids.tsv's rough IPA as ARPAbet with stress digits: the vowel after ' is 1, after ˌ is 2, others 0."""
    out: list[str] = []
    stress, i = "0", 0
    s = re.sub(r"[ː0-9]", "", ipa)
    while i < len(s):
        if s[i] in "'ˈˌ":
            stress = "2" if s[i] == "ˌ" else "1"
            i += 1
            continue
        k, v = next(((k, v) for k, v in _IPA if s.startswith(k, i)), (s[i], s[i].upper()))
        i += len(k)
        for p in v.split():
            if p in VOWELS:
                out.append(p + stress)
                stress = "0"
            else:
                out.append(p)
    return out


def _cost(a: str, b: str) -> float:
    if a == b:
        return 0.0
    pa, pb = a.rstrip("012"), b.rstrip("012")
    if pa == pb:
        return 0.3  # stress alone differs
    if pa in VOWELS and pb in VOWELS:
        return 0.6 if any({pa, pb} <= near for near in _NEAR) else 0.8
    return 1.0


def phone_distance(a: list[str], b: list[str]) -> float:
    """Edit distance between phoneme lists: a stress difference 0.3, a near vowel 0.6, another vowel 0.8."""
    row = [float(j) for j in range(len(b) + 1)]
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], float(i)
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + _cost(x, y))
    return row[-1]


def no_stress(pron: str) -> str:
    return " ".join(p.rstrip("012") for p in pron.split())


def covered_homographs(dictionary: dict[str, list[str]], homographs: list[str]) -> list[str]:
    """The homographs CMUdict lists with two or more different pronunciations once stress is removed."""
    return [h for h in homographs if len({no_stress(p) for p in dictionary.get(h, [])}) >= 2]


# Chosen by hand where the closest-by-distance rule put two readings on one pronunciation (see the `how`
# column of the map). Three homographs keep their readings on one pronunciation, because CMUdict's variants
# do not tell them apart: august (the month, the adjective and the German name all map to AA1 G AH0 S T),
# interchange (its variants differ by a dropped T, not by noun or verb) and recount (both readings are
# R IY- in the data; CMUdict's R IH0 K AW1 N T is neither).
HAND = {
    "desert_nou": "D EH1 Z ER0 T",
    "desert_vrb": "D IH0 Z ER1 T",
    "elaborate_adj": "IH0 L AE1 B R AH0 T",
    "elaborate_vrb": "IH0 L AE1 B ER0 EY2 T",
    "extract_nou": "EH1 K S T R AE2 K T",
    "extract_vrb": "IH0 K S T R AE1 K T",
    "graduate_adj-nou": "G R AE1 JH AH0 W AH0 T",
    "graduate_vrb": "G R AE1 JH AH0 W EY2 T",
    "perfect_adj": "P ER1 F IH2 K T",
    "perfect_vrb": "P ER0 F EH1 K T",
    "subject_adj-nou": "S AH1 B JH IH0 K T",
    "subject_vrb": "S AH0 B JH EH1 K T",
    "supplement_nou": "S AH1 P L AH0 M AH0 N T",
    "supplement_vrb": "S AH2 P L AH0 M EH1 N T",
    "tear_nou": "T IH1 R",
    "tear_vrb": "T EH1 R",
}


def label_map(dictionary: dict[str, list[str]], wordids_tsv: Path) -> list[dict]:
    """Each wordid of a covered homograph -> the closest CMUdict pronunciation (HAND where set by hand).
    Rows: homograph, wordid, ipa, arpabet (the IPA read as ARPAbet), cmudict (the pronunciation), how."""
    rows = list(csv.reader(wordids_tsv.open(encoding="utf-8"), delimiter="\t"))[1:]
    covered = set(covered_homographs(dictionary, sorted({r[0] for r in rows})))
    out = []
    for h, wordid, _label, ipa, *_ in rows:
        if h not in covered:
            continue
        arpa = ipa_to_arpabet(ipa)
        if wordid in HAND:
            if HAND[wordid] not in dictionary[h]:
                raise ValueError(f"{wordid}: {HAND[wordid]!r} is not a CMUdict pronunciation of {h!r}")
            best, how = HAND[wordid], "hand"
        else:
            best = min(dictionary[h], key=lambda p: (phone_distance(arpa, p.split()), dictionary[h].index(p)))
            how = "closest"
        out.append({"homograph": h, "wordid": wordid, "ipa": ipa, "arpabet": " ".join(arpa), "cmudict": best, "how": how})
    return out


def write_label_map(path: Path = LABEL_MAP) -> list[dict]:
    from attnserve.training.data import load_dictionary

    rows = label_map(load_dictionary("cmudict"), DATA_DIR / "data" / "wordids.tsv")
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("homograph\twordid\tipa\tarpabet\tcmudict\thow\n")
        for r in rows:
            f.write("\t".join(r[k] for k in ("homograph", "wordid", "ipa", "arpabet", "cmudict", "how")) + "\n")
    return rows


def read_label_map(path: Path = LABEL_MAP) -> dict[str, tuple[str, str]]:
    """wordid -> (homograph, CMUdict pronunciation)."""
    rows = list(csv.reader(path.open(encoding="utf-8"), delimiter="\t"))[1:]
    return {r[1]: (r[0], r[4]) for r in rows}


# ---- sentences --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sentence:
    homograph: str
    label: str  # the CMUdict pronunciation its wordid maps to
    text: str
    start: int  # character offsets of the homograph
    end: int


def read_sentences(data_dir: Path, labels: dict[str, tuple[str, str]]) -> list[Sentence]:
    """The labelled sentences of the covered homographs in one split's TSV files (byte offsets -> characters)."""
    out = []
    for path in sorted(Path(data_dir).glob("*.tsv")):
        rows = list(csv.reader(path.open(encoding="utf-8"), delimiter="\t"))[1:]
        for h, wordid, text, start, end in rows:
            if wordid not in labels:
                continue
            raw = text.encode("utf-8")
            s = len(raw[: int(start)].decode("utf-8", errors="ignore"))
            e = len(raw[: int(end)].decode("utf-8", errors="ignore"))
            out.append(Sentence(h, labels[wordid][1], text, s, e))
    return out


def read_written(path: Path, labels: dict[str, tuple[str, str]]) -> list[Sentence]:
    """The written sentences: a TSV of homograph, wordid and sentence, the homograph marked by {braces}."""
    out = []
    rows = list(csv.reader(Path(path).open(encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    for n, (h, wordid, marked) in enumerate(rows, 2):
        start, end = marked.find("{"), marked.find("}")
        if wordid not in labels or labels[wordid][0] != h or not 0 <= start < end or marked[start + 1 : end].lower() != h:
            raise ValueError(f"{path}:{n}: want a covered homograph, its wordid, and the sentence with {{{h}}} marked")
        out.append(Sentence(h, labels[wordid][1], marked[:start] + marked[start + 1 : end] + marked[end + 1 :], start, end - 1))
    return out


def split_held_out(sentences: list[Sentence]) -> tuple[list[Sentence], list[Sentence]]:
    """(fit, held out): per homograph, its sentences ordered by sha1 of the text and every tenth held out."""
    by_h: dict[str, list[Sentence]] = {}
    for s in sentences:
        by_h.setdefault(s.homograph, []).append(s)
    fit, dev = [], []
    for h in sorted(by_h):
        ordered = sorted(by_h[h], key=lambda s: hashlib.sha1(f"{s.text}\t{s.start}".encode()).hexdigest())
        for i, s in enumerate(ordered):
            (dev if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else fit).append(s)
    return fit, dev


# ---- the models ------------------------------------------------------------------------------------------
class Design:
    """Binary features of some sentences as index lists (sparse): feature j of sentence i is on when j is in
    `cols[starts[i]:starts[i + 1]]`."""

    def __init__(self, feats: list[list[str]], index: dict[str, int]):
        rows = [sorted({index[f] for f in fs if f in index}) for fs in feats]
        self.n = len(rows)
        self.cols = np.asarray([j for r in rows for j in r], dtype=np.int64)
        self.row_of = np.repeat(np.arange(self.n), [len(r) for r in rows])

    def times(self, w: np.ndarray) -> np.ndarray:
        """x @ w: [n, k]."""
        # bincount per class: several times faster than np.add.at on the same sums
        wc = w[self.cols]
        return np.stack([np.bincount(self.row_of, weights=wc[:, c], minlength=self.n) for c in range(w.shape[1])], axis=1)

    def t_times(self, g: np.ndarray, d: int) -> np.ndarray:
        """x.T @ g: [d, k]."""
        gr = g[self.row_of]
        return np.stack([np.bincount(self.cols, weights=gr[:, c], minlength=d) for c in range(g.shape[1])], axis=1)


def logreg(x: Design, d: int, extra: np.ndarray | None, y: np.ndarray, cfg: ContextConfig) -> tuple:
    """Multinomial logistic regression, L2-penalised, full-batch gradient descent with Nesterov momentum.
    `x`: binary features over `d` names; `extra`: one real-valued column [n] or None; `y`: one-hot [n, k].
    Returns (w [d, k], w_extra [k], b [k])."""
    n, k = y.shape
    prior = y.mean(axis=0)
    w, we, b = np.zeros((d, k)), np.zeros(k), np.log(np.maximum(prior, 1e-3))
    vw, ve, vb = np.zeros_like(w), np.zeros_like(we), np.zeros_like(b)
    e = np.zeros(n) if extra is None else extra
    for _ in range(cfg.iterations):
        lw, le, lb = w + 0.9 * vw, we + 0.9 * ve, b + 0.9 * vb
        z = x.times(lw) + e[:, None] * le + lb
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = p - y
        vw = 0.9 * vw - cfg.learning_rate * (x.t_times(g, d) + cfg.l2 * lw) / n
        ve = 0.9 * ve - cfg.learning_rate * (e @ g + cfg.l2 * le) / n
        vb = 0.9 * vb - cfg.learning_rate * g.sum(axis=0) / n
        w, we, b = w + vw, we + ve, b + vb
    return w, we, b


def coarse_tags(path: Path = LABEL_MAP) -> dict[tuple[str, str], str]:
    """(homograph, pronunciation) -> "V" where its readings are verbs only, "N" where nouns or adjectives only
    (the wordid's suffix: `_vrb`, `_nou`, `_adj`, `_adj-nou`); readings named otherwise get no tag."""
    seen: dict[tuple[str, str], set] = {}
    for r in list(csv.reader(path.open(encoding="utf-8"), delimiter="\t"))[1:]:
        suffix = r[1].partition("_")[2]
        tag = "V" if suffix == "vrb" else "N" if suffix and "vrb" not in suffix and ("nou" in suffix or "adj" in suffix) else None
        seen.setdefault((r[0], r[4]), set()).add(tag)
    return {key: tags.pop() for key, tags in seen.items() if len(tags) == 1 and None not in tags}


def fit_shared(sentences: list[Sentence], tags: dict, cfg: ContextConfig) -> dict:
    """One verb-or-noun model over every homograph's tagged sentences: what "to X", "will X", "the X" say in
    general, for the homographs whose own ~100 sentences are too few to say it. Its score (the verb logit)
    is one more input of each homograph's model."""
    tagged = [s for s in sentences if (s.homograph, s.label) in tags]
    feats = [context_features(s.text, s.start, s.end) for s in tagged]
    counts = Counter(f for fs in feats for f in set(fs) if f != "bias")
    names = sorted(f for f, c in counts.items() if c >= 2)
    y = np.asarray([[tags[(s.homograph, s.label)] == "V", tags[(s.homograph, s.label)] == "N"] for s in tagged], float)
    w, _, b = logreg(Design(feats, {f: i for i, f in enumerate(names)}), len(names), None, y, cfg)
    return {"names": names, "weights": w[:, 0] - w[:, 1], "bias": float(b[0] - b[1])}


def shared_score(shared: dict, feats: list[str]) -> float:
    index = shared.setdefault("_index", {f: i for i, f in enumerate(shared["names"])})
    return shared["bias"] + sum(float(shared["weights"][index[f]]) for f in feats if f in index)


def cross_fitted_scores(sentences: list[Sentence], tags: dict, cfg: ContextConfig, folds: int = 5) -> list[float]:
    """Each sentence's shared score from a shared model fitted without it (5 folds by sha1), so a homograph's
    model learns how far to trust the score on sentences the score has not seen, as at serving."""
    fold = [int(hashlib.sha1(s.text.encode()).hexdigest()[:8], 16) % folds for s in sentences]
    out = [0.0] * len(sentences)
    for k in range(folds):
        shared = fit_shared([s for s, f in zip(sentences, fold) if f != k], tags, cfg)
        for i, s in enumerate(sentences):
            if fold[i] == k:
                out[i] = shared_score(shared, context_features(s.text, s.start, s.end))
    return out


def fit_homograph(sentences: list[Sentence], classes: list[str], cfg: ContextConfig, extra: list[float] | None = None) -> dict:
    """One homograph's multinomial logistic regression over `context_features` (and the shared score)."""
    feats = [context_features(s.text, s.start, s.end) for s in sentences]
    counts = Counter(f for fs in feats for f in set(fs) if f != "bias")
    names = sorted(f for f, c in counts.items() if c >= cfg.min_count)
    y = np.zeros((len(sentences), len(classes)))
    y[np.arange(len(sentences)), [classes.index(s.label) for s in sentences]] = 1.0
    e = None if extra is None else np.asarray(extra)
    w, we, b = logreg(Design(feats, {f: i for i, f in enumerate(names)}), len(names), e, y, cfg)
    return {
        "classes": classes,
        "prior": y.mean(axis=0).tolist(),
        "bias": b.tolist(),
        "names": names,
        "weights": w,
        "shared": we.tolist() if extra is not None else None,
    }


def predict(model: dict, s: Sentence, shared: dict | None = None) -> str:
    index = model.setdefault("_index", {f: i for i, f in enumerate(model["names"])})
    feats = context_features(s.text, s.start, s.end)
    z = np.asarray(model["bias"]).copy()
    for f in feats:
        j = index.get(f)
        if j is not None:
            z += model["weights"][j]
    if shared is not None and model["shared"] is not None:
        z += shared_score(shared, feats) * np.asarray(model["shared"])
    return model["classes"][int(np.argmax(z))]


def classes_of(sentences: list[Sentence]) -> dict[str, list[str]]:
    """Each homograph's classes: the pronunciations its labels map to, most frequent first."""
    out: dict[str, Counter] = {}
    for s in sentences:
        out.setdefault(s.homograph, Counter())[s.label] += 1
    return {h: [p for p, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))] for h, c in out.items()}


def fit_all(sentences: list[Sentence], classes: dict[str, list[str]], cfg: ContextConfig) -> tuple[dict[str, dict], dict | None]:
    """Every homograph's model, and the shared verb-or-noun model when `cfg.shared` (else None)."""
    shared, scores = None, None
    if cfg.shared:
        tags = coarse_tags(Path(cfg.label_map))
        shared = fit_shared(sentences, tags, cfg)
        scores = dict(zip(map(id, sentences), cross_fitted_scores(sentences, tags, cfg)))
    by_h: dict[str, list[Sentence]] = {}
    for s in sentences:
        by_h.setdefault(s.homograph, []).append(s)
    models = {
        h: fit_homograph(by_h[h], classes[h], cfg, [scores[id(s)] for s in by_h[h]] if scores is not None else None)
        for h in sorted(by_h)
    }
    return models, shared


def measure(models: dict[str, dict], shared: dict | None, fit: list[Sentence], dev: list[Sentence]) -> dict:
    """Held-out accuracy (stress ignored) per homograph: the linear model and the most frequent label of `fit`."""
    mfl = {h: c[0] for h, c in classes_of(fit).items()}
    per: dict[str, dict] = {}
    for s in dev:
        r = per.setdefault(s.homograph, {"n": 0, "linear": 0, "most_frequent": 0})
        r["n"] += 1
        r["linear"] += no_stress(predict(models[s.homograph], s, shared)) == no_stress(s.label)
        r["most_frequent"] += no_stress(mfl[s.homograph]) == no_stress(s.label)
    n = sum(r["n"] for r in per.values())
    total = {a: sum(r[a] for r in per.values()) / n for a in ("linear", "most_frequent")}
    return {"sentences": n, "homographs": len(per), "accuracy": total, "per_homograph": per}


def component(models: dict[str, dict], shared: dict | None) -> dict:
    """The served file's JSON (service/text/context.py): one feature-name table, per homograph its rows, and
    the shared verb-or-noun model with each homograph's weights on its score."""
    names = sorted({f for m in models.values() for f in m["names"]} | set(shared["names"] if shared else ()))
    index = {f: i for i, f in enumerate(names)}
    homographs = {}
    for h, m in models.items():
        w = m["weights"]
        keep = np.abs(w).max(axis=1) >= 1e-4  # features whose weights round to nothing are left out
        homographs[h] = {
            "classes": m["classes"],
            "prior": [round(p, 6) for p in m["prior"]],
            "bias": [round(float(v), 5) for v in m["bias"]],
            "rows": [index[f] for f, kept in zip(m["names"], keep) if kept],
            "weights": [[round(float(v), 4) for v in row] for row in w[keep]],
        }
        if m["shared"] is not None:
            homographs[h]["shared"] = [round(float(v), 5) for v in m["shared"]]
    out_shared = None
    if shared is not None:
        keep = np.abs(shared["weights"]) >= 1e-4
        out_shared = {
            "bias": round(shared["bias"], 5),
            "rows": [index[f] for f, kept in zip(shared["names"], keep) if kept],
            "weights": [round(float(v), 4) for v in shared["weights"][keep]],
        }
    used = sorted({r for h in homographs.values() for r in h["rows"]} | set(out_shared["rows"] if out_shared else ()))
    remap = {r: i for i, r in enumerate(used)}
    for h in [*homographs.values(), *([out_shared] if out_shared else [])]:
        h["rows"] = [remap[r] for r in h["rows"]]
    data = {"format": FORMAT, "features": [names[r] for r in used], "homographs": homographs}
    if out_shared is not None:
        data["shared"] = out_shared
    return data


def write_component(path: Path, data: dict) -> None:
    """gzip-compressed JSON with no time or name in its header: the same weights give the same bytes (and hash)."""
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode("utf-8")
    path.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))


def load_config(path: Path | None, overrides: list[str]) -> ContextConfig:
    import yaml

    data = yaml.safe_load(path.read_text()) if path is not None else {}
    data = data or {}
    known = {f.name: f.type for f in fields(ContextConfig)}
    for o in overrides:
        key, _, value = o.partition("=")
        data[key] = yaml.safe_load(value)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown context config key(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
    return ContextConfig(**data)


def run(cfg: ContextConfig, out: Path, log=print) -> dict:
    """Measure on the held-out tenth, then fit on the whole train split; writes the run directory:
    context.json.gz (the component), heldout.json (figures per homograph), config.json."""
    out.mkdir(parents=True, exist_ok=True)
    labels = read_label_map(Path(cfg.label_map))
    sentences = read_sentences(Path(cfg.data), labels)
    classes = classes_of(sentences)
    # the written sentences add to the homographs the split covers, never a homograph of their own
    written = [s for s in read_written(Path(cfg.written), labels) if s.homograph in classes] if cfg.written else []
    for h, extra in classes_of(written).items():  # a reading only the written sentences show comes last
        classes[h] = classes.get(h, []) + [p for p in extra if p not in classes.get(h, [])]
    fit, dev = split_held_out(sentences)
    t0 = time.perf_counter()
    report = measure(*fit_all(fit + written, classes, cfg), fit, dev)
    acc = report["accuracy"]
    log(
        f"[context] held out: {report['sentences']} sentences over {report['homographs']} homographs; "
        f"linear {acc['linear']:.4f}, most frequent label {acc['most_frequent']:.4f} ({time.perf_counter() - t0:.0f} s)"
    )
    models, shared = fit_all((sentences if cfg.fit_whole_split else fit) + written, classes, cfg)
    data = component(models, shared)
    write_component(out / CONTEXT_FILE, data)
    (out / "heldout.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    size = (out / CONTEXT_FILE).stat().st_size
    log(f"[context] {out / CONTEXT_FILE}: {len(models)} homographs, {len(data['features'])} features, {size / 1e6:.2f} MB")
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnserve-train context", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, help="YAML of ContextConfig keys (configs/context.yaml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", type=Path, required=True, help="run directory to write")
    p.add_argument("--write-label-map", action="store_true", help="rewrite wordid_cmudict.tsv from wordids.tsv first")
    args = p.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except (OSError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.write_label_map:
        write_label_map(Path(cfg.label_map))
    run(cfg, args.out)
    return 0
