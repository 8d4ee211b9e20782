"""``python -m taskq``: the same as the ``taskq`` command."""

from taskq.cli import main

main()
