"""`python -m fi_patcher`."""

from fi_patcher.cli import main

main()
