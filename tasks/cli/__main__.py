"""`python -m capjudge.tasks.cli ...`: the same as the `capjudge` script."""

import sys

from capjudge.tasks.cli.main import main

sys.exit(main())
