"""taskq's benchmark suite: ``python bench/run.py`` (see bench/README.md)."""
