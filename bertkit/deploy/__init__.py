"""Deployment: a run exported as one ONNX graph (optionally int8) that every inference command runs through
onnxruntime.

    manifest.py  the export folder's manifest.json: what the graph is (kind, pooling, labels, precision), read and
                 checked against the graph without torch
    runtime.py   OnnxModel: an export folder's graph in an onnxruntime session, fed length-sorted padded batches
    export.py    export_onnx: run → graph (+ pooling and normalisation for an encoder), onnxruntime's transformer
                 optimisation and dynamic int8 quantization, a parity check that leaves nothing behind on failure
"""
