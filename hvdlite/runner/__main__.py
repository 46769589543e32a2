"""`python -m hvdlite.runner ...` is the same as `hvdliterun ...`."""
import sys

from hvdlite.runner.launch import main

sys.exit(main())
