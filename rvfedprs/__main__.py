import sys

from rvfedprs.cli import main

sys.exit(main())
