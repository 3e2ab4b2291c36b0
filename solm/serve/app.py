"""The HTTP side of `solm serve`: OpenAI's `/v1/chat/completions`, `/v1/completions` and
`/v1/models` (FastAPI), with server-sent events for streaming.

`content` is the answer without tags; the annotated text and solm's figures (threads,
critical path, steps, timings, realized speedup with `compare`) ride in an extra top-level
field `solm`, which OpenAI clients keep as an extra attribute.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from dataclasses import dataclass
from typing import AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException

from solm.core.chat import messages_ids, text_ids
from solm.core.sampling import SamplingConfig
from solm.decode.pasta.runtime import PastaDecodeConfig
from solm.decode.tip.runtime import TipDecodeConfig
from solm.serve.engine import BaseEngine, ServeJob, Outcome, QueueFull, ShuttingDown
from solm.serve.openai_schema import (ApiError, ChatRequest, CompletionRequest, SolmFields,
                                 error_body)
from solm.serve.streaming import TokenLogprob, token_bytes, token_text


@dataclass
class ServeSettings:
    model_name: str  # what `/v1/models` lists and requests name
    defaults: PastaDecodeConfig | TipDecodeConfig  # the server's; requests override some
    api_key: str | None = None
    max_request_bytes: int = 1 << 20


def create_app(engine: BaseEngine, settings: ServeSettings) -> FastAPI:
    app = FastAPI(title="solm", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, limit=settings.max_request_bytes)
    _install_error_handlers(app)

    def authorize(request: Request) -> None:
        if settings.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, key = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(key.encode(),
                                                                 settings.api_key.encode()):
            raise ApiError(401, "missing or wrong API key (Authorization: Bearer KEY)",
                           code="invalid_api_key")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "queued": engine.jobs.qsize(), "decoding": len(engine.live),
                "cancelled_total": engine.cancelled_total}

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(settings.model_name)]}

    @app.get("/v1/models/{name:path}", dependencies=[Depends(authorize)])
    async def model(name: str) -> dict:
        _check_model(name, settings)
        return _model_card(name)

    @app.post("/v1/chat/completions", dependencies=[Depends(authorize)])
    async def chat(req: ChatRequest, request: Request):
        job = _job(req, settings, engine, messages_ids(
            engine.tokenizer, [{"role": "system" if m.role == "developer" else m.role,
                                "content": m.text()} for m in req.messages]), "messages")
        return await _answer(engine, job, req, settings, request, chat=True)

    @app.post("/v1/completions", dependencies=[Depends(authorize)])
    async def completions(req: CompletionRequest, request: Request):
        job = _job(req, settings, engine, _completion_ids(req, engine), "prompt")
        return await _answer(engine, job, req, settings, request, chat=False)

    return app


def now() -> int:
    return int(time.time())


def _model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": "solm"}


def _check_model(name: str, settings: ServeSettings) -> None:
    if name != settings.model_name:
        raise ApiError(404, f"model '{name}' is not served here; this server serves "
                            f"'{settings.model_name}'", param="model", code="model_not_found")


def _completion_ids(req: CompletionRequest, engine: BaseEngine) -> list[int]:
    """A completion's prompt as token ids: text, one text in a list, or ids in the
    vocabulary."""
    prompt = req.prompt
    if isinstance(prompt, list) and not prompt:
        raise ApiError(400, "the prompt is empty", param="prompt")
    if isinstance(prompt, list) and isinstance(prompt[0], int):
        vocab = engine.runtime.model.get_input_embeddings().weight.shape[0]
        bad = [t for t in prompt if not 0 <= t < vocab]
        if bad:
            raise ApiError(400, f"token id {bad[0]} is outside this model's vocabulary "
                                f"(0 to {vocab - 1})", param="prompt")
        return list(prompt)
    ids = text_ids(engine.tokenizer, prompt[0] if isinstance(prompt, list) else prompt)
    if not ids:
        raise ApiError(400, "the prompt is empty", param="prompt")
    return ids


def _job(req: SolmFields, settings: ServeSettings, engine: BaseEngine,
         prompt_ids: list[int], prompt_field: str) -> ServeJob:
    """The request checked against the server's bounds and turned into a decode job."""
    req.refuse_unsupported()
    _check_model(req.model, settings)
    d = settings.defaults
    cap = req.token_cap
    if cap is not None and cap > d.max_new_tokens:
        raise ApiError(400, f"max_tokens {cap} is over this server's limit of "
                            f"{d.max_new_tokens} (--max-new-tokens)", param="max_tokens")
    pool = engine.pool_tokens
    if len(prompt_ids) + 1 > pool:
        raise ApiError(400, f"the prompt has {len(prompt_ids)} tokens; this server's KV pool "
                            f"holds {pool} (--pool-size)", param=prompt_field,
                       code="context_length_exceeded")
    s = d.sampling
    sampling = SamplingConfig(
        temperature=s.temperature if req.temperature is None else req.temperature,
        top_p=s.top_p if req.top_p is None else req.top_p,
        seed=s.seed if req.seed is None else req.seed,
        repetition_penalty=(s.repetition_penalty if req.repetition_penalty is None
                            else req.repetition_penalty),
        no_repeat_ngram=s.no_repeat_ngram if req.no_repeat_ngram is None else req.no_repeat_ngram)
    config = engine.request_config(d, req, cap, sampling)
    return ServeJob(prompt_ids, config, top_k=req.top_k, compare=req.compare, stream=req.stream)


async def _answer(engine: BaseEngine, job: ServeJob, req: SolmFields, settings: ServeSettings,
                  request: Request, chat: bool):
    try:
        engine.submit(job)
    except QueueFull as e:
        raise ApiError(429, f"the server is busy ({e}); retry later",
                       code="queue_full") from None
    except ShuttingDown as e:
        raise ApiError(503, f"{e}; retry elsewhere or later", code="server_shutdown") from None
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    if req.stream:
        usage = bool(req.stream_options and req.stream_options.include_usage)
        return StreamingResponse(_sse(engine, job, rid, settings.model_name, chat, usage),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    try:
        kind, payload = await _next_event_unless_gone(job, request)
    finally:
        job.cancelled.set()  # a client that went away stops its decode
    if kind == "error":
        raise payload
    out: Outcome = payload
    tok = engine.tokenizer
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": out.text},
                  "logprobs": _chat_logprobs(tok, out.logprobs),
                  "finish_reason": out.finish_reason}
    else:
        choice = {"index": 0, "text": out.text, "finish_reason": out.finish_reason,
                  "logprobs": _completion_logprobs(tok, out.logprobs)}
    return {"id": rid, "object": "chat.completion" if chat else "text_completion",
            "created": now(), "model": settings.model_name, "choices": [choice],
            "usage": _usage(out), "solm": out.figures}


DISCONNECT_POLL_S = 0.05


async def _next_event_unless_gone(job: ServeJob, request: Request) -> tuple[str, object]:
    """The job's next event; a client that disconnects while it waits cancels the job at
    once (a non-streamed request has no write to fail, so its connection is polled)."""
    getter = asyncio.ensure_future(job.events.get())
    try:
        while True:
            done, _ = await asyncio.wait({getter}, timeout=DISCONNECT_POLL_S)
            if done:
                return getter.result()
            if await request.is_disconnected():
                job.cancelled.set()
                raise ClientGone()
    finally:
        getter.cancel()


class ClientGone(Exception):
    """The client closed its connection; there is nobody to answer."""


async def _sse(engine: BaseEngine, job: ServeJob, rid: str, model: str, chat: bool,
               include_usage: bool) -> AsyncIterator[str]:
    tok = engine.tokenizer
    created = now()
    obj = "chat.completion.chunk" if chat else "text_completion"

    def chunk(delta_text: str | None, logprobs: list[TokenLogprob] | None,
              finish: str | None = None, extra: dict | None = None, role: bool = False) -> str:
        if chat:
            delta = {"role": "assistant", "content": ""} if role else (
                {} if delta_text is None else {"content": delta_text})
            choice = {"index": 0, "delta": delta, "logprobs": _chat_logprobs(tok, logprobs),
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": delta_text or "", "finish_reason": finish,
                      "logprobs": _completion_logprobs(tok, logprobs)}
        body = {"id": rid, "object": obj, "created": created, "model": model,
                "choices": [choice], **(extra or {})}
        return f"data: {json.dumps(body)}\n\n"

    try:
        if chat:
            yield chunk(None, None, role=True)
        while True:
            kind, payload = await job.events.get()
            if kind == "delta":
                text, logprobs = payload
                yield chunk(text, logprobs if job.top_k is not None else None)
            elif kind == "error":
                status = payload.status_code if isinstance(payload, ApiError) else 500
                message = payload.message if isinstance(payload, ApiError) else \
                    "the decode failed; see the server's log"
                yield f"data: {json.dumps(error_body(status, message))}\n\n"
                break
            else:
                out: Outcome = payload
                yield chunk(None, None, finish=out.finish_reason, extra={"solm": out.figures})
                if include_usage:
                    body = {"id": rid, "object": obj, "created": created, "model": model,
                            "choices": [], "usage": _usage(out)}
                    yield f"data: {json.dumps(body)}\n\n"
                break
        yield "data: [DONE]\n\n"
    finally:
        job.cancelled.set()


def _usage(out: Outcome) -> dict:
    return {"prompt_tokens": out.prompt_tokens, "completion_tokens": out.completion_tokens,
            "total_tokens": out.prompt_tokens + out.completion_tokens}


def _chat_logprobs(tok, logprobs: list[TokenLogprob] | None) -> dict | None:
    if logprobs is None:
        return None

    def entry(tid: int, lp: float) -> dict:
        return {"token": token_text(tok, tid), "logprob": lp,
                "bytes": list(token_bytes(tok, tid))}

    return {"content": [{**entry(t.token_id, t.logprob),
                         "top_logprobs": [entry(i, v) for i, v in t.top]} for t in logprobs]}


def _completion_logprobs(tok, logprobs: list[TokenLogprob] | None) -> dict | None:
    if logprobs is None:
        return None
    tokens = [token_text(tok, t.token_id) for t in logprobs]
    offsets, at = [], 0
    for piece in tokens:
        offsets.append(at)
        at += len(piece)
    return {"tokens": tokens, "token_logprobs": [t.logprob for t in logprobs],
            "top_logprobs": [{token_text(tok, i): v for i, v in t.top} for t in logprobs],
            "text_offset": offsets}


# ---- errors and bounds -----------------------------------------------------------------

def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(error_body(e.status_code, e.message, e.param, e.code, e.kind),
                            status_code=e.status_code)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        message = e.detail if isinstance(e.detail, str) else str(e.detail)
        if e.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        return JSONResponse(error_body(e.status_code, message), status_code=e.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        message = f"{param}: {first['msg']}" if param else first["msg"]
        if first.get("type") == "json_invalid":
            message, param = "the request body is not valid JSON", None
        return JSONResponse(error_body(400, message, param), status_code=400)

    @app.exception_handler(ClientGone)
    async def gone(request: Request, e: ClientGone) -> JSONResponse:
        return JSONResponse(error_body(499, "the client closed the request"), status_code=499)

    @app.exception_handler(Exception)
    async def crashed(request: Request, e: Exception) -> JSONResponse:
        return JSONResponse(error_body(500, f"internal error: {type(e).__name__}"),
                            status_code=500)


class BodyLimit:
    """Refuse request bodies over `limit` bytes (413) without reading them into memory."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            response = JSONResponse(error_body(413, f"request body over {self.limit} bytes "
                                                    f"(--max-request-bytes)"), status_code=413)
            return await response(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise ApiError(413, f"request body over {self.limit} bytes "
                                        f"(--max-request-bytes)")
            return message

        await self.app(scope, limited, send)
