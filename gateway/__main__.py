"""`python -m gateway ...`: an alias of the `streamgate` command (tests and scripts use it)."""

import sys

from cli.main import main

sys.exit(main())
