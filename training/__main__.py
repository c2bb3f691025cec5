import sys

from attnserve.training import train_main

sys.exit(train_main())
