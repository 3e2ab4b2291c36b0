"""Gemini through google-genai (the successor of the deprecated google-generativeai)."""

from __future__ import annotations

import json
import os
import re

from solm.core.errors import SolmError
from solm.core.llm.base import ChatClient, Completion, LLMError, redact, register_secret


def _retry_delay(err) -> float | None:
    """Seconds from a RetryInfo detail ("retryDelay": "3s") in a Gemini error body."""
    body = getattr(err, "details", None) or getattr(err, "response_json", None)
    text = json.dumps(body) if body is not None else str(err)
    m = re.search(r'"retryDelay"\s*:\s*"([\d.]+)s"', text)
    return float(m.group(1)) if m else None


class GeminiClient(ChatClient):
    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 timeout: float = 60.0):
        from google import genai
        from google.genai import types

        key = api_key or os.environ.get("GEMINI_API_KEY") or os.environ.get("GOOGLE_API_KEY")
        if not key:
            raise SolmError("Gemini needs an API key: set GEMINI_API_KEY (or GOOGLE_API_KEY)")
        register_secret(key)
        self.model, self.spec = model, f"gemini:{model}" + (f"@{base_url}" if base_url else "")
        self._types = types
        options = types.HttpOptions(
            base_url=base_url or os.environ.get("GEMINI_BASE_URL") or None,
            timeout=int(timeout * 1000),
            retry_options=types.HttpRetryOptions(attempts=1))  # retries are the pipeline's job
        self.client = genai.Client(api_key=key, http_options=options)

    async def complete(self, system: str, user: str, *, max_tokens: int = 4096,
                       temperature: float = 0.0, logprobs: int = 0) -> Completion:
        from google.genai import errors

        extra = {"response_logprobs": True, "logprobs": logprobs} if logprobs else {}
        config = self._types.GenerateContentConfig(
            system_instruction=system, temperature=temperature, max_output_tokens=max_tokens,
            **extra)
        try:
            resp = await self.client.aio.models.generate_content(
                model=self.model, contents=user, config=config)
        except errors.APIError as e:
            code = int(getattr(e, "code", 0) or 0)
            retryable = code == 429 or code >= 500 or code == 408
            raise LLMError(f"http_{code}", redact(str(e))[:300], retryable, _retry_delay(e),
                           code) from None
        except Exception as e:  # timeouts, dropped connections, truncated bodies
            raise LLMError(_transport_kind(e), redact(f"{type(e).__name__}: {e}")[:300],
                           True) from None
        try:
            text = resp.text
        except Exception as e:
            raise LLMError("bad_reply", redact(str(e))[:200], True) from None
        if not text:
            raise LLMError("empty_reply", "no text in the reply", True)
        usage = getattr(resp, "usage_metadata", None)
        return Completion(text, getattr(usage, "prompt_token_count", None),
                          getattr(usage, "candidates_token_count", None),
                          _top_logprobs(resp) if logprobs else None)

    async def aclose(self) -> None:
        try:
            await self.client.aio.aclose()
        except Exception:
            pass


def _top_logprobs(resp) -> list[dict[str, float]] | None:
    candidates = getattr(resp, "candidates", None) or []
    result = getattr(candidates[0], "logprobs_result", None) if candidates else None
    top = getattr(result, "top_candidates", None)
    if not top:
        return None
    return [{c.token: c.log_probability for c in (step.candidates or [])} for step in top]


def _transport_kind(e: Exception) -> str:
    name = type(e).__name__.lower()
    if "timeout" in name:
        return "timeout"
    if "json" in name or "decode" in name or "validation" in name:
        return "bad_reply"
    return "transport"
