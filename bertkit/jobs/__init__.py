"""One module per CLI job (the Python API under the CLI). Each command is one function taking a frozen dataclass
of what it is asked (`PretrainJob`, `FinetuneJob`, …: the command's options, same names) and returning a dataclass
of what it did (`PretrainResult`, `FinetuneResult`, …). The function is `run` for a module's own command, and the
command's name for the others a module serves (`search.build` / `add` / `search` / `info` / `similarity`,
`generate.perplexity`, `translate.translate` / `evaluate`). A console, where the job prints, is the second argument:
presentation, not part of the job. Rows that mirror a CSV (ablate, probe), open-ended metric reports (evaluate) and
predictions (JSON records whose keys differ by task) stay dicts inside their result."""
