import sys

from service import serve_main

sys.exit(serve_main())
