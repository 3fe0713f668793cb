"""`python -m webui.cli`: the same command as `steamharness`."""

from webui.cli import main

main()
