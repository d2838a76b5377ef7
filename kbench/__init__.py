"""kbench: trustworthy kernel microbenchmarks."""
from . import _core
