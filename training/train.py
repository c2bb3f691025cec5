"""The training loop: one file, a dataclass config, no framework (after nanoGPT).

Writes the run directory of Contract 1:
    checkpoint.pt    latest state (model, optimizer, scheduler, data order, RNG, step): --resume
    best.pt          same format, the step with the best dev metric: what export takes
    src_tokenizer.json, tgt_tokenizer.json, config.json, metrics.jsonl, train_log.jsonl, curves.png
Multi-GPU / multi-node via DDP under torchrun (nccl on GPU, gloo on CPU): each
rank takes every world_size-th batch; only rank 0 writes.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from training.config import ModelConfig
from training.data import Example, load_examples, token_batches
from training.metrics import task_metrics
from training.model import Transformer, greedy_decode
from training.tokenize import BOS_ID, EOS_ID, PAD_ID, UNK_ID, build_tokenizer, decode, encode


class ConfigError(ValueError):
    """A configuration problem the user must fix."""


@dataclass
class TrainConfig:
    # data
    dataset: str = "cmudict"  # "cmudict" or a TSV/JSONL file of pairs
    task: str = "g2p"  # "g2p" (WER/PER) or "seq2seq" (exact match, token accuracy, chrF)
    strip_stress: bool = False
    src_tokenizer: str = "char"
    tgt_tokenizer: str = "whitespace"
    lowercase_source: bool = True
    bpe_vocab_size: int = 8000
    train_limit: int = 0  # 0 = all; a small number for smoke tests
    # model
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    max_source_len: int = 48
    max_target_len: int = 48
    dropout: float = 0.1
    norm_placement: str = "pre"
    pos_encoding: str = "sinusoidal"
    activation: str = "relu"
    tie_embeddings: bool = True
    # optimization
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 1000
    schedule: str = "inverse_sqrt"  # or "cosine"
    max_steps: int = 20000
    max_minutes: float = 0.0  # 0 = no wall-clock limit
    max_tokens: int = 4096  # padded target tokens per batch (per rank)
    label_smoothing: float = 0.1
    grad_clip: float = 1.0
    precision: str = "auto"  # "auto" (bf16 autocast on CUDA), "fp32", "bf16"
    seed: int = 1234
    # bookkeeping
    eval_every: int = 1000
    eval_limit: int = 2000  # dev examples per periodic eval; 0 = the whole split
    eval_batch_size: int = 256
    log_every: int = 50
    checkpoint_every: int = 1000
    threads: int = 0  # torch intra-op threads; 0 = leave torch's default

    def model_config(self, src_vocab: int, tgt_vocab: int) -> ModelConfig:
        return ModelConfig(
            src_vocab_size=src_vocab,
            tgt_vocab_size=tgt_vocab,
            d_model=self.d_model,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            n_encoder_layers=self.n_encoder_layers,
            n_decoder_layers=self.n_decoder_layers,
            max_source_len=self.max_source_len,
            max_target_len=self.max_target_len,
            dropout=self.dropout,
            norm_placement=self.norm_placement,
            pos_encoding=self.pos_encoding,
            activation=self.activation,
            tie_embeddings=self.tie_embeddings,
            pad_id=PAD_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            unk_id=UNK_ID,
        )

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise ConfigError(f"unknown config key(s) {unknown}; valid keys: {', '.join(sorted(known))}")
        return cls(**d)

    def with_overrides(self, assignments: list[str]) -> "TrainConfig":
        """Apply `key=value` strings, converting value to the field's type."""
        known = {f.name: f for f in fields(self)}
        values = asdict(self)
        for item in assignments:
            if "=" not in item:
                raise ConfigError(f"--set expects key=value, got {item!r}")
            key, raw = item.split("=", 1)
            if key not in known:
                raise ConfigError(f"unknown config key {key!r}; valid keys: {', '.join(sorted(known))}")
            current = values[key]
            try:
                if isinstance(current, bool):
                    if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(raw)
                    values[key] = raw.lower() in ("true", "1", "yes")
                elif isinstance(current, int):
                    values[key] = int(raw)
                elif isinstance(current, float):
                    values[key] = float(raw)
                else:
                    values[key] = raw
            except ValueError:
                raise ConfigError(f"--set {key}: {raw!r} is not a valid {type(current).__name__}") from None
        return TrainConfig(**values)


PRESETS: dict[str, dict] = {
    # Trains in seconds on a laptop CPU: tests and smoke runs.
    "tiny": dict(
        d_model=64,
        n_heads=4,
        d_ff=128,
        n_encoder_layers=2,
        n_decoder_layers=2,
        dropout=0.0,
        lr=3e-3,
        warmup_steps=100,
        max_steps=400,
        max_tokens=1024,
        eval_every=200,
        checkpoint_every=200,
        log_every=20,
        eval_limit=200,
        label_smoothing=0.0,
    ),
    # The CMUSphinx g2p-seq2seq Transformer's size: 3+3 layers, 256 wide.
    "base": dict(
        d_model=256,
        n_heads=4,
        d_ff=1024,
        n_encoder_layers=3,
        n_decoder_layers=3,
        dropout=0.1,
        lr=1e-3,
        warmup_steps=1000,
        max_steps=20000,
        max_tokens=4096,
    ),
}


# ---- distributed ------------------------------------------------------------------------
def dist_setup() -> tuple[int, int, torch.device]:
    """(rank, world_size, device); initialises the process group under torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    return rank, world, device


# ---- batches ----------------------------------------------------------------------------
def collate(pairs: list[tuple[list[int], list[int]]], device: torch.device) -> dict[str, torch.Tensor]:
    """Right-padded source, decoder input (bos + target) and labels (target + eos, -100 on padding)."""
    b = len(pairs)
    s = max(len(p[0]) for p in pairs)
    t = max(len(p[1]) for p in pairs) + 1
    src = torch.full((b, s), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((b, t), PAD_ID, dtype=torch.long)
    labels = torch.full((b, t), -100, dtype=torch.long)
    for i, (sid, tid) in enumerate(pairs):
        src[i, : len(sid)] = torch.tensor(sid)
        tgt_in[i, : len(tid) + 1] = torch.tensor([BOS_ID] + tid)
        labels[i, : len(tid) + 1] = torch.tensor(tid + [EOS_ID])
    return {
        "src": src.to(device),
        "src_mask": (src != PAD_ID).long().to(device),
        "tgt_in": tgt_in.to(device),
        "tgt_mask": (labels != -100).long().to(device),
        "labels": labels.to(device),
    }


def lr_lambda(cfg: TrainConfig):
    def f(step: int) -> float:
        step = max(step, 1)
        if step < cfg.warmup_steps:
            return step / cfg.warmup_steps
        if cfg.schedule == "cosine":
            progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return math.sqrt(cfg.warmup_steps / step)

    return f


# ---- run directory ----------------------------------------------------------------------
def load_run_tokenizers(run_dir: Path) -> tuple[Tokenizer, Tokenizer]:
    return (
        Tokenizer.from_file(str(run_dir / "src_tokenizer.json")),
        Tokenizer.from_file(str(run_dir / "tgt_tokenizer.json")),
    )


def load_model(run_dir: Path, which: str = "best", device: str | torch.device = "cpu") -> Transformer:
    """The model from `best.pt` (or `checkpoint.pt` when no best exists / which="last")."""
    path = run_dir / ("best.pt" if which == "best" else "checkpoint.pt")
    if not path.is_file():
        path = run_dir / "checkpoint.pt"
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint in {run_dir} (expected best.pt or checkpoint.pt)")
    ckpt = torch.load(path, map_location=device, weights_only=False)
    model = Transformer(ModelConfig.from_dict(ckpt["config"]))
    model.load_state_dict(ckpt["state_dict"])
    return model.to(device).eval()


def decode_examples(
    model: Transformer,
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    sources: list[str],
    batch_size: int = 256,
    progress: bool = False,
) -> list[str]:
    """Greedy outputs for `sources` (sorted by length for tight batches, returned in order)."""
    device = next(model.parameters()).device
    cfg = model.cfg
    ids = [encode(src_tok, s)[: cfg.max_source_len] for s in sources]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(ids)
    for start in tqdm(range(0, len(order), batch_size), desc="decode", disable=not progress, leave=False):
        idx = order[start : start + batch_size]
        batch = collate([(ids[i] or [UNK_ID], []) for i in idx], device)
        hyps = greedy_decode(model, batch["src"], batch["src_mask"], cfg.max_target_len)
        for i, h in zip(idx, hyps):
            out[i] = decode(tgt_tok, h)
    return out


def evaluate_model(model, src_tok, tgt_tok, examples: list[Example], task: str, batch_size: int = 256) -> dict:
    was_training = model.training
    model.eval()
    sources = [e.source for e in examples]
    hyps = decode_examples(model, src_tok, tgt_tok, sources, batch_size)
    model.train(was_training)
    return task_metrics(task, sources, hyps, [e.targets for e in examples])


def plot_curves(run_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = (
        [json.loads(line) for line in open(run_dir / "train_log.jsonl")]
        if (run_dir / "train_log.jsonl").exists()
        else []
    )
    evals = (
        [json.loads(line) for line in open(run_dir / "metrics.jsonl")] if (run_dir / "metrics.jsonl").exists() else []
    )
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    if log:
        axes[0].plot([r["step"] for r in log], [r["loss"] for r in log], label="train loss")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("loss")
    axes[0].legend()
    for key in ("wer", "wer_no_stress", "per", "exact_match"):
        pts = [(r["step"], r[key]) for r in evals if key in r]
        if pts:
            axes[1].plot(*zip(*pts), marker="o", label=f"dev {key}")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("%")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(run_dir / "curves.png", dpi=100)
    plt.close(fig)


# ---- the loop ---------------------------------------------------------------------------
def train(cfg: TrainConfig, out_dir: Path, resume: bool = False) -> dict:
    """Train into `out_dir`; returns the last dev metrics."""
    rank, world, device = dist_setup()
    is_main = rank == 0
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    ckpt = None
    if resume:
        if not (out_dir / "checkpoint.pt").is_file():
            raise ConfigError(f"--resume: no checkpoint.pt in {out_dir}")
        ckpt = torch.load(out_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    elif is_main and (out_dir / "checkpoint.pt").exists():
        raise ConfigError(f"{out_dir} already holds a run: pass --resume to continue it, or choose another --out")

    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    train_ex = load_examples(cfg.dataset, "train", cfg.strip_stress, cfg.train_limit or None)
    dev_ex = load_examples(cfg.dataset, "dev", cfg.strip_stress)
    if cfg.eval_limit:
        dev_ex = dev_ex[: cfg.eval_limit]

    if ckpt is not None:
        src_tok, tgt_tok = load_run_tokenizers(out_dir)
    else:
        src_tok = build_tokenizer(
            (e.source for e in train_ex), cfg.src_tokenizer, cfg.lowercase_source, cfg.bpe_vocab_size
        )
        tgt_tok = build_tokenizer(
            (t for e in train_ex for t in e.targets), cfg.tgt_tokenizer, False, cfg.bpe_vocab_size
        )

    pairs: list[tuple[list[int], list[int]]] = []
    skipped = 0
    for e in train_ex:
        s = encode(src_tok, e.source)
        for t in e.targets:
            tid = encode(tgt_tok, t)
            if 0 < len(s) <= cfg.max_source_len and len(tid) < cfg.max_target_len:
                pairs.append((s, tid))
            else:
                skipped += 1
    if not pairs:
        raise ConfigError("no training pair fits max_source_len/max_target_len")

    mcfg = cfg.model_config(src_tok.get_vocab_size(), tgt_tok.get_vocab_size())
    model = Transformer(mcfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    step, epoch, batch_pos, best = 0, 0, 0, None
    if ckpt is not None:
        model.load_state_dict(ckpt["state_dict"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        step, epoch, batch_pos, best = ckpt["step"], ckpt["epoch"], ckpt["batch_pos"], ckpt.get("best")
        torch.set_rng_state(ckpt["rng"]["torch"])
        random.setstate(ckpt["rng"]["python"])

    ddp_model = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    use_bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")

    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
        src_tok.save(str(out_dir / "src_tokenizer.json"))
        tgt_tok.save(str(out_dir / "tgt_tokenizer.json"))
        (out_dir / "config.json").write_text(json.dumps(asdict(cfg), indent=2) + "\n")
        print(
            f"[train] {len(pairs)} pairs ({skipped} too long, skipped), {len(dev_ex)} dev examples, "
            f"{model.num_parameters() / 1e6:.2f}M parameters, world size {world}, device {device}"
        )

    def save(name: str) -> None:
        state = {
            "config": mcfg.to_dict(),
            "train_config": asdict(cfg),
            "state_dict": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": step,
            "epoch": epoch,
            "batch_pos": batch_pos,
            "best": best,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        }
        tmp = out_dir / (name + ".tmp")
        torch.save(state, tmp)
        tmp.replace(out_dir / name)

    def run_eval() -> dict:
        nonlocal best
        m = evaluate_model(model, src_tok, tgt_tok, dev_ex, cfg.task, cfg.eval_batch_size)
        m = {"step": step, **{k: v for k, v in m.items() if k != "by_length"}}
        key = "wer" if cfg.task == "g2p" else "exact_match"
        score = m[key] if cfg.task == "g2p" else -m[key]
        with open(out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(m) + "\n")
        if best is None or score < best:
            best = score
            save("best.pt")
        return m

    lengths = [len(t) + 1 for _, t in pairs]
    start_time = time.monotonic()
    bar = tqdm(total=cfg.max_steps, initial=step, desc="train", disable=not is_main, dynamic_ncols=True)
    last_metrics: dict = {}
    tokens_since, t_since = 0, time.monotonic()
    model.train()
    stop = step >= cfg.max_steps
    while not stop:
        batches = token_batches(lengths, cfg.max_tokens, cfg.seed, epoch)
        usable = len(batches) - len(batches) % world  # every rank takes the same number of steps
        while batch_pos < usable:
            batch = collate([pairs[i] for i in batches[batch_pos + rank]], device)
            batch_pos += world
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
                logits = ddp_model(batch["src"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])
                loss = F.cross_entropy(
                    logits.float().reshape(-1, logits.shape[-1]),
                    batch["labels"].reshape(-1),
                    ignore_index=-100,
                    label_smoothing=cfg.label_smoothing,
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            tokens_since += int(batch["tgt_mask"].sum()) * world
            if is_main:
                bar.update(1)
                if step % cfg.log_every == 0 or step == 1:
                    now = time.monotonic()
                    tps = tokens_since / max(1e-9, now - t_since)
                    tokens_since, t_since = 0, now
                    lr = scheduler.get_last_lr()[0]
                    bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:.0f}")
                    with open(out_dir / "train_log.jsonl", "a") as f:
                        f.write(json.dumps({"step": step, "loss": loss.item(), "lr": lr, "tokens_per_s": tps}) + "\n")
                if step % cfg.eval_every == 0:
                    last_metrics = run_eval()
                    bar.write(
                        f"[eval] step {step}: "
                        + ", ".join(f"{k}={v:.2f}" for k, v in last_metrics.items() if k != "step")
                    )
                if step % cfg.checkpoint_every == 0:
                    save("checkpoint.pt")
            out_of_time = cfg.max_minutes and (time.monotonic() - start_time) / 60 >= cfg.max_minutes
            if world > 1:  # every rank stops on the same step
                flag = torch.tensor([1 if out_of_time else 0])
                dist.all_reduce(flag)
                out_of_time = bool(flag.item())
            if step >= cfg.max_steps or out_of_time:
                stop = True
                break
        else:
            epoch += 1
            batch_pos = 0
    bar.close()
    if is_main:
        if not last_metrics or last_metrics.get("step") != step:
            last_metrics = run_eval()
        save("checkpoint.pt")
        plot_curves(out_dir)
        print(
            f"[train] done at step {step}: " + ", ".join(f"{k}={v:.2f}" for k, v in last_metrics.items() if k != "step")
        )
    if world > 1:
        dist.barrier()
    return last_metrics
