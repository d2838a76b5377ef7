"""What produced a figure and where: the harness (harness: script, callable, arguments,
kbench's build), the machine and environment (metadata), and the cache files kbench reads
without trusting what sits at their paths (cachefile)."""
