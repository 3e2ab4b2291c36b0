"""The serving engine of a TIP model (`solm serve --system tip`): continuous batching over
the paged TIP runtime (`TipRuntime.session`), one eviction policy for the server.

A request's answer text has the registers removed; its `solm` field reports the live KV of
that request (the tokens attention read per decode step, mean and peak, prompt included, and
the response's share), the pages the policy freed, the registers opened and the steps a
reuse killed, and its timings. Per request: `temperature`, `top_p`, `seed`, `max_tokens`.
PASTA's fields (`mode`, `penalize`, `compare`), the repetition penalty / n-gram ban and
`logprobs` are refused with a 400: the TIP runtime does not apply them.
"""

from __future__ import annotations

from dataclasses import replace

from solm.decode.flags import MAX_NEW_TOKENS
from solm.decode.tip.runtime import TipDecodeConfig, TipRequest, TipResult, TipRuntime
from solm.serve.engine import CANCELLED, BaseEngine, ServeJob, Outcome, _Live, _shutdown_error
from solm.serve.streaming import TextStream


class TipServeEngine(BaseEngine):
    def __init__(self, runtime: TipRuntime, defaults: TipDecodeConfig, max_queue: int = 32,
                 max_batch: int = 8):
        super().__init__(runtime, max_queue, max_batch)
        self.defaults = replace(defaults, batch_size=max_batch)
        self.session = runtime.session(self.defaults)
        self.registers = set(runtime.vocab.registers) if runtime.vocab else set()

    @property
    def pool_tokens(self) -> int:
        """A prompt must fit the pool with a page to spare per batch row."""
        rt = self.runtime
        return (rt.num_pages // self.max_batch - 1) * rt.page_size

    def request_config(self, defaults: TipDecodeConfig, req, cap: int | None, sampling):
        from solm.serve.openai_schema import ApiError

        for name in ("mode", "penalize"):
            if getattr(req, name) is not None:
                raise ApiError(400, f"{name} is a PASTA field; this server decodes a TIP "
                                    f"model", param=name)
        if req.compare:
            raise ApiError(400, "compare is a PASTA field; this server decodes a TIP model",
                           param="compare")
        if req.top_k is not None:
            raise ApiError(400, "logprobs are not given by a TIP server", param="logprobs")
        if sampling.no_repeat_ngram:
            raise ApiError(400, "the TIP runtime applies no n-gram ban", param="no_repeat_ngram")
        if sampling.repetition_penalty != 1.0:
            raise ApiError(400, "the TIP runtime applies no repetition penalty",
                           param="repetition_penalty")
        return replace(defaults, max_new_tokens=cap or defaults.max_new_tokens,
                       sampling=sampling)

    def _content(self, ids: list[int]) -> list[int]:
        return [t for t in ids if t not in self.registers]

    def _start(self, job: ServeJob) -> None:
        self._ids += 1
        self.live[self._ids] = _Live(job, TextStream(self.runtime.tokenizer), [])
        self.session.add(TipRequest(self._ids, list(job.prompt_ids),
                                    sampling=job.config.sampling,
                                    max_new_tokens=job.config.max_new_tokens))

    def _abandon(self) -> None:
        self.session.abandon()

    def _step(self) -> None:
        from solm.serve.openai_schema import ApiError

        for rid, live in self.live.items():
            if live.job.cancelled.is_set() or self.abort.is_set():
                self.session.cancel(rid)
        ended = self.session.step()
        for rid, live in self.live.items():
            ids = self.session.ids_of(rid)
            if ids is None or not live.job.stream:
                continue
            delta = live.stream.update(self._content(ids))
            if delta:
                live.job.emit("delta", (delta, []))
        for res in ended:
            live = self.live.pop(res.rid)
            if CANCELLED in res.flags and self.abort.is_set():
                live.job.emit("error", _shutdown_error())
                continue
            if CANCELLED in res.flags:
                self.cancelled_total += 1
            if CANCELLED in res.flags and not res.ids:
                live.job.emit("error", ApiError(499, "the request was cancelled"))
            else:
                live.job.emit("done", self._outcome(live, res))

    def _outcome(self, live: _Live, res: TipResult) -> Outcome:
        from solm.core.systems.tip import steps_and_kills

        tok = self.runtime.tokenizer
        job = live.job
        text = tok.decode(self._content(res.ids), skip_special_tokens=True)
        if job.stream:
            rest = live.stream.finish(text)
            if rest:
                job.emit("delta", (rest, []))
        opened, killed = steps_and_kills(res.ids, self.runtime.vocab)
        prompt = len(job.prompt_ids)
        figures = {
            "annotated": tok.decode(res.ids, skip_special_tokens=True),
            "policy": self.defaults.policy, "budget": self.defaults.budget,
            "mean_live_tokens": round(res.mean_live_tokens, 2),
            "live_response_tokens": round(max(0.0, res.mean_live_tokens - prompt), 2),
            "peak_live_tokens": res.peak_live_tokens, "peak_pages": res.peak_pages,
            "evicted_pages": res.evicted_pages, "registers_opened": opened,
            "steps_killed": killed, "prefill_s": round(res.prefill_s, 3),
            "decode_s": round(res.decode_s, 3),
            "tokens_per_s": round(res.generated / max(res.decode_s, 1e-9), 2),
            "flags": res.flags, "batch": self.max_batch}
        return Outcome(text=text, finish_reason="length" if MAX_NEW_TOKENS in res.flags
                       else "stop", prompt_tokens=prompt, completion_tokens=res.generated,
                       figures=figures)
