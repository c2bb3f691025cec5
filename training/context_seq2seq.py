"""The context chooser tried with the project's own Transformer (not shipped; the model card has its figure).

The issue's approach (a): a window of the sentence with the homograph marked ("... we will [read] the new ...")
-> its pronunciation, trained by `attnserve-train` (the tiny preset, characters in, phonemes out) on the nine
tenths of the train split that the linear model is fitted on; each held-out sentence's candidates (the
homograph's classes) are scored by teacher-forced log-probability, and the most probable is its answer.

    python -m attnserve.training.context_seq2seq --out runs/context-seq2seq [--steps 3000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from attnserve.training.context import ContextConfig, classes_of, no_stress, read_label_map, read_sentences, split_held_out

WINDOW_CHARS = 32  # characters either side of the homograph


def window(text: str, start: int, end: int) -> str:
    """The homograph in brackets with the characters around it, lower-cased, on one line."""
    left = " ".join(text[max(0, start - WINDOW_CHARS) : start].split())
    right = " ".join(text[end : end + WINDOW_CHARS].split())
    return f"{left} [{text[start:end]}] {right}".lower().strip()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = ContextConfig()
    sentences = read_sentences(Path(cfg.data), read_label_map(Path(cfg.label_map)))
    classes = classes_of(sentences)
    fit, dev = split_held_out(sentences)
    pairs = args.out / "pairs.tsv"
    pairs.write_text("".join(f"{window(s.text, s.start, s.end)}\t{s.label}\n" for s in fit), encoding="utf-8")
    run = args.out / "run"
    if not (run / "best.pt").is_file() and not (run / "checkpoint.pt").is_file():
        settings = [
            f"dataset={pairs}",
            "max_source_len=80",
            "max_target_len=16",
            f"max_steps={args.steps}",
            f"eval_every={args.steps}",
            f"checkpoint_every={args.steps}",
            "eval_limit=200",
            f"threads={args.threads}",
        ]
        cmd = [sys.executable, "-m", "attnserve.training", "--preset", "tiny", "--out", str(run)]
        for s in settings:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True)

    import torch

    from attnserve.training.run import load_model, load_run_tokenizers
    from attnserve.training.tokenize import BOS_ID, EOS_ID, PAD_ID, encode

    model = load_model(run).eval()
    src_tok, tgt_tok = load_run_tokenizers(run)
    right = 0
    per: dict[str, dict] = {}
    with torch.no_grad():
        for s in dev:
            cands = classes[s.homograph]
            src = encode(src_tok, window(s.text, s.start, s.end))[:80]
            tgts = [[BOS_ID, *encode(tgt_tok, c), EOS_ID] for c in cands]
            t = max(map(len, tgts))
            tgt_ids = torch.tensor([x + [PAD_ID] * (t - len(x)) for x in tgts])
            tgt_mask = (tgt_ids != PAD_ID).long()
            src_ids = torch.tensor([src] * len(cands))
            logits = model(src_ids, torch.ones_like(src_ids), tgt_ids[:, :-1], tgt_mask[:, :-1])
            logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tgt_ids[:, 1:, None])[..., 0]
            scores = (logp * tgt_mask[:, 1:]).sum(dim=1)
            ok = no_stress(cands[int(scores.argmax())]) == no_stress(s.label)
            right += ok
            r = per.setdefault(s.homograph, {"n": 0, "right": 0})
            r["n"] += 1
            r["right"] += ok
    report = {"sentences": len(dev), "accuracy": right / len(dev), "steps": args.steps, "per_homograph": per}
    (args.out / "heldout.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"[context-seq2seq] held out: {right}/{len(dev)} = {right / len(dev):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
