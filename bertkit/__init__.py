"""bertkit: a BERT-style pretrain-and-finetune toolkit with a from-scratch transformer."""

__version__ = "0.1.0"
