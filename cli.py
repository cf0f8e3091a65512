"""Launcher for a checkout: `python cli.py ARGS` behaves exactly like the `bertkit` console script."""

from bertkit.cli import run

if __name__ == "__main__":
    run()
