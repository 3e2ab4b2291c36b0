"""LLM clients behind one small interface, chosen by a spec string.

    gemini:gemini-1.5-flash[@BASE_URL]   google-genai; key from GEMINI_API_KEY / GOOGLE_API_KEY
    openai:gpt-4o[@BASE_URL]             any OpenAI-compatible server (OpenAI, vLLM, llama.cpp
                                         server, Ollama); key from OPENAI_API_KEY (optional for
                                         local servers), base URL also from OPENAI_BASE_URL
    hf:smollm2-135m                      a local Hugging Face model through transformers, batched
"""

from solm.core.llm.base import ChatClient, Completion, LLMError
from solm.core.llm.spec import make_client, parse_spec

__all__ = ["ChatClient", "Completion", "LLMError", "make_client", "parse_spec"]
