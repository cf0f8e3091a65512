"""One module per CLI job (the Python API under the CLI). Each command is a function taking a frozen dataclass of
what it is asked (`PretrainJob`, `FinetuneJob`, …: the command's options, same names) and returning a dataclass of
what it did (`PretrainResult`, `FinetuneResult`, …): `run(job)` for a module with one command, one named function per
command otherwise (`search.build`, `search.search`, `generate.perplexity`, `translate.evaluate`, …). A console, where
the job prints, is the second argument: presentation, not part of the job."""
