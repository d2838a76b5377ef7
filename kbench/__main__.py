"""python -m kbench: the same as the `kbench` console script."""
import sys

from .workflow.cli import main

sys.exit(main())
