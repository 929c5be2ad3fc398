"""``python -m roughnet.cli``: the roughnet command."""

from . import main

main()
