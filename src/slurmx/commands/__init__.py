"""One module per subcommand; each has `register(subparsers)` and a `run(args) -> int`."""
