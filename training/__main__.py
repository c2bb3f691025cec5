import sys

from training.cli import train_main

sys.exit(train_main())
