"""An SB3 zip with a pickle payload: the `policy_class` entry of its data JSON replaced by a
cloudpickle whose `__reduce__` opens (creates) a marker file when unpickled, as SB3's
`json_to_data` would. Everything else in the zip (weights, spaces, kwargs) is left as it was, so
it is read and identified as a real checkpoint; trusted (`policy.trust_pickle=true`), SB3
unpickles it, the payload runs, and the load then fails (its policy class is gone). A test
asserts the marker never appears where nothing should unpickle it."""

from __future__ import annotations

import base64
import json
import shutil
import zipfile
from pathlib import Path

import cloudpickle


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def payload_b64(marker: Path) -> str:
    return base64.b64encode(cloudpickle.dumps(Payload(marker))).decode()


def poison(src: Path, dst: Path, marker: Path) -> Path:
    """Copy the SB3 zip `src` to `dst` with the payload in its data's `policy_class`."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            blob = zin.read(item.filename)
            if item.filename == "data":
                data = json.loads(blob)
                data["policy_class"][":serialized:"] = payload_b64(marker)
                blob = json.dumps(data, indent=4).encode()
            zout.writestr(item, blob)
    return dst


def poison_dir(src_dir: Path, dst_dir: Path, marker: Path) -> Path:
    """A copy of a complete checkpoint directory with every zip poisoned and its COMPLETE
    manifest re-signed (what someone handing over a results root or a bundle could do)."""
    from benchmark.store import file_sha256

    shutil.copytree(src_dir, dst_dir)
    for z in dst_dir.glob("*.zip"):
        poison(src_dir / z.name, z, marker)
    manifest = json.loads((dst_dir / "COMPLETE").read_text())
    manifest["checkpoints"] = {
        n: file_sha256(dst_dir / f"{n}.zip") for n in manifest["checkpoints"]
    }
    (dst_dir / "COMPLETE").write_text(json.dumps(manifest))
    return dst_dir
