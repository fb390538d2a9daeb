"""`python -m bridge mqtt ...`: the same as `streamgate bridge mqtt ...`."""

import sys

from bridge.cli import main

sys.exit(main())
