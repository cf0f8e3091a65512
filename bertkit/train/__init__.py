"""Training machinery every task shares: the one Accelerate loop (`loop.py`), model-dependent defaults
(`defaults.py`) and the typed result of a run trained for a validation metric (`results.py`). What is trained comes
from `bertkit.tasks`."""
