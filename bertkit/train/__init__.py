"""Training: the loop (later), checkpoints and run directories, metrics."""
