"""Text to tensors: corpora, tokenizers, packing, collation. No nn.Modules here."""
