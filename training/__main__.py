import sys

from training import train_main

sys.exit(train_main())
