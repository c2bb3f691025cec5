"""A choice's text without stop sequences takes a shorter path (every streamed token goes through it): it releases what
the general rule releases, token by token, and the OpenAI request's TGI parameters are reused only where equal."""

import random

from attnserve.service.engine.options import DecodingOptions
from attnserve.service.http.openai import completions
from attnserve.service.http.openai.choices import ChoiceText
from attnserve.service.http.openai.schemas import ChatCompletionRequest
from attnserve.service.requests.units import Token

# a one-character stop sequence that never occurs: the general rule holds nothing back, as without stop sequences
NEVER = ("\x00",)


def tokens(rng: random.Random) -> list[tuple[Token, str | None]]:
    """A random answer: texts with and without a leading space, empty texts (a byte token that completes no
    character), specials, and a finish reason on the last."""
    out = []
    for i in range(rng.randint(1, 12)):
        kind = rng.random()
        if kind < 0.15:
            token = Token(2, "", -0.01, True)
        elif kind < 0.3:
            token = Token(7, "", -0.5, False)
        else:
            token = Token(10 + i, rng.choice(["AH0", " T", " EH1", "N", " SH"]), -0.1 * i, False)
        out.append((token, None))
    reason = rng.choice(["eos_token", "length", "stop_sequence", None])
    out[-1] = (out[-1][0], reason)
    return out


def test_without_stop_sequences_a_choice_releases_what_the_general_rule_does():
    rng = random.Random(0)
    for _ in range(2000):
        answer = tokens(rng)
        fast, general = ChoiceText(()), ChoiceText(NEVER)
        for token, finish in answer:
            top = [Token(3, "X", -2.0, False)] if rng.random() < 0.3 else None
            assert fast.add(token, top, finish) == general.add(token, top, finish), answer
        assert (fast.text, fast.sent, fast.pending, fast.tokens, fast.finish_reason) == (
            general.text,
            general.sent,
            general.pending,
            general.tokens,
            general.finish_reason,
        )


def body(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields})


def test_each_request_s_decoding_options_follow_its_body_field_by_field():
    """The OpenAI edge builds each request's options from its body alone, no set kept from another request: the same
    body gives equal options, any field that differs gives its own, a sampled one keeps its seed."""

    def options(b: ChatCompletionRequest, sampling: bool, max_new_tokens: int, seed: int | None = None):
        return DecodingOptions(**completions.decoding_values(b, sampling, max_new_tokens, None, seed, None))

    first = options(body(stop=["x"]), False, 5)
    assert options(body(stop=["x"]), False, 5) == first and first.stop == ("x",) and first.max_new_tokens == 5
    assert not first.sampling and options(body(), False, 5) != first
    for other in (options(body(stop=["y"]), False, 5), options(body(stop=["x"]), False, 6)):
        assert other != first
    sampled = [options(body(temperature=0.5), True, 5, 7) for _ in range(2)]
    assert sampled[0] == sampled[1] and sampled[0].seed == 7 and sampled[0].temperature == 0.5
    assert options(body(temperature=0.5), False, 5).temperature is None  # greedy: the sampling fields stay off
