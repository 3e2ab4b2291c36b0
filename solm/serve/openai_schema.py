"""The OpenAI request bodies `solm serve` accepts, and its OpenAI-style errors.

Fields that change what a generation means but that solm's runtimes cannot honour (`n` > 1,
`stop`, tools, logit bias, ...) are refused with a 400 naming the field, rather than ignored;
other unknown fields are ignored, as most OpenAI-compatible servers do. solm's own settings
(`mode`, `repetition_penalty`, `no_repeat_ngram`, `penalize`, `compare`) ride along as extra
top-level fields (the `openai` client's `extra_body`).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from solm.core.sampling import SamplingConfig
from solm.core.settings import field_of
from solm.decode.pasta.config import PastaDecodeConfig


class ApiError(HTTPException):
    """An error answered as OpenAI does: `{"error": {message, type, param, code}}`."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str | None = None):
        super().__init__(status_code=status, detail=message)
        self.message, self.param, self.code = message, param, code
        self.kind = kind or _KINDS.get(status, "invalid_request_error")


_KINDS = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error",
          429: "rate_limit_error", 500: "server_error", 503: "server_error"}


def error_body(status: int, message: str, param: str | None = None, code: str | None = None,
               kind: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind or _KINDS.get(status,
                                                                      "invalid_request_error"),
                      "param": param, "code": code}}


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: Union[str, list[TextPart], None] = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


def bounded(cls: type, name: str) -> Any:
    """A request field with the bounds its setting declares (None: the server's default)."""
    m = field_of(cls, name).metadata
    return Field(None, ge=m.get("min"), le=m.get("max"), gt=m.get("above"))


# a request's `mode` and `penalize`: the choices their settings declare
Mode = Literal[tuple(field_of(PastaDecodeConfig, "mode").metadata["choices"])]
Penalize = Literal[tuple(field_of(PastaDecodeConfig, "penalize").metadata["choices"])]


class StreamOptions(BaseModel):
    include_usage: bool = False


class SolmFields(BaseModel):
    """Settings shared by both endpoints; None falls back to the server's defaults."""

    model_config = ConfigDict(extra="ignore")
    model: str
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = bounded(SamplingConfig, "temperature")
    top_p: Optional[float] = bounded(SamplingConfig, "top_p")
    seed: Optional[int] = bounded(SamplingConfig, "seed")
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    n: int = Field(1, ge=1)
    stop: Union[str, list[str], None] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Optional[dict[str, float]] = None
    # solm's own
    mode: Optional[Mode] = None
    repetition_penalty: Optional[float] = bounded(SamplingConfig, "repetition_penalty")
    no_repeat_ngram: Optional[int] = bounded(SamplingConfig, "no_repeat_ngram")
    penalize: Optional[Penalize] = None
    compare: bool = False

    def refuse_unsupported(self) -> None:
        if self.n != 1:
            raise ApiError(400, "n > 1 is not supported: send n requests", param="n")
        if self.stop:
            raise ApiError(400, "stop sequences are not supported by solm serve", param="stop")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name):
                raise ApiError(400, f"{name} is not supported; use repetition_penalty",
                               param=name)
        if self.logit_bias:
            raise ApiError(400, "logit_bias is not supported", param="logit_bias")


class ChatRequest(SolmFields):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=20)
    tools: Optional[list[Any]] = None
    response_format: Optional[dict[str, Any]] = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.tools:
            raise ApiError(400, "tools are not supported", param="tools")
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            raise ApiError(400, "only response_format text is supported",
                           param="response_format")
        if self.top_logprobs and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")

    @property
    def token_cap(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens

    @property
    def top_k(self) -> Optional[int]:
        """Alternatives per token when logprobs are asked for (None: no logprobs)."""
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SolmFields):
    prompt: Union[str, list[str], list[int]]
    logprobs: Optional[int] = Field(None, ge=0, le=20)
    echo: bool = False
    suffix: Optional[str] = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo:
            raise ApiError(400, "echo is not supported", param="echo")
        if self.suffix:
            raise ApiError(400, "suffix is not supported", param="suffix")
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) \
                and len(self.prompt) != 1:
            raise ApiError(400, "one prompt per request: send a string", param="prompt")

    @property
    def token_cap(self) -> Optional[int]:
        return self.max_tokens

    @property
    def top_k(self) -> Optional[int]:
        return self.logprobs
