"""Attention as one onnxruntime operator in an exported graph: `com.microsoft.MultiHeadAttention`.

torch's exporter writes `F.scaled_dot_product_attention` out as its parts (MatMul, scale, mask, Softmax, MatMul),
which onnxruntime's transformer optimiser does not recognise as attention in our graphs (it fuses Hugging Face's
pattern, not this one). Its own fused CPU kernel computes the same function, faster the longer the sequences (the
figures below; `benchmarks/onnx_throughput.py` measures the whole export against sentence-transformers' ONNX).

`translation_table(config)` gives the exporter a translation of SDPA into that operator, for the one form an
encoder export calls it with: queries, keys and values (B, H, T, dh) with as many key/value heads as query heads,
a boolean padding mask (B, 1, 1, T), no causal mask, no dropout, the default scale. Any other call keeps torch's
own translation (the exporter raises `Unsupported`, and `export` then exports without the table). Masked keys get
float32's lowest value before the softmax, not the operator's default of -10000, so that no padding key can
outscore a real one (SDPA's boolean mask is -inf); no row is all masked (`build_mask` opens such rows).

Measured on all-MiniLM-L6-v2 (batch 32, the same padded batches through both graphs, AMD EPYC,
`benchmarks/onnx_attention.py`): 1.07x / 1.12x / 1.22x at 128 / 256 / 512 tokens on one thread, 1.12x / 1.23x /
1.41x on two, outputs equal to cosine 0.9999999. The
graph then needs onnxruntime (its contrib operators), as the optimiser's fused LayerNorm / GELU already did.
"""

from __future__ import annotations

from pathlib import Path

from bertkit.config import Config

DOMAIN = "com.microsoft"
OPERATOR = "MultiHeadAttention"


class Unsupported(Exception):
    """An SDPA call the operator does not cover (the export falls back to torch's translation)."""


def _operator():
    """onnxruntime's MultiHeadAttention as an onnxscript op. Its schema lives in onnxruntime, not in `onnx`, so the
    part this export uses is declared here: query, key, value (B, T, H*dh), no bias, a (B, T) int32 key padding
    mask (1 = a real token); output (B, T, H*dh); attributes num_heads and mask_filter_value (what a masked key's
    score becomes)."""
    from onnx.defs import OpSchema
    from onnxscript.values import Op, Opset

    param, optional = OpSchema.FormalParameter, OpSchema.FormalParameterOption.Optional
    schema = OpSchema(
        OPERATOR, DOMAIN, 1,
        inputs=[param("query", "T"), param("key", "T"), param("value", "T"), param("bias", "T", param_option=optional),
                param("key_padding_mask", "M", param_option=optional)],
        outputs=[param("output", "T")],
        type_constraints=[("T", ["tensor(float)"], "float32 activations"), ("M", ["tensor(int32)"], "1 = real key")],
        attributes=[OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "query (= key/value) heads"),
                    OpSchema.Attribute("mask_filter_value", OpSchema.AttrType.FLOAT, "a masked key's score")])
    return Op(Opset(DOMAIN, 1), OPERATOR, schema)


def translation_table(config: Config) -> dict:
    """{aten SDPA: its translation into MultiHeadAttention} for an encoder whose attention the operator covers
    (multi-head, not grouped: the operator takes as many key/value heads as query heads); else {}."""
    model = config.model
    if model.n_kv_heads != model.n_heads or model.positions == "relative":  # relative positions never call SDPA
        return {}
    import numpy as np
    import onnx
    import torch
    from onnxscript import ir
    from onnxscript import opset18 as op

    attention, heads = _operator(), model.n_heads
    lowest = float(np.finfo(np.float32).min)  # a masked key's score: SDPA's boolean mask gives -inf

    def to_rows(x):  # (B, H, T, dh) -> (B, T, H*dh)
        return op.Reshape(op.Transpose(x, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, -1]))

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        """Traced by the exporter: the shapes are known here, so any form but the encoder's is refused."""
        mask = None if attn_mask is None else attn_mask.shape
        if (mask is None or attn_mask.dtype != ir.DataType.BOOL or len(mask) != 4 or mask[1] != 1 or mask[2] != 1
                or mask[0] != query.shape[0] or mask[3] != key.shape[2] or is_causal or dropout_p
                or scale is not None or enable_gqa or query.shape[1] != heads or key.shape[1] != heads):
            raise Unsupported(f"SDPA with mask {mask} ({None if attn_mask is None else attn_mask.dtype}), causal "
                              f"{is_causal}, dropout {dropout_p}, scale {scale}, query {query.shape}, key {key.shape}")
        padding = op.Cast(op.Squeeze(attn_mask, op.Constant(value_ints=[1, 2])), to=onnx.TensorProto.INT32)  # (B, T)
        out = attention(to_rows(query), to_rows(key), to_rows(value), None, padding, num_heads=heads,
                        mask_filter_value=lowest)  # (B, T, D)
        split = op.Reshape(out, op.Constant(value_ints=[0, 0, heads, -1]))  # (B, T, H, dh)
        return op.Transpose(split, perm=[0, 2, 1, 3])  # (B, H, T, dh), as SDPA returns

    return {torch.ops.aten.scaled_dot_product_attention.default: sdpa}


def refused(error: BaseException) -> bool:
    """Whether an exporter error was the translation refusing a call (`Unsupported`, somewhere in its causes)."""
    while error is not None:
        if isinstance(error, Unsupported):
            return True
        error = error.__cause__ or error.__context__
    return False


def attention_in(graph: Path) -> str:
    """How an exported graph computes attention: "MultiHeadAttention" where it holds the operator, else
    "decomposed" (read from the graph itself, not from the config that chose the translation)."""
    import onnx

    nodes = onnx.load(str(graph), load_external_data=False).graph.node
    return OPERATOR if any(n.op_type == OPERATOR and n.domain == DOMAIN for n in nodes) else "decomposed"
