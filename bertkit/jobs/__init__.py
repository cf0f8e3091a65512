"""One module per CLI job; each exposes `run(...)`."""
