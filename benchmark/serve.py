"""One OpenAI-compatible server for a whole sweep: start it, wait until it is healthy, hand its URL
to the cells, stop it cleanly.

Why: with `slm=hf` every cell (every SLURM array task) loads its own copy of the model and batches
only its own queries. Against one server (vLLM with prefix caching on a GPU, `transformers serve`
on a CPU) the model is loaded once and the queries of all concurrent cells batch together; the
cells themselves need no GPU (`slm=openai`, `hydra/launcher=slurm_cpu`). docs/cluster.md, "One
engine for a sweep", has the recipe.

    python -m benchmark.serve --model tiny --device cpu --threads 1 --url-file /tmp/slm.url
    python -m benchmark.serve --engine vllm --host 0.0.0.0 --model Qwen/Qwen3.5-2B \\
        --url-file $BENCHMARK_ROOT/serve/qwen2b.url -- --max-model-len 8192

`--model` is a model directory, a hub id, or a `conf/slm` option (`tiny`, `qwen3.5-2b`, ...: its
backend's path or hub id; the tiny models are built first). Once `GET <url>/models` answers, the
URL is written to `--url-file` (atomically; cells read it with `slm.backend.url_file` and wait for
it with `slm.backend.wait_timeout`) and printed as `export BENCHMARK_SLM_URL=<url>`. The process
then stays in the foreground with the server; SIGTERM or SIGINT (scancel, Ctrl-C, the end of the
SLURM job) stops the server and removes the URL file, so no cell finds a dead address there.
Beside it, `<url-file>.served.json` names the served model id and its weights' identity (a local
directory by the bytes of its files, a cached hub model by its snapshot commit), computed before
the server starts: a cell records it, so weights replaced under the same name make new cells.

A server that exits on its own (an engine that crashed: CUDA error, out of memory) is started
again, on the same address, up to `--restarts` times (launchers/serve/serve.sbatch: 3): the URL
file is removed while it is down and written again once it is healthy; the cells' requests wait
for it meanwhile (slm.backend.restart_wait_s). Past the last restart, the process exits with the
server's exit code."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmark.config import option_file, options
from benchmark.consultants.errors import ConsultantError
from benchmark.store import write_text_atomic

ENGINES = ("transformers", "vllm")
HUB_TIMEOUT = 10.0  # seconds to learn whether the hub can serve a model that is not local


def resolve_model(model: str) -> str:
    """A model directory or hub id for the server: `model` itself, or what the `conf/slm` option
    of that name loads (built first for the tiny models), found in a child process: composing
    the config and building a model import hydra, torch and transformers, about 350 MB this
    process would otherwise hold for the whole sweep."""
    if Path(model).exists() or not option_file("slm", model).is_file():
        return model
    code = "import sys; from benchmark.serve import slm_model; print(slm_model(sys.argv[1]))"
    out = subprocess.run(
        [sys.executable, "-c", code, model], stdout=subprocess.PIPE, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"--model {model}: could not resolve conf/slm/{model}.yaml (see above)")
    return out.stdout.strip().splitlines()[-1]


def check_model(model: str, hub_timeout: float = HUB_TIMEOUT) -> None:
    """Fail in seconds, before any server starts, on a model that is neither a local path nor in
    the Hugging Face cache when the hub cannot be reached (or HF_HUB_OFFLINE is set): the server
    would otherwise retry the hub for minutes and then fail."""
    if Path(model).expanduser().exists():
        return
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    known = ", ".join(options("slm"))
    try:
        snapshot_download(model, local_files_only=True)
        return
    except HFValidationError:
        raise SystemExit(
            f"--model {model!r} is not a local path (it does not exist), nor a hub id or a "
            f"conf/slm option ({known})"
        ) from None
    except LocalEntryNotFoundError:
        pass
    where = (
        f"--model {model!r} is neither a local path nor in the Hugging Face cache "
        f"({constants.HF_HUB_CACHE})"
    )
    fix = (
        f"download it where there is network (`hf download {model}`) and copy the cache, pass a "
        f"local model directory, or a conf/slm option ({known})"
    )
    if constants.HF_HUB_OFFLINE:
        raise SystemExit(f"{where}, and HF_HUB_OFFLINE is set: {fix}")
    problem = _hub_problem(model, hub_timeout)
    if problem is not None:
        raise SystemExit(f"{where}, and {problem}: {fix}")


def _hub_problem(model: str, timeout: float) -> str | None:
    """Why the hub cannot serve `model` (unreachable within `timeout` s, or no such repository),
    None when it answers for it (or asks for a token: the server may have one)."""
    import threading

    from huggingface_hub import model_info
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            model_info(model, timeout=timeout)
            outcome.append(None)
        except Exception as exc:  # noqa: BLE001 - judged below
            outcome.append(exc)

    # a DNS lookup is not bounded by the HTTP timeout: a daemon thread is, and never holds the
    # exit
    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(timeout + 1)
    if not outcome:
        return f"the hub is unreachable (no answer in {timeout:g} s)"
    exc = outcome[0]
    if exc is None:
        return None
    if isinstance(exc, RepositoryNotFoundError):
        return "the hub has no such model repository (or it is private: set HF_TOKEN)"
    if isinstance(exc, HfHubHTTPError):
        return None  # the hub answered (gated, rate-limited, ...): the server may do better
    return f"the hub is unreachable ({type(exc).__name__}: {exc})"


def slm_model(model: str) -> str:
    """The model directory or hub id the `conf/slm` option `model` loads."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from benchmark.config import compose  # the app's config, as a job composes it

    cfg = compose([f"slm={model}"])
    backend: dict[str, Any] = OmegaConf.to_container(cfg.slm.backend, resolve=True)  # type: ignore[assignment]
    target = get_class(str(backend.get("_target_")))
    from benchmark.consultants import backend as backend_class_of  # not the dict `backend`
    from benchmark.consultants.tiny import build_tiny

    if issubclass(target, backend_class_of("tiny")):
        build_tiny(backend["path"], backend.get("seed", 0), backend.get("size", "tiny"))
        return str(backend["path"])
    found = backend.get("path") or backend.get("model")
    if not found:
        raise SystemExit(
            f"--model {model}: conf/slm/{model}.yaml names no model directory or hub id "
            "(slm.backend.path / slm.backend.model); pass one directly"
        )
    return str(found)


def server_command(
    engine: str, model: str, host: str, port: int, device: str, binary: str | None, extra: list[str]
) -> list[str]:
    """The server's command line. vLLM batches concurrent requests (continuous batching) and gets
    --enable-prefix-caching: every query of a sweep starts with the same system message.
    `transformers serve` batches them only with --continuous-batching, given on a CUDA --device;
    not on CPU (nor `auto`, which may be CPU), where its paged KV pool claims 90% of free RAM
    (9.2 GB for the tiny model here), a small --cb-max-memory-percent makes it fail, and it gained
    at most 2x on 20 tiny-model queries. `extra` comes last, so it can add or undo any of these."""
    if engine not in ENGINES:
        raise SystemExit(f"--engine {engine!r} is invalid: allowed {', '.join(ENGINES)}")
    exe = binary or _sibling_or_path(engine)
    common = [exe, "serve", model, "--host", host, "--port", str(port)]
    if engine == "transformers":
        batching = ["--continuous-batching"] if device.startswith("cuda") else []
        return [*common, "--device", device, *batching, *extra]
    return [*common, "--enable-prefix-caching", *extra]


def _sibling_or_path(name: str) -> str:
    """The executable installed beside this Python (the venv's), else the one on PATH."""
    sibling = Path(sys.executable).parent / name
    if sibling.exists():
        return str(sibling)
    found = shutil.which(name)
    if found is None:
        hint = {
            "transformers": "pip install -e '.[serving]'",
            "vllm": "install vLLM in the server's own environment (it pins its own torch) and "
            "pass --bin /path/to/that/venv/bin/vllm",
        }[name]
        raise SystemExit(
            f"`{name}` executable not found beside {sys.executable} or on PATH: {hint}"
        )
    return found


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def advertised_url(host: str, port: int) -> str:
    """The base URL cells use: a wildcard bind address is replaced by this node's host name."""
    name = socket.gethostname() if host in ("0.0.0.0", "::", "") else host
    return f"http://{name}:{port}/v1"


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float) -> str:
    """Probe `url` as a cell would (the openai backend's start-up probe) until the server lists
    its models; returns the first model id. Fails if the server exits or `timeout` passes."""
    from benchmark.consultants import backend

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with code {proc.returncode} before it was healthy")
        try:  # no probe outlasts the deadline
            left = max(deadline - time.monotonic(), 0.1)
            client = backend("openai")(base_url=url, timeout=min(5.0, left))
        except ConsultantError as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"server at {url} not healthy after {timeout:g} s: {exc}") from exc
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
            continue
        client.close()
        return client.model


def weights_of(model: str) -> str | None:
    """The identity of the weights `model` (a directory or hub id) names, as the hf backend
    computes it; None for a hub model that is not in the local cache (its commit is not known
    until the server downloads it)."""
    from benchmark.consultants.fingerprint import resolve_source

    local = Path(model).expanduser().is_dir()
    try:
        _, found, identity = resolve_source(
            None if local else model, model if local else None, None
        )
    except (ConsultantError, ValueError):  # check_model has said why (HFValidationError)
        return None
    return identity if found else None


def write_url_file(
    path: Path, url: str, served: str | None = None, weights: str | None = None
) -> None:
    """Atomically: a cell never reads half a URL. The served model's record first (`served`:
    the model id the server lists), so a cell that finds the URL finds it too."""
    from benchmark.consultants.openai_server_checks import served_file, served_record

    if served is not None:
        write_text_atomic(served_file(path), served_record(url, served, weights))
    write_text_atomic(path, url + "\n")


def remove_url_file(path: Path, url: str) -> None:
    """Only our own URL (and its served record): a newer server may have written them since."""
    from benchmark.consultants.openai_server_checks import served_file

    record = served_file(path)
    try:
        if json.loads(record.read_text(encoding="utf-8")).get("url") == url:
            record.unlink()
    except (OSError, ValueError, AttributeError):
        pass
    try:
        if path.read_text(encoding="utf-8").strip() == url:
            path.unlink()
    except FileNotFoundError:
        pass


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmark.serve",
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after `--` go to the server unchanged.",
    )
    p.add_argument("--model", required=True, help="model dir, hub id or conf/slm option")
    p.add_argument("--engine", choices=ENGINES, default="transformers")
    p.add_argument("--host", default="127.0.0.1", help="bind address (0.0.0.0 on a cluster node)")
    p.add_argument("--port", type=int, default=0, help="0 = a free port")
    p.add_argument(
        "--device", default="auto", help="transformers serve --device (cpu, cuda: batched)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads of the server's torch (OMP_NUM_THREADS); 1 on a busy shared CPU",
    )
    p.add_argument("--bin", default=None, help="server executable (default: beside python)")
    p.add_argument("--url-file", type=Path, default=None, help="write the base URL here")
    p.add_argument("--start-timeout", type=float, default=1800.0, help="seconds to get healthy")
    p.add_argument(
        "--restarts",
        type=int,
        default=0,
        help="start a server that exits on its own again, up to this many times",
    )
    p.add_argument("extra", nargs="*", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    model = resolve_model(args.model)
    check_model(model)
    port = args.port or free_port(args.host)
    cmd = server_command(args.engine, model, args.host, port, args.device, args.bin, args.extra)
    url = advertised_url(args.host, port)
    if args.url_file is not None:  # a stale file from a killed server must not be read
        from benchmark.consultants.openai_server_checks import served_file

        args.url_file.unlink(missing_ok=True)
        served_file(args.url_file).unlink(missing_ok=True)
    args.weights = weights_of(model)
    print(f"starting: {' '.join(cmd)}", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.threads is not None:  # like slm.backend.num_threads: idle threads spin on a busy CPU
        if args.threads < 1:
            raise SystemExit(f"--threads {args.threads} is invalid: allowed an integer >= 1")
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(args.threads)
    if args.restarts < 0:
        raise SystemExit(f"--restarts {args.restarts} is invalid: allowed an integer >= 0")
    return serve(cmd, env, url, args)


def serve(cmd: list[str], env: dict[str, str], url: str, args: argparse.Namespace) -> int:
    """Run the server until SIGTERM/SIGINT (exit 0), starting it again when it exits on its own,
    up to `args.restarts` times (module docstring); its exit code past the last restart."""
    procs = [subprocess.Popen(cmd, env=env)]

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            try:
                served = wait_healthy(url, procs[-1], args.start_timeout)
            except SystemExit:  # a first start that fails, or hangs, is not retried
                if len(procs) == 1 or procs[-1].poll() is None:
                    raise
                code = procs[-1].returncode  # a restart that died on the way up
            else:
                if args.url_file is not None:
                    write_url_file(args.url_file, url, served, getattr(args, "weights", None))
                print(f"# serving {served} ({args.engine})", flush=True)
                print(f"export BENCHMARK_SLM_URL={url}", flush=True)
                code = procs[-1].wait()
                if args.url_file is not None:  # no cell may find it while it is down
                    remove_url_file(args.url_file, url)
            if len(procs) > args.restarts:
                print(f"# the server exited with code {code}", file=sys.stderr, flush=True)
                return code or 1
            print(
                f"# the server exited with code {code}: restart {len(procs)} of "
                f"{args.restarts}: {' '.join(cmd)}",
                file=sys.stderr,
                flush=True,
            )
            procs.append(subprocess.Popen(cmd, env=env))
    except KeyboardInterrupt:
        return 0
    finally:
        if args.url_file is not None:
            remove_url_file(args.url_file, url)
        stop_process(procs[-1])


def stop_process(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGTERM a still-running server, then SIGKILL it if it has not exited within `grace` s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
