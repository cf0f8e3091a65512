"""`python -m bertkit …` (used by `accelerate launch -m bertkit` / `torchrun -m bertkit`)."""

from bertkit.cli import run

if __name__ == "__main__":
    run()
