"""`coloco demo`: the whole network on one machine, driving the public `coloco` commands.

Only `coloco_cli.demo.cli` is imported by the console script; the rest loads when the demo runs.
"""
