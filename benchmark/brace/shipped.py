"""The base model that ships with the suite: the tiny Qwen3 model pretrained by
benchmark.brace.base on the generated transcripts, so that Agent-BRACE's SFT starts from a model
that copies names off its prompt (`brace.base=pretrained`). Nothing is downloaded.

Its weights lie in the package (benchmark/brace/pretrained_base/), their SHA-256 pinned in the
model's config.json (`weights_sha256`, compared at every load by benchmark.weights.check_folder)
and in PINNED below, so that the SFT identity of a job names one exact set of weights:

    python -m benchmark.brace.shipped ship <pretraining folder>   # probe it; at the goal, ship it
    python -m benchmark.brace.shipped check                       # the shipped files' digest

`make base` rebuilds the weights from the recipe recorded in the folder's made_with.json; a
rebuild must pass the same probe (bit-identity across machines is not required); shipping it
changes PINNED, a deliberate re-key of every job that trains on it."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).with_name("pretrained_base")
NAME = "pretrained"  # the value of `brace.base` that names the shipped base
WEIGHTS = "model.safetensors"
PINNED = ""  # SHA-256 of FOLDER/model.safetensors; written here once, when the base is final
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    WEIGHTS,
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)
RECORDS = ("made_with.json", "summary.json")  # what the pretraining wrote
PROBE_GOAL = 0.95  # exact copies of the room and of the visible objects, held-out transcripts


class ShippedError(RuntimeError):
    """The shipped base is missing or is not the pinned one; one line."""


def folder() -> Path:
    """The shipped base's folder, once its weights are checked against the pin."""
    from benchmark.store import file_sha256

    weights = FOLDER / WEIGHTS
    if not PINNED or not weights.is_file():
        raise ShippedError(
            f"brace.base={NAME}: no pretrained base ships in {FOLDER} yet; allowed a model "
            "directory or null (the tiny model `tiny_size`); build one with `make base`"
        )
    found = file_sha256(weights)
    if found != PINNED:
        hint = " (a git-lfs pointer? fetch the file)" if weights.stat().st_size < 1024 else ""
        raise ShippedError(
            f"refused {weights}: SHA-256 {found[:16]}... is not the pinned {PINNED[:16]}...{hint}"
        )
    return FOLDER


def identity() -> str:
    """What `brace.base=pretrained` stands for in a model identity: the name and the pin."""
    return f"{NAME}:{PINNED[:16]}"


def card(made_with: dict[str, Any], summary: dict[str, Any], probe: dict[str, Any]) -> str:
    """The model card: size, recipe, corpus, steps, time, probe (all read off the run's records)."""
    settings = made_with["settings"]
    shape = ", ".join(f"{k} {settings[k]}" for k in ("layers", "width", "heads", "kv_heads", "mlp", "context", "vocab"))  # fmt: skip
    recipe = ", ".join(f"{k} {settings[k]}" for k in ("steps", "batch", "lr", "min_lr", "warmup", "weight_decay", "seed"))  # fmt: skip
    low_room, high_room = probe["room_ci"]
    low_vis, high_vis = probe["visible_ci"]
    return "\n".join([
        "# The pretrained base (`brace.base=pretrained`)",
        "",
        f"- Architecture: Qwen3 (transformers `Qwen3ForCausalLM`), {summary['parameters']:,} "
        f"parameters; {shape}; float32 safetensors, SHA-256 `{summary['weights_sha256']}`.",
        f"- Recipe: `python -m benchmark.brace.base` (`make base`), settings {recipe}; "
        f"identity `{made_with['identity']}` (corpus version {settings['corpus_version']}).",
        "- Corpus: generated TextWorld-style transcripts (benchmark.brace.corpus): valid "
        "commands, observations, the state block and the command an expert or a random player "
        "took, with room and object names drawn per document from thousands of adjective+noun "
        "names, and copy questions; no belief blocks, no demo prompts; seeds and about one name "
        "in eight held out.",
        f"- Training: {summary['steps']} steps, {summary['tokens']:,} tokens, "
        f"{summary['seconds'] / 60:.0f} min on the CPU ({summary['tokens_per_second']:.0f} "
        f"tokens/s), loss {summary['first_loss']:.2f} -> {summary['last_loss']:.2f}.",
        f"- Probe ({probe['n']} held-out transcripts, held-out seeds and names, greedy, exact "
        f"match): current room {probe['room']:.3f} [{low_room:.3f}, {high_room:.3f}], visible "
        f"objects {probe['visible']:.3f} [{low_vis:.3f}, {high_vis:.3f}], names "
        f"{probe['visible_names']:.3f}; goal {PROBE_GOAL} each.",
        "",
    ])  # fmt: skip


def ship(run: Path, n: int = 200, pages: Path | None = None) -> dict[str, Any]:
    """Probe a finished pretraining folder's model on `n` held-out transcripts and, at the goal,
    copy it into the package, its config pinned to its weights' digest, with its records and its
    card (README.md there; the measured page docs/measured/base-model.md). Below the goal
    nothing is copied."""
    from benchmark import measured
    from benchmark.brace.base import probe
    from benchmark.store import file_sha256

    run, model = Path(run), Path(run) / "model"
    missing = [name for name in RECORDS if not (run / name).is_file()]
    missing += [f"model/{name}" for name in MODEL_FILES if not (model / name).is_file()]
    if missing:
        raise ShippedError(f"{run}: not a finished pretraining folder (no {missing[0]})")
    result = probe(model, n)
    if min(result["room"], result["visible"]) < PROBE_GOAL:
        raise ShippedError(
            f"{run}: probe room {result['room']:.3f}, visible {result['visible']:.3f}; "
            f"allowed to ship only at >= {PROBE_GOAL} each"
        )
    digest = file_sha256(model / WEIGHTS)
    shutil.rmtree(FOLDER, ignore_errors=True)
    FOLDER.mkdir(parents=True)
    for name in MODEL_FILES:
        shutil.copy2(model / name, FOLDER / name)
    config = json.loads((FOLDER / "config.json").read_text())
    (FOLDER / "config.json").write_text(json.dumps({**config, "weights_sha256": digest}, indent=2) + "\n")  # fmt: skip
    for name in RECORDS:
        shutil.copy2(run / name, FOLDER / name)
    (FOLDER / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
    records = {name: json.loads((run / name).read_text()) for name in RECORDS}
    text = card(records["made_with.json"], {**records["summary.json"], "weights_sha256": digest}, result)  # fmt: skip
    (FOLDER / "README.md").write_text(text)
    page = measured.write_page(
        "base-model", "The pretrained base: model card", text.split("\n", 2)[2],
        f"python -m benchmark.brace.shipped ship {run} --n {n}", pages or measured.PAGES,
    )  # fmt: skip
    return {"folder": str(FOLDER), "page": str(page), "weights_sha256": digest,
            "pin": f'PINNED = "{digest}"', "probe": result}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmark.brace.shipped", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="check the shipped weights against the pin")
    p = sub.add_parser("ship", help="probe a finished pretraining folder; at the goal, ship it")
    p.add_argument("run", type=Path, help="the pretraining folder (holds model/)")
    p.add_argument("--n", type=int, default=200, help="held-out transcripts (default 200)")
    args = ap.parse_args(argv)
    from benchmark.brace.base import json_cli

    if args.command == "ship":
        return json_cli(lambda: ship(args.run, args.n), (ShippedError,))
    return json_cli(lambda: {"folder": str(folder()), "weights_sha256": PINNED}, (ShippedError,))


if __name__ == "__main__":
    sys.exit(main())
