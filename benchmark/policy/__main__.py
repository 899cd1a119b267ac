"""python -m benchmark.policy: export trained policies as a bundle; check the training-code record.

    python -m benchmark.policy export +experiment=policies          # the preset's 9 policies
    python -m benchmark.policy export env=doorkey8 policy.seed=0,1,2 --out my-bundle
    python -m benchmark.policy export --sweep outputs/sweeps/policies/<time>
    python -m benchmark.policy export --dir outputs/checkpoints/doorkey8-c9c342e6a4
    python -m benchmark.policy training-code [--record]

Overrides are the app's (`python -m benchmark ...`): a comma list sweeps like -m, and a preset's
sweep (`+experiment=policies`) is expanded; each combination names the cached checkpoint
directory the app would train or use. The bundle goes to --out (default
<paths.root>/bundles/<experiment_name>); publish it with `hf upload <user>/<repo> <out>`."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import benchmark  # noqa: F401 - registers the config resolvers
from benchmark.config import compose, sweep_jobs
from benchmark.store import Store

log = logging.getLogger("benchmark.policy")


def combinations(overrides: list[str]) -> list[list[str]]:
    """Every job the overrides (and a preset's hydra.sweeper.params) describe, as override lists;
    the command line wins over the preset's sweep, as in Hydra."""
    return sweep_jobs(overrides)[1]


def from_overrides(overrides: list[str]):
    """(selected policies, notes on those not trained, the first job's config)."""
    from omegaconf import OmegaConf

    from benchmark.policy import names
    from benchmark.policy.bundle import Selected
    from benchmark.policy.checkpoints import checkpoint_dir, intact
    from benchmark.seeds import Splits

    selected, missing, first = [], [], None
    for combo in combinations(overrides):
        cfg = compose(combo)
        first = first or cfg
        # the checkpoint name as the job resolves it (tK -> rNNN, checked against the recipe)
        OmegaConf.update(cfg, "policy.checkpoint", names.of_config(cfg))
        splits = Splits.from_config(cfg.get("splits"))
        if cfg.policy.get("path") or cfg.policy.get("source"):
            missing.append(f"{' '.join(combo)}: policy.path/source set, not a cached policy")
            continue
        directory = checkpoint_dir(cfg, splits)
        if intact(directory):
            selected.append(Selected(directory, str(cfg.policy.checkpoint)))
        else:
            missing.append(
                f"{' '.join(combo)}: not trained ({directory.name}); train it with "
                f"python -m benchmark train_only=true {' '.join(combo)}"
            )
    return selected, missing, first


def export_main(args: argparse.Namespace) -> int:
    from benchmark.policy.bundle import Selected, export, from_sweep, root_of

    selected, missing, cfg = [Selected(Path(d)) for d in args.dir], [], None
    for sweep in args.sweep:
        found, notes = from_sweep(Path(sweep))
        selected += found
        missing += [f"{sweep} job {n}" for n in notes]
    if args.overrides or not (args.dir or args.sweep):
        found, notes, cfg = from_overrides(args.overrides)
        selected += found
        missing += notes
    root = args.root
    if root is None and args.sweep:
        root = root_of(Path(args.sweep[0]))
    if root is None:
        cfg = cfg or compose([])
        root = cfg.paths.root
    out = args.out
    if out is None:
        cfg = cfg or compose([])
        out = Store.of(cfg.paths).bundle_dir(str(cfg.experiment_name))
    for note in missing:
        print(f"not exported: {note}", file=sys.stderr)
    if not selected:
        print("no trained policy to export", file=sys.stderr)
        return 1
    command = "python -m benchmark.policy " + " ".join(sys.argv[1:])
    out = export(selected, out, root, title=args.title, command=command)
    print(f"exported {len(selected)} policies to {out}")
    print(f"use: python -m benchmark policy.path={out} env=<env> policy.seed=<seed> ...")
    print(f"publish: hf upload <user>/<repo> {out} .")
    return 1 if missing else 0


def training_code_main(args: argparse.Namespace) -> int:
    from benchmark.policy import provenance
    from benchmark.policy.train import TRAINING_VERSION

    if args.record:
        data = provenance.record(TRAINING_VERSION)
        print(
            f"recorded training code {data['digest'][:12]} as TRAINING_VERSION "
            f"{data['training_version']} in {provenance.RECORD}"
        )
        return 0
    problem = provenance.check(TRAINING_VERSION)
    print(problem or f"training code matches {provenance.RECORD.name}")
    return 1 if problem else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="export trained policies as a bundle directory")
    exp.add_argument("overrides", nargs="*", help="app overrides (comma lists sweep)")
    exp.add_argument("--out", type=Path, help="bundle directory (created or extended)")
    exp.add_argument(
        "--root", type=Path, help="results root with the PPO-only cells (test metrics)"
    )
    exp.add_argument("--sweep", action="append", default=[], help="a sweep dir: its jobs' policies")
    exp.add_argument("--dir", action="append", default=[], help="a complete checkpoint directory")
    exp.add_argument("--title", help="the model card's title (default: the bundle's dir name)")
    code = sub.add_parser("training-code", help="check (or --record) the training-code digest")
    code.add_argument("--record", action="store_true", help="write benchmark/policy/TRAINING_CODE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "export":
        return export_main(args)
    return training_code_main(args)


if __name__ == "__main__":
    sys.exit(main())
