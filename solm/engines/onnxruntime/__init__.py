"""ONNX Runtime as an engine: the model exported once to an ONNX graph (solm's cache), one
session run a pass, the structure's mask as an additive bias."""
