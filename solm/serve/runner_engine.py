"""A serving engine for any registered decode system (`solm.decode.registry`): the jobs that
are waiting decode together through the system's runner (the one protocol), each answered
whole when it ends. Systems with an engine of their own (PASTA's streaming threads, TIP's
paged sessions) are served by it instead (`solm.serve.systems`)."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

from solm.core.records import Record
from solm.decode.flags import MAX_NEW_TOKENS
from solm.decode.protocol import Job as DecodeJob
from solm.serve.engine import BaseEngine, ServeJob, Outcome

TEXT_FIELDS = ("response", "prompt", "id")


class RunnerServeEngine(BaseEngine):
    """Up to `max_batch` requests per run of the system's runner (`runner` is built for
    that batch); a request joins the next run."""

    def __init__(self, system, runner, model, tokenizer, pool_tokens: int,
                 max_queue: int = 32, max_batch: int = 8):
        from types import SimpleNamespace

        super().__init__(SimpleNamespace(model=model, tokenizer=tokenizer), max_queue,
                         max_batch)
        self.system, self.runner, self._pool_tokens = system, runner, pool_tokens
        self.waiting: list[tuple[int, ServeJob]] = []

    @property
    def pool_tokens(self) -> int:
        return self._pool_tokens

    def request_config(self, defaults, req, cap: int | None, sampling):
        from solm.serve.openai_schema import ApiError

        for name in ("mode", "penalize"):
            if getattr(req, name, None) is not None:
                raise ApiError(400, f"{name} is not a setting of {self.system.name}",
                               param=name)
        if req.top_k is not None:
            raise ApiError(400, f"logprobs are not given by a {self.system.name} server",
                           param="logprobs")
        honoured = set(self.system.sampling)
        for name in ("repetition_penalty", "no_repeat_ngram"):
            if name not in honoured and getattr(sampling, name) != getattr(defaults.sampling,
                                                                           name):
                raise ApiError(400, f"{self.system.name} applies no {name}", param=name)
        fields = {f.name for f in dataclasses.fields(defaults)}
        cap_field = {"max_new_tokens": cap or defaults.max_new_tokens} \
            if "max_new_tokens" in fields and cap else {}
        return replace(defaults, sampling=sampling, **cap_field)

    def _start(self, job: ServeJob) -> None:
        self._ids += 1
        self.live[self._ids] = job
        self.waiting.append((self._ids, job))

    def _abandon(self) -> None:
        self.waiting.clear()

    def _step(self) -> None:
        from solm.serve.engine import _shutdown_error
        from solm.serve.openai_schema import ApiError

        # one run decodes under one config: the jobs that share the first one's (requests
        # with other settings wait for the next run)
        first = self.waiting[0][1].config if self.waiting else None
        batch = [(rid, job) for rid, job in self.waiting if job.config == first]
        self.waiting = [(rid, job) for rid, job in self.waiting if job.config != first]
        jobs = []
        for rid, job in batch:
            if job.cancelled.is_set() or self.abort.is_set():
                self.live.pop(rid)
                self.cancelled_total += not self.abort.is_set()
                job.emit("error", _shutdown_error() if self.abort.is_set()
                         else ApiError(499, "the request was cancelled"))
                continue
            jobs.append(DecodeJob(rid, Record(str(rid), ""), tuple(job.prompt_ids)))
        if not jobs:
            return
        self.runner.config = first
        for done in self.runner.run(jobs):
            # a job leaves `live` only once answered: if making its row raises, the step's
            # error handler still answers it (a popped job would wait for ever)
            job = self.live[done.rid]
            if done.error:
                self.live.pop(done.rid)
                job.emit("error", ApiError(400, done.error))
                continue
            row = self.runner.row(next(j for j in jobs if j.rid == done.rid), done.result)
            text = self.system.display.row_text(row)
            self.live.pop(done.rid)
            if job.stream and text:
                job.emit("delta", (text, []))
            figures = {k: v for k, v in row.items() if k not in TEXT_FIELDS}
            generated = row.get("total_tokens", row.get("generated_tokens",
                                                        row.get("generated", 0)))
            job.emit("done", Outcome(
                text=text, finish_reason="length" if MAX_NEW_TOKENS in row.get("flags", ())
                else "stop", prompt_tokens=len(job.prompt_ids), completion_tokens=generated,
                figures=figures))
