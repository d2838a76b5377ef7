"""python -m kbench: the same as the `kbench` console script."""
import sys

from .cli import main

sys.exit(main())
