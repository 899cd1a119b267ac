"""`python -m benchmark.bench [cpu|gpu|gpu-smoke] [options]`: side-by-side speed and memory ratios.

cpu (default, `make bench`): gate, training, evaluation, workers, ir1, tuning, threads and memory sections in
one process; prints a progress line as each section starts (with the time left, estimated from
the last run's section times) and a table (each ratio with its target and PASS/MISS), and writes
`<paths.bench>/<timestamp>.json`. gpu (`make bench-gpu`): Qwen3.5-2B/4B shapes with random
weights on the first CUDA device: queries/s, prefill and decode per query, ASK+ decisions/s at IR
0 and IR 1, memory, kernels per layer type, the gate check and the projected Table 1 time, within
`--budget-s`; `--device cpu` is its CPU dry run (toy widths of the same architecture). gpu-smoke
(`make gpu-smoke`): the first GPU run's checks in under 3 minutes (benchmark.bench.gpu_smoke:
kernels, SDPA backend, padded batches in bf16, a Qwen3.5-2B prefill at batch 64 x 750).

Exit codes: 0 done (a MISS is reported, not an error; gpu-smoke: 1 when a check failed), 2 no
CUDA device for the gpu benchmark or gpu-smoke, 3 its time budget ran out (the message names the section), 4 a Qwen3.5 layer would run
transformers' reference kernels on CUDA (the message names the layer and the install)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from benchmark.bench.common import default_root, format_table, jsonable, machine_info, write_report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmark.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("kind", nargs="?", default="cpu", choices=("cpu", "gpu", "gpu-smoke"))
    p.add_argument("--quick", action="store_true", help="small sizes (tests, smoke runs)")
    p.add_argument(
        "--root",
        type=Path,
        default=None,
        help="outputs root (paths.root); default $BENCHMARK_ROOT or ./outputs",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for the cpu run (default 1: fastest on a shared machine)",
    )
    p.add_argument(
        "--sections", default=None, help="comma-separated subset of the cpu sections (default: all)"
    )
    p.add_argument(
        "--ir1-max-steps",
        type=int,
        default=None,
        help="cpu ir1 section: episode step cap (default: the size's, 500 = the paper setting)",
    )
    p.add_argument(
        "--device",
        default="cuda",
        help="gpu benchmark device (cuda, cuda:0; cpu: the CPU dry run, toy widths)",
    )
    p.add_argument(
        "--tiny-shapes",
        action="store_true",
        help="gpu benchmark: same architecture at toy widths (implied by --device cpu)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="gpu benchmark / gpu-smoke: wall-clock budget in s (default 480: 8 minutes / 180), "
        "enforced: past it the run stops (exit 3)",
    )
    p.add_argument(
        "--only",
        default=None,
        help="gpu-smoke: comma-separated subset of its sections (kernels, sdpa, padded, prefill; "
        "`--only kernels` is make install-gpu's last step)",
    )
    p.add_argument("--models", default="qwen3.5-2b,qwen3.5-4b", help="gpu benchmark models")
    p.add_argument(
        "--page",
        default=None,
        metavar="NAME",
        help="cpu: also write the table as docs/measured/NAME.md with the command, commit, date "
        "and machine (`make bench`: --page bench)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    root = (args.root or default_root()).resolve()
    if args.kind == "gpu":
        from benchmark.bench.gpu import main_gpu

        if args.budget_s is None:
            args.budget_s = 480.0
        return main_gpu(args, root)
    if args.kind == "gpu-smoke":
        from benchmark.bench.gpu_smoke import main_smoke

        return main_smoke(args, root)
    return main_cpu(args, root)


def main_cpu(args: argparse.Namespace, root: Path) -> int:
    import torch

    from benchmark.bench.common import compose
    from benchmark.bench.cpu import CpuBench
    from benchmark.bench.cpu_settings import FULL, QUICK, SECTIONS, sizes_dict
    from benchmark.results import provenance

    if args.threads < 1:
        raise SystemExit(f"--threads={args.threads} must be >= 1")
    sections = tuple(s.strip() for s in args.sections.split(",")) if args.sections else SECTIONS
    default_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else FULL
    if args.ir1_max_steps is not None:
        if args.ir1_max_steps < 1:
            raise SystemExit(f"--ir1-max-steps={args.ir1_max_steps} must be >= 1")
        sizes = dataclasses.replace(sizes, ir1_max_steps=args.ir1_max_steps)
    bench_dir = Path(str(compose(root).paths.bench))
    started = time.perf_counter()
    before = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-work-") as work:
        bench = CpuBench(root, Path(work), sizes, default_threads)
        bench.run(sections, expected_s=last_section_seconds(bench_dir, args.quick))
    data = {
        "kind": "cpu",
        "quick": args.quick,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "wall_seconds": time.perf_counter() - started,
        "sizes": sizes_dict(sizes),
        "machine": {
            "before": before,
            "after": machine_info(),
            "default_torch_threads": default_threads,
        },
        "note": "machine shared with other jobs: ratios of paths timed side by side, medians",
        "provenance": provenance(),
        "sections": bench.sections,
        "table": [c.to_dict() for c in bench.checks],
    }
    path = write_report(bench_dir, jsonable(data))
    print(format_table(bench.checks))
    load = data["machine"]["before"].get("loadavg")
    summary = f"{data['wall_seconds']:.0f} s, load average at start {load}"
    print(f"\n{summary}; wrote {path}")
    if args.page:
        from benchmark.measured import write_page

        body = (
            f"```text\n{format_table(bench.checks)}\n```\n\n{summary}; the full record: `{path}`."
        )
        command = " ".join(["python -m benchmark.bench", *(args.argv or [])])
        print(f"measured page: {write_page(args.page, 'make bench', body, command)}")
    return 0


def last_section_seconds(bench_dir: Path, quick: bool) -> dict[str, float] | None:
    """Each section's seconds in the newest earlier cpu run of the same size (the progress
    line's time-left estimate), or None when there is none."""
    import json

    for path in sorted(Path(bench_dir).glob("*.json"), key=lambda p: p.stat().st_mtime)[::-1]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("kind") == "cpu" and data.get("quick") == quick:
            sections = data.get("sections") or {}
            return {k: float(v["seconds"]) for k, v in sections.items() if v.get("seconds")}
    return None


if __name__ == "__main__":
    sys.exit(main())
