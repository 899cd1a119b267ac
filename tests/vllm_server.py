"""A small server speaking the vLLM endpoints the openai backend uses, on a real (tiny) transformers
model: vLLM itself does not run here. It records every request body.

- GET /v1/models: the model, `owned_by` "vllm" (vLLM's model card);
- POST /tokenize: a prompt, or messages through the chat template (vLLM's /tokenize);
- POST /v1/completions on token-id prompts: greedy, with vLLM's `logprobs` (raw log-probabilities,
  computed before `allowed_token_ids` or any sampling parameter acts: vLLM's default
  `--logprobs-mode raw_logprobs`), `logprob_token_ids` (those tokens' log-probabilities instead of
  the natural top-k; `token_ids=False` plays a vLLM from before it, which ignores the field),
  `return_tokens_as_token_ids` and `prompt_logprobs`;
- POST /v1/chat/completions: the chat template, then generation (greedy, or sampled from the
  request's temperature/top_p/top_k with its seed); vLLM's `stop` strings cut the text before
  the first one found, with finish_reason "stop" (the tokens generated are all counted);
- sampling keys checked as vLLM checks them (HTTP 400 otherwise): top_k -1, 0 or >= 1, top_p in
  (0, 1], min_p in [0, 1], repetition_penalty > 0 (applied as generate() applies it).

`fields` plays a server that takes only those chat completion fields, as `transformers serve`
does (TRANSFORMERS_FIELDS; its `owned_by` is not "vllm"): any other is answered HTTP 422
"Unexpected fields in the request: {...}". With "generation_config" among them, that field's JSON
of generate() arguments (`top_k`, `repetition_penalty`) is applied, as `transformers serve` does.

`status` set to 503 answers every request so (an engine still loading); `stop()` then `start()`
on the same port is an engine restart. `python -m tests.vllm_server serve MODEL --host H --port P
[...]` runs it as a process, the command line of `vllm serve` (what `python -m benchmark.serve
--engine vllm --bin` starts); its pid is appended to $VLLM_TEST_PIDS when set."""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class BadRequest(Exception):
    pass


class Unprocessable(BadRequest):
    """A field the server does not take (`fields`): HTTP 422."""


# the chat completion fields `transformers serve` takes (OpenAI's, plus its own) that the openai
# backend may send; it answers any other with HTTP 422
TRANSFORMERS_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "stream",
        "chat_template_kwargs",
        "generation_config",
    }
)


class VLLMServer:
    def __init__(
        self,
        model_dir: str,
        *,
        token_ids: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str | None = None,
        fields: frozenset[str] | None = None,
        owned_by: str | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.lm = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.name = name or str(model_dir)
        self.token_ids = token_ids
        self.fields = fields
        self.owned_by = owned_by or ("vllm" if fields is None else "local")
        self.host, self.port = host, port
        self.status = 200
        self.bodies: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self.httpd: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # ------------------------------------------------------------------ endpoints
    def tokenize(self, body: dict) -> dict:
        if "messages" in body:
            text = self.tok.apply_chat_template(
                body["messages"],
                add_generation_prompt=body.get("add_generation_prompt", True),
                tokenize=False,
                **(body.get("chat_template_kwargs") or {}),
            )
            ids = self.tok(text, add_special_tokens=body.get("add_special_tokens", False))
        else:
            ids = self.tok(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
        tokens = ids["input_ids"]
        return {"tokens": tokens, "count": len(tokens), "max_model_len": 32768}

    def completions(self, body: dict) -> dict:
        import torch

        check_sampling(body)
        prompts = body["prompt"]
        if prompts and isinstance(prompts[0], int):
            prompts = [prompts]
        wanted = body.get("logprob_token_ids") if self.token_ids else None
        n_logprobs = body.get("logprobs")
        allowed = body.get("allowed_token_ids")
        name = (
            (lambda t: f"token_id:{t}")
            if body.get("return_tokens_as_token_ids")
            else (lambda t: self.tok.decode([t]))
        )
        choices = []
        for i, ids in enumerate(prompts):
            with self._lock, torch.inference_mode():
                logits = self.lm(input_ids=torch.tensor([ids])).logits[0]
            logp = torch.log_softmax(logits.float(), -1)  # raw: before any processing
            last = logp[-1]
            pick = last.clone()
            if allowed:
                keep = torch.full_like(pick, -float("inf"))
                keep[allowed] = 0
                pick = pick + keep
            token = int(pick.argmax())
            choice: dict[str, Any] = {
                "index": i,
                "text": self.tok.decode([token]),
                "finish_reason": "length",
                "logprobs": None,
                "prompt_logprobs": None,
            }
            if n_logprobs is not None:
                if wanted:
                    shown = [token, *(t for t in wanted if t != token)]
                else:
                    top = [int(t) for t in last.topk(int(n_logprobs)).indices] if n_logprobs else []
                    shown = [token, *(t for t in top if t != token)]
                choice["logprobs"] = {
                    "tokens": [name(token)],
                    "token_logprobs": [float(last[token])],
                    "top_logprobs": [{name(t): float(last[t]) for t in shown}],
                    "text_offset": [0],
                }
            if body.get("prompt_logprobs") is not None:
                choice["prompt_logprobs"] = [None] + [
                    {str(t): {"logprob": float(logp[k, t]), "rank": 1}}
                    for k, t in enumerate(ids[1:])
                ]
            choices.append(choice)
        return {"object": "text_completion", "model": self.name, "choices": choices}

    def chat(self, body: dict) -> dict:
        import torch

        check_sampling(body)
        unexpected = set(body) - self.fields if self.fields is not None else set()
        if unexpected:
            raise Unprocessable(f"Unexpected fields in the request: {unexpected}")
        options = {**body, **json.loads(body.get("generation_config") or "{}")}
        text = self.tok.apply_chat_template(
            body["messages"],
            add_generation_prompt=True,
            tokenize=False,
            **(body.get("chat_template_kwargs") or {}),
        )
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        temperature = float(options.get("temperature", 1.0))
        kwargs: dict[str, Any] = {"do_sample": temperature > 0}
        if float(options.get("repetition_penalty", 1.0)) != 1.0:
            kwargs["repetition_penalty"] = float(options["repetition_penalty"])
        if temperature > 0:
            kwargs |= {"temperature": temperature, "top_p": float(options.get("top_p", 1.0))}
            kwargs["top_k"] = max(int(options.get("top_k", -1)), 0) or None
            torch.manual_seed(int(options.get("seed", 0)))
        ends = [t for t in (self.tok.eos_token_id, self.tok.convert_tokens_to_ids("<|im_end|>"))]
        with self._lock, torch.inference_mode():
            out = self.lm.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=int(body.get("max_tokens", 16)),
                eos_token_id=[t for t in ends if t is not None],
                pad_token_id=self.tok.pad_token_id or 0,
                **kwargs,
            )[0, len(ids) :].tolist()
        finish = "stop" if out and out[-1] in ends else "length"
        content = self.tok.decode(out, skip_special_tokens=True)
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        found = [content.find(x) for x in stops if x and x in content]
        if found:
            content, finish = content[: min(found)], "stop"
        return {
            "object": "chat.completion",
            "model": self.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(out)},
        }

    # ------------------------------------------------------------------ server
    def start(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def reply(self, code: int, data: dict) -> None:
                blob = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if server.status != 200:
                    return self.reply(server.status, {"error": "loading"})
                model = {"id": server.name, "object": "model", "owned_by": server.owned_by}
                self.reply(200, {"object": "list", "data": [model]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append((self.path, body))
                if server.status != 200:
                    return self.reply(server.status, {"error": "loading"})
                route = {
                    "/tokenize": server.tokenize,
                    "/v1/completions": server.completions,
                    "/v1/chat/completions": server.chat,
                }.get(self.path)
                if route is None:
                    return self.reply(404, {"error": f"no route {self.path}"})
                try:
                    self.reply(200, route(body))
                except Unprocessable as exc:  # transformers serve's (FastAPI's) error body
                    self.reply(422, {"detail": str(exc)})
                except BadRequest as exc:
                    self.reply(400, {"error": {"message": str(exc), "code": 400}})

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((self.host, self.port), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None


def check_sampling(body: dict) -> None:
    """vLLM's SamplingParams checks, for the keys a request carries."""
    top_k = body.get("top_k", -1)
    if not (top_k in (-1, 0) or top_k >= 1):
        raise BadRequest(f"top_k must be -1 (disable), 0 or at least 1, got {top_k}")
    if not 0 < body.get("top_p", 1.0) <= 1:
        raise BadRequest(f"top_p must be in (0, 1], got {body['top_p']}")
    if not 0 <= body.get("min_p", 0.0) <= 1:
        raise BadRequest(f"min_p must be in [0, 1], got {body['min_p']}")
    if not body.get("repetition_penalty", 1.0) > 0:
        raise BadRequest(f"repetition_penalty must be > 0, got {body['repetition_penalty']}")
    if body.get("temperature", 1.0) < 0:
        raise BadRequest(f"temperature must be non-negative, got {body['temperature']}")


def main(argv: list[str]) -> None:
    """`serve MODEL --host H --port P [ignored]`: serve until killed."""
    import time

    if argv[:1] != ["serve"] or len(argv) < 2:
        raise SystemExit("usage: python -m tests.vllm_server serve MODEL --host H --port P")
    host = argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8000
    pids = os.environ.get("VLLM_TEST_PIDS")
    if pids:
        with open(pids, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    VLLMServer(argv[1], host=host, port=port)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(sys.argv[1:])
