"""Training stage: a hand-written encoder-decoder Transformer in PyTorch (writes a run directory).

Owns the model, data and tokenizers, the training loop (train.py; its processes in distributed.py), evaluation,
warm starts, and the heteronym chooser's training (context.py).

May import `service.engine` (dev sets decode as the server decodes), `service.text.context` (the chooser's
features) and `service.extras`; never `export` (the stages run training -> export -> service: pyproject.toml's
import-linter contracts).
"""

from service.extras import command

# the entry points: one line naming the extra when it is missing
train_main = command("attnserve-train", "training.cli:train_main", "train")
eval_main = command("attnserve-eval", "training.cli:eval_main", "train", "cpu")
