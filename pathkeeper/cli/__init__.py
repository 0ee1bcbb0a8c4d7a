"""The ``pathkeeper`` command: one click group (``main``) and one module per group of
subcommands."""
