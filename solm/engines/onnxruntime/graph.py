"""A Llama-architecture decoder written as an ONNX graph whose every pass takes its own
attention mask: the tokens fed, their positions, the pool cells they read (`read_slots`)
and an additive bias over [those cells, then the fed tokens]. The KV pool stays outside the
graph (one input per layer and kind, [1, cells, kv heads x head dim]): a pass gathers the cells
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
OPSET = 23  # ONNX's Attention op
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

    def op(self, kind: str, *inputs: str, domain: str = "", outputs: int = 1,
           name: str | None = None, **attrs):
        """A node's output name(s); `name` names a single output (a graph output)."""
        from onnx import helper

        outs = [name] if name else [self.name(kind.lower()) for _ in range(outputs)]
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

    def rms_norm(self, x: str, weight: np.ndarray, eps: float,
                 skip: str | None = None) -> tuple[str, str]:
        """(RMS-normed x, x) or, with `skip`, (RMS-normed x + skip, x + skip): one fused node
        either way (the residual add folded into the norm that follows it)."""
        scale = self.const(weight.astype(np.float32))
        if skip is None:
            return self.op("SimplifiedLayerNormalization", x, scale, axis=-1,
                           epsilon=eps), x
        normed, _, _, total = self.op("SkipSimplifiedLayerNormalization", x, skip, scale,
                                      domain="com.microsoft", outputs=4, epsilon=eps)
        return normed, total

    def rope(self, x: str, rows: str, cos: str, sin: str, heads: int,
             name: str | None = None) -> str:
        """Hugging Face's rotate-half rope on [1, T, heads x D]; `cos` / `sin` [T, D/2] hold
        each fed token's own angles and `rows` [1, T] = 0..T-1 picks a token's row."""
        return self.op("RotaryEmbedding", x, rows, cos, sin, domain="com.microsoft",
                       interleaved=0, num_heads=heads, name=name)


def build_graph(model, fmt: str = "fp32"):
    """The ONNX model of a loaded (fp32, LoRA merged) Llama-architecture decoder. A layer
    is few nodes, since a pass pays a few microseconds a node on top of its kernels: q, k
    and v in one matmul, gate and up in one, each residual add fused into the RMS norm
    after it, rope one op per tensor, attention one op (ONNX's, grouped heads, the pass's
    bias as its mask) over tensors kept [1, tokens, heads x D], the pool's layout too."""
    from onnx import TensorProto, helper

    if fmt not in FORMATS:
        raise SolmError(f"ONNX weight format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    s = model_shape(model)
    state = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    w = GraphWriter(fmt)
    d = s.head_dim
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["T"]),
              helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["T"]),
              helper.make_tensor_value_info("read_slots", TensorProto.INT64, ["P"]),
              helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["T", "K"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["T", s.vocab])]

    inv_freq = (1.0 / (s.theta ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d))
                ).astype(np.float32)
    pos = w.op("Unsqueeze", w.op("Cast", "position_ids", to=TensorProto.FLOAT),
               w.const(np.array([-1], np.int64)))
    freqs = w.op("Mul", pos, w.const(inv_freq))  # [T, D/2], the angles as HF computes them
    cos, sin = w.op("Cos", freqs), w.op("Sin", freqs)
    count = w.op("Gather", w.op("Shape", "position_ids"), w.const(np.array(0, np.int64)))
    rows = w.op("Unsqueeze", w.op("Range", w.const(np.array(0, np.int64)), count,
                                  w.const(np.array(1, np.int64))),
                w.const(np.array([0], np.int64)))
    qkv_widths = w.const(np.array([s.heads * d, s.kv_heads * d, s.kv_heads * d], np.int64))
    batch_of_one = w.const(np.array([0], np.int64))

    def proj(h: str, *names: str) -> str:
        """h @ the named layers' weights stacked by rows (their biases stacked alike)."""
        weight = np.concatenate([state[n + ".weight"] for n in names])
        biases = [state.get(n + ".bias") for n in names]
        return w.linear(h, weight, None if biases[0] is None else np.concatenate(biases))

    x = w.op("Unsqueeze", w.op("Gather", w.const(state["model.embed_tokens.weight"], "embed"),
                               "input_ids", axis=0), batch_of_one)  # [1, T, hidden]
    pending = None  # the last layer's MLP output, added to x inside the next norm
    for layer in range(s.layers):
        p = f"model.layers.{layer}."
        h, x = w.rms_norm(x, state[p + "input_layernorm.weight"], s.eps, pending)
        q, k, v = w.op("Split", proj(h, *(p + f"self_attn.{n}_proj" for n in "qkv")),
                       qkv_widths, axis=-1, outputs=3)
        q = w.rope(q, rows, cos, sin, s.heads)
        k = w.rope(k, rows, cos, sin, s.kv_heads, name=f"new_k_{layer}")
        v = w.op("Identity", v, name=f"new_v_{layer}")
        for kind in ("k", "v"):
            inputs.append(helper.make_tensor_value_info(
                f"pool_{kind}_{layer}", TensorProto.FLOAT, [1, "C", s.kv_heads * d]))
            outputs.append(helper.make_tensor_value_info(
                f"new_{kind}_{layer}", TensorProto.FLOAT, [1, "T", s.kv_heads * d]))
        keys = w.op("Concat", w.op("Gather", f"pool_k_{layer}", "read_slots", axis=1), k, axis=1)
        values = w.op("Concat", w.op("Gather", f"pool_v_{layer}", "read_slots", axis=1), v,
                      axis=1)
        # ONNX's Attention (opset 23): grouped query heads, the additive bias broadcast
        attn = w.op("Attention", q, keys, values, "bias", q_num_heads=s.heads,
                    kv_num_heads=s.kv_heads)
        h, x = w.rms_norm(x, state[p + "post_attention_layernorm.weight"], s.eps,
                          proj(attn, p + "self_attn.o_proj"))
        gate, up = w.op("Split", proj(h, p + "mlp.gate_proj", p + "mlp.up_proj"), axis=-1,
                        num_outputs=2, outputs=2)
        act = w.op("Mul", w.op("Mul", gate, w.op("Sigmoid", gate)), up)
        pending = proj(act, p + "mlp.down_proj")
    x, _ = w.rms_norm(x, state["model.norm.weight"], s.eps, pending)
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    w.op("Squeeze", w.linear(x, head), batch_of_one, name="logits")
    graph = helper.make_graph(w.nodes, "solm_decoder", inputs, outputs, w.inits)
    opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="solm"), s
