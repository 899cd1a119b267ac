"""Policy bundles: trained PPO policies exported to a self-describing directory that the Hugging
Face hub accepts as a model repository (`hf upload <repo> <dir>` publishes it), and used back
with `policy.path=<dir>` or `policy.source=<repo id>` (+ `policy.revision`).

A bundle:

    README.md                 model card (YAML metadata: library_name stable-baselines3, tags,
                              model-index with the test results), what each policy is, how to use it
    bundle.json               the index: format, one entry per policy (env, seed, recipe hash,
                              checkpoints with their SHA-256, policy identity and validation score,
                              test results)
    <env>-s<seed>-<hash>/     one trained policy:
        best.safetensors final.safetensors rNNN.safetensors
                                      the policy's tensors (benchmark.policy.portable), no pickle
        policy.json                   what rebuilds the policy: the suite's policy class by name,
                                      its kwargs, the observation and action spaces as plain
                                      fields, the recipe
        best.json final.json ...      when each was saved and its validation score
        curve.csv                     the validation learning curve
        config.json                   the resolved training config (env + policy recipe, validation
                                      split, TRAINING_VERSION) and its hash `config_hash`
        results.json                  test metrics with 95% CIs from the PPO-only cells of the
                                      results root (huggingface_sb3's mean_reward, std_reward, ...)
        system.json                   machine and package versions it was trained with
        COMPLETE                      SHA-256 of every .safetensors and of every other file,
                                      checked on every load
    COMPLETE                  SHA-256 of bundle.json, README.md and each policy's COMPLETE, so
                              the manifests cover every file: an edited or corrupt one is refused

Loading one never unpickles: the policy is built from the suite's own classes and given the
tensors. The policy identity (`checkpoints.policy_digest`) of a .safetensors with its policy.json
is that of the SB3 zip it was made from (export checks it), so a cell evaluated from the bundle
has the same hash, and byte-identical episodes, as one evaluated from the cache that trained it.
Bundles of the earlier formats (SB3 zips copied byte for byte) still load, under the zip's trust
rules (`checkpoints.check_pickles`, `policy.trust_pickle`)."""

from __future__ import annotations

import json
import logging
import shutil
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from benchmark import weights
from benchmark.envs.base import env_identity
from benchmark.policy import portable
from benchmark.policy.card import model_card
from benchmark.policy.checkpoints import (
    MARKER,
    CheckpointError,
    config_hash,
    intact,
    manifest,
    match_options,
    policy_digest,
    resolve,
    weights_suffix,
)
from benchmark.policy.names import order
from benchmark.policy.provenance import system_info
from benchmark.seeds import DEFAULT_SPLITS, Splits
from benchmark.store import (
    Store,
    file_sha256,
    read_json,
    replace_dir,
    write_json_atomic,
    write_text_atomic,
)

log = logging.getLogger(__name__)

# 3: safetensors and policy.json instead of SB3 zips; 2: COMPLETE manifests cover every file
FORMAT = "ask-benchmark-policies/3"
FIRST_FORMAT = "ask-benchmark-policies/1"  # still loaded: its zips are verified
INDEX = "bundle.json"
CARD = "README.md"
SYSTEM = "system.json"  # written beside the zips at training time (checkpoints.ensure_dir)
# a cell's summary fields copied into results.json (those present)
RESULT_FIELDS = tuple(
    f"{m}_{s}"
    for m in ("reward", "success", "accuracy", "length")
    for s in ("mean", "ci95_low", "ci95_high")
)


@dataclass(frozen=True)
class Selected:
    """One policy to export: its complete checkpoint directory and the checkpoint the job used
    (the model card's headline; None: best, else final)."""

    directory: Path
    checkpoint: str | None = None


# ----------------------------------------------------------------------------- export
def policy_name(config: dict[str, Any], ckpt_dir: Path) -> str:
    """`<env>-s<seed>-<recipe hash>`: readable and unique within a bundle."""
    return f"{config['env']['name']}-s{config['policy']['seed']}-{ckpt_dir.name.rsplit('-', 1)[-1]}"


def evaluations(
    root: Path | None, sha256s: dict[str, str], weights: dict[str, str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Per checkpoint name, the complete PPO-only cells of the results root that evaluated it (by
    the checkpoint file's SHA-256, or by the policy identity `weights` gives it: a cell evaluated
    from a bundle read another file of the same policy), test split first, then larger first."""
    found: dict[str, list[dict[str, Any]]] = {}
    if root is None:
        return found
    by_sha = {sha: name for name, sha in sha256s.items()}
    by_weights = {digest: name for name, digest in (weights or {}).items()}
    for cell in Store(root).cells():
        name = by_sha.get(cell.checkpoint_sha256) or by_weights.get(
            (cell.inputs or {}).get("policy_weights")
        )
        ppo_only = getattr(cell.gate_class, "name", None) == "never"
        if name is None or not ppo_only or (done := cell.read()) is None:
            continue
        identity = cell.identity or {}
        summary, episodes = done
        rewards = [float(e["reward"]) for e in episodes]
        found.setdefault(name, []).append(
            {
                "cell_hash": cell.hash,
                "cell": summary.get("cell"),
                "env": summary.get("env"),
                "metric": summary.get("metric"),
                "split": summary.get("split"),
                "seeds": summary.get("seeds"),  # [first, last, count]
                "evaluation_seed": identity.get("seed"),
                "n_episodes": len(episodes),
                "std_reward": statistics.pstdev(rewards) if rewards else None,
                **{k: summary[k] for k in RESULT_FIELDS if k in summary},
            }
        )
    for rows in found.values():
        rows.sort(key=lambda r: (r["split"] != "test", -r["n_episodes"], r["cell_hash"]))
    return found


def _results_json(
    env: dict[str, Any], headline: str, evals: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """huggingface_sb3's results.json fields for the headline checkpoint (when it was evaluated),
    and every evaluation found, by checkpoint."""
    out: dict[str, Any] = {"env_id": env_id(env), "checkpoint": headline}
    main = (evals.get(headline) or [None])[0]
    if main is not None:
        out.update(
            mean_reward=main["reward_mean"],
            std_reward=main["std_reward"],
            n_evaluation_episodes=main["n_episodes"],
            split=main["split"],
        )
    out["evaluations"] = evals
    return out


def env_id(env: dict[str, Any]) -> str:
    """The environment's public id: the Gymnasium id for MiniGrid tasks, else the suite's name."""
    return str((env.get("task") or {}).get("gym_id") or env.get("label") or env["name"])


def _headline(selected: Selected, names: Iterable[str]) -> str:
    names = list(names)
    if selected.checkpoint in names:
        return selected.checkpoint
    return "best" if "best" in names else "final"


def _write_weights(
    src: Path, tmp: Path, names: list[str], suffix: str, recipe: dict[str, Any]
) -> dict[str, str]:
    """Each checkpoint of `src` as `<name>.safetensors` in `tmp`, with one policy.json; returns
    each one's policy identity. A zip is converted (its tensors read with weights_only, its
    settings read without unpickling; a zip whose policy class or kwargs are not the suite's is
    refused) and must give the zip's own identity; a bundle's files are copied."""
    if suffix == portable.SUFFIX:
        for ckpt in names:
            shutil.copyfile(src / f"{ckpt}{suffix}", tmp / f"{ckpt}{suffix}")
        shutil.copyfile(src / portable.SETTINGS, tmp / portable.SETTINGS)
    else:
        settings: dict[str, str] = {}
        for ckpt in names:
            found = portable.write(src / f"{ckpt}.zip", tmp / f"{ckpt}{portable.SUFFIX}")
            settings.setdefault(json.dumps(found, sort_keys=True), ckpt)
        if len(settings) != 1:
            raise CheckpointError(
                f"cannot export {src}: its checkpoints {', '.join(settings.values())} differ in "
                "their policy class, kwargs or spaces (one training saves one kind of policy)"
            )
        write_json_atomic(
            tmp / portable.SETTINGS, {**json.loads(next(iter(settings))), "recipe": recipe}
        )
    digests = {c: policy_digest(tmp / f"{c}{portable.SUFFIX}") for c in names}
    for ckpt in names if suffix == ".zip" else ():
        if digests[ckpt] != policy_digest(src / f"{ckpt}.zip"):
            raise CheckpointError(
                f"cannot export {src / ckpt}.zip: its safetensors copy does not give the zip's "
                "policy identity (a space or kwarg the bundle format does not carry exactly)"
            )
    return digests


def export_policy(selected: Selected, out: Path, root: Path | None) -> dict[str, Any]:
    """Write one complete checkpoint directory (the cache's, or a bundle's policy) into
    `out/<name>/` as safetensors and policy.json, with its config hash, results and system;
    returns its bundle.json entry."""
    src = Path(selected.directory)
    if not intact(src):
        raise CheckpointError(
            f"{src} is not a complete checkpoint directory (no {MARKER}, or a checkpoint file "
            "that no longer matches its SHA-256): train it first"
        )
    recorded = manifest(src) or {}
    sha256s: dict[str, str] = dict(recorded["checkpoints"])  # the files cells were evaluated from
    config = json.loads((src / "config.json").read_text())
    config.setdefault("config_hash", src.name.rsplit("-", 1)[-1])
    config.setdefault("checkpoint_dir", src.name)
    name = policy_name(config, src)
    names = sorted(sha256s, key=order)
    metas = {}
    headline = _headline(selected, names)
    system = read_json(src / SYSTEM) or {
        "unknown": "trained before checkpoint directories recorded their machine and versions"
    }
    recipe = {
        "name": config["policy"].get("recipe"),
        "config_hash": config["config_hash"],
        "training_version": config.get("training_version"),
    }
    written: dict[str, Any] = {}

    def fill(tmp: Path) -> None:
        digests = _write_weights(src, tmp, names, weights_suffix(recorded), recipe)
        evals = evaluations(root, sha256s, digests)
        for ckpt in names:
            if (src / f"{ckpt}.json").is_file():
                shutil.copyfile(src / f"{ckpt}.json", tmp / f"{ckpt}.json")
                metas[ckpt] = json.loads((src / f"{ckpt}.json").read_text())
        if (src / "curve.csv").is_file():
            shutil.copyfile(src / "curve.csv", tmp / "curve.csv")
        write_json_atomic(tmp / "config.json", config)
        write_json_atomic(tmp / SYSTEM, system)
        write_json_atomic(tmp / "results.json", _results_json(config["env"], headline, evals))
        weights = {c: file_sha256(tmp / f"{c}{portable.SUFFIX}") for c in names}
        files = {
            p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.suffix != portable.SUFFIX
        }
        # last: marks it complete
        write_json_atomic(
            tmp / MARKER, {"weights": "safetensors", "checkpoints": weights, "files": files}
        )
        written.update(sha256=weights, policy_weights=digests, evals=evals)

    replace_dir(policy_dir(out, name), fill)
    evals = written.pop("evals")
    return {
        "name": name,
        "env": config["env"]["name"],
        "env_id": env_id(config["env"]),
        "env_label": config["env"].get("label") or config["env"]["name"],
        "metric": config["env"].get("metric", "success"),
        "seed": int(config["policy"]["seed"]),
        "config_hash": config["config_hash"],
        "training_version": config.get("training_version"),
        "total_timesteps": config["policy"].get("total_timesteps"),
        "headline": headline,
        "checkpoints": {
            c: {
                "sha256": written["sha256"][c],
                "policy_weights": written["policy_weights"][c],
                "timesteps": metas.get(c, {}).get("timesteps"),
                "validation_reward": metas.get(c, {}).get("eval_reward"),
                "validation_success": metas.get(c, {}).get("eval_success"),
            }
            for c in names
        },
        "test": {c: rows[0] for c, rows in evals.items()},  # the headline rows of the card
        "trained_with": {k: system.get(k) for k in ("cpu", "torch_cpu_capability", "packages")},
    }


def export(
    selected: Iterable[Selected | Path],
    out: str | Path,
    root: str | Path | None = None,
    *,
    title: str | None = None,
    command: str | None = None,
) -> Path:
    """Export policies into the bundle `out` (created, or extended: a policy already there is
    replaced, the others kept), then rewrite bundle.json and the model card. `root`: the results
    root whose PPO-only cells give the test metrics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    index = _read_index(out) or {}
    entries = {policy_dir(out, e.get("name")).name: e for e in index.get("policies", [])}
    for item in selected:
        item = item if isinstance(item, Selected) else Selected(Path(item))
        entry = export_policy(item, out, Path(root) if root else None)
        entries[entry["name"]] = entry
        log.info("exported %s into %s", item.directory, out / entry["name"])
    index = {
        "format": FORMAT,
        "title": title or index.get("title") or out.name,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": command or index.get("command"),
        "exported_with": system_info(),
        "policies": [entries[k] for k in sorted(entries)],
    }
    write_json_atomic(out / INDEX, index)
    write_text_atomic(out / CARD, model_card(index))
    files = [INDEX, CARD, *(f"{name}/{MARKER}" for name in sorted(entries))]
    write_json_atomic(
        out / MARKER, {"format": FORMAT, "files": {f: file_sha256(out / f) for f in files}}
    )
    return out


# ----------------------------------------------------------------------------- import
def _read_index(directory: Path) -> dict[str, Any] | None:
    """bundle.json, None when there is none; corrupt or foreign: CheckpointError naming it."""
    path = directory / INDEX
    if not path.exists():
        return None
    index = read_json(path)
    if not isinstance(index, dict):
        raise CheckpointError(
            f"{path} is corrupt (not a JSON bundle index): export the bundle again or download "
            "it again"
        )
    if not str(index.get("format", "")).startswith(FORMAT.split("/")[0]):
        raise CheckpointError(f"{path} is not a policy bundle index")
    return index


def _read_manifest(path: Path) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("files", {}), dict):
        raise CheckpointError(
            f"{path} is corrupt (not a JSON manifest): export the bundle again or download it again"
        )
    return data


def verify(directory: Path) -> dict[str, Any]:
    """The COMPLETE manifest of a bundle or of one of its policies, after checking that every
    file it lists (`files`; the weights under `checkpoints` are checked when one is loaded) still
    has its SHA-256. CheckpointError naming the file that is missing, corrupt or changed."""
    path = Path(directory) / MARKER
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the bundle is incomplete, export it again")
    data = _read_manifest(path)
    for name, sha in data.get("files", {}).items():
        file = Path(directory) / name
        if not file.is_file():
            raise CheckpointError(f"{file} is missing (listed in {path}): export it again")
        if name.endswith(MARKER):  # a policy's manifest: a corrupt one says so
            _read_manifest(file)
        if file_sha256(file) != sha:
            raise CheckpointError(
                f"{file} is corrupt or was changed: it does not match the SHA-256 recorded in "
                f"{path}; export the bundle again or download it again"
            )
    return data


def policy_dir(directory: Path, name: Any) -> Path:
    """`directory/name` for a policy named in a bundle index, after checking that the name is
    one folder name: an index naming `../other` (or `a/b`, `/abs`) would point outside the bundle
    (and export would sign what is there)."""
    text = str(name) if isinstance(name, str) else ""
    if not text or text in (".", "..") or "/" in text or "\\" in text or "\0" in text:
        raise CheckpointError(
            f"{Path(directory) / INDEX} names the policy {name!r}: a policy name must be one "
            "folder name inside the bundle (no '/', '\\', '.' or '..'); the index was edited "
            "or is not a policy bundle: export the bundle again or download it again"
        )
    return Path(directory) / text


def select_policy(directory: Path, cfg: DictConfig, splits: Splits = DEFAULT_SPLITS) -> Path:
    """The policy directory inside a bundle (or `directory` itself when it is one policy) that
    `cfg` asks for: the policy trained with exactly `cfg`'s recipe (same hash), else the one for
    `env.name` and `policy.seed`."""
    directory = Path(directory)
    index = _read_index(directory)
    if index is None and (directory / MARKER).is_file():
        return directory  # one policy directory (or a bundle whose bundle.json is missing)
    if index is None:
        raise CheckpointError(
            f"policy.path={str(directory)!r} is a directory but neither an exported policy (no "
            f"{MARKER}) nor a bundle (no {INDEX}): give an SB3 .zip, a bundle, or one of its "
            "policy directories"
        )
    if index.get("format") != FIRST_FORMAT:  # the first format had no bundle manifest
        verify(directory)
    policies = index.get("policies", [])
    want = config_hash(cfg, splits)
    exact = [p for p in policies if p["config_hash"] == want]
    if len(exact) == 1:
        return policy_dir(directory, exact[0]["name"])
    env, seed = str(cfg.env.name), int(cfg.policy.seed)
    same = [p for p in policies if p["env"] == env and int(p["seed"]) == seed]
    if len(same) == 1:
        log.warning(
            "%s: no policy with this config's recipe (hash %s); using %s, the bundle's %s "
            "policy of seed %d (recipe %s)",
            directory,
            want,
            same[0]["name"],
            env,
            seed,
            same[0]["config_hash"],
        )
        return policy_dir(directory, same[0]["name"])
    available = ", ".join(p["name"] for p in policies) or "none"
    raise CheckpointError(
        f"bundle {directory} has {'several' if same else 'no'} policies for env={env} "
        f"policy.seed={seed}: available {available}; set env and policy.seed to one of them, or "
        f"policy.path={directory}/<policy>"
    )


def bundle_checkpoint(directory: Path, cfg: DictConfig, splits: Splits = DEFAULT_SPLITS) -> Path:
    """The verified checkpoint file (.safetensors; .zip in a bundle of an earlier format)
    `policy.checkpoint` of the policy `cfg` asks for in a bundle directory."""
    policy_dir = select_policy(directory, cfg, splits)
    verify(policy_dir)  # every file but the weights (first format: none); resolve checks those
    wanted = read_json(policy_dir / "config.json") or {}
    trained_on = (wanted.get("env") or {}).get("task")
    task = OmegaConf.to_container(cfg.env.task, resolve=True)
    # a key added since the bundle was made, at the value it was trained with, is no difference
    if trained_on is not None and env_identity({"task": trained_on}) != env_identity(
        {"task": task}
    ):
        log.warning(
            "%s was trained on env.task %s; this job's env.task differs (%s)",
            policy_dir.name,
            trained_on,
            task,
        )
    source = cfg.policy.get("source")  # a bundle is downloaded or exported, never trained here
    revision = f" --revision {cfg.policy.revision}" if cfg.policy.get("revision") else ""
    remedy = (
        f"the bundle policy.source={source} is damaged in the Hugging Face cache ({directory}): "
        f"download it again (`hf download {source}{revision} --force-download`)"
        if source
        else f"the bundle {directory} is damaged: export it again (python -m benchmark.policy "
        "export) or copy it again from where it came"
    )
    path = resolve(policy_dir, str(cfg.policy.checkpoint), remedy, **match_options(cfg))
    check_recorded(path)
    return path


def check_recorded(path: Path) -> None:
    """Refuse a bundle's `.safetensors` whose header says other than its policy declares
    (`portable.check_weights`), or whose SHA-256 or policy identity is not what its policy's
    COMPLETE and the bundle's bundle.json record for it: a header edited with the manifests
    signed again (offsets of two tensors swapped) still gives another policy identity. A file
    outside a bundle is checked against what is there; CheckpointError naming file and record."""
    path = Path(path)
    if path.suffix != portable.SUFFIX:
        return
    portable.check_weights(path)
    records: list[tuple[str, dict[str, Any]]] = []
    recorded = manifest(path.parent) or {}
    if isinstance(recorded.get("checkpoints"), dict):
        records.append(
            (str(path.parent / MARKER), {"sha256": recorded["checkpoints"].get(path.stem)})
        )
    index = _read_index(path.parent.parent) if (path.parent.parent / INDEX).is_file() else None
    for entry in (index or {}).get("policies", []):
        if isinstance(entry, dict) and entry.get("name") == path.parent.name:
            found = (entry.get("checkpoints") or {}).get(path.stem)
            if isinstance(found, dict):
                records.append(
                    (f"{path.parent.parent / INDEX} ({entry['name']}/{path.stem})", found)
                )
    try:
        for where, record in records:
            if record.get("sha256") is not None:
                weights.check_digest(path, record["sha256"], file_sha256(path), where)
            if record.get("policy_weights") is not None:
                actual = policy_digest(path)
                weights.check_digest(path, record["policy_weights"], actual, where)
    except weights.WeightsError as e:
        raise CheckpointError(str(e)) from e


def fetch(repo_id: str, revision: str | None = None, cache_dir: str | Path | None = None) -> Path:
    """The local snapshot of the hub repository `repo_id` at `revision` (a commit hash pins it;
    a branch or tag is resolved through the cache's refs): from the Hugging Face cache when it is
    there (no network), else downloaded into it unless HF_HUB_OFFLINE is set."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    kw = {"revision": revision, "cache_dir": str(cache_dir) if cache_dir else None}
    try:
        return Path(snapshot_download(repo_id, local_files_only=True, **kw))
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise CheckpointError(
                f"policy.source={repo_id} (revision {revision or 'main'}) is not in the Hugging "
                "Face cache and HF_HUB_OFFLINE is set: download it where there is network "
                f"(`hf download {repo_id}" + (f" --revision {revision}" if revision else "") + "`)"
                " and copy the cache, or use policy.path=<a local copy>"
            ) from None
    log.info("downloading policy bundle %s (revision %s)", repo_id, revision or "main")
    return Path(snapshot_download(repo_id, **kw))


# ----------------------------------------------------------------------------- selection
def from_sweep(sweep_dir: Path) -> tuple[list[Selected], list[str]]:
    """The policies the jobs of a sweep used (from each job's summary.json), and a note for each
    job that names none (failed or not run)."""
    found: dict[Path, Selected] = {}
    missing = []
    for job in sorted(p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()):
        summary = read_json(job / "summary.json") or {}
        path = summary.get("checkpoint_path")
        if not path:
            error = (read_json(job / "error.json") or {}).get("message")
            missing.append(f"{job.name}: no policy ({error or 'no summary.json'})")
            continue
        directory = Path(path).parent
        found.setdefault(directory, Selected(directory, summary.get("checkpoint")))
    return list(found.values()), missing


def root_of(path: Path) -> Path | None:
    """The results root above a sweep dir (benchmark.store)."""
    return Store.root_of(path)


class ExportOnMultirunEnd(Callback):
    """Hydra callback (conf/experiment/policies.yaml): after the sweep, bundle the policies its
    jobs used into `<sweep dir>/bundle`. A failure is logged, never raised: the sweep's results
    stand without the bundle, and `python -m benchmark.policy export --sweep <dir>` redoes it."""

    def __init__(self, subdir: str = "bundle") -> None:
        self.subdir = subdir

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            sweep_dir = Path(config.hydra.sweep.dir)
            selected, missing = from_sweep(sweep_dir)
            for note in missing:
                log.warning("policy bundle: job %s", note)
            if not selected:
                log.warning("policy bundle: no job of %s used a policy; none exported", sweep_dir)
                return
            out = export(
                selected,
                sweep_dir / self.subdir,
                root=config.paths.root,
                title=str(config.experiment_name),
                command=f"python -m benchmark.policy export --sweep {sweep_dir}",
            )
            log.info(
                "policy bundle of %d policies: %s (publish it: hf upload <user>/<repo> %s)",
                len(selected),
                out,
                out,
            )
        except Exception as exc:  # noqa: BLE001 - the sweep's results stand without it
            log.error("policy bundle not written: %s: %s", type(exc).__name__, exc)
