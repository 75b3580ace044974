"""Record the calls into code under test in a child; replay them in the judge.

A check is written once, as ordinary code that calls the functions under test and compares what
they return. It runs twice: in the harness child (``fp4moe.infra.runner``) with every function
under test wrapped by a :class:`Recorder`, which logs each call's arguments (as digests), its
result (tensors kept whole), any in-place change to a tensor argument and any exception; and then
in the parent with :class:`Replay` proxies in their place, which return what the child recorded.
The rows the child computes are thrown away: the parent's rows, computed by the parent's own
reference code from the recorded results, are the verdict. A child that patches the checker, the
reference or the row writer changes nothing the parent uses.

Index:
- :func:`encode` / :func:`digest` -- values as JSON-able structures; tensors by dtype, shape and
  the sha256 of their bytes (arguments) or whole, as raw bytes (results).
- :class:`Recorder` -- child side: ``rec.function(name, fn)`` and ``rec.module(name, mod, attrs)``
  wrap what the check will call; ``rec.outputs()`` -> (calls JSON, tensors) for the harness.
- :class:`Replay` -- parent side: ``Replay(calls, tensors)``; ``rp.function(name)`` and
  ``rp.module(name)`` answer like the originals did in the child (signature, presence, results,
  exceptions, in-place writes). Calls are found by function and argument digest (in order for
  repeats of the same call). A call the child never made -- it was skipped, or made with other
  arguments, by code that patched the check in the child -- raises :class:`ReplayMissing`, which
  each check turns into a failing row of its own ("no result recorded"); a malformed log is a
  :class:`ReplayDiverged` (a cannot-run).
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import json
import math
import types

import torch

from fp4moe.infra.errors import GateCannotRun

#: Exception classes a replay re-raises under their own name (others: a class of that name).
MAX_MESSAGE = 500


class ReplayMissing(Exception):
    """The judge's call was never made by the child (with these arguments): the check that
    needs it fails, naming the call. Checks catch it before any generic ``except Exception``."""


class ReplayDiverged(BaseException):
    """The parent's calls are not the child's, or the log is malformed: the recorded results
    cannot be used. A ``BaseException`` so that no ``except Exception`` of a check turns it into a
    row; the judge turns it into a cannot-run (:meth:`Replay.run`)."""


def _flat_u8(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor (a view where it is contiguous already)."""
    t = t.detach().contiguous().cpu()
    return t.reshape(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)


def _sha(t: torch.Tensor) -> str:
    return hashlib.sha256(memoryview(_flat_u8(t).numpy())).hexdigest()


def encode(value, tensors: dict | None = None, prefix: str = ""):
    """``value`` as JSON-able data. Tensors go into ``tensors`` (whole) when given, else as a
    digest; floats that JSON cannot hold as strings; anything else by its ``repr`` (enum members,
    dtypes, stand-in constants: what the call was given, not its identity)."""
    if isinstance(value, torch.Tensor):
        meta = {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape)}
        if tensors is None:
            return {"tensor": meta, "sha256": _sha(value)}
        key = f"{prefix}{len(tensors)}"
        tensors[key] = _flat_u8(value).clone()
        return {"tensor": meta, "key": key}
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (tuple, list)):
        return {"seq": type(value).__name__, "items": [encode(v, tensors, prefix) for v in value]}
    if isinstance(value, dict):
        return {"map": [[encode(k), encode(v, tensors, prefix)] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"torch_dtype": str(value).removeprefix("torch.")}
    return {"repr": repr(value)}


def decode(data, tensors: dict):
    """The inverse of :func:`encode` for results (tensors taken from ``tensors``)."""
    if isinstance(data, dict):
        if "tensor" in data:
            meta = data["tensor"]
            dtype = getattr(torch, meta["dtype"], None)
            if not isinstance(dtype, torch.dtype):
                raise ReplayDiverged(f"a recorded result has dtype {meta['dtype']!r}, unknown to this torch")
            raw = tensors.get(data.get("key")) if isinstance(data.get("key"), str) else None
            if raw is None:
                raise ReplayDiverged(f"a recorded result's tensor {data.get('key')!r} is missing")
            t = raw.view(dtype) if raw.numel() else torch.empty(0, dtype=dtype)
            n = math.prod(meta["shape"])
            if t.numel() != n:
                raise ReplayDiverged(f"a recorded tensor holds {t.numel()} values, its shape {meta['shape']} needs {n}")
            return t.reshape(meta["shape"])
        if "float" in data:
            return float(data["float"])
        if "seq" in data:
            items = [decode(v, tensors) for v in data["items"]]
            return tuple(items) if data["seq"] == "tuple" else items
        if "map" in data:
            return {decode(k, tensors): decode(v, tensors) for k, v in data["map"]}
        if "torch_dtype" in data:
            return getattr(torch, data["torch_dtype"])
        if "repr" in data:
            return _Opaque(data["repr"])
    return data


class _Opaque:
    """A recorded value that is not data (an enum member, an object): only its ``repr`` travels."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def digest(args: tuple, kwargs: dict) -> str:
    body = json.dumps([encode(list(args)), encode(dict(sorted(kwargs.items())))], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _signature_data(fn) -> list | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    return [[p.name, int(p.kind), p.default is not inspect.Parameter.empty] for p in sig.parameters.values()]


def _signature(data: list | None) -> inspect.Signature | None:
    if data is None:
        return None
    return inspect.Signature([inspect.Parameter(n, inspect._ParameterKind(k), **({"default": None} if d else {}))
                              for n, k, d in data])


def _exception_data(e: BaseException) -> dict:
    builtin = next((c.__name__ for c in type(e).__mro__ if getattr(builtins, c.__name__, None) is c
                    and issubclass(c, Exception)), "Exception")
    return {"type": type(e).__name__, "builtin": builtin, "message": str(e)[:MAX_MESSAGE]}


def reraise(data: dict):
    """Raise the exception recorded by :meth:`Recorder.error` (its class name, builtin base and
    message); ``None`` raises nothing."""
    if data is not None:
        _raise(data)


def _raise(data: dict):
    base = getattr(builtins, data.get("builtin", "Exception"), Exception)
    if not (isinstance(base, type) and issubclass(base, Exception)):
        base = Exception
    cls = base if data["type"] == base.__name__ else type(data["type"], (base,), {})
    raise cls(data["message"])


# --------------------------------------------------------------------------- child side


class Recorder:
    """Child side: wraps the functions under test and logs every call (see the module doc)."""

    def __init__(self):
        self.calls: list[dict] = []
        self.tensors: dict[str, torch.Tensor] = {}
        self.lookups: dict[str, dict] = {}

    def function(self, name: str, fn):
        """``fn`` wrapped: same signature, every call logged under ``name``."""
        if fn is None:
            self.lookups[name] = {"callable": False}
            return None
        rec = self

        def wrapper(*args, **kwargs):
            entry = {"fn": name, "args": digest(args, kwargs)}
            places = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
            places += [(k, v) for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
            before = [(where, _sha(t)) for where, t in places]
            rec.calls.append(entry)
            try:
                out = fn(*args, **kwargs)
            except Exception as e:
                entry["raised"] = _exception_data(e)
                raise
            finally:  # in-place writes into the arguments travel too (the judge applies them)
                changed = {str(where): encode(t, rec.tensors, "w") for (where, t), (_, old) in zip(places, before)
                           if _sha(t) != old}
                if changed:
                    entry["writes"] = changed
            entry["result"] = encode(out, rec.tensors, "r")
            return out

        wrapper.__signature__ = _safe_signature(fn)
        wrapper.__name__ = getattr(fn, "__name__", name)
        self.lookups[name] = {"callable": True, "signature": _signature_data(fn)}
        return wrapper

    def module(self, name: str, mod, attrs) -> types.SimpleNamespace | None:
        """The attributes ``attrs`` of ``mod`` (functions wrapped; absent ones recorded absent)."""
        if mod is None:
            self.lookups[name] = {"module": None}
            return None
        ns = types.SimpleNamespace()
        present = {}
        for a in attrs:
            v = getattr(mod, a, None)
            present[a] = v is not None
            if v is not None:
                setattr(ns, a, self.function(f"{name}.{a}", v) if callable(v) else v)
        self.lookups[name] = {"module": present}
        return ns

    def value(self, name: str, v):
        """A plain value the check reads from the code under test (a dtype, an enum member)."""
        self.lookups[name] = {"value": encode(v)}
        return v

    def error(self, name: str, e: BaseException | None) -> None:
        """An exception the check catches (a module that does not load), or None."""
        self.lookups[name] = {"value": None if e is None else {"map": [[k, v] for k, v in _exception_data(e).items()]}}

    def outputs(self) -> tuple[dict, dict]:
        return {"calls": self.calls, "lookups": self.lookups}, self.tensors


def _safe_signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- parent side


class Replay:
    """Parent side: answers the check's calls from the child's log, in order."""

    def __init__(self, log: dict, tensors: dict):
        if not isinstance(log, dict) or not isinstance(log.get("calls"), list) or not isinstance(log.get("lookups"), dict):
            raise ReplayDiverged("the child's call log is not a {calls, lookups} object")
        self.calls, self.lookups, self.tensors = log["calls"], log["lookups"], tensors
        self._index: dict[tuple, list] = {}
        for i, entry in enumerate(self.calls):
            if not isinstance(entry, dict) or not isinstance(entry.get("fn"), str) or not isinstance(entry.get("args"), str):
                raise ReplayDiverged(f"the child's call log: entry {i + 1} is not a {{fn, args, ...}} object")
            self._index.setdefault((entry["fn"], entry["args"]), []).append((i, entry))
        self.replayed = 0

    def _lookup(self, name: str) -> dict:
        if name not in self.lookups:
            raise ReplayDiverged(f"the check asks for {name!r}, which the child never looked up")
        return self.lookups[name]

    def function(self, name: str):
        info = self._lookup(name)
        if not info.get("callable"):
            return None
        rp = self

        def proxy(*args, **kwargs):
            return rp._call(name, args, kwargs)

        proxy.__signature__ = _signature(info.get("signature"))
        proxy.__name__ = name.rsplit(".", 1)[-1]
        return proxy

    def module(self, name: str, attrs=()) -> types.SimpleNamespace | None:
        present = self._lookup(name).get("module")
        if present is None:
            return None
        ns = types.SimpleNamespace()
        for a, here in present.items():
            if here:
                setattr(ns, a, self.function(f"{name}.{a}"))
        return ns

    def value(self, name: str):
        return decode(self._lookup(name).get("value"), {})

    def _call(self, name: str, args: tuple, kwargs: dict):
        todo = self._index.get((name, digest(args, kwargs)))
        if not todo:
            made = sum(1 for e in self.calls if e["fn"] == name)
            raise ReplayMissing(f"no result recorded for this call of {name}: the child made {made} call(s) of it, none "
                                "with these arguments (aiter's code in the child skipped or altered it)")
        i, entry = todo.pop(0)
        self.replayed += 1
        for where, data in (entry.get("writes") or {}).items():
            t = args[int(where)] if where.isdigit() else kwargs[where]
            new = decode(data, self.tensors)
            if new.shape != t.shape or new.dtype != t.dtype:
                raise ReplayDiverged(f"call {i + 1} ({name}): a recorded in-place write does not fit its argument")
            t.copy_(new)
        if "raised" in entry:
            _raise(entry["raised"])
        return decode(entry.get("result"), self.tensors)

    def run(self, label: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` (the checks, with this replay's proxies); a malformed log is a
        :class:`GateCannotRun` naming ``label``."""
        try:
            return fn(*args, **kwargs)
        except ReplayDiverged as e:
            raise GateCannotRun(f"{label}: {e}") from None
