"""``python -m coordinator`` is the ``pathkeeper`` command."""

from .cli import main

main()
