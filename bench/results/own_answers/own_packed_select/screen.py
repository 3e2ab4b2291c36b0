"""Screen low-rank deltas of a full model against the base: teacher-forced argmax agreement
and KL on the selection outputs (annotated text after the chat prompt)."""
import json, sys, torch
from solm.core.models import load_model
torch.set_num_threads(1)
full_name, base_name, outputs = sys.argv[1], sys.argv[2], sys.argv[3]
ranks = [int(x) for x in sys.argv[4].split(",")]
full, tok = load_model(full_name, dtype="float32", device="cpu")
base, _ = load_model(base_name, dtype="float32", device="cpu", system="pasta")
rows = [json.loads(l) for l in open(outputs)][:12]
texts = [tok.apply_chat_template([{"role": "user", "content": r["instruction"]}], tokenize=False,
                                  add_generation_prompt=True) + r["annotated"] for r in rows]
batches = [tok(t, return_tensors="pt").input_ids[:, :400] for t in texts]
with torch.no_grad():
    ref = [full(b).logits.log_softmax(-1) for b in batches]
fs, bs = full.state_dict(), base.state_dict()
for rank in ranks:
    trunc = {}
    for k, w in fs.items():
        b = bs.get(k)
        if w.ndim == 2 and "embed" not in k and "lm_head" not in k and b is not None:
            d = w - b
            u, s, vh = torch.linalg.svd(d, full_matrices=False)
            trunc[k] = b + (u[:, :rank] * s[:rank]) @ vh[:rank] if rank > 0 else b.clone()
    model, _ = load_model(full_name, dtype="float32", device="cpu")
    model.load_state_dict(trunc, strict=False)
    agree = kl = n = 0
    with torch.no_grad():
        for b, r in zip(batches, ref):
            lp = model(b).logits.log_softmax(-1)
            agree += (lp.argmax(-1) == r.argmax(-1)).sum().item()
            kl += (r.exp() * (r - lp)).sum(-1).sum().item()
            n += b.shape[1]
    print(f"rank {rank}: argmax agreement {agree/n:.4f}  mean KL {kl/n:.4f}", flush=True)
