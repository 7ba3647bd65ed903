"""The `coloco` command line: one entry point for operators, contributors, holders, organisers."""
