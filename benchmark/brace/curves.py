"""Joint RL's training curves: what the sampled rollouts of each iteration scored,
so a run shows whether its rewards moved, not only the before/after measurement."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# the per-iteration fields of joint.train's history, plotted one panel each
FIELDS = ("r_env", "r_belief", "format", "correctness")


def rolling(values: Sequence[float], window: int) -> np.ndarray:
    """The mean of each iteration's last `window` values (fewer at the start)."""
    v = np.asarray(values, dtype=float)
    cum = np.concatenate([[0.0], np.cumsum(v)])
    lo = np.maximum(np.arange(1, len(v) + 1) - window, 0)
    return (cum[1:] - cum[lo]) / (np.arange(1, len(v) + 1) - lo)


def plot(history: Sequence[dict[str, Any]], path: Path, window: int = 5, title: str = "") -> Path:
    """Per iteration of the sampled rollouts: each field (dots) and its rolling mean (line);
    with a critic (PPO), its value loss per iteration and role."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        raise ValueError("no RL iterations to plot (the RL stage was reused or not run)")
    x = [row["iteration"] for row in history]
    critics = sorted({r for row in history for r, v in (row.get("value_loss") or {}).items()
                      if v is not None})  # fmt: skip
    panels = len(FIELDS) + bool(critics)
    fig, axes = plt.subplots(1, panels, figsize=(3.4 * panels, 3.0))
    for ax, field in zip(axes, FIELDS, strict=False):
        y = [row[field] for row in history]
        ax.plot(x, y, ".", alpha=0.4, color="tab:blue")
        ax.plot(x, rolling(y, window), color="tab:blue", label=f"mean of last {window}")
        ax.set(title=field, xlabel="RL iteration")
    axes[0].legend(loc="best", fontsize=8)
    for role in critics:  # PPO: the critic's value loss of each trained role
        pts = [(row["iteration"], row["value_loss"][role]) for row in history
               if (row.get("value_loss") or {}).get(role) is not None]  # fmt: skip
        axes[-1].plot(*zip(*pts, strict=True), "o-", ms=3, label=role)
    if critics:
        axes[-1].set(title="critic value loss", xlabel="RL iteration")
        axes[-1].legend(loc="best", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
