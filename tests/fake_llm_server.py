"""A local HTTP server speaking Gemini `generateContent` and OpenAI chat-completions, with faults.

It "annotates" the response found in the user prompt with the rules annotator (PASTA's, or
TIP's when asked with TIP's system prompt) and wraps it in <annotated> tags, like a
well-behaved LLM. Asked with the judge's system prompt, it judges instead: the response with more "GOOD" in it
wins with probability 0.8 (plus `position_bias` towards response A), returned as the letter
and, when asked for, as log-probabilities (OpenAI `logprobs`, Gemini `logprobsResult`); with
the JSON prompt, as {"better", "confidence"}. A seeded share of requests instead gets a fault:
429 with a retry hint, 500, a reply slower than the client's timeout, a truncated body, an
annotation that changes the text, or a reply without the <annotated> block.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from solm.annotate.prompt import response_from_user_prompt
from solm.annotate.rules import annotate_rules
from solm.annotate.tip_rules import annotate_tip_rules

FAULTS = ("429", "500", "slow", "truncated", "unfaithful", "garbage")


class FakeLLM:
    def __init__(self, count_tokens, fault_rate: float = 0.0, faults=FAULTS, seed: int = 0,
                 slow_s: float = 3.0, delay_s: float = 0.0, retry_delay_s: float = 0.2,
                 unfaithful_marker: str | None = None, position_bias: float = 0.0):
        self.count_tokens = count_tokens
        self.fault_rate, self.faults, self.seed = fault_rate, tuple(faults), seed
        self.slow_s, self.delay_s, self.retry_delay_s = slow_s, delay_s, retry_delay_s
        self.unfaithful_marker = unfaithful_marker
        self.position_bias = position_bias
        self.judge_requests = 0
        self.lock = threading.Lock()
        self.requests = 0
        self.fault_counts: dict[str, int] = {}
        # what each distinct request (by its user text) was served, in order: None for a clean
        # reply. Faults are drawn per (seed, text, n-th time asked), not from one stream, so
        # which request gets which fault does not depend on how the client's threads interleave
        self.served: dict[str, list[str | None]] = {}
        self.api_keys: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                server.handle(self)

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request, client_address):  # clients hang up on timeouts
                pass

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "FakeLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- request handling ----------------------------------------------------------------

    def _pick_fault(self, user: str) -> str | None:
        with self.lock:
            self.requests += 1
            served = self.served.setdefault(user, [])
            draw = random.Random(f"{self.seed}\0{len(served)}\0{user}")
            fault = draw.choice(self.faults) if draw.random() < self.fault_rate else None
            served.append(fault)
            if fault:
                self.fault_counts[fault] = self.fault_counts.get(fault, 0) + 1
            return fault

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length", 0))) or b"{}")
        gemini = ":generateContent" in h.path
        key = h.headers.get("x-goog-api-key") or (h.headers.get("Authorization") or "")[7:]
        with self.lock:
            self.api_keys.add(key)
        if gemini:
            user = "".join(p.get("text", "") for c in body.get("contents", [])
                           for p in c.get("parts", []))
            sys_part = body.get("systemInstruction") or body.get("system_instruction") or {}
            system = "".join(p.get("text", "") for p in sys_part.get("parts", []))
        else:
            user = next((m["content"] for m in body.get("messages", []) if m["role"] == "user"), "")
            system = next((m["content"] for m in body.get("messages", [])
                           if m["role"] == "system"), "")
        fault = self._pick_fault(user)
        if self.delay_s:
            time.sleep(self.delay_s)
        if fault == "429":
            if gemini:
                return self._json(h, 429, {"error": {
                    "code": 429, "message": "Resource has been exhausted", "status":
                    "RESOURCE_EXHAUSTED", "details": [{
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": f"{self.retry_delay_s}s"}]}})
            return self._json(h, 429, {"error": {"message": "Rate limit reached", "type":
                                                 "requests", "code": "rate_limit_exceeded"}},
                              headers={"retry-after": str(self.retry_delay_s)})
        if fault == "500":
            return self._json(h, 500, {"error": {"code": 500, "message": "internal error",
                                                 "status": "INTERNAL"}})
        if fault == "slow":
            time.sleep(self.slow_s)
        if system.startswith("You compare two responses"):
            text, top = self._judge(user, json_reply="JSON" in system)
            if fault == "garbage":
                text, top = "I cannot decide between them.", None
            return self._reply(h, body, gemini, user, text, top, fault)
        response = response_from_user_prompt(user) or ""
        if system.startswith("You annotate step-by-step reasoning traces"):
            registers = int(re.search(r"The model has (\d+) registers", system).group(1))
            annotated = annotate_tip_rules(response, self.count_tokens, registers,
                                           min_step_tokens=3).annotated
        else:
            annotated, _ = annotate_rules(response, self.count_tokens)
        if fault == "unfaithful" or (self.unfaithful_marker and self.unfaithful_marker in response):
            annotated = annotated.replace(" ", " extra ", 1) if " " in annotated else "changed"
        text = f"<annotated>\n{annotated}\n</annotated>"
        if fault == "garbage":
            text = "Sure! Here is the annotated response: " + annotated[:50]
        return self._reply(h, body, gemini, user, text, None, fault)

    def _judge(self, user: str, json_reply: bool) -> tuple[str, list[tuple[str, float]] | None]:
        import math
        import re

        with self.lock:
            self.judge_requests += 1
        first = re.search(r"<response A>\n(.*?)\n</response A>", user, re.S)
        second = re.search(r"<response B>\n(.*?)\n</response B>", user, re.S)
        a = first.group(1).count("GOOD") if first else 0
        b = second.group(1).count("GOOD") if second else 0
        p_a = 0.5 + 0.3 * ((a > b) - (a < b)) + self.position_bias
        p_a = min(0.98, max(0.02, p_a))
        label = "A" if p_a >= 0.5 else "B"
        if json_reply:
            return json.dumps({"better": label, "confidence": round(max(p_a, 1 - p_a), 3)}), None
        return label, [("A", math.log(p_a)), ("B", math.log(1 - p_a))]

    def _reply(self, h, body: dict, gemini: bool, user: str, text: str,
               top: list[tuple[str, float]] | None, fault: str | None) -> None:
        n_in, n_out = len(user.split()), len(text.split())
        if gemini:
            payload = {"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                                       "finishReason": "STOP", "index": 0}],
                       "usageMetadata": {"promptTokenCount": n_in, "candidatesTokenCount": n_out,
                                         "totalTokenCount": n_in + n_out},
                       "modelVersion": "fake"}
            if top and (body.get("generationConfig") or {}).get("responseLogprobs"):
                payload["candidates"][0]["logprobsResult"] = {
                    "topCandidates": [{"candidates": [
                        {"token": t, "logProbability": lp} for t, lp in top]}],
                    "chosenCandidates": [{"token": top[0][0], "logProbability": top[0][1]}]}
        else:
            payload = {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0,
                       "model": body.get("model", "fake"),
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                                 "total_tokens": n_in + n_out}}
            if top and body.get("logprobs"):
                chosen = next((t for t in top if t[0] == text), top[0])
                payload["choices"][0]["logprobs"] = {"content": [{
                    "token": chosen[0], "logprob": chosen[1], "bytes": list(chosen[0].encode()),
                    "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())}
                                     for t, lp in top]}]}
        if fault == "truncated":
            raw = json.dumps(payload).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            h.wfile.write(raw[: len(raw) // 3])
            h.wfile.flush()
            h.close_connection = True
            try:
                h.connection.shutdown(2)
            except OSError:
                pass
            return
        return self._json(h, 200, payload)

    @staticmethod
    def _json(h, status: int, payload: dict, headers: dict | None = None) -> None:
        raw = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(raw)
