"""kbench.kernels: the reference kernels' sources, as package data (see README.md here).

A regular package, not a namespace one, so that importlib.resources.files("kbench.kernels")
gives a path whose joinpath takes several parts on every Python (a namespace package's
MultiplexedPath takes only one before 3.12).
"""
