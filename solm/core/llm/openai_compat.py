"""Any OpenAI-compatible chat-completions server through the `openai` SDK."""

from __future__ import annotations

import os

from solm.core.llm.base import ChatClient, Completion, LLMError, redact, register_secret
from solm.core.llm.gemini import _transport_kind


class OpenAIClient(ChatClient):
    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 timeout: float = 60.0):
        import openai

        key = api_key or os.environ.get("OPENAI_API_KEY") or "not-needed-for-local-servers"
        register_secret(key)
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.model, self.spec = model, f"openai:{model}" + (f"@{base_url}" if base_url else "")
        self.client = openai.AsyncOpenAI(api_key=key, base_url=base_url, timeout=timeout,
                                         max_retries=0)  # retries are the pipeline's job

    async def complete(self, system: str, user: str, *, max_tokens: int = 4096,
                       temperature: float = 0.0, logprobs: int = 0) -> Completion:
        import openai

        extra = {"logprobs": True, "top_logprobs": logprobs} if logprobs else {}
        try:
            resp = await self.client.chat.completions.create(
                model=self.model, temperature=temperature, max_tokens=max_tokens,
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": user}], **extra)
        except openai.APIStatusError as e:
            code = e.status_code
            retry_after = None
            try:
                retry_after = float(e.response.headers.get("retry-after"))
            except (TypeError, ValueError):
                pass
            raise LLMError(f"http_{code}", redact(str(e))[:300], code == 429 or code >= 500 or
                           code == 408, retry_after, code) from None
        except openai.APITimeoutError as e:
            raise LLMError("timeout", redact(str(e))[:200], True) from None
        except openai.APIConnectionError as e:
            raise LLMError("transport", redact(str(e))[:200], True) from None
        except Exception as e:  # malformed bodies
            raise LLMError(_transport_kind(e), redact(f"{type(e).__name__}: {e}")[:300],
                           True) from None
        if not resp.choices or resp.choices[0].message is None:
            raise LLMError("empty_reply", "no choices in the reply", True)
        text = resp.choices[0].message.content or ""
        if not text:
            raise LLMError("empty_reply", "empty message", True)
        usage = resp.usage
        return Completion(text, getattr(usage, "prompt_tokens", None),
                          getattr(usage, "completion_tokens", None),
                          _top_logprobs(resp.choices[0]) if logprobs else None)

    async def aclose(self) -> None:
        await self.client.close()


def _top_logprobs(choice) -> list[dict[str, float]] | None:
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return [{alt.token: alt.logprob for alt in (item.top_logprobs or [])}
            or {item.token: item.logprob} for item in content]
