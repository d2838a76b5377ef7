"""Correctness before timing: kbench.compare and assert_close (compare)."""
