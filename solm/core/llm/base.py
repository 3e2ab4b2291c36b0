"""The client interface, its error type, and secret redaction."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass
class Completion:
    text: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    # per output token, its most likely alternatives: token text -> log-probability
    # (filled when `logprobs` was asked for and the backend returns them)
    top_logprobs: list[dict[str, float]] | None = None


class LLMError(Exception):
    """A failed request. `retryable` for 429 / 5xx / timeouts / broken replies."""

    def __init__(self, kind: str, message: str, retryable: bool, retry_after: float | None = None,
                 status: int | None = None):
        self.kind, self.retryable, self.retry_after, self.status = kind, retryable, retry_after, status
        super().__init__(f"{kind}: {message}")


class ChatClient(ABC):
    """One system + one user message in, one completion out."""

    spec: str = ""
    model: str = ""

    @abstractmethod
    async def complete(self, system: str, user: str, *, max_tokens: int = 4096,
                       temperature: float = 0.0, logprobs: int = 0) -> Completion:
        """`logprobs` > 0 asks for that many alternatives per output token, where the backend
        can give them (`Completion.top_logprobs` stays None where it cannot)."""

    async def aclose(self) -> None:
        return None


_SECRETS: set[str] = set()


def register_secret(value: str | None) -> None:
    if value and len(value) >= 6:
        _SECRETS.add(value)


def redact(text: str) -> str:
    """Remove any registered secret (and anything that looks like `key=...`) from a message."""
    for s in _SECRETS:
        text = text.replace(s, "***")
    text = re.sub(r"(?i)\b((?:api[_-]?)?key|x-goog-api-key)\s*([=:])\s*[^\s&,'\"]+", r"\1\2***",
                  text)
    return re.sub(r"(?i)(authorization:\s*(?:bearer\s+)?)\S+", r"\1***", text)
