"""`python -m coloco_cli` is the same as the `coloco` console script."""

from coloco_cli.main import main

main()
