"""Task kinds, one module each: pretraining objectives (mlm, clm, rtd) and finetuning tasks (classify, ner,
sentence, seq2seq). Each owns its objective (batches, loss, FLOPs, evaluation for the loop) and what the jobs need
to know about it (`base.py`'s contracts); `registry.py` lists them."""
