"""A Llama-architecture decoder written as an ONNX graph whose every pass takes its own
attention mask: the tokens fed, their positions, the pool cells they read (`read_slots`)
and an additive bias over [those cells, then the fed tokens]. The KV pool stays outside the
graph (one input per layer and kind, [kv heads, cells, head dim]): a pass gathers the cells
it reads and returns the keys and values of the tokens it fed, which the caller writes
into the pool. So any structure's mask runs unchanged, token for token, as on torch.

Weight formats: `fp32` (the Hugging Face weights: its logits equal the reference's to
~1e-5); `i8` (every linear layer, the output head included, int8 with one scale per output
row, run by `DynamicQuantizeMatMul`, which quantizes the activations per pass); `q8` and
`q4` (the same layers as `MatMulNBits`: blocks of 32 weights with one scale each,
symmetric, int8 activations inside the kernel (`accuracy_level` 4)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solm.core.errors import SolmError

FORMATS = ("fp32", "i8", "q8", "q4")
BLOCK = 32  # weights per quantization block
I8_TOP = 63  # the `i8` format's largest weight step (see `quantize_columns`)
OPSET = 21
# Llama's layer stack; Qwen2's is the same with biases on q, k and v
ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")


@dataclass(frozen=True)
class Shape:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    vocab: int
    eps: float
    theta: float


def model_shape(model) -> Shape:
    """The dimensions the graph needs, or a one-line error naming what is supported."""
    from solm.core.models import rope_theta

    config = model.config
    names = list(getattr(config, "architectures", None) or [type(model).__name__])
    if not any(n in ARCHITECTURES for n in names + [type(model).__name__]):
        raise SolmError(f"architecture {names[0]} has no ONNX graph in solm yet (supported: "
                        f"{', '.join(ARCHITECTURES)})")
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        raise SolmError("the ONNX graph has no sliding window; this config sets one")
    heads = config.num_attention_heads
    state = model.state_dict()
    return Shape(layers=config.num_hidden_layers, heads=heads,
                 kv_heads=config.num_key_value_heads,
                 head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads,
                 hidden=config.hidden_size, vocab=state["model.embed_tokens.weight"].shape[0],
                 eps=float(config.rms_norm_eps), theta=rope_theta(config, "an ONNX graph"))


def quantize_blocks(weight: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """`MatMulNBits`' B and scales for a [N, K] weight (K a multiple of `BLOCK`): per block
    of 32, scale = max |w| / (2^(bits-1) - 1), q = round(w / scale) + 2^(bits-1) stored
    unsigned (the op's default zero point), 4-bit values two a byte, low nibble first."""
    n, k = weight.shape
    if k % BLOCK:
        raise SolmError(f"a weight of {k} columns is not a multiple of the {BLOCK}-weight blocks")
    blocks = weight.reshape(n, k // BLOCK, BLOCK).astype(np.float32)
    top = (1 << (bits - 1)) - 1
    scale = np.abs(blocks).max(axis=-1) / top
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(blocks / scale[..., None]), -top - 1, top).astype(np.int32)
    q = (q + (1 << (bits - 1))).astype(np.uint8)
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
    return q, scale.astype(np.float32).reshape(-1)


def quantize_columns(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`DynamicQuantizeMatMul`'s B [K, N] int8 and per-column scales for a [N, K] weight:
    scale = max |w| of an output row / 63, q = round(w / scale). Seven bits, not eight: on
    x86 without VNNI the u8 x s8 kernel adds pairs of products in int16, which 8-bit
    weights overflow (a measured 23% error in a matmul at full range)."""
    scale = np.abs(weight).max(axis=1) / I8_TOP
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(weight / scale[:, None]), -I8_TOP, I8_TOP).astype(np.int8)
    return np.ascontiguousarray(q.T), scale.astype(np.float32)


class GraphWriter:
    """Nodes and initializers of one graph, with fresh names."""

    def __init__(self, fmt: str):
        import onnx

        self.onnx, self.fmt = onnx, fmt
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, value, stem: str = "c") -> str:
        from onnx import numpy_helper

        out = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), out))
        return out

    def op(self, kind: str, *inputs: str, domain: str = "", outputs: int = 1, **attrs):
        from onnx import helper

        outs = [self.name(kind.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(kind, list(inputs), outs, domain=domain or None,
                                           **attrs))
        return outs[0] if outputs == 1 else outs

    def linear(self, x: str, weight: np.ndarray, bias: np.ndarray | None = None) -> str:
        """x [T, K] @ weight[N, K]^T (+ bias)."""
        weight = np.ascontiguousarray(weight, dtype=np.float32)
        if self.fmt == "fp32":
            out = self.op("MatMul", x, self.const(weight.T.copy(), "w"))
        elif self.fmt == "i8":
            q, scales = quantize_columns(weight)
            out = self.op("DynamicQuantizeMatMul", x, self.const(q, "wq"),
                          self.const(scales, "ws"), self.const(np.zeros_like(scales, np.int8)),
                          domain="com.microsoft")
        else:
            bits = {"q8": 8, "q4": 4}[self.fmt]
            n, k = weight.shape
            q, scales = quantize_blocks(weight, bits)
            out = self.op("MatMulNBits", x, self.const(q, "wq"), self.const(scales, "ws"),
                          domain="com.microsoft", K=k, N=n, bits=bits, block_size=BLOCK,
                          accuracy_level=4)
        return out if bias is None else self.op("Add", out, self.const(bias.astype(np.float32)))

    def rms_norm(self, x: str, weight: np.ndarray, eps: float) -> str:
        square = self.op("Mul", x, x)
        mean = self.op("ReduceMean", square, self.const(np.array([-1], np.int64)), keepdims=1)
        inv = self.op("Reciprocal", self.op("Sqrt", self.op("Add", mean, self.const(
            np.array(eps, np.float32)))))
        return self.op("Mul", self.op("Mul", x, inv), self.const(weight.astype(np.float32)))


def _rotate(w: GraphWriter, x: str, cos: str, sin: str, half: int) -> str:
    """Hugging Face's rotate-half rope on [heads, T, D]."""
    first, second = w.op("Split", x, w.const(np.array([half, half], np.int64)), axis=-1,
                         outputs=2)
    rotated = w.op("Concat", w.op("Neg", second), first, axis=-1)
    return w.op("Add", w.op("Mul", x, cos), w.op("Mul", rotated, sin))


def build_graph(model, fmt: str = "fp32"):
    """The ONNX model of a loaded (fp32, LoRA merged) Llama-architecture decoder."""
    from onnx import TensorProto, helper

    if fmt not in FORMATS:
        raise SolmError(f"ONNX weight format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    s = model_shape(model)
    state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    w = GraphWriter(fmt)
    d, group, half = s.head_dim, s.heads // s.kv_heads, s.head_dim // 2
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["T"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["T"]),
              helper.make_tensor_value_info("read_slots", TensorProto.INT64, ["P"]),
              helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["T", "K"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["T", s.vocab])]

    inv_freq = (1.0 / (s.theta ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d))
                ).astype(np.float32)
    pos = w.op("Unsqueeze", w.op("Cast", "position_ids", to=TensorProto.FLOAT),
               w.const(np.array([-1], np.int64)))
    freqs = w.op("Mul", pos, w.const(inv_freq))
    emb = w.op("Concat", freqs, freqs, axis=-1)  # [T, D]
    cos, sin = w.op("Cos", emb), w.op("Sin", emb)
    # the bias once per pass, tiled over the query heads that share a KV head ([g*T, K])
    bias = w.op("Tile", "bias", w.const(np.array([group, 1], np.int64)))
    q_shape = w.const(np.array([0, s.heads, d], np.int64))
    kv_shape = w.const(np.array([0, s.kv_heads, d], np.int64))
    grouped = w.const(np.array([s.kv_heads, -1, d], np.int64))
    per_head = w.const(np.array([s.heads, -1, d], np.int64))
    flat = w.const(np.array([0, s.heads * d], np.int64))
    scale = w.const(np.array(d ** -0.5, np.float32))

    def proj(h: str, name: str) -> str:
        return w.linear(h, state[name + ".weight"], state.get(name + ".bias"))

    x = w.op("Gather", w.const(state["model.embed_tokens.weight"], "embed"), "input_ids",
             axis=0)
    for layer in range(s.layers):
        p = f"model.layers.{layer}."
        h = w.rms_norm(x, state[p + "input_layernorm.weight"], s.eps)
        q = w.op("Transpose", w.op("Reshape", proj(h, p + "self_attn.q_proj"),
                                   q_shape), perm=[1, 0, 2])
        k = w.op("Transpose", w.op("Reshape", proj(h, p + "self_attn.k_proj"),
                                   kv_shape), perm=[1, 0, 2])
        v = w.op("Transpose", w.op("Reshape", proj(h, p + "self_attn.v_proj"),
                                   kv_shape), perm=[1, 0, 2])
        q, k = _rotate(w, q, cos, sin, half), _rotate(w, k, cos, sin, half)
        for kind, new in (("k", k), ("v", v)):
            inputs.append(helper.make_tensor_value_info(
                f"pool_{kind}_{layer}", TensorProto.FLOAT, [s.kv_heads, "C", d]))
            w.nodes.append(helper.make_node("Identity", [new], [f"new_{kind}_{layer}"]))
            outputs.append(helper.make_tensor_value_info(
                f"new_{kind}_{layer}", TensorProto.FLOAT, [s.kv_heads, "T", d]))
        keys = w.op("Concat", w.op("Gather", f"pool_k_{layer}", "read_slots", axis=1), k, axis=1)
        values = w.op("Concat", w.op("Gather", f"pool_v_{layer}", "read_slots", axis=1), v,
                      axis=1)
        scores = w.op("Mul", w.op("MatMul", w.op("Reshape", q, grouped),
                                  w.op("Transpose", keys, perm=[0, 2, 1])), scale)
        probs = w.op("Softmax", w.op("Add", scores, bias), axis=-1)
        attn = w.op("Reshape", w.op("MatMul", probs, values), per_head)  # [H, T, D]
        attn = w.op("Reshape", w.op("Transpose", attn, perm=[1, 0, 2]), flat)
        x = w.op("Add", x, proj(attn, p + "self_attn.o_proj"))
        h = w.rms_norm(x, state[p + "post_attention_layernorm.weight"], s.eps)
        gate = proj(h, p + "mlp.gate_proj")
        up = proj(h, p + "mlp.up_proj")
        act = w.op("Mul", w.op("Mul", gate, w.op("Sigmoid", gate)), up)
        x = w.op("Add", x, proj(act, p + "mlp.down_proj"))
    x = w.rms_norm(x, state["model.norm.weight"], s.eps)
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    w.nodes.append(helper.make_node("Identity", [w.linear(x, head)], ["logits"]))
    graph = helper.make_graph(w.nodes, "solm_decoder", inputs, outputs, w.inits)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="solm"), s
