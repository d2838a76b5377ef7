"""kbench's version, in a module of its own: provenance and the CLI read it without importing
the package's face (kbench/__init__.py imports kbench.bench, which imports them)."""
__version__ = "0.1.0"
