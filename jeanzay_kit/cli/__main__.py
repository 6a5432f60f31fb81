"""`python -m jeanzay_kit.cli` is `jzk`."""

import sys

from jeanzay_kit.cli import main

sys.exit(main())
