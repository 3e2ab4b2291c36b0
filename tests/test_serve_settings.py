"""A request's settings in both servers: each field a request gives overrides the server's
default, each field it leaves out takes the server's (falsy values such as temperature 0 or
no_repeat_ngram 0 included), and a TIP server applies only the fields its runtime reads.
The rule is written here as a table of expected decode settings (planted bugs in
request settings passed every test)."""

import pytest

from solm.core.sampling import SamplingConfig
from solm.decode.pasta.runtime import PastaDecodeConfig
from solm.decode.tip.runtime import TipDecodeConfig
from solm.serve.app import ServeSettings, _job
from solm.serve.engine import ServeEngine
from solm.serve.openai_schema import ApiError, CompletionRequest
from solm.serve.tip_engine import TipServeEngine

SERVER = SamplingConfig(temperature=0.7, top_p=0.9, seed=5, repetition_penalty=1.2,
                        no_repeat_ngram=3)


class _Engine:
    pool_tokens = 10_000

    def __init__(self, request_config):
        self.request_config = request_config.__get__(self)
        self.registers = set()


def _config(engine_cls, defaults, **fields):
    req = CompletionRequest(model="m", prompt="Hi", **fields)
    job = _job(req, ServeSettings("m", defaults), _Engine(engine_cls.request_config), [1, 2],
               "prompt")
    return job.config


PASTA = PastaDecodeConfig(mode="parallel", max_new_tokens=64, penalize="all", sampling=SERVER)


@pytest.mark.parametrize("fields,expected", [
    ({}, dict(mode="parallel", max_new_tokens=64, penalize="all", temperature=0.7,
              top_p=0.9, seed=5, repetition_penalty=1.2, no_repeat_ngram=3)),
    (dict(temperature=0.0, top_p=0.5, seed=0, repetition_penalty=1.0, no_repeat_ngram=0,
          mode="sequential", max_tokens=10, penalize="blocks"),
     dict(mode="sequential", max_new_tokens=10, penalize="blocks", temperature=0.0,
          top_p=0.5, seed=0, repetition_penalty=1.0, no_repeat_ngram=0)),
    (dict(seed=11), dict(mode="parallel", max_new_tokens=64, penalize="all", temperature=0.7,
                         top_p=0.9, seed=11, repetition_penalty=1.2, no_repeat_ngram=3)),
])
def test_pasta_request_fields_override_the_server_defaults(fields, expected):
    c = _config(ServeEngine, PASTA, **fields)
    got = dict(mode=c.mode, max_new_tokens=c.max_new_tokens, penalize=c.penalize,
               temperature=c.sampling.temperature, top_p=c.sampling.top_p,
               seed=c.sampling.seed, repetition_penalty=c.sampling.repetition_penalty,
               no_repeat_ngram=c.sampling.no_repeat_ngram)
    assert got == expected


def test_a_request_over_the_servers_token_cap_is_refused():
    with pytest.raises(ApiError) as e:
        _config(ServeEngine, PASTA, max_tokens=65)
    assert e.value.param == "max_tokens"
    assert _config(ServeEngine, PASTA, max_tokens=64).max_new_tokens == 64  # the cap itself


TIP = TipDecodeConfig(policy="tip", max_new_tokens=24,
                      sampling=SamplingConfig(temperature=1.0, top_p=0.95, seed=3))


@pytest.mark.parametrize("fields,expected", [
    ({}, dict(max_new_tokens=24, temperature=1.0, top_p=0.95, seed=3)),
    (dict(temperature=0.0, top_p=0.5, seed=0, max_tokens=4),
     dict(max_new_tokens=4, temperature=0.0, top_p=0.5, seed=0)),
])
def test_tip_request_fields_override_the_server_defaults(fields, expected):
    c = _config(TipServeEngine, TIP, **fields)
    assert dict(max_new_tokens=c.max_new_tokens, temperature=c.sampling.temperature,
                top_p=c.sampling.top_p, seed=c.sampling.seed) == expected
    assert c.policy == "tip"  # the server's policy, whatever the request


@pytest.mark.parametrize("fields,cap", [
    (dict(max_tokens=10), 10), (dict(max_completion_tokens=7), 7),
    # OpenAI: max_completion_tokens supersedes the deprecated max_tokens, whichever is larger
    (dict(max_tokens=10, max_completion_tokens=7), 7),
    (dict(max_tokens=7, max_completion_tokens=10), 10), ({}, 64)])
def test_a_chat_requests_cap_is_max_completion_tokens_over_max_tokens(fields, cap):
    from solm.serve.openai_schema import ChatRequest, Message

    req = ChatRequest(model="m", messages=[Message(role="user", content="Hi")], **fields)
    job = _job(req, ServeSettings("m", PASTA), _Engine(ServeEngine.request_config), [1, 2],
               "messages")
    assert job.config.max_new_tokens == cap
