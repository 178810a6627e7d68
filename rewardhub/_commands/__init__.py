"""Subcommands of the ``rewardhub`` CLI, one module each (``NAME``, ``HELP``, ``add_arguments``, ``run``)."""
