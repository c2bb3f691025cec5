import sys

from attnserve.loadtest import main

sys.exit(main())
