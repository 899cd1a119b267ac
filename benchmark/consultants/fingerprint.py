"""Which weights an hf consultant loads, and their identity: a hub model by its cached snapshot
commit (or the asked revision), a local directory by a hash of the bytes that determine its
outputs (`local_fingerprint`). The identity names the cells a model's answers belong to, so a
changed weight file makes new cells, and a fine-tuned model's directory is recognised again."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from benchmark.consultants.errors import ConsultantError
from benchmark.weights import WeightsError, check_folder

_MB = 1 << 20


def resolve_source(
    model: str | None,
    path: str | None,
    revision: str | None,
    digests: str | None = None,
) -> tuple[str, bool, str]:
    """(what to pass to from_pretrained, local_files_only, identity)."""
    if path is not None:
        p = Path(os.path.expanduser(str(path)))
        if not p.is_dir():
            raise ConsultantError(
                f"slm.backend.path={str(path)!r} does not exist or is not a directory; point it "
                "at a model directory (config.json + *.safetensors + tokenizer files)"
            )
        if not (p / "config.json").is_file():
            raise ConsultantError(f"slm.backend.path={str(path)!r} has no config.json")
        return str(p), True, "hf-local:" + local_fingerprint(p, digests)
    if not model:
        raise ConsultantError("the hf backend needs slm.backend.model (hub id) or slm.backend.path")
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json", revision=revision)
    if isinstance(cached, str):  # snapshots/<commit>/config.json
        return model, True, f"hf:{model}@{Path(cached).parent.name}"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ConsultantError(offline_hint(model, "HF_HUB_OFFLINE is set"))
    return model, False, f"hf:{model}@{revision or 'main'}"


def weights_folder(source: str, revision: str | None = None) -> Path | None:
    """The folder from_pretrained reads `source`'s weights from: a local directory, or a hub
    model's snapshot in the local cache (None: not downloaded yet)."""
    if Path(source).is_dir():
        return Path(source)
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(source, "config.json", revision=revision)
    return Path(cached).parent if isinstance(cached, str) else None


def offline_hint(model: str | None, cause: object) -> str:
    from huggingface_hub.constants import HF_HUB_CACHE

    return (
        f"slm.backend.model={model!r} is not in the local Hugging Face cache ({HF_HUB_CACHE}) "
        f"and could not be downloaded ({cause}). Set slm.backend.path to a local copy of the "
        f"model, or pre-download it on a machine with network: `huggingface-cli download "
        f"{model}` (HF_HOME chooses the cache directory; runs then work with HF_HUB_OFFLINE=1)."
    )


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
CONFIG_SUFFIXES = (".json", ".jinja", ".txt", ".model")
# files beside the weights that never change an output: fine-tuning's record (its timings and
# held-out measurement) and the Trainer's own logs
NOT_MODEL_FILES = frozenset({"finetune.json", "trainer_state.json", "training_args.bin"})
WHOLE_ABOVE = 2 * _MB  # a file this small is covered whole by its first and last MB
# A local model directory made once (a fine-tuned model) writes MARKER last: the fingerprint of
# its files, with the version of `local_fingerprint` that computed it (2: whole weight files)
MARKER = "COMPLETE"
FINGERPRINT_VERSION = 2


def marker(directory: Path, digests: str | os.PathLike | None = None) -> dict[str, object]:
    """What MARKER records of a model directory's files."""
    return {
        "fingerprint": local_fingerprint(directory, digests),
        "fingerprint_version": FINGERPRINT_VERSION,
    }


def marker_holds(directory: Path, recorded: dict, digests: str | os.PathLike | None = None) -> bool:
    """Whether the MARKER `recorded` still describes the directory's files (a marker of another
    fingerprint version never does: an earlier release's is brought up to date once, by
    benchmark.migrate)."""
    return recorded.get("fingerprint_version") == FINGERPRINT_VERSION and recorded.get(
        "fingerprint"
    ) == local_fingerprint(directory, digests)


def local_fingerprint(directory: Path, digests: str | os.PathLike | None = None) -> str:
    """Hash of the bytes that determine a local model's outputs: every weight file whole, the
    config, generation config, tokenizer and chat template; never logs or statistics
    (NOT_MODEL_FILES). A weight file of at most 2 MB enters by its size and its first and last
    MB, which is every byte of it (so the identities of the tiny models are those of earlier
    releases); a larger one by the SHA-256 of its whole content, cached in the results store
    (`digests`) by (path, inode, size, mtime_ns, ctime_ns): read once, not on every job."""
    from benchmark.store import cached_digest

    h = hashlib.sha256()
    for f in sorted(directory.iterdir()):
        if not f.is_file() or f.name in NOT_MODEL_FILES:
            continue
        size = f.stat().st_size
        if f.suffix in CONFIG_SUFFIXES and size < 64 * _MB:
            h.update(json.dumps([f.name, size]).encode())
            h.update(f.read_bytes())
        elif f.suffix in WEIGHT_SUFFIXES:
            h.update(json.dumps([f.name, size]).encode())
            if size <= WHOLE_ABOVE:
                with f.open("rb") as fh:
                    h.update(fh.read(_MB))
                    fh.seek(max(0, size - _MB))
                    h.update(fh.read(_MB))
            else:
                h.update(b"sha256:" + cached_digest(f, digests).encode())
    return h.hexdigest()[:16]


def checked_weights(folder: Path | None, model: Any, source: str) -> None:
    """Refuse a model folder whose safetensors headers say other than the model declares
    (benchmark.weights.check_folder: before loading against its config's dtype, after loading
    against the loaded `model`), naming the file, the tensor and the model."""
    if folder is None:
        return
    try:
        check_folder(folder, model, what=f"the model {source}")
    except WeightsError as e:
        raise ConsultantError(str(e)) from e
