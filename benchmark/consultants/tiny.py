"""A tiny random Qwen3-architecture model, built locally from a seed.

Why: every part of the suite that talks to a language model (batching, thinking budget, cache,
OpenAI server, sweeps) can then be tested end to end on a CPU without downloading weights. The
model is saved with `save_pretrained` (safetensors) and loaded back through the very same
`HFConsultant` / `from_pretrained` path a real model takes. Its answers are mostly invalid
text, which the suite counts like any other invalid answer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchmark.consultants.errors import ConsultantError, ModelNotBuilt
from benchmark.consultants.hf import HFConsultant
from benchmark.vocabulary import LABELS

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")  # added, not special: decoding keeps them, as Qwen3 does

# Qwen3-style template: `enable_thinking=false` closes an empty thinking block up front, `true`
# opens one (as Qwen3.5 does), so generation starts inside the thinking block.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}"
    "{{- '<think>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

# Small built-in corpus: the words prompts and answers are made of, so token counts stay sane.
_CORPUS = """\
You are a helpful assistant guiding an agent in a grid world. Answer with one action.
The agent is in a room. The goal is a green square. Walls are grey. A door is yellow.
You see a wall ahead, a key to the left, the goal two steps forward and one step right.
Valid actions: TURN_LEFT, TURN_RIGHT, FORWARD, PICKUP, TOGGLE, DONE, HIGHER, LOWER.
Action: TURN_LEFT
Action: TURN_RIGHT
Action: FORWARD
Action: PICKUP
Action: TOGGLE
Reason: the goal is ahead and the path is free.
Reason: a wall blocks the way, so turn.
Reason: the card is low, so the next card is likely higher.
{"action": "TURN_LEFT", "reason": "wall ahead"}
{"action": "TURN_RIGHT", "reason": "goal to the right"}
{"action": "FORWARD", "reason": "path is clear"}
{"action": "HIGHER", "reason": "low card"}
{"action": "LOWER", "reason": "high card"}
{"plan": ["FORWARD", "FORWARD", "TURN_LEFT", "FORWARD"]}
The current card is 3. Will the next card be HIGHER or LOWER? Answer: HIGHER
The current card is Q. Cards seen so far: 2 5 7 9 J K A. Answer: LOWER
Position (3, 4), facing east. Visited cells: (1, 1) (1, 2) (2, 2). Known map:
# # # # # # #
# . . . . G #
# . # # . . #
# A . . . . #
# # # # # # #
The autopilot suggests FORWARD. Do you agree? Think step by step, then answer.
<think>
The agent faces a wall. Turning left leads to the open corridor.
</think>
Action: TURN_LEFT
system user assistant north south east west left right up down step steps
0 1 2 3 4 5 6 7 8 9 10 11 12 13 A J Q K
"""


# `size: small` (the fine-tuning base, conf/slm/tiny_small.yaml) learns its tokenizer from the
# corpus above plus these lines in the prompt variants' style, so a prompt costs about half the
# tokens it costs the tiny model (fine-tuning time follows the prompt length).
_CORPUS_SMALL = """\
         DONE->no effect
         PICKUP->takes key    DROP->nothing held    TOGGLE->no door    DONE->no effect
  ?####??
  ?#..#??
  ?#..L??
  ?#.A#??
  ?#.k#??
  ??#####
  ??#####????
  ??#...#????
  ??#..G#????
  ??#..v#????
  ??#A..#
  ??#G..#
  ???####????
  ???#..#????
  ???#..L????
  ???#.^#????
  ???#.k#????
  ?????##????
  ???????
  ???????????
  aligned with corridors / the cached goal. If 'G' is visible, move toward it.
- Choose HIGHER (resp. LOWER) if more remaining cards are strictly above (below) the current card.
- DONE: declare the task finished
- DROP: drop the carried object onto the cell ahead
- FORWARD cannot enter '#' or a closed/locked door -- TOGGLE or turn first.   DONE: only on G.
- FORWARD: move one cell in the facing direction (fails if blocked)
- Follow autopilot when it matches the current subtask and previews.
- Follow planner hint when consistent with safe previews.
- HIGHER: bet the next card ranks above the current one
- If FORWARD is blocked (ahead is '#'), do not choose FORWARD. Prefer doors (D)
- If counts tie, use P(push) and recent streaks as tie-breakers. Follow autopilot when consistent.
- LOWER: bet the next card ranks below the current one
- Line 1: Reason: <one short line, max 12 words>.   Line 2: Action: <HIGHER|LOWER>.
- Line 1: Reason: <one short line, max 15 words>.   Line 2: Action: <one of VALID ACTIONS>.
- No other text or markdown.
- Output only the action token line required below (no markdown).
- Output only the two lines below (no markdown).
- PICKUP: only when 'k' is directly ahead and nothing in hand.  TOGGLE: only on L/D/o (L needs key).
- PICKUP: pick up the object directly ahead
- TOGGLE: open/close/unlock the door directly ahead
- TURN_LEFT: rotate 90 degrees counter-clockwise in place
- TURN_RIGHT: rotate 90 degrees clockwise in place
Action: FORWARD
Action: HIGHER
Action: HIGHER or LOWER
Action: PICKUP
Action: TURN_LEFT or TURN_RIGHT or FORWARD or DONE
Action: TURN_LEFT or TURN_RIGHT or FORWARD or PICKUP or DROP or TOGGLE or DONE
Adjacent F/L/R/B: G/#/./.    Ahead chain: G # ?    Doors visible: (none)
Adjacent F/L/R/B: k/./#/.    Ahead chain: k . .    Doors visible: L 3 ahead, 1 right
Autopilot: FORWARD
Autopilot: HIGHER
Card=A, many ranks above -> HIGHER       Card=K, many ranks below -> LOWER
Counts tie, pushes possible -> pick using push prob. and recent streaks
Decision idx: 3    Win streak: 3    Loss streak: 0
EXAMPLES:
Goal (cached): (3, 3), 1 south
Goal (cached): not seen yet
KNOWN MAP (11x11 around you, north up, x -2..8, y -3..7; your cell = v; ? = never seen):
KNOWN MAP (11x11 around you, north up, x -3..7, y -1..9; your cell = ^; ? = never seen):
Key visible: 1 ahead    Goal: (none)
LEGEND: A=agent #=wall .=floor G=goal ?=unseen
LEGEND: A=agent #=wall .=floor G=goal ?=unseen k=key L=door(locked) D=door(closed) o=door(open)
Longest ray (view): left 1    Longest ray (known map): back 2
Longest ray (view): right 2    Longest ray (known map): right 2
Loop warning: none
MEMORY: Pos=(2, 4)  Room=SW  Visits@here=1  Cells seen=32
MEMORY: Pos=(3, 2)  Room=NE  Visits@here=1  Cells seen=22
OUTPUT FORMAT:
P(higher)=0.69  P(lower)=0.25  P(push)=0.06  Count says: HIGHER (margin 0.44)
PREVIEW  TURN_LEFT->E,'#'    TURN_RIGHT->W,'.'    FORWARD->(3, 3) 'G'
PREVIEW  TURN_LEFT->W,'.'    TURN_RIGHT->E,'#'    FORWARD->blocked 'k'
Planner hint: FORWARD (known-map path to the cached goal, 1 actions)
Planner hint: PICKUP (known-map path to the key, then PICKUP, 1 actions)
ROLE: You advise a card-game agent playing HigherLower: one shuffled 52-card deck is dealt one card at a time, and before each new card the agent bets whether it will rank HIGHER or LOWER than the current card. Ranks, lowest to highest: A 2 3 4 5 6 7 8 9 10 J Q K (the ace is low). A card of the same rank is a push (no reward either way).
ROLE: You are the navigation consultant of a reinforcement-learning agent in the MiniGrid world DoorKey-8x8: an 8x8 grid split by a wall with one locked door; a key 'k' lies on the agent's side and the goal 'G' lies behind the door. The agent sees only a 7x7 window in front of it. Pick the single next action that brings it closest to reaching the goal.
ROLE: You are the navigation consultant of a reinforcement-learning agent in the MiniGrid world Empty-Random-5x5: a small empty room; the goal 'G' is in a corner. The agent sees only a 7x7 window in front of it. Pick the single next action that brings it closest to reaching the goal.
RULES:
Reason: <short>
Reason: x
Recent actions (last 8): TURN_LEFT TURN_LEFT FORWARD
Recent actions (last 8): TURN_RIGHT FORWARD
Recent cells (oldest first, visits): (2, 5)x3
Recent cells (oldest first, visits): (3, 1)x2
Recent: on K->LOWER->WIN(10) | on 10->LOWER->WIN(7) | on 7->LOWER->WIN(4)
Remaining cards: higher=33  lower=12  equal=3
STATE: Card=4  Decision 4/51  Cards left in deck=48
STATE: Facing=NORTH  PathAhead=BLOCKED ('k')  Goal=not visible  Step=3/640
STATE: Facing=SOUTH  PathAhead=clear ('G')  Goal=visible, 1 ahead  Step=2/100
STATUS: HasKey=NO  Door=LOCKED
SUBTASK: FIND AND PICK UP THE KEY ('k') -- face it, then PICKUP
VALID ACTIONS:
VIEW (7x7; top row = farthest ahead; you are A at the bottom middle, facing up):
ahead=BLOCKED,  door visible to the right         -> TURN_RIGHT
ahead=passable, goal visible (3 ahead)            -> FORWARD
key in hand, facing 'L' -> TOGGLE                              door open and goal 1 fwd -> FORWARD
key visible (2 fwd, 1 right), no key in hand -> TURN_RIGHT     facing 'k', no key in hand -> PICKUP
visits high + loop hint + longest_corridor=right  -> TURN_RIGHT
"""

# The model shapes. `tiny` is the original model: its files, and so every cell identity made with
# `slm=tiny`, depend on these values and on `_CORPUS`; never change them.
SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        corpus=(_CORPUS,),
        vocab_size=600,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    ),
    # the tiny shape with a larger vocabulary (1255 tokens, 0.23M parameters): on this CPU the
    # prompt length, not the width, is what fine-tuning time follows
    "small": dict(corpus=(_CORPUS, _CORPUS_SMALL), vocab_size=2048),
}
SIZES["small"] = {**SIZES["tiny"], **SIZES["small"]}  # otherwise the tiny shape


def family_vocabularies() -> str:
    """Every env family's own words (`Family.vocabulary`: TextWorld's rooms, objects and command
    templates), in family-name order: the `text` size's tokenizer learns them."""
    from benchmark.envs.family import available_families, get_family

    return "\n".join(get_family(name).vocabulary() for name in available_families())


# the small shape whose tokenizer also learned the families' words (text games): a TextWorld
# command is a few tokens instead of a spelling, so prompts are shorter and answers easier to learn
SIZES["text"] = {**SIZES["small"], "corpus": (_CORPUS, _CORPUS_SMALL, family_vocabularies)}
SIZES["text"]["vocab_size"] = 4096


def family_words() -> str:
    """The families' words as a prompt shows them: after a space (the byte-level tokenizer's
    `Ġword`; `text`'s corpus, one phrase per line, taught mostly the line-initial form, so it
    spells ` kitchenette` in four pieces) and capitalised (a room's title: `-= Spare Room =-`),
    and each certainty label as a belief claim ends it (`[almost certain]`)."""
    lines = []
    for line in family_vocabularies().splitlines():
        title = " ".join(word[:1].upper() + word[1:] for word in line.split())
        lines += [" " + line, " " + title]
    lines += [f"- the score of the game [{label}]" for label in LABELS]
    return "\n".join([*lines, "<belief_state>", "</belief_state>"])


# the small shape whose tokenizer holds each game word whole, as sentences, titles and belief
# claims write it (about 5,000 tokens): the toy demo's belief examples are 13% fewer tokens than
# with `text`'s tokenizer, their answers 31% fewer
SIZES["words"] = {**SIZES["small"], "corpus": (_CORPUS, _CORPUS_SMALL, family_words)}
SIZES["words"]["vocab_size"] = 8192  # a cap: the corpus' merges end below it


def train_tokenizer(corpus: tuple = (_CORPUS,), vocab_size: int = 600) -> Any:
    """A byte-level BPE tokenizer trained on the built-in corpus (deterministic, offline); an
    entry of `corpus` may be a function that returns its text (read when the model is built)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=[*SPECIAL_TOKENS, *THINK_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(
        [line for text in corpus for line in (text() if callable(text) else text).splitlines()],
        trainer=trainer,
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        model_max_length=32768,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny(directory: str | os.PathLike, seed: int = 0, size: str = "tiny") -> Path:
    """Build the tiny model (`size`: a key of SIZES) into `directory` unless it is already there;
    return its path.

    Built once across processes in a private directory and renamed into place
    (benchmark.store.build_once): an incomplete leftover is set aside, never deleted."""
    from benchmark.store import build_once

    if size not in SIZES:
        raise ConsultantError(f"slm.backend.size={size!r} is not one of {list(SIZES)}")
    target = Path(directory)
    build_once(target, lambda work: _write_tiny(work, seed, size), is_built, aside="incomplete")
    return target


def is_built(directory: Path) -> bool:
    """The model's files are there (config.json is written with them, in the directory renamed
    into place whole)."""
    return (Path(directory) / "config.json").exists()


def _write_tiny(directory: Path, seed: int, size: str = "tiny") -> None:
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    shape = dict(SIZES[size])
    tokenizer = train_tokenizer(shape.pop("corpus"), shape.pop("vocab_size"))
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        **shape,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        initializer_range=0.1,  # wider than 0.02 so greedy text is not one token repeated
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        eos_token_id=eos,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)


class TinyConsultant(HFConsultant):
    """`HFConsultant` on the tiny model at `path`, built there from `seed` (and `size`, a key of
    SIZES: `tiny` by default, `small` for conf/slm/tiny_small.yaml) first if missing."""

    label = "tiny"
    protocol_fields = ()  # built in float32 from a seed: no hub dtype to follow

    def __init__(self, path: str, seed: int = 0, size: str = "tiny", **kwargs: Any) -> None:
        build_tiny(path, seed, size)
        kwargs.setdefault("dtype", "float32")
        kwargs.setdefault("device_map", "cpu")
        super().__init__(model=None, path=path, **kwargs)

    @classmethod
    def weights_identity(
        cls, path: str, seed: int = 0, size: str = "tiny", **kwargs: object
    ) -> str | None:
        """The built files' fingerprint; `ModelNotBuilt` before the job builds them."""
        if not is_built(Path(path)):
            raise ModelNotBuilt(f"tiny model (seed {seed}, size {size}) not built yet")
        return super().weights_identity(path=path, digests=kwargs.get("digests"))

    @classmethod
    def make_weights(cls, path: str, seed: int = 0, size: str = "tiny", **_: object) -> None:
        build_tiny(path, seed, size)
