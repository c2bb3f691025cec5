"""The training loop: a dataclass config, no framework (after nanoGPT); the processes it runs in (DDP set-up,
RNG states, signals, the run lock) are training/distributed.py.

Writes the run directory of Contract 1:
    checkpoint.pt    latest state (model, optimizer, scheduler, data order, RNG, step): --resume
    best.pt          same format, the step with the best dev metric: what export takes
    averaging/       weights of the last `average_last` checkpoints; their mean becomes
                     best.pt when it scores better on dev (checkpoint averaging)
    src_tokenizer.json, tgt_tokenizer.json, config.json, metrics.jsonl, train_log.jsonl, curves.png
    train.lock       while a trainer runs: its host and PID (training/lock.py); one trainer per directory
Multi-GPU / multi-node via DDP under torchrun (nccl on GPU, gloo on CPU): each
rank takes every world_size-th batch; only rank 0 writes.

Resuming is exact: the checkpoint holds the data order (epoch, batch index) and
every rank's RNG state, so a resumed run follows the uninterrupted loss curve.
A first Ctrl-C (SIGINT) or SIGTERM finishes the current step and saves, so
`--resume` continues at the next step; a second one interrupts at once.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm

from attnserve.training.config import ConfigError, ModelConfig, TrainConfig
from attnserve.training.data import Example, token_batches
from attnserve.training.decode import collate, evaluate_model
from attnserve.training.distributed import StopSignal, all_ranks_halt, dist_setup, rng_state, run_lock, set_rng_state
from attnserve.training.lengths import dropped_pairs_warning, encode_pairs
from attnserve.training.model import Transformer
from attnserve.training.run import load_run_tokenizers
from attnserve.training.tokenize import (
    bpe_target_warning,
    build_tokenizer,
    unknown_fraction,
    unknown_tokens_warning,
)
from attnserve.training.warmstart import bundle_state_dict, bundle_tokenizers, dev_examples, training_examples


class StopRequested(KeyboardInterrupt):
    """Training stopped on a signal after saving `checkpoint.pt` at `step`: `--resume` continues."""

    def __init__(self, step: int):
        super().__init__(f"stopped at step {step}")
        self.step = step


# on_step(step, this rank's loss, the unwrapped model): called on every rank after each optimizer step.
StepHook = Callable[[int, float, "Transformer"], None]


# ---- schedule, model selection, averaging and plots -------------------------------------
def bf16_accelerated(device: torch.device, cpuinfo: str | None = None) -> bool:
    """Whether bf16 autocast pays on this device: CUDA, or a CPU with bf16 instructions (avx512_bf16,
    amx_bf16). Measured on the default recipe: 1.6x faster than fp32 on an AVX-512 bf16 CPU, but
    about 23x SLOWER on an AVX2-only CPU (60 s against 2.6 s per step), where it is emulated."""
    if device.type == "cuda":
        return True
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return "avx512_bf16" in flags or "amx_bf16" in flags


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


def dev_score(task: str, metrics: dict) -> list[float]:
    """Lower is better, compared in order: WER then PER for G2P, exact match then token accuracy
    otherwise. The second figure settles ties of the first (on 1,000 dev words WER moves in steps
    of 0.1, and a mean of checkpoints often ties the last one on it while its PER is lower)."""
    if task == "g2p":
        return [metrics["wer"], metrics["per"]]
    return [-metrics["exact_match"], -metrics["token_accuracy"]]


def format_figures(metrics: dict) -> str:
    """A metrics.jsonl line's figures for the log: "wer=33.20, per=9.33, ..." (not its step or averaged steps)."""
    skip = ("step", "averaged_steps", "train_pairs", "dropped_too_long", "dropped_unknown")
    return ", ".join(f"{k}={v:.2f}" for k, v in metrics.items() if k not in skip)


def average_snapshots(model: Transformer, out_dir: Path, last: int) -> list[int] | None:
    """Load the mean of the last `last` snapshots in out_dir/averaging into `model`; their steps, or None."""
    paths = sorted((out_dir / "averaging").glob("step-*.pt"))[-last:]
    if len(paths) < 2:
        return None
    total = None
    for path in paths:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if total is None:
            total = {k: v.double().clone() for k, v in state.items()}
        else:
            for k, v in state.items():
                total[k] += v.double()
    model.load_state_dict({k: (v / len(paths)).to(model.state_dict()[k].dtype) for k, v in total.items()})
    return [int(p.stem.split("-")[1]) for p in paths]


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def plot_curves(run_dir: Path) -> None:
    """curves.png: training loss by step (left) and the dev metrics of each eval (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log, evals = _read_jsonl(run_dir / "train_log.jsonl"), _read_jsonl(run_dir / "metrics.jsonl")
    fig, (loss_ax, eval_ax) = plt.subplots(1, 2, figsize=(10, 4))
    if log:
        loss_ax.plot([r["step"] for r in log], [r["loss"] for r in log], label="train loss")
    for key in ("wer", "wer_no_stress", "per", "exact_match", "token_accuracy", "chrf"):
        pts = [(r["step"], r[key]) for r in evals if key in r]
        if pts:
            eval_ax.plot(*zip(*pts), marker="o", label=f"dev {key}")
    for ax, ylabel in ((loss_ax, "loss"), (eval_ax, "%")):
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(run_dir / "curves.png", dpi=100)
    plt.close(fig)


# ---- the pipeline ------------------------------------------------------------------------
def train(cfg: TrainConfig, out_dir: Path, resume: bool = False, on_step: StepHook | None = None) -> dict:
    """Train into `out_dir` (or continue the run there with `resume`); returns the last dev metrics.

    `on_step(step, loss, model)` runs on every rank after each optimizer step with that
    rank's own loss (tests record per-rank losses and weights with it).
    Raises StopRequested after saving when stopped by SIGINT/SIGTERM.
    """
    owns_group = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized()
    rank, world, device = dist_setup()
    try:
        with run_lock(out_dir, rank, world):
            return _train(cfg, out_dir, resume, on_step, rank, world, device)
    finally:
        if owns_group and dist.is_initialized():
            dist.destroy_process_group()


def _train(cfg, out_dir: Path, resume: bool, on_step, rank: int, world: int, device: torch.device) -> dict:
    """The pipeline: set up (data, tokenizers, model, optimizer, resume state), loop, finish."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    ckpt = _load_checkpoint(out_dir, resume)
    cfg = cfg.resolved_task()
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    src_tok, tgt_tok = _given_tokenizers(cfg, out_dir, ckpt)
    train_ex = training_examples(cfg, src_tok, tgt_tok)
    dev_ex = dev_examples(cfg)
    if src_tok is None or tgt_tok is None:
        src_tok, tgt_tok = _shared_tokenizers(cfg, train_ex, rank == 0, world)
    cfg, pairs, skipped, unknown = encode_pairs(cfg, train_ex, src_tok, tgt_tok)

    mcfg = cfg.model_config(src_tok.get_vocab_size(), tgt_tok.get_vocab_size())
    model = _build_model(cfg, mcfg, device, warm_start=bool(cfg.init_from) and ckpt is None)
    torch.manual_seed(cfg.seed + rank)  # but each rank its own dropout draws
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(cfg))
    run = _Run(cfg, out_dir, rank, world, device, src_tok, tgt_tok, dev_ex, mcfg, model, optimizer, scheduler)
    run.data = {"train_pairs": len(pairs), "dropped_too_long": skipped, "dropped_unknown": unknown}
    if ckpt is not None:
        _restore(run, ckpt)

    if run.is_main:
        _prepare_run_dir(run, resumed=ckpt is not None)
        print(
            f"[train] {len(pairs)} pairs ({skipped} too long, {unknown} with symbols outside the vocabulary: skipped), "
            f"{len(dev_ex)} dev examples, "
            f"{model.num_parameters() / 1e6:.2f}M parameters, world size {world}, device {device}"
            + (f", resuming after step {run.step}" if ckpt is not None else "")
            + (f", initialised from {cfg.init_from}" if cfg.init_from and ckpt is None else "")
        )
        _warn(dropped_pairs_warning(cfg, len(pairs), skipped))
        _warn_unknown_dev_tokens(cfg, src_tok, tgt_tok, dev_ex)
        if cfg.tgt_tokenizer == "bpe" and ckpt is None and not cfg.init_from:  # a vocabulary this run chose
            _warn(bpe_target_warning(tgt_tok.get_vocab_size(), len({t for e in train_ex for t in e.targets}), cfg.bpe_vocab_size))

    last_metrics = _loop(run, pairs, on_step)
    return _finish(run, last_metrics)


# ---- set-up ------------------------------------------------------------------------------
def _load_checkpoint(out_dir: Path, resume: bool) -> dict | None:
    """checkpoint.pt to continue from with `resume`, else None; refuses to overwrite a run without it."""
    if resume:
        if not (out_dir / "checkpoint.pt").is_file():
            raise ConfigError(f"--resume: no checkpoint.pt in {out_dir}")
        return torch.load(out_dir / "checkpoint.pt", map_location="cpu", weights_only=False)
    if (out_dir / "checkpoint.pt").exists():
        raise ConfigError(f"{out_dir} already holds a run: pass --resume to continue it, or choose another --out")
    return None


def _given_tokenizers(cfg: TrainConfig, out_dir: Path, ckpt: dict | None) -> tuple[Tokenizer | None, Tokenizer | None]:
    """The tokenizers a run must keep: the resumed run's, else --init-from's bundle's; (None, None) to build new ones."""
    if ckpt is not None:
        return load_run_tokenizers(out_dir)
    if cfg.init_from:
        return bundle_tokenizers(cfg.init_from)
    return None, None


def _shared_tokenizers(cfg: TrainConfig, train_ex: list[Example], is_main: bool, world: int) -> tuple[Tokenizer, Tokenizer]:
    """Rank 0 builds the tokenizers and sends them to the others, so every rank has the same ids."""
    payload: list[str | None] = [None, None]
    if is_main:
        src = build_tokenizer((e.source for e in train_ex), cfg.src_tokenizer, cfg.lowercase_source, cfg.bpe_vocab_size)
        tgt = build_tokenizer((t for e in train_ex for t in e.targets), cfg.tgt_tokenizer, False, cfg.bpe_vocab_size)
        payload = [src.to_str(), tgt.to_str()]
    if world > 1:
        dist.broadcast_object_list(payload, src=0)
    return Tokenizer.from_str(payload[0]), Tokenizer.from_str(payload[1])


def _changed_keys(saved: dict, mcfg: ModelConfig) -> list[str]:
    """The architecture keys (dropout aside) in which a saved model config differs from `mcfg`."""
    return sorted(k for k, v in saved.items() if k != "dropout" and mcfg.to_dict().get(k) != v)


def _build_model(cfg: TrainConfig, mcfg: ModelConfig, device: torch.device, warm_start: bool) -> Transformer:
    """A fresh model (same seed, same init on every rank), or with `warm_start` the --init-from bundle's weights."""
    model = Transformer(mcfg).to(device)
    if warm_start:
        bundle_cfg, bundle_state = bundle_state_dict(cfg.init_from)
        changed = _changed_keys(bundle_cfg, mcfg)
        if changed:
            raise ConfigError(f"--init-from: the bundle's model differs from the run's config in {changed}")
        model.load_state_dict(bundle_state)
    return model


@dataclass
class _Run:
    """One run's state: the parts the loop's steps share, and what checkpoint.pt saves for an exact resume."""

    cfg: TrainConfig
    out_dir: Path
    rank: int
    world: int
    device: torch.device
    src_tok: Tokenizer
    tgt_tok: Tokenizer
    dev_ex: list[Example]
    mcfg: ModelConfig
    model: Transformer
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    step: int = 0
    epoch: int = 0
    batch_pos: int = 0
    best: list[float] | None = None  # dev_score of the best eval so far
    data: dict = field(default_factory=dict)  # the training pairs kept and dropped: in every metrics.jsonl line

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def save(self, name: str, rng_per_rank: list[dict] | None = None) -> None:
        """Write out_dir/name atomically: model, optimizer, scheduler, data order, best score, RNG."""
        state = {
            "config": self.mcfg.to_dict(),
            "train_config": asdict(self.cfg),
            "state_dict": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "step": self.step,
            "epoch": self.epoch,
            "batch_pos": self.batch_pos,
            "best": self.best,
            "rng": rng_state(self.device),
            "rng_per_rank": rng_per_rank,
        }
        tmp = self.out_dir / (name + ".tmp")
        torch.save(state, tmp)
        tmp.replace(self.out_dir / name)

    def checkpoint(self) -> None:
        """Collective: every rank hands rank 0 its RNG state, rank 0 writes checkpoint.pt (and, near
        the end, a weights snapshot in averaging/)."""
        cfg = self.cfg
        states = [rng_state(self.device)]
        if self.world > 1:
            states = [None] * self.world
            dist.all_gather_object(states, rng_state(self.device))
        if self.is_main:
            self.save("checkpoint.pt", states)
            if cfg.average_last and self.step > cfg.max_steps - cfg.average_last * cfg.checkpoint_every:
                snapshot_dir = self.out_dir / "averaging"
                snapshot_dir.mkdir(exist_ok=True)
                torch.save(self.model.state_dict(), snapshot_dir / f"step-{self.step:07d}.pt")

    def evaluate(self, **extra) -> tuple[dict, bool]:
        """Dev figures of the model as it is now, one metrics.jsonl line (with `extra`, e.g. the
        averaged steps); best.pt when they beat every earlier eval. -> (figures, became best)."""
        cfg = self.cfg
        m = evaluate_model(self.model, self.src_tok, self.tgt_tok, self.dev_ex, cfg.task, cfg.eval_batch_size)
        m = {"step": self.step, **extra, **{k: v for k, v in m.items() if k != "by_length"}, **self.data}
        score = dev_score(cfg.task, m)
        with open(self.out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(m) + "\n")
        improved = self.best is None or score < self.best
        if improved:
            self.best = score
            self.save("best.pt")
        return m, improved


def _restore(run: _Run, ckpt: dict) -> None:
    """Continue from checkpoint.pt: weights, optimizer, schedule, data order, best score and this rank's RNG."""
    changed = _changed_keys(ckpt["config"], run.mcfg)
    if changed:
        raise ConfigError(f"--resume: the model in {run.out_dir} differs from the config in {changed}; they cannot change")
    run.model.load_state_dict(ckpt["state_dict"])
    run.optimizer.load_state_dict(ckpt["optimizer"])
    run.scheduler.load_state_dict(ckpt["scheduler"])
    run.step, run.epoch, run.batch_pos, run.best = ckpt["step"], ckpt["epoch"], ckpt["batch_pos"], ckpt.get("best")
    if isinstance(run.best, int | float):  # a run saved when the score was the headline metric alone
        run.best = [run.best, float("inf")]
    per_rank = ckpt.get("rng_per_rank")
    set_rng_state(per_rank[run.rank] if per_rank and len(per_rank) == run.world else ckpt["rng"], run.device)


def _prepare_run_dir(run: _Run, resumed: bool) -> None:
    """Rank 0: tokenizers and config.json into the run directory; on resume, drop log lines past the checkpoint."""
    run.out_dir.mkdir(parents=True, exist_ok=True)
    run.src_tok.save(str(run.out_dir / "src_tokenizer.json"))
    run.tgt_tok.save(str(run.out_dir / "tgt_tokenizer.json"))
    (run.out_dir / "config.json").write_text(json.dumps(asdict(run.cfg), indent=2) + "\n")
    if resumed:
        _truncate_log(run.out_dir / "train_log.jsonl", run.step)
        _truncate_log(run.out_dir / "metrics.jsonl", run.step)


def _truncate_log(path: Path, step: int) -> None:
    """Drop lines logged after `step` (a run killed between checkpoints logged steps it will redo)."""
    if path.exists():
        lines = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
        path.write_text("".join(line + "\n" for line in lines))


def _warn_unknown_dev_tokens(cfg: TrainConfig, src_tok: Tokenizer, tgt_tok: Tokenizer, dev_ex: list[Example]) -> None:
    """A tokenizer that maps much of the dev set to <unk> dooms the run (exact match 0, silently): say so at the start."""
    sides = (
        ("source", "src_tokenizer", cfg.src_tokenizer, src_tok, [e.source for e in dev_ex]),
        ("target", "tgt_tokenizer", cfg.tgt_tokenizer, tgt_tok, [t for e in dev_ex for t in e.targets]),
    )
    for side, key, kind, tok, texts in sides:
        warning = unknown_tokens_warning(side, key, kind, *unknown_fraction(tok, texts), from_bundle=bool(cfg.init_from))
        _warn(warning)


def _warn(warning: str | None) -> None:
    """A warning a user must not miss in the progress output: its own paragraph on stderr."""
    if warning:
        print(f"\n{warning}\n", file=sys.stderr, flush=True)


def nothing_learned_warning(cfg: TrainConfig, metrics: dict) -> str | None:
    """The warning for a dev evaluation after the warm-up at which no dev example is right (exact match 0, or
    G2P's WER 100), naming the likely causes; None otherwise."""
    if metrics.get("exact_match", 100.0 - metrics.get("wer", 0.0)) > 0:
        return None
    causes = []
    if cfg.tgt_tokenizer == "bpe":
        causes.append(
            f"a target vocabulary too large for the data (tgt_tokenizer=bpe, bpe_vocab_size={cfg.bpe_vocab_size}: "
            "try bpe_vocab_size=auto or tgt_tokenizer=char)"
        )
    causes += [
        f"too few steps for the data (max_steps={cfg.max_steps})",
        f"a learning rate too high or too low (lr={cfg.lr})",
        f"targets cut at max_target_len={cfg.max_target_len} or sources at max_source_len={cfg.max_source_len}",
        f"dev targets unlike the training targets (dataset={cfg.dataset}{f', dev_data={cfg.dev_data}' if cfg.dev_data else ''})",
    ]
    head = f"WARNING: dev exact match is 0 at step {metrics['step']}, after the warm-up. Likely causes: "
    return head + "; ".join(causes) + "."


# ---- the loop ---------------------------------------------------------------------------
def _loop(run: _Run, pairs: list[tuple[list[int], list[int]]], on_step: StepHook | None) -> dict:
    """Optimizer steps until max_steps or max_minutes, with periodic logs, evals and checkpoints;
    returns the last periodic eval's metrics ({} if none). On SIGINT/SIGTERM: saves checkpoint.pt
    and raises StopRequested."""
    cfg, world = run.cfg, run.world
    ddp_model = torch.nn.parallel.DistributedDataParallel(run.model) if world > 1 else run.model
    use_bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and bf16_accelerated(run.device))
    lengths = [len(t) + 1 for _, t in pairs]
    start_time = time.monotonic()
    bar = tqdm(total=cfg.max_steps, initial=run.step, desc="train", disable=not run.is_main, dynamic_ncols=True)
    rate = _TokenRate()
    last_metrics: dict = {}
    run.model.train()
    stop = run.step >= cfg.max_steps
    signalled = False
    warned_after_warmup = run.step > cfg.warmup_steps  # a resumed run past its warm-up was judged before
    with StopSignal() as stop_signal:
        while not stop:
            batches = token_batches(lengths, cfg.max_tokens, cfg.seed, run.epoch)
            usable = len(batches) - len(batches) % world  # every rank takes the same number of steps
            if usable == 0:
                raise ConfigError(f"{len(batches)} batch(es) per epoch cannot feed {world} ranks: lower max_tokens")
            while run.batch_pos < usable:
                batch = collate([pairs[i] for i in batches[run.batch_pos + run.rank]], run.device)
                run.batch_pos += world
                loss = _train_step(run, ddp_model, batch, use_bf16)
                if on_step is not None:
                    on_step(run.step, loss.item(), run.model)
                rate.tokens += int(batch["tgt_mask"].sum()) * world
                _log_step(run, loss, bar, rate)
                if run.is_main and run.step % cfg.eval_every == 0:
                    last_metrics, _ = run.evaluate()
                    bar.write(f"[eval] step {run.step}: {format_figures(last_metrics)}")
                    if run.step >= cfg.warmup_steps and not warned_after_warmup:  # the first eval after the warm-up
                        warned_after_warmup = True
                        _warn(nothing_learned_warning(cfg, last_metrics))
                if run.step % cfg.checkpoint_every == 0:
                    run.checkpoint()
                out_of_time = bool(cfg.max_minutes) and (time.monotonic() - start_time) / 60 >= cfg.max_minutes
                halt = all_ranks_halt(out_of_time or stop_signal.requested, run.world, run.device)
                if run.step >= cfg.max_steps or halt:
                    signalled = halt and not out_of_time
                    stop = True
                    break
            else:
                run.epoch += 1
                run.batch_pos = 0
        bar.close()
        if signalled:  # stop quickly: no final eval, just what --resume needs
            run.checkpoint()
            if run.is_main:
                plot_curves(run.out_dir)
            raise StopRequested(run.step)
    return last_metrics


def _train_step(run: _Run, ddp_model: torch.nn.Module, batch: dict, use_bf16: bool) -> torch.Tensor:
    """One optimizer step on `batch` (forward under autocast, clipped backward, LR schedule); -> this rank's loss."""
    with torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=use_bf16):
        logits = ddp_model(batch["src"], batch["src_mask"], batch["tgt_in"], batch["tgt_mask"])
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            batch["labels"].reshape(-1),
            ignore_index=-100,
            label_smoothing=run.cfg.label_smoothing,
        )
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.cfg.grad_clip)
    run.optimizer.step()
    run.scheduler.step()
    run.step += 1
    return loss


@dataclass
class _TokenRate:
    """Target tokens (all ranks) since the last log line, and when that line was written."""

    tokens: int = 0
    since: float = field(default_factory=time.monotonic)

    def per_second(self) -> float:
        """Tokens per second since the last call (or creation); starts the next interval."""
        now = time.monotonic()
        tps = self.tokens / max(1e-9, now - self.since)
        self.tokens, self.since = 0, now
        return tps


def _log_step(run: _Run, loss: torch.Tensor, bar: tqdm, rate: _TokenRate) -> None:
    """Collective on log steps (every log_every and the first): the loss, averaged over ranks, the LR and
    tokens/s go to the progress bar and train_log.jsonl on rank 0, which also advances the bar every step."""
    log_now = run.step % run.cfg.log_every == 0 or run.step == 1
    logged_loss = loss.detach().clone()
    if run.world > 1 and log_now:  # the log shows the mean over ranks
        dist.all_reduce(logged_loss)
        logged_loss /= run.world
    if not run.is_main:
        return
    bar.update(1)
    if log_now:
        tps = rate.per_second()
        lr = run.scheduler.get_last_lr()[0]
        bar.set_postfix(loss=f"{logged_loss.item():.3f}", lr=f"{lr:.2e}", tok_s=f"{tps:.0f}")
        with open(run.out_dir / "train_log.jsonl", "a") as f:
            record = {"step": run.step, "loss": logged_loss.item(), "lr": lr, "tokens_per_s": tps}
            f.write(json.dumps(record) + "\n")


# ---- finish -----------------------------------------------------------------------------
def _finish(run: _Run, last_metrics: dict) -> dict:
    """After the last step: a final eval (unless that step was just evaluated), checkpoint.pt, the mean
    of the last checkpoints when it decodes better, curves.png; -> the last dev metrics."""
    cfg = run.cfg
    if run.is_main and (not last_metrics or last_metrics.get("step") != run.step):
        last_metrics, _ = run.evaluate()
    run.checkpoint()
    if run.is_main and cfg.average_last:
        averaged = average_snapshots(run.model, run.out_dir, cfg.average_last)
        if averaged is not None:  # a mean of weights is only kept if it decodes better
            m, improved = run.evaluate(averaged_steps=averaged)
            print(f"[train] mean of the checkpoints at steps {averaged}: {format_figures(m)}")
            if improved:
                last_metrics = m
    if run.is_main:
        plot_curves(run.out_dir)
        print(f"[train] done at step {run.step}: {format_figures(last_metrics)}")
    if run.world > 1:
        dist.barrier()
    return last_metrics
