import sys

from attnserve.service import serve_main

sys.exit(serve_main())
