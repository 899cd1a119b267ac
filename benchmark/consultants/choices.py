"""Choice scoring (Decoding.mode "choices", `score_choices`; docs/choices.md): a query whose answer
is one bare valid action is answered by prefilling its prompt (each group of equal-length rows
unpadded on a copy of the stored prefix: `PrefixReuse.prefill_groups`) and scoring every valid
action's continuation (`choice_ids`: its tokens and the token that ends the reply): on CPU with
attention layers only, as branches after the prompt in the prefill's own forward
(`PrefixReuse.extend`'s branches, attention.branched_attention); otherwise in one batched forward on that cache. The most likely
action is the answer (`slm.decoding.choice_score`: by the sum of its continuation's token
log-probabilities, or by their mean), every action's probability goes in `Answer.choices`. With a repetition
penalty (`slm.decoding.repetition_penalty` != 1), each action token's log-probability is taken
from the logits as `generate` would penalize them at that point: over the prompt for the first
token, over the prompt and the action's earlier tokens for the later ones."""

from __future__ import annotations

import math
import time
from typing import Any

from benchmark.consultants.base import Answer
from benchmark.consultants.errors import ConsultantError
from benchmark.consultants.finite import nonfinite_rows, raise_nonfinite
from benchmark.consultants.penalty import penalize
from benchmark.consultants.prefix import Prompt, next_positions
from benchmark.consultants.turns import local_end_of_reply


def choice_answer(
    actions: tuple[str, ...],
    logp: list[float],
    prompt_tokens: int,
    seconds: float = 0.0,
    tokens: list[int] | None = None,
) -> Answer:
    """The most likely action (ties: the first) as the answer, every action's probability (its
    continuation's likelihood, normalized over the valid actions) in `Answer.choices`; every
    backend that scores choices answers through this. With `tokens` (each continuation's token
    count: choice_score "mean"), an action's score is its log-likelihood per token, and the
    probabilities are those scores normalized over the valid actions."""
    if tokens is not None:
        logp = [v / n for v, n in zip(logp, tokens, strict=True)]
    best = max(range(len(actions)), key=lambda k: (logp[k], -k))
    top = max(logp)
    weights = [math.exp(v - top) for v in logp]
    total = sum(weights)
    probs = {a: w / total for a, w in zip(actions, weights, strict=True)}
    return Answer(actions[best], prompt_tokens, 0, seconds, choices=probs)


def token_counts(decoding: Any, conts: list[list[int]]) -> list[int] | None:
    """`choice_answer`'s `tokens` for a query's decoding: each continuation's length when it
    ranks by the mean (choice_score "mean"), None when by the sum."""
    return [len(c) for c in conts] if decoding.choice_score == "mean" else None


class ChoiceScorer:
    """Choice scoring, one part of the hf backend: built on its `ModelRuntime`
    (benchmark.consultants.runtime) and its `PrefixReuse` prefill (benchmark.consultants.prefix),
    it scores given prompts' actions (`logprobs`) and turns an action into its continuation's
    tokens (`choice_ids`); the backend renders the prompts."""

    def __init__(self, runtime: Any, prefix: Any) -> None:
        self.runtime, self.prefix = runtime, prefix
        self._memo: dict[str, list[int]] = {}

    def choice_ids(self, action: str) -> list[int]:
        """An action's continuation: its tokens, then the end of the answer: the token the chat
        template writes after the reply (benchmark.consultants.turns: Llama-3.1's `<|eot_id|>`,
        not its generation config's first stop token `<|end_of_text|>`), the first stop token
        for a tokenizer without a template; memoized (the same few actions come at every step)."""
        if action not in self._memo:
            tokenizer = self.runtime.tokenizer
            ids = tokenizer.encode(action, add_special_tokens=False)
            end = local_end_of_reply(tokenizer, action)
            if end is None and getattr(tokenizer, "chat_template", None):
                raise ConsultantError(
                    f"slm.decoding.mode=choices: the chat template of {self.runtime.identity} "
                    f"does not write the reply {action!r} as its own tokens; use mode=generate"
                )
            self._memo[action] = [*ids, self.runtime.eos_ids[0] if end is None else end]
        return list(self._memo[action])

    def logprobs(
        self,
        prompts: list[Prompt],
        conts: list[list[list[int]]],
        penalties: list[float],
        max_batch_size: int,
    ) -> list[tuple[list[float], int, float]]:
        """Per prompt: the log-likelihood of each of its continuations `conts` (`choice_ids`,
        all their tokens) after it under its repetition penalty, the prompt's length and its
        share of its batch's seconds. Batches of `max_batch_size` prompts, longest first; the
        prompt's prefix cache is reused and each length group is prefilled unpadded
        (`PrefixReuse.prefill_groups`)."""
        out: list[tuple[list[float], int, float] | None] = [None] * len(prompts)
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i].ids))
        for s in range(0, len(order), max_batch_size):
            chunk = order[s : s + max_batch_size]
            t0 = time.perf_counter()
            scores = self.score_batch(
                [prompts[i] for i in chunk],
                [conts[i] for i in chunk],
                [penalties[i] for i in chunk],
            )
            per = (time.perf_counter() - t0) / len(chunk)
            for i, v in zip(chunk, scores, strict=True):
                out[i] = (v, len(prompts[i].ids), per)
        return out  # type: ignore[return-value]

    def score_batch(
        self, rows: list[Prompt], conts: list[list[list[int]]], penalties: list[float]
    ) -> list[list[float]]:
        """Each row's action log-likelihoods; a group whose logits hold a NaN or an infinity
        raises a ConsultantError naming the batch (benchmark.consultants.finite)."""
        import torch

        seqs = [r.ids for r in rows]
        out: list[list[float]] = [[] for _ in rows]
        with torch.inference_mode():
            for members, cache, last, mask in self.prefix.prefill_groups(seqs, rows, conts):
                t0 = time.perf_counter()
                if any(penalties[r] != 1.0 for r in members):
                    scored, bad = self._penalized(
                        members, cache, last, seqs, conts, penalties, mask
                    )
                else:
                    scored, bad = self._gathered(members, cache, last, conts, mask)
                bad_rows = [members[j] for j in bad]
                raise_nonfinite(
                    self.runtime, self.prefix.batching, "choice scoring", bad_rows, seqs
                )
                for r, values in zip(members, scored, strict=True):
                    out[r] = values
                self.runtime.stats["decode_seconds"] += time.perf_counter() - t0
        return out

    def _gathered(self, members, cache, last, conts, mask) -> tuple[list[list[float]], list[int]]:
        """(per member: each action's log-likelihood; the members whose logits are not finite).
        Every action token's log-probability is gathered on the device and copied to the host
        once per group together with the finite flags, instead of one device sync per token;
        each action's tokens are summed in order, as a loop over them would."""
        import torch

        keys: list[tuple[int, int]] = []  # (member j, action a) of each gathered value
        if last.dim() == 3:  # folded: the prompt's last position, then every branch's
            logp = torch.log_softmax(last.float(), dim=-1)  # [g, 1 + branch tokens, V]
            where: list[tuple[int, int, int]] = []  # (member, position, token)
            for j, r in enumerate(members):
                k = 1
                for a, c in enumerate(conts[r]):
                    where += [(j, 0 if t == 0 else k + t - 1, c[t]) for t in range(len(c))]
                    keys += [(j, a)] * len(c)
                    k += len(c) - 1
            values = _at(logp, where)
            flags = [nonfinite_rows(last)]
            owners = list(range(len(members)))
        else:
            first = torch.log_softmax(last.float(), dim=-1)  # [g, V]: each action's 1st token
            pairs, logits = self._action_tails(members, cache, conts, mask)
            seen = [0] * len(members)
            for j, _ in pairs:  # pair m is member j's action seen[j]
                keys.append((j, seen[j]))
                seen[j] += 1
            parts = [_at(first, [(j, c[0]) for j, c in pairs])]
            flags = [nonfinite_rows(last)]
            owners = list(range(len(members)))
            if logits is not None:  # the later tokens, pair by pair
                rest = torch.log_softmax(logits.float(), dim=-1)  # [pairs, width, V]
                tails = [
                    (m, t - 1, c[t]) for m, (_, c) in enumerate(pairs) for t in range(1, len(c))
                ]
                keys += [keys[m] for m, _, _ in tails]
                parts.append(_at(rest, tails))
                flags.append(nonfinite_rows(logits))
                owners += [j for j, _ in pairs]
            values = torch.cat(parts)
        copied = torch.cat([values, *(f.to(values.dtype) for f in flags)]).tolist()  # one copy
        sums: dict[tuple[int, int], float] = {}
        for key, v in zip(keys, copied[: len(keys)], strict=True):
            sums[key] = sums.get(key, 0.0) + v
        scores: list[list[float]] = [[] for _ in members]
        for (j, _), v in sums.items():  # j-major, actions in order
            scores[j].append(v)
        bad = {j for j, f in zip(owners, copied[len(keys) :], strict=True) if f}
        return scores, sorted(bad)

    def _action_tails(
        self, members, cache, conts, mask=None
    ) -> tuple[list[tuple[int, list[int]]], Any]:
        """Every (member row, action) pair, and the logits of the actions' later tokens: one
        forward of the actions right-padded (padding comes after) on the prompt's cache, which is
        reordered to one row per pair; None when every action is a single token. A left-padded
        group's attention `mask` goes along, grown by the actions' columns, with each action's
        positions following its prompt's last."""
        import torch

        pairs = [(j, c) for j, r in enumerate(members) for c in conts[r]]
        width = max(len(c) for _, c in pairs) - 1
        if width <= 0:
            return pairs, None
        rt = self.runtime
        index = torch.tensor([j for j, _ in pairs], device=rt.device)
        cache.reorder_cache(index)
        ids = torch.full((len(pairs), width), rt.pad_id, dtype=torch.long)
        for m, (_, c) in enumerate(pairs):
            ids[m, : len(c) - 1] = torch.tensor(c[:-1], dtype=torch.long)
        kwargs: dict[str, Any] = {rt.cache_arg: cache}
        if mask is not None:
            grown = torch.cat([mask[index], mask.new_ones((len(pairs), width))], dim=1)
            kwargs.update(attention_mask=grown, position_ids=next_positions(grown, width))
        logits = rt.model(input_ids=ids.to(rt.device), use_cache=True, **kwargs).logits
        return pairs, logits

    def _penalized(
        self, members, cache, last, seqs, conts, penalties, mask=None
    ) -> tuple[list[list[float]], list[int]]:
        """(per member row: each action's log-likelihood with every token's logits penalized
        over the prompt and the action's earlier tokens (module docstring); the members whose
        logits are not finite). The later tokens' logits come from the folded branches, or from
        one forward of the actions on the cache."""
        import torch

        bad = set(nonfinite_rows(last).nonzero().flatten().tolist())
        if last.dim() == 3:  # folded: [g, 1 + branch tokens, V]
            positions = []
            for j, r in enumerate(members):
                at, rows = 1, []
                for c in conts[r]:
                    rows.append([last[j, 0]] + [last[j, at + t - 1] for t in range(1, len(c))])
                    at += len(c) - 1
                positions.append(rows)
        else:
            pairs, logits = self._action_tails(members, cache, conts, mask)
            if logits is not None:
                flags = nonfinite_rows(logits).tolist()
                bad |= {j for (j, _), f in zip(pairs, flags, strict=True) if f}
            positions = [[] for _ in members]
            for m, (j, c) in enumerate(pairs):
                positions[j].append(
                    [last[j]] + [logits[m, t - 1] for t in range(1, len(c))]  # type: ignore[index]
                )
        out = []
        for j, r in enumerate(members):
            values = []
            for c, vectors in zip(conts[r], positions[j], strict=True):
                contexts = [seqs[r] + c[:t] for t in range(len(c))]
                scores = penalize(torch.stack(vectors).float(), contexts, penalties[r])
                logp = torch.log_softmax(scores, dim=-1)
                values.append(sum(float(logp[t, c[t]]) for t in range(len(c))))
            out.append(values)
        return out, sorted(bad)


def _at(tensor: Any, where: list[tuple[int, ...]]) -> Any:
    """tensor[w] for every index tuple w of `where`, in one gather on the tensor's device."""
    import torch

    index = torch.tensor(where, dtype=torch.long, device=tensor.device)
    return tensor[tuple(index.unbind(-1))]
