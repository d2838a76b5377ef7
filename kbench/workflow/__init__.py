"""What users drive: kbench.ab and kbench.sweep, the pytest plugin and its gate baselines
(pytest_plugin, baseline), and the command line (cli, cli_compare)."""
