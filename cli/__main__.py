"""`python3 -m cli` runs the `flotilla` command."""

import sys

from cli.main import main

sys.exit(main())
