"""A written estimate of one training process's GPU memory: does a stage's setting
fit the GPUs a paper config names?

Under FSDP (full sharding, bf16 mixed precision, AdamW) each of N processes holds 1/N of the
fp32 master weights (4 bytes a parameter), of the fp32 gradients (4) and of Adam's two
moments (8), plus the bf16 copy of the one decoder layer being computed (2 bytes a layer
parameter, twice: the layer gathered and the next prefetched). Activations with gradient
checkpointing: the hidden state kept at each layer boundary (2 bytes x tokens x hidden x
layers) plus one layer recomputed in full during its backward (~34 bytes x tokens x hidden,
the attention itself block-sparse under FlexAttention so no tokens x tokens term), plus the
logits of the micro-batch in bf16 and their float32 log-softmax for the loss (6 bytes x tokens
x vocabulary). A GRPO process also keeps the KV pool its rollouts decode into (2 bytes x 2 x
layers x KV heads x head size per token, for its rollout batch at full length). The estimate
leaves out the allocator's fragmentation and the CUDA context, so a stage fits when it
stays under 85% of the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024 ** 3
HEADROOM = 0.85  # of the GPU's memory: fragmentation, CUDA context, NCCL buffers


@dataclass(frozen=True)
class ModelShape:
    name: str
    params: float  # parameters
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    vocab: int


@dataclass(frozen=True)
class Stage:
    name: str
    model: ModelShape
    tokens: int  # max length of a training row (prompt + answer)
    micro_batch: int = 1
    gpus: int = 8
    gpu_gib: float = 80.0
    rollout_batch: int = 0  # GRPO: rollouts a process decodes at once
    rollout_tokens: int = 0  # GRPO: prompt + completion of a rollout


def estimate_bytes(stage: Stage) -> dict[str, float]:
    """Bytes per process, by part."""
    m, n = stage.model, stage.gpus
    tokens = stage.micro_batch * stage.tokens
    layer_params = (m.params - m.vocab * m.hidden) / m.layers
    parts = {
        "weights (fp32 shard + bf16 layers)": (4 * m.params / n + 2 * 2 * layer_params),
        "gradients (fp32 shard)": 4 * m.params / n,
        "AdamW moments (fp32 shard)": 8 * m.params / n,
        "activations (checkpointed)": 2 * tokens * m.hidden * m.layers
        + 34 * tokens * m.hidden,
        "logits + log-softmax": 6 * tokens * m.vocab,
        "rollout KV pool": 2 * 2 * m.layers * m.kv_heads * m.head_dim
        * stage.rollout_batch * stage.rollout_tokens,
    }
    return parts


def estimate(stage: Stage) -> dict[str, float]:
    """GiB per process by part, the total, the budget and whether the stage fits its GPU."""
    parts = estimate_bytes(stage)
    out = {k: round(v / GIB, 2) for k, v in parts.items()}
    total = sum(parts.values()) / GIB
    out["total"] = round(total, 2)
    out["budget"] = round(HEADROOM * stage.gpu_gib, 2)
    out["fits"] = total <= HEADROOM * stage.gpu_gib
    return out


# the paper configs' base models (their config.json figures)
GEMMA_7B = ModelShape("google/gemma-7b", 8.54e9, 28, 3072, 16, 256, 256_000)
QWEN_7B = ModelShape("Qwen2.5-7B (R1-Distill-Qwen-7B, Dream-7B)", 7.62e9, 28, 3584, 4, 128,
                     152_064)

PAPER_STAGES = (
    Stage("pasta sft (configs/paper/pasta/sft.yaml)", GEMMA_7B, 4096),
    # a pair is two rows: the chosen and the rejected answer
    Stage("pasta bonbon (configs/paper/pasta/bonbon.yaml)", GEMMA_7B, 4096, micro_batch=2),
    Stage("tip sft (configs/paper/tip/sft.yaml)", QWEN_7B, 16384),
    # max_completion_length 8192 after a prompt of up to 1024 tokens; rollout_batch 32
    Stage("tip grpo (configs/paper/tip/grpo.yaml)", QWEN_7B, 8192 + 1024, rollout_batch=32,
          rollout_tokens=8192 + 1024),
    Stage("pdiff sft (configs/paper/pdiff/sft.yaml)", QWEN_7B, 4096 + 10 * 8),
)


def table() -> str:
    """The README's table: each paper stage's estimate against its GPUs."""
    rows = ["| stage | GPUs | per-process GiB: weights / grads / Adam / activations / logits "
            "/ KV pool | total | fits 85% of |", "|---|---|---|---|---|"]
    for s in PAPER_STAGES:
        e = estimate(s)
        parts = " / ".join(str(v) for k, v in e.items() if k not in ("total", "budget", "fits"))
        rows.append(f"| {s.name}, {s.tokens} tokens | {s.gpus} x {s.gpu_gib:g} GiB | {parts} "
                    f"| {e['total']} | {'yes' if e['fits'] else 'no'} ({e['budget']} GiB) |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
