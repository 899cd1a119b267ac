"""Reading an SB3 zip without running it.

An SB3 zip's `data` member is JSON in which every value that is not plain JSON (the policy class,
the observation and action spaces, the schedules) is a cloudpickle, base64-encoded, under
":serialized:". Unpickling runs whatever the file says: SB3's `json_to_data` would execute a
`__reduce__` payload placed there. This module only *reads* those pickles: `pickletools.genops`
disassembles them, and a small stack machine rebuilds what they describe as inert values
(`Ref` for a class or function named by module and name, numpy arrays and dtypes from their raw
bytes, `Obj` for an object made by a constructor with a state, `Opaque` for anything else). No
module named in the file is imported and nothing in it is called.

Two uses:
- the policy identity (`settings`): the policy class, its kwargs and the spaces, canonical exactly
  as the identity computed them when it unpickled (so existing cells keep their hashes);
- the load check (`unsafe_entries`): a zip is loaded by SB3 (which unpickles) only when every
  pickle it holds calls nothing but the constructors of numpy arrays, dtypes and scalars,
  gymnasium spaces, numpy random generators, SB3's schedules and the standard containers, and
  names only classes of the suite, SB3, sb3-contrib, torch.nn and gymnasium.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pickletools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


class Unreadable(ValueError):
    """A pickle this reader does not rebuild (an opcode it does not know, or malformed)."""


@dataclass(frozen=True)
class Ref:
    """A global the pickle names (a class or function), never imported."""

    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(eq=False)
class Call:
    """`func(*args)` as the pickle asks for it (REDUCE, NEWOBJ), with the state BUILD gives it."""

    func: Any
    args: tuple
    state: Any = None
    built: bool = False


@dataclass(eq=False)
class Obj:
    """An object of class `cls` with instance state `state` (a dict)."""

    cls: Ref
    state: dict


@dataclass(frozen=True)
class Opaque:
    """Something this reader does not turn into a value: `what` says what it was."""

    what: str


MARK = object()

# callables a pickle may call, by what they build
NUMPY_ARRAY = {
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
}
NUMPY_RECONSTRUCT = {
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
}
NUMPY_SCALAR = {("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar")}
NUMPY_DTYPE = {("numpy", "dtype")}
RANDOM_CTORS = {
    ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
}
CONTAINERS = {("collections", "OrderedDict"), ("collections", "deque"), ("builtins", "set")}
RECONSTRUCTOR = ("copyreg", "_reconstructor")
CALLABLE = NUMPY_ARRAY | NUMPY_RECONSTRUCT | NUMPY_SCALAR | NUMPY_DTYPE | RANDOM_CTORS | CONTAINERS
# modules whose classes a pickle may name, and (constructed with NEWOBJ or copyreg, then given a
# state) instantiate: spaces and schedules are plain data holders
CONSTRUCTED = ("gymnasium.spaces.", "stable_baselines3.common.utils")
NAMED = (
    "benchmark.",
    "stable_baselines3.",
    "sb3_contrib.",
    "torch.nn.modules.",
    "torch.optim.",
    "gymnasium.spaces.",
    "numpy",
)
NAMED_EXACT = {RECONSTRUCTOR, ("builtins", "object")}


def _module_in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p.rstrip(".") or module.startswith(p) for p in prefixes)


# ----------------------------------------------------------------------------- the reader
def read_pickle(blob: bytes) -> Any:
    """What a pickle describes, rebuilt without importing or calling anything (see module doc)."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}

    def pop_mark() -> list[Any]:
        start = marks.pop()
        items = stack[start:]
        del stack[start:]
        return items

    try:
        for op, arg, _pos in pickletools.genops(blob):
            name = op.name
            if name in ("PROTO", "FRAME"):
                continue
            if name == "STOP":
                if len(stack) != 1:
                    raise Unreadable("the pickle ends with an unbalanced stack")
                return stack.pop()
            if name == "MARK":
                marks.append(len(stack))
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[int(arg)])
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name == "NONE":
                stack.append(None)
            elif name in ("NEWTRUE", "NEWFALSE"):
                stack.append(name == "NEWTRUE")
            elif name in (
                "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
                "FLOAT", "BINFLOAT", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
                "BINUNICODE8", "STRING", "BINSTRING", "SHORT_BINSTRING",
            ):  # fmt: skip
                stack.append(arg)
            elif name in ("BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8"):
                stack.append(bytes(arg))
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                items = tuple(stack[-n:])
                del stack[-n:]
                stack.append(items)
            elif name == "TUPLE":
                stack.append(tuple(pop_mark()))
            elif name == "EMPTY_LIST":
                stack.append([])
            elif name == "LIST":
                stack.append(pop_mark())
            elif name == "APPEND":
                value = stack.pop()
                _container(stack[-1], list).append(value)
            elif name == "APPENDS":
                items = pop_mark()
                _container(stack[-1], list).extend(items)
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name == "DICT":
                items = pop_mark()
                stack.append(dict(zip(items[::2], items[1::2], strict=True)))
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                _container(stack[-1], dict)[_key(key)] = value
            elif name == "SETITEMS":
                items = pop_mark()
                target = _container(stack[-1], dict)
                for k, v in zip(items[::2], items[1::2], strict=True):
                    target[_key(k)] = v
            elif name == "EMPTY_SET":
                stack.append([])  # a set's items, as a list (they may be unhashable here)
            elif name == "ADDITEMS":
                items = pop_mark()
                _container(stack[-1], list).extend(items)
            elif name == "FROZENSET":
                stack.append(pop_mark())
            elif name == "GLOBAL":
                module, _, attr = str(arg).partition(" ")
                stack.append(Ref(module, attr))
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                if not isinstance(attr, str) or not isinstance(module, str):
                    raise Unreadable("STACK_GLOBAL without two strings")
                stack.append(Ref(module, attr))
            elif name == "REDUCE":
                args, func = stack.pop(), stack.pop()
                stack.append(_call(func, args))
            elif name == "NEWOBJ":
                args, cls = stack.pop(), stack.pop()
                stack.append(Call(cls, ("__new__", *args)))
            elif name == "NEWOBJ_EX":
                kwargs, args, cls = stack.pop(), stack.pop(), stack.pop()
                stack.append(Call(cls, ("__new__", *args, kwargs)))
            elif name == "BUILD":
                state = stack.pop()
                target = stack[-1]
                if not isinstance(target, Call) or target.built:
                    raise Unreadable(f"BUILD on {type(target).__name__}, not a new object")
                target.state, target.built = state, True
            else:  # PERSID, EXT*, INST, OBJ, NEXT_BUFFER, ...: not in what SB3 writes
                raise Unreadable(f"pickle opcode {name} is not read here")
    except Unreadable:
        raise
    except Exception as exc:  # malformed: genops' ValueError, an empty stack, a bad memo key
        raise Unreadable(f"malformed pickle: {type(exc).__name__}: {exc}") from exc
    raise Unreadable("the pickle has no STOP")


def _container(value: Any, kind: type) -> Any:
    if isinstance(value, kind):
        return value
    if isinstance(value, Call) and _is(value.func, CONTAINERS) and not value.built:
        return _items(value, kind)
    raise Unreadable(f"items added to {type(value).__name__}, not a {kind.__name__}")


def _items(call: Call, kind: type) -> Any:
    """The items a container call (OrderedDict(), deque()) is filled with after it is made."""
    if not isinstance(call.args, tuple):
        raise Unreadable("container call without argument tuple")
    if call.state is None:
        call.state = kind()
    return call.state


def _key(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        raise Unreadable(f"unhashable dict key {type(key).__name__}") from None
    return key


def _is(func: Any, names: set[tuple[str, str]]) -> bool:
    return isinstance(func, Ref) and (func.module, func.name) in names


def _call(func: Any, args: Any) -> Any:
    """REDUCE: an empty OrderedDict becomes the dict its SETITEMS fill; the rest stays a Call."""
    if not isinstance(args, tuple):
        raise Unreadable("REDUCE without an argument tuple")
    if _is(func, {("collections", "OrderedDict")}) and not args:
        return {}
    return Call(func, args)


# ----------------------------------------------------------------------------- values
def value_of(node: Any) -> Any:
    """`node` as a Python value where it is inert data: numpy arrays, dtypes and scalars from
    their bytes, `Obj` for a space or schedule, `Ref` kept, anything else `Opaque`."""
    if isinstance(node, (str, bytes, int, float, bool)) or node is None or isinstance(node, Ref):
        return node
    if isinstance(node, tuple):
        return tuple(value_of(v) for v in node)
    if isinstance(node, list):
        return [value_of(v) for v in node]
    if isinstance(node, dict):
        return {k: value_of(v) for k, v in node.items()}
    if not isinstance(node, Call):
        return Opaque(type(node).__name__)
    try:
        return _value_of_call(node)
    except (TypeError, ValueError, IndexError, KeyError, AttributeError) as exc:
        return Opaque(f"{node.func}: {type(exc).__name__}: {exc}")


def _value_of_call(node: Call) -> Any:
    func, args = node.func, node.args
    if _is(func, NUMPY_DTYPE):
        dtype = np.dtype(str(args[0]))
        state = node.state if isinstance(node.state, tuple) else ()
        if len(state) > 1 and state[1] in ("<", ">") and dtype.byteorder not in ("|",):
            dtype = dtype.newbyteorder(state[1])
        if len(state) > 3 and state[3] is not None:  # a structured dtype: not rebuilt here
            return Opaque("structured numpy dtype")
        return dtype
    if _is(func, NUMPY_ARRAY):
        buffer, dtype, shape, order = args[0], value_of(args[1]), tuple(args[2]), args[3]
        return np.frombuffer(bytes(buffer), dtype=dtype).reshape(shape, order=str(order))
    if _is(func, NUMPY_RECONSTRUCT) and isinstance(node.state, tuple):
        _version, shape, dtype, fortran, raw = node.state
        dtype = value_of(dtype)
        if not isinstance(raw, bytes) or dtype.hasobject:
            return Opaque("numpy array of objects")
        return np.frombuffer(raw, dtype=dtype).reshape(tuple(shape), order="F" if fortran else "C")
    if _is(func, NUMPY_SCALAR):
        dtype = value_of(args[0])
        if not isinstance(args[1], bytes) or dtype.hasobject:
            return Opaque("numpy scalar of an object")
        return np.frombuffer(args[1], dtype=dtype)[0]
    if isinstance(func, Ref) and args[:1] == ("__new__",) and isinstance(node.state, dict):
        return Obj(func, value_of(node.state))
    if (
        _is(func, {RECONSTRUCTOR})
        and isinstance(args[:1] and args[0], Ref)
        and isinstance(node.state, dict)
    ):
        return Obj(args[0], value_of(node.state))
    return Opaque(f"call of {func}")


# ----------------------------------------------------------------------------- the load check
def problems(node: Any) -> list[str]:
    """What in a read pickle would run code beyond building inert data when SB3 unpickles it:
    a call of anything but the constructors listed above, a global outside NAMED, a state given
    to something that is not a new object of CONSTRUCTED, a state that sets an attribute to a
    global (a function there would shadow a method the suite calls; empty: safe to unpickle)."""
    out: list[str] = []
    seen: set[int] = set()

    def walk(n: Any) -> None:
        if id(n) in seen:
            return
        seen.add(id(n))
        if isinstance(n, Ref):
            if not _module_in(n.module, NAMED) and not _is(n, CALLABLE | NAMED_EXACT):
                out.append(f"names {n}")
        elif isinstance(n, (list, tuple)):
            for v in n:
                walk(v)
        elif isinstance(n, dict):
            for k, v in n.items():
                walk(k)
                walk(v)
        elif isinstance(n, Call):
            f = n.func
            new = n.args[:1] == ("__new__",)
            allowed = (
                _is(f, CALLABLE)
                or (new and isinstance(f, Ref) and _module_in(f.module, CONSTRUCTED))
                or (
                    _is(f, {RECONSTRUCTOR})
                    and isinstance(n.args[:1] and n.args[0], Ref)
                    and _module_in(n.args[0].module, CONSTRUCTED)
                )
            )
            if not allowed:
                out.append(f"calls {f}")
            walk(n.args[1:] if new else n.args)
            if isinstance(n.state, dict):  # an attribute set to a function could shadow a method
                out.extend(f"sets {k} to {v}" for k, v in n.state.items() if isinstance(v, Ref))
            walk(n.state)

    walk(node)
    return out


# ----------------------------------------------------------------------------- a zip's data
def read_data(path: str | Path) -> dict[str, Any]:
    """The zip's `data` JSON as stored (serialized entries left as they are); {} when absent."""
    with zipfile.ZipFile(path) as zf:
        if "data" not in zf.namelist():
            return {}
        return json.loads(zf.read("data").decode())


def is_serialized(entry: Any) -> bool:
    return isinstance(entry, dict) and ":serialized:" in entry


def pickle_bytes(entry: dict[str, Any]) -> bytes:
    return base64.b64decode(str(entry[":serialized:"]).encode())


def decoded(entry: Any) -> Any:
    """A data entry as a value: plain JSON as it is, a serialized one read (never unpickled);
    an unreadable pickle becomes `Opaque` carrying its SHA-256."""
    if not is_serialized(entry):
        return entry
    blob = pickle_bytes(entry)
    try:
        return value_of(read_pickle(blob))
    except Unreadable as exc:
        return Opaque(str(exc))


def unsafe_entries(data: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Per serialized entry (but `skip`, which the loader replaces), what unpickling it would run
    beyond building data (see `problems`); {}: SB3 may load the zip."""
    out = {}
    for key, entry in data.items():
        if key in skip or not is_serialized(entry):
            continue
        try:
            found = problems(read_pickle(pickle_bytes(entry)))
        except Unreadable as exc:
            found = [str(exc)]
        if found:
            out[key] = found
    return out


# ----------------------------------------------------------------------------- identity
@dataclass
class Canon:
    """Turns read values into the JSON the policy identity hashes: the same JSON the identity
    made of the unpickled objects (a class: "module.qualname"; a gymnasium space: its class,
    dtype, shape and the SHA-256 of n/start/low/high/nvec; containers recursively)."""

    opaque: list[str] = field(default_factory=list)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, Ref):
            return str(value)
        if isinstance(value, dict):
            return {str(k): self(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        if isinstance(value, Obj) and _is_space(value):
            return self.space(value)
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, (np.generic, np.ndarray, np.dtype)):
            return repr(value)
        what = value.what if isinstance(value, Opaque) else f"{type(value).__name__}"
        self.opaque.append(what)
        return f"opaque:{what}"

    def space(self, value: Obj) -> dict[str, Any]:
        state = value.state
        out: dict[str, Any] = {"space": str(value.cls), "dtype": str(state.get("dtype"))}
        shape = state.get("_shape")
        out["shape"] = list(shape) if shape is not None else None
        for attr in ("n", "start", "low", "high", "nvec"):
            if attr in state:
                array = np.asarray(state[attr])
                out[attr] = hashlib.sha256(array.tobytes()).hexdigest()[:16]
        if "spaces" in state:
            spaces = state["spaces"]
            out["spaces"] = self(dict(spaces) if isinstance(spaces, dict) else list(spaces))
        return out


def _is_space(value: Obj) -> bool:
    return _module_in(value.cls.module, ("gymnasium.spaces.", "gym.spaces.")) or {
        "_shape",
        "dtype",
        "_np_random",
    } <= set(value.state)


def settings(data: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The canonical JSON of `keys` of a zip's data (the policy identity's settings); an entry
    that is not plain data (a pickled call, a class pickled by value) enters as the SHA-256 of
    its pickle, so it is identified without being run."""
    out = {}
    for key in keys:
        canon, entry = Canon(), data.get(key)
        value = canon(decoded(entry))
        if canon.opaque:
            value = "opaque:pickle-sha256:" + hashlib.sha256(pickle_bytes(entry)).hexdigest()
        out[key] = value
    return out
