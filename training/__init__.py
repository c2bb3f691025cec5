"""Training stage: a hand-written encoder-decoder Transformer in PyTorch (writes a run directory)."""

from service.extras import command

# the entry points: one line naming the extra when it is missing
train_main = command("attnserve-train", "training.cli:train_main", "train")
eval_main = command("attnserve-eval", "training.cli:eval_main", "train", "cpu")
