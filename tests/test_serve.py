"""`pasta serve` as a user meets it: the real server on a free port with the embedded model,
talked to by the official `openai` client, by curl, by 8 clients at once, and by bad
requests; its greedy answer equals `pasta decode`'s. On torch in fp32, where a batch reproduces
one-at-a-time decoding exactly (llama.cpp's kernels are not batch-invariant: its greedy
answers may part at near-ties once requests share a pass)."""

import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.slow

KEY = "sk-test-7f3a9c"  # must never appear in the server's output
CAP = 48  # the server's --max-new-tokens
PROMPT = "Name three fruits."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    env = {**os.environ, "SOLM_API_KEY": KEY, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "solm.cli.main", "pasta", "serve", "--port", str(port),
             "--max-new-tokens", str(CAP), "--max-queue", "8", "--max-request-bytes", "4096",
             "--engine", "torch", "--dtype", "fp32"], stdout=sink, stderr=subprocess.STDOUT, env=env)
        base = f"http://127.0.0.1:{port}"
        for _ in range(240):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"server exited: {log.read_text()}")
                time.sleep(0.5)
        else:
            proc.kill()
            pytest.fail(f"server did not start: {log.read_text()}")
        yield base, log
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server[0] + "/v1", api_key=KEY, max_retries=0, timeout=300)


def ask(client, prompt: str = PROMPT, **kw):
    return client.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": prompt}],
        max_tokens=kw.pop("max_tokens", 32), temperature=0, **kw)


def post(base: str, path: str, body: bytes | dict, key: str | None = KEY) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(base + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_openai_client_chat_and_completion(client):
    r = ask(client)
    assert r.choices[0].message.content.strip()
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1 and r.usage.prompt_tokens > 5
    figures = r.model_extra["solm"]
    assert figures["mode"] == "parallel" and figures["forward_passes"] >= 1
    assert [m.id for m in client.models.list().data] == ["smollm2-135m"]
    c = client.completions.create(model="smollm2-135m", prompt="The capital of France is",
                                  max_tokens=4, temperature=0, logprobs=2,
                                  extra_body={"mode": "sequential"})
    assert c.choices[0].finish_reason == "length"
    assert len(c.choices[0].logprobs.tokens) == 4
    assert "".join(c.choices[0].logprobs.tokens) == c.choices[0].text


def test_streaming_adds_up_to_the_non_streaming_answer(client):
    whole = ask(client).choices[0].message.content
    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and "solm" in finals[0].model_extra
    assert chunks[-1].usage.completion_tokens >= 1  # the usage chunk comes last


def test_chat_logprobs_in_sequential_mode(client):
    r = ask(client, logprobs=True, top_logprobs=3, extra_body={"mode": "sequential"})
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens
    assert "".join(e.token for e in entries) == r.choices[0].message.content
    for e in entries:
        assert e.top_logprobs[0].token == e.token  # greedy
        assert e.logprob <= 0 and len(e.top_logprobs) == 3


def test_curl(server):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed here")
    body = json.dumps({"model": "smollm2-135m", "max_tokens": 8,
                       "messages": [{"role": "user", "content": PROMPT}]})
    out = subprocess.run(["curl", "-sS", server[0] + "/v1/chat/completions",
                          "-H", "Content-Type: application/json",
                          "-H", f"Authorization: Bearer {KEY}", "-d", body],
                         capture_output=True, text=True, timeout=300, check=True)
    reply = json.loads(out.stdout)
    assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"]


def test_eight_concurrent_clients_get_their_own_complete_answers(client):
    prompts = [f"Give one tip about {topic}." for topic in
               ("sleep", "tea", "running", "chess", "gardens", "rain", "bread", "music")]
    alone = [ask(client, p, max_tokens=16).choices[0].message.content for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: ask(client, p, max_tokens=16), prompts))
    assert [r.choices[0].message.content for r in together] == alone
    assert len(set(alone)) > 1


BAD = [
    ("not json", b"{bad", 400, None),
    ("no messages", {"model": "smollm2-135m", "messages": []}, 400, "messages"),
    ("wrong role", {"model": "smollm2-135m", "messages": [{"role": "robot", "content": "x"}]},
     400, "messages.0.role"),
    ("temperature", {"model": "smollm2-135m", "temperature": 9,
                     "messages": [{"role": "user", "content": "x"}]}, 400, "temperature"),
    ("n", {"model": "smollm2-135m", "n": 2, "messages": [{"role": "user", "content": "x"}]},
     400, "n"),
    ("stop", {"model": "smollm2-135m", "stop": ["\n"],
              "messages": [{"role": "user", "content": "x"}]}, 400, "stop"),
    ("max_tokens over the cap", {"model": "smollm2-135m", "max_tokens": CAP + 1,
                                 "messages": [{"role": "user", "content": "x"}]}, 400,
     "max_tokens"),
    ("logprobs in parallel mode", {"model": "smollm2-135m", "logprobs": True,
                                   "messages": [{"role": "user", "content": "x"}]}, 400,
     "logprobs"),
    ("unknown model", {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
     404, "model"),
    ("body too large", {"model": "smollm2-135m",
                        "messages": [{"role": "user", "content": "x" * 5000}]}, 413, None),
]


@pytest.mark.parametrize("name,body,status,param", BAD, ids=[b[0] for b in BAD])
def test_bad_request_gets_an_openai_error_and_the_server_keeps_serving(server, client, name,
                                                                       body, status, param):
    code, reply = post(server[0], "/v1/chat/completions", body)
    assert code == status
    assert reply["error"]["message"] and reply["error"]["type"]
    assert reply["error"]["param"] == param
    assert ask(client, max_tokens=2).choices[0].message.content is not None


def test_key_required_and_never_logged(server):
    base, log = server
    code, reply = post(base, "/v1/chat/completions", {"model": "smollm2-135m", "messages": [
        {"role": "user", "content": "x"}]}, key=None)
    assert code == 401 and reply["error"]["code"] == "invalid_api_key"
    code, _ = post(base, "/v1/chat/completions", {"model": "smollm2-135m", "messages": [
        {"role": "user", "content": "x"}]}, key="sk-wrong")
    assert code == 401
    assert KEY not in log.read_text()


def test_a_full_queue_answers_429_and_the_rest_complete(server, client):
    body = {"model": "smollm2-135m", "max_tokens": 12,
            "messages": [{"role": "user", "content": PROMPT}]}
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        replies = list(pool.map(lambda _: post(server[0], "/v1/chat/completions", body),
                                range(20)))
    codes = [c for c, _ in replies]
    assert 429 in codes and set(codes) <= {200, 429}
    answers = {r["choices"][0]["message"]["content"] for c, r in replies if c == 200}
    assert len(answers) == 1  # greedy: every admitted request got the same complete answer
    assert all(r["error"]["type"] == "rate_limit_error" for c, r in replies if c == 429)
    assert ask(client, max_tokens=2).choices[0].message.content is not None


def test_greedy_answer_equals_pasta_decode(client):
    served = ask(client, max_tokens=CAP).choices[0].message.content
    cli = subprocess.run([sys.executable, "-m", "solm.cli.main", "pasta", "decode", PROMPT,
                          "--max-new-tokens", str(CAP), "--engine", "torch", "--dtype", "fp32",
                          "-q"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.rstrip("\n") == served


def _raw_request(base: str, body: dict) -> socket.socket:
    """A chat request sent on a raw socket, left unread (the caller may just close it)."""
    host, port = base.rsplit("/", 1)[-1].split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
              b"\r\nAuthorization: Bearer " + KEY.encode() + b"\r\nContent-Length: "
              + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def health(base: str) -> dict:
    with urllib.request.urlopen(base + "/health", timeout=30) as r:
        return json.loads(r.read())


def health_once(base: str, holds, what: str, tries: int = 3000) -> dict:
    """Poll /health until `holds` is true of it (the bound only ends a hung test)."""
    for _ in range(tries):
        seen = health(base)
        if holds(seen):
            return seen
        time.sleep(0.02)
    pytest.fail(f"/health never showed {what}: last {seen}")


def test_a_disconnected_request_is_cancelled_and_leaves_the_batch(server, client):
    """A client that drops a non-streamed request cancels its decode: the server counts it
    cancelled, which it would not if the decode had run to its end (the same request
    answered in full first runs to the cap), stops decoding it, and answers the next."""
    base = server[0]
    long_body = {"model": "smollm2-135m", "max_tokens": CAP, "temperature": 0,
                 "mode": "sequential", "repetition_penalty": 1.3,
                 "messages": [{"role": "user", "content": "Write a long story about a dragon."}]}
    status, full = post(base, "/v1/chat/completions", long_body)
    assert status == 200 and full["usage"]["completion_tokens"] == CAP, full
    before = health_once(base, lambda h: h["decoding"] == 0, "an idle server")
    sock = _raw_request(base, long_body)
    health_once(base, lambda h: h["decoding"] == 1, "the request decoding")
    sock.close()
    after = health_once(base, lambda h: h["decoding"] == 0, "the dropped decode gone")
    assert after["cancelled_total"] == before["cancelled_total"] + 1, (before, after)
    assert after["queued"] == 0
    assert ask(client, max_tokens=2).choices[0].message.content


def test_sigterm_drains_then_cancels_with_an_error_event(tmp_path):
    """SIGTERM: a new request gets 503 (or no connection), a running stream ends with an
    error event once --shutdown-timeout passes, and the process exits by itself."""
    import signal
    import threading

    port = free_port()
    log = tmp_path / "server.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "solm.cli.main", "pasta", "serve", "--port", str(port),
             "--max-new-tokens", "2000", "--dtype", "fp32", "--shutdown-timeout", "1"],
            stdout=sink, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(base + "/health", timeout=1)
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                time.sleep(0.5)
        body = json.dumps({"model": "smollm2-135m", "max_tokens": 2000, "stream": True,
                           "mode": "sequential", "repetition_penalty": 1.3,
                           "messages": [{"role": "user", "content": "Tell a long story."}]})
        req = urllib.request.Request(base + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
        events: list[str] = []

        def read_stream():
            with urllib.request.urlopen(req, timeout=120) as r:
                for line in r:
                    if line.strip():
                        events.append(line.decode().strip())

        reader = threading.Thread(target=read_stream, daemon=True)
        reader.start()
        for _ in range(200):
            if len(events) >= 3:  # decoding has started
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        code, _ = post(base, "/v1/chat/completions", {
            "model": "smollm2-135m", "messages": [{"role": "user", "content": "x"}]}, key=None) \
            if _listening(port) else (503, None)
        assert code == 503
        reader.join(timeout=60)
        assert proc.wait(timeout=60) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    errors = [e for e in events if '"error"' in e]
    assert errors and "shut down" in errors[0], events[-3:]
    assert events[-1] == "data: [DONE]"


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
