"""Training stage: a hand-written encoder-decoder Transformer in PyTorch (writes a run directory).

Owns the model, data and tokenizers, the training loop (train.py; its processes in distributed.py), evaluation,
warm starts, and the heteronym chooser's training (context.py).

May import `attnserve.service.engine` (dev sets decode as the server decodes), `attnserve.service.text.context` (the chooser's
features) and `attnserve.service.extras`; never `export` (the stages run training -> export -> service: pyproject.toml's
import-linter contracts).
"""

from attnserve.service.extras import command

# the entry points: one line naming the extra when it is missing
train_main = command("attnserve-train", "attnserve.training.cli:train_main", "train")
eval_main = command("attnserve-eval", "attnserve.training.cli:eval_main", "train", "cpu")
