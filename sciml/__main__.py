"""``python -m sciml``: the ``sciml`` command, for environments where the console script is not installed."""

from sciml.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
