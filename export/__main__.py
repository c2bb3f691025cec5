import sys

from attnserve.export import main

sys.exit(main())
