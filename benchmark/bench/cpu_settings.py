"""What the CPU bench runs and measures against: its sections in order, the target of each
headline ratio, and how much work each section does (FULL for `make bench`, QUICK for
`--quick`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SECTIONS = ("gate", "training", "evaluation", "workers", "ir1", "tuning", "threads", "memory")
TARGETS = {
    "gate": 5.0,
    "evaluation": 2.0,
    "ir1_floor": 1.2,  # IR 1: choice scoring's ms/query as a multiple of the floor
    "tuning": 3.0,
    "training": 1.0,
    "memory_gib": 2.0,
    "workers": 1.7,  # 2 worker processes vs 1 on 2 cores
    "training_workers": 1.7,  # PPO training steps/s, env stepping in 2 processes vs 1
    "env_share": 0.5,  # IR-0 decisions/s vs the env's own steps/s
}
IR1_PAPER_MAX_STEPS = 500  # the fourrooms step cap of the paper setting (the paper's 4 x 500)


@dataclass(frozen=True)
class Sizes:
    """How much work each section does. FULL: `make bench` took about 8 minutes on 2 loaded cores
    with four IR-1 paths; the IR-1 section (now five paths x 4 episodes x 500 steps, and the
    interleaved per-query costs) is most of it."""

    gate_batch: int = 100
    gate_repeats: int = 25
    train_steps: int = 8192
    train_n_steps: int | None = None  # PPO n_steps override (None: SB3's 2048)
    train_repeats: int = 2
    eval_episodes: int = 100
    eval_max_steps: int = 20  # fourrooms step cap (500 in the paper setting)
    eval_repeats: int = 2
    target_ir: float = 0.3
    tune_trials: int = 15
    tune_episodes: int = 10
    thread_repeats: int = 3
    ir1_episodes: int = 4
    ir1_max_steps: int = IR1_PAPER_MAX_STEPS
    workers_episodes: int = 100
    workers_max_steps: int = 100
    workers_repeats: int = 2
    env_rate_seconds: float = 2.0  # the env's own steps/s: each process steps at least this long


FULL = Sizes()
QUICK = Sizes(
    gate_batch=100,
    gate_repeats=3,
    train_steps=1024,
    train_n_steps=256,
    train_repeats=1,
    eval_episodes=12,
    eval_max_steps=8,
    eval_repeats=1,
    tune_trials=3,
    tune_episodes=3,
    thread_repeats=1,
    ir1_episodes=2,
    ir1_max_steps=6,
    workers_episodes=8,
    workers_max_steps=6,
    workers_repeats=1,
    env_rate_seconds=0.2,
)


def sizes_dict(sizes: Sizes) -> dict[str, Any]:
    return asdict(sizes)
