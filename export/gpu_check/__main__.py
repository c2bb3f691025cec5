"""`python -m attnserve.export.gpu_check`: attnserve-gpu-check without its console script (deploy/gpu/device_check.sh)."""

import os
import sys

from attnserve.export.gpu_check.cli import main

code = main()
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)  # a step left running past its bound must not hold the process
