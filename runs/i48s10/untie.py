"""baseline-sft-cpu exported to q4_0 with the output layer as a tensor of its own (the
embedded model ties it to token_embd, which llama.cpp keeps out of the repacked buffer):
does a repacked output layer make a pass cheaper?"""
from pathlib import Path

from solm.core.models import load_decoder
from solm.llamacpp.engine import gguf_for
from solm.llamacpp.export import model_meta, write_gguf

model, tokenizer = load_decoder("baseline-sft-cpu", dtype="fp32", device="cpu", system="pasta",
                                num_registers=16)
model.config.tie_word_embeddings = False
out = Path(gguf_for("baseline-sft-cpu", "q4_0")).parent / "i48s10-baseline-sft-cpu-q4_0_untied.gguf"
meta = model_meta("baseline-sft-cpu")
meta["control_tokens"] = None
print(write_gguf(model, tokenizer, out, "q4_0", meta=meta, source="baseline-sft-cpu"))
