import pytest

from solm.core.pasta_lang import (PastaSyntaxError, Promise, faithful, parse, promises,
                                  serialize, strip, validate)

GOOD = ('Intro:\n1. A:<promise topic="a" tokens="2"/><async> alpha text</async>\n'
        '2. B:<promise topic="b" tokens="1"/><async> beta</async>\n<sync/>Done.')


def test_round_trip_is_exact():
    assert serialize(parse(GOOD)) == GOOD
    assert serialize(parse("no tags at all\n")) == "no tags at all\n"


def test_strip_splices_blocks_at_their_promises():
    assert strip(GOOD) == "Intro:\n1. A: alpha text\n2. B: beta\nDone."
    assert faithful(GOOD, "Intro:\n1. A:  alpha text\n2. B: beta\n Done.")
    assert not faithful(GOOD, "Intro: something else")


def test_promises_carry_topic_length_and_body():
    ps = promises(GOOD)
    assert ps == [Promise("a", 2, " alpha text"), Promise("b", 1, " beta")]


@pytest.mark.parametrize("text, message, line", [
    ('x\n<promise topic="a" tokens="2"/> no block', "not followed directly", 2),
    ('<promise topic="a" tokens="2"/><async>open', "unclosed", 1),
    ('a\nb <async>x</async>', "without a promise", 2),
    ('a</async>', "without a promise", 1),
    ('<promise topic="a" tokens="2"/><async>x <sync/></async>', "nesting", 1),
    ('<promise topic="a" tokens="0"/><async>x</async>', "out of range", 1),
    ('<promise topic=a tokens=2/>', "malformed promise", 1),
])
def test_validation_says_what_and_where(text, message, line):
    with pytest.raises(PastaSyntaxError, match=message) as e:
        parse(text)
    assert e.value.line == line
    assert validate(text) and f"line {line}" in validate(text)[0]


def test_lenient_strip_never_raises():
    assert strip('a<async>b</async><sync/>c<promise topic="t" tokens="3"/>', strict=False) == "abc"
