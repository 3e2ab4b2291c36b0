"""Backend spec strings -> clients."""

from __future__ import annotations

from solm.core.errors import SolmError
from solm.core.llm.base import ChatClient

BACKENDS = ("gemini", "openai", "hf")
# USD per million tokens (input, output), for the cost line of summaries; extend as needed
PRICES = {
    "gemini-1.5-flash": (0.075, 0.30), "gemini-1.5-pro": (1.25, 5.00),
    "gemini-2.0-flash": (0.10, 0.40), "gemini-2.5-flash": (0.30, 2.50),
    "gpt-4o": (2.50, 10.0), "gpt-4o-mini": (0.15, 0.60),
}


def parse_spec(spec: str) -> tuple[str, str, str | None]:
    """'openai:gpt-4o@http://host/v1' -> ('openai', 'gpt-4o', 'http://host/v1')."""
    backend, sep, rest = spec.partition(":")
    if not sep or backend not in BACKENDS or not rest:
        raise SolmError(f"bad backend spec '{spec}': expected gemini:MODEL[@URL], "
                        f"openai:MODEL[@URL] or hf:MODEL")
    model, at, url = rest.partition("@")
    if backend == "hf" and at:
        raise SolmError("hf: specs take no @URL")
    return backend, model, (url or None)


def make_client(spec: str, api_key: str | None = None, base_url: str | None = None,
                timeout: float = 60.0, batch_size: int = 8) -> ChatClient:
    backend, model, url = parse_spec(spec)
    if backend == "gemini":
        from solm.core.llm.gemini import GeminiClient
        return GeminiClient(model, api_key, base_url or url, timeout)
    if backend == "openai":
        from solm.core.llm.openai_compat import OpenAIClient
        return OpenAIClient(model, api_key, base_url or url, timeout)
    from solm.core.llm.hf_local import HFClient
    return HFClient(model, batch_size=batch_size)


def cost_usd(model: str, input_tokens: int, output_tokens: int) -> float | None:
    price = PRICES.get(model)
    if price is None:
        return None
    return (input_tokens * price[0] + output_tokens * price[1]) / 1e6
