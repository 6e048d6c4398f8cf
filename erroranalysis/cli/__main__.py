"""`python -m erroranalysis.cli`: the same as the `erroranalysis` command."""

from erroranalysis.cli.app import main

main()
