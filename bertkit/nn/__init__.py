"""Pure PyTorch modules: no files, no tokenizers, no Accelerate."""

from bertkit.nn.attention import Attention, KVCache, build_mask, set_attention_impl
from bertkit.nn.block import Block, FeedForward, make_norm
from bertkit.nn.model import Model
from bertkit.nn.transformer import Decoder, Embeddings, Encoder, EncoderDecoder, StackOutput, build_backbone

__all__ = ["Attention", "Block", "Decoder", "Embeddings", "Encoder", "EncoderDecoder", "FeedForward", "KVCache",
           "Model", "StackOutput", "build_backbone", "build_mask", "make_norm", "set_attention_impl"]
