"""Training machinery every task shares: the one Accelerate loop (`loop.py`) and model-dependent defaults
(`defaults.py`). What is trained comes from `bertkit.tasks`."""
