"""Which parts of a full finetune's delta matter: embeddings (original rows vs control rows),
norms, and the linear layers' rank. Teacher-forced argmax agreement and KL against the full
model on selection outputs."""
import json, sys, torch
from solm.core.models import load_model
torch.set_num_threads(1)
full_name, base_name, outputs = sys.argv[1], sys.argv[2], sys.argv[3]
full, tok = load_model(full_name, dtype="float32", device="cpu")
base, _ = load_model(base_name, dtype="float32", device="cpu", system="pasta")
rows = [json.loads(l) for l in open(outputs)][:12]
texts = [tok.apply_chat_template([{"role": "user", "content": r["instruction"]}], tokenize=False,
                                  add_generation_prompt=True) + r["annotated"] for r in rows]
batches = [tok(t, return_tensors="pt").input_ids[:, :400] for t in texts]
with torch.no_grad():
    ref = [full(b).logits.log_softmax(-1) for b in batches]
fs, bs = full.state_dict(), base.state_dict()
n_orig = 49152
def variant(rank, embed, norms):
    sd = {}
    for k, w in fs.items():
        b = bs[k]
        if "embed" in k or "lm_head" in k:
            if embed.startswith("lr"):
                r = int(embed[2:])
                u, sv, vh = torch.linalg.svd(w[:n_orig] - b[:n_orig], full_matrices=False)
                e = b.clone()
                e[:n_orig] += (u[:, :r] * sv[:r]) @ vh[:r]
            else:
                e = b.clone() if embed == "base+ctl" else w.clone()
            e[n_orig:] = w[n_orig:]
            sd[k] = e
        elif w.ndim == 2:
            d = w - b
            if rank is None:
                sd[k] = w.clone()
            else:
                u, s, vh = torch.linalg.svd(d, full_matrices=False)
                sd[k] = b + (u[:, :rank] * s[:rank]) @ vh[:rank]
        else:
            sd[k] = w.clone() if norms == "full" else b.clone()
    return sd
def measure(name, sd):
    model, _ = load_model(full_name, dtype="float32", device="cpu")
    model.load_state_dict(sd, strict=False)
    agree = kl = n = 0
    with torch.no_grad():
        for b, r in zip(batches, ref):
            lp = model(b).logits.log_softmax(-1)
            agree += (lp.argmax(-1) == r.argmax(-1)).sum().item()
            kl += (r.exp() * (r - lp)).sum(-1).sum().item()
            n += b.shape[1]
    print(f"{name}: argmax agreement {agree/n:.4f}  mean KL {kl/n:.4f}", flush=True)
for spec in sys.argv[4:]:
    rank, embed, norms = spec.split(":")
    measure(spec, variant(None if rank == "full" else int(rank), embed, norms))
