"""OpenAI's own Python client against an OpenAI-compatible server: what it sends and parses.

Usage: python openai_client.py BASE_URL. Prints one JSON object of what the client saw; the
integration test (tests/it/engine.rs) asserts on it. Exits non-zero if the client raises where
it should not.
"""

import json
import sys

import openai

QUESTION = [{"role": "user", "content": "What is 2+2? Answer with the number only."}]


def main(base: str) -> None:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    out = {"client_version": openai.__version__}

    r = client.chat.completions.create(
        model="m", messages=QUESTION, max_tokens=8, temperature=0, logprobs=True, top_logprobs=3
    )
    c = r.choices[0]
    out["chat"] = {
        "content": c.message.content,
        "finish_reason": c.finish_reason,
        "completion_tokens": r.usage.completion_tokens,
        "logprobs": [
            {
                "token": t.token,
                "logprob": t.logprob,
                "bytes": t.bytes,
                "top": [[a.token, a.logprob] for a in t.top_logprobs],
            }
            for t in c.logprobs.content
        ],
    }

    text, usage, lp_tokens = "", None, 0
    for chunk in client.chat.completions.create(
        model="m",
        messages=QUESTION,
        max_tokens=8,
        temperature=0,
        logprobs=True,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.usage is not None:
            usage = chunk.usage.completion_tokens
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None and choice.logprobs.content:
                lp_tokens += len(choice.logprobs.content)
    out["stream"] = {"content": text, "completion_tokens": usage, "logprob_tokens": lp_tokens}

    # vLLM's extensions go through the client's `extra_body`, as load tools send them.
    r = client.chat.completions.create(
        model="m", messages=QUESTION, max_tokens=20, temperature=0, extra_body={"ignore_eos": True}
    )
    out["ignore_eos"] = {
        "completion_tokens": r.usage.completion_tokens,
        "finish_reason": r.choices[0].finish_reason,
    }

    r = client.completions.create(
        model="m", prompt="The sky is", max_tokens=4, temperature=0, logprobs=2
    )
    lp = r.choices[0].logprobs
    out["completion"] = {
        "text": r.choices[0].text,
        "tokens": lp.tokens,
        "token_logprobs": lp.token_logprobs,
        "top_logprobs": lp.top_logprobs,
        "text_offset": lp.text_offset,
    }

    # Scoring a text, as lm-evaluation-harness's loglikelihood tasks do: the prompt echoed with
    # its tokens' log-probabilities, nothing generated.
    r = client.completions.create(
        model="m", prompt="The sky is blue", max_tokens=0, echo=True, logprobs=1, temperature=0
    )
    lp = r.choices[0].logprobs
    out["echo"] = {
        "text": r.choices[0].text,
        "tokens": lp.tokens,
        "token_logprobs": lp.token_logprobs,
        "top_logprobs": lp.top_logprobs,
        "completion_tokens": r.usage.completion_tokens,
    }

    # Several sampled choices of one request.
    r = client.chat.completions.create(
        model="m", messages=QUESTION, max_tokens=4, temperature=0.8, seed=3, n=2
    )
    out["n"] = {
        "index": [c.index for c in r.choices],
        "contents": [c.message.content for c in r.choices],
        "completion_tokens": r.usage.completion_tokens,
    }

    try:
        client.chat.completions.create(
            model="m", messages=[{"role": "wizard", "content": "x"}], max_tokens=2
        )
        out["error"] = None
    except openai.BadRequestError as e:
        out["error"] = {"status": e.status_code, "body": e.body}

    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
