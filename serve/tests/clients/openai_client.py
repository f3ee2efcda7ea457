"""OpenAI's own Python client against flexstruct-serve's chat endpoint: models, a plain and a
streamed completion with citations, and the errors it raises. Usage: openai_client.py BASE_URL"""

import sys

import openai
from openai import OpenAI

QUESTION = "In what year was the trawler Morning Star lost?"


def main(base: str) -> None:
    client = OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0, timeout=60)

    ids = [m.id for m in client.models.list()]
    assert "sample" in ids and "sample:chunks" in ids, ids

    messages = [
        {"role": "system", "content": "Answer from the index."},
        {"role": "user", "content": QUESTION},
    ]
    completion = client.chat.completions.create(model="sample", messages=messages)
    choice = completion.choices[0]
    assert choice.finish_reason == "stop", choice
    content = choice.message.content
    assert "1952" in content and "Sources:" in content, content
    citations = completion.model_extra["citations"]
    assert citations and citations[0]["doc_id"].startswith("doc-"), citations
    assert completion.usage.total_tokens > 0

    stream = client.chat.completions.create(model="sample", messages=messages, stream=True)
    pieces, last = [], None
    for chunk in stream:
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            last = chunk
    assert "".join(pieces) == content, ("".join(pieces), content)
    assert last.choices[0].finish_reason == "stop"
    assert last.model_extra["citations"] == citations

    other = client.chat.completions.create(model="sample:chunks", messages=messages)
    assert other.choices[0].message.content

    try:
        client.chat.completions.create(model="no-such-index", messages=messages)
        raise AssertionError("an unknown model was answered")
    except openai.NotFoundError as error:
        assert error.body["field"] == "model", error.body
    try:
        client.chat.completions.create(model="sample", messages=[{"role": "system", "content": "hi"}])
        raise AssertionError("a conversation without a question was answered")
    except openai.BadRequestError as error:
        assert error.body["field"] == "messages", error.body
    print(f"openai {openai.__version__}: models, plain and streamed completions with citations, errors: ok")


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"))
