"""How an answer ends: the token a chat template writes right after the assistant's reply
(Qwen's `<|im_end|>`, Llama-3.1's `<|eot_id|>`, not the tokenizer's end of text). Choice scoring
scores each action followed by it, in the hf backend (the local tokenizer) and the openai backend
(the server's /tokenize) alike: both render the same one-turn chat (`reply_turn`) and take the
token after the reply's own tokens (`token_after`), so no table of templates is kept."""

from __future__ import annotations


def reply_turn(reply: str) -> list[dict[str, str]]:
    """A one-question chat whose assistant message is `reply`."""
    return [{"role": "user", "content": "?"}, {"role": "assistant", "content": reply}]


def token_after(rendered: list[int], own: list[int]) -> int | None:
    """The token after the last occurrence of `own` in `rendered` (the reply's tokens in the
    rendered chat); None when `own` is empty, absent (the template merged the reply's tokens
    with its neighbours) or last."""
    n = len(own)
    if not n:
        return None
    for i in range(len(rendered) - n - 1, -1, -1):
        if rendered[i : i + n] == own:
            return rendered[i + n]
    return None


def local_end_of_reply(tokenizer, reply: str) -> int | None:
    """`token_after` with a local tokenizer and its chat template (None without a template)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    text = tokenizer.apply_chat_template(
        reply_turn(reply), add_generation_prompt=False, tokenize=False, enable_thinking=False
    )
    rendered = tokenizer(text, add_special_tokens=False)["input_ids"]
    return token_after(rendered, tokenizer.encode(reply, add_special_tokens=False))
