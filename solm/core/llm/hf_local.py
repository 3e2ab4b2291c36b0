"""A local Hugging Face model as a chat client; concurrent requests are batched."""

from __future__ import annotations

import asyncio

import torch

from solm.core.llm.base import ChatClient, Completion


class HFClient(ChatClient):
    def __init__(self, model: str, batch_size: int = 8, dtype: str = "auto",
                 device: str | None = None):
        from solm.core.models import load_model

        self.model, self.spec = model, f"hf:{model}"
        self.lm, self.tok = load_model(model, dtype=dtype, device=device)
        self.tok.padding_side = "left"
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        self.batch_size = batch_size
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None

    async def complete(self, system: str, user: str, *, max_tokens: int = 4096,
                       temperature: float = 0.0, logprobs: int = 0) -> Completion:
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._serve())
        fut = asyncio.get_running_loop().create_future()
        await self._queue.put((system, user, max_tokens, temperature, logprobs, fut))
        return await fut

    async def _serve(self) -> None:
        while True:
            batch = [await self._queue.get()]
            await asyncio.sleep(0)  # let concurrent callers enqueue
            while len(batch) < self.batch_size and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                results = await asyncio.to_thread(self._generate, batch)
                for item, res in zip(batch, results):
                    item[-1].set_result(res)
            except Exception as e:  # surface the failure to every waiting caller
                for item in batch:
                    if not item[-1].done():
                        item[-1].set_exception(e)

    def _generate(self, batch) -> list[Completion]:
        texts = [self.tok.apply_chat_template(
            [{"role": "system", "content": s}, {"role": "user", "content": u}],
            add_generation_prompt=True, tokenize=False) for s, u, *_ in batch]
        enc = self.tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.lm.device) for k, v in enc.items()}
        max_new = max(item[2] for item in batch)
        temperature = batch[0][3]
        top_k = max(item[4] for item in batch)
        with torch.no_grad():
            out = self.lm.generate(**enc, max_new_tokens=max_new, do_sample=temperature > 0,
                                   temperature=temperature if temperature > 0 else None,
                                   top_p=None, top_k=None, pad_token_id=self.tok.pad_token_id,
                                   return_dict_in_generate=True, output_logits=top_k > 0)
        n_in = enc["input_ids"].shape[1]
        results = []
        for i, (row, mask) in enumerate(zip(out.sequences, enc["attention_mask"])):
            new = row[n_in:]
            n_out = int((new != self.tok.pad_token_id).sum())
            text = self.tok.decode(new, skip_special_tokens=True)
            top = self._top_logprobs(out.logits, i, n_out, batch[i][4]) if batch[i][4] else None
            results.append(Completion(text, int(mask.sum()), n_out, top))
        return results

    def _top_logprobs(self, logits, row: int, n_out: int, k: int) -> list[dict[str, float]]:
        """Per output token, the k most likely tokens (decoded text -> log-probability) of the
        model's own distribution (before temperature)."""
        steps = []
        for step in logits[:n_out]:
            logp = torch.log_softmax(step[row].float(), dim=-1)
            values, ids = logp.topk(k)
            alternatives: dict[str, float] = {}
            for v, t in zip(values.tolist(), ids.tolist()):
                alternatives.setdefault(self.tok.decode([t]), v)
            steps.append(alternatives)
        return steps

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
        # the model stays loaded: the next request (in any event loop) starts a new worker
        self._queue, self._worker = None, None
