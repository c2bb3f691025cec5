import sys

from loadtest import main

sys.exit(main())
