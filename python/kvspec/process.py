"""An engine that runs as its own process, driven over the adapter protocol
(docs/adapter-protocol.md): JSON lines on its stdin and stdout, a ``hello``
handshake, one request per :class:`kvspec.Adapter` method.

    python3 -m kvspec.conform --adapter-command 'node kit/examples/toy.mjs' FILE...

:class:`ProcessAdapter` is an ordinary :class:`kvspec.Adapter` to the
runner. A malformed or late answer, an answer with another id, or the
process exiting raises :class:`AdapterFailure` naming the command and
quoting the last lines of its stderr; the process is then ended and the
next call starts a new one. An ``error`` answer of type ``failure`` raises
:class:`AdapterFailure` too, on the same process.
"""

import base64
import collections
import json
import queue
import shlex
import signal
import subprocess
import sys
import threading
import weakref
from typing import IO, Any, Deque, Dict, List, Mapping, NoReturn, Optional, Sequence, Set, \
    Union

from .adapter import Adapter, ForwardResult, Item, QueryKey
from .errors import NotApplicable, Refused
from .program import Layer

PROTOCOL = 1
#: Seconds an answer may take (--adapter-timeout); hello gets at least HELLO_TIMEOUT.
DEFAULT_TIMEOUT = 60.0
HELLO_TIMEOUT = 120.0
STDERR_KEPT = 20      # stderr lines kept for messages
STDERR_QUOTED = 5     # of which a message quotes the last ones
OBSERVATIONS = ("kind", "trimmable", "bytes_per_token", "out")


class AdapterFailure(RuntimeError):
    """The engine process failed: it exited or crashed, answered late, out of
    order or not in the protocol, or answered an error of type failure."""


class EngineError(AdapterFailure):
    """An error answer of type failure: the engine's own message."""

    def __init__(self, engine: str, message: str) -> None:
        super().__init__("%s: %s" % (engine, message))
        self.message = message


class ProcessHandle:
    """A layout of the engine process: the engine's handle string and the
    process (generation) it belongs to."""

    __slots__ = ("id", "generation", "__weakref__")

    def __init__(self, ident: str, generation: int) -> None:
        self.id = ident
        self.generation = generation

    def __repr__(self) -> str:
        return "ProcessHandle(%r)" % self.id


def _reader(stream: IO[bytes], lines: "queue.Queue[Optional[bytes]]") -> None:
    for line in iter(stream.readline, b""):
        lines.put(line)
    lines.put(None)


def _stderr_reader(stream: IO[bytes], tail: Deque[str], passthrough: bool) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        tail.append(line)
        if passthrough:
            print(line, file=sys.stderr, flush=True)


def _kill(proc: "subprocess.Popen[bytes]") -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class ProcessAdapter(Adapter):
    """Drives ``command`` (a string split as a shell would, or a list) over
    the protocol. ``settings`` go to the engine in ``hello``; ``timeout``
    is the seconds an answer may take."""

    def __init__(self, command: Union[str, Sequence[str]],
                 settings: Optional[Mapping[str, str]] = None,
                 timeout: float = DEFAULT_TIMEOUT, stderr_passthrough: bool = True) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("an empty adapter command")
        self.command = command if isinstance(command, str) else shlex.join(self.argv)
        self.name = self.argv[-1]
        self.settings: Dict[str, str] = dict(settings or {})
        self.timeout = timeout
        self.passthrough = stderr_passthrough
        self.engine: Dict[str, Any] = {}  # the hello answer
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.generation = 0
        self.next_id = 0
        self.lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self.tail: Deque[str] = collections.deque(maxlen=STDERR_KEPT)
        self.stderr_thread: Optional[threading.Thread] = None
        self.live: Set[str] = set()
        self.released: List[str] = []
        self.lock = threading.RLock()  # finalizers may run in any thread, at any time

    # -- the process ------------------------------------------------------------
    def configure(self, settings: Mapping[str, str]) -> Dict[str, str]:
        """Sets the settings sent in hello and starts the engine: returns the
        settings it has in effect (raises AdapterFailure when it refuses)."""
        self.settings = dict(settings)
        self.close()
        self.start()
        return dict(self.engine.get("settings") or {})

    def start(self) -> None:
        """Starts the process and says hello (raises AdapterFailure)."""
        try:
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except OSError as e:
            raise AdapterFailure("`%s` cannot be started: %s" % (self.command, e))
        assert proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.generation += 1
        self.next_id = 0
        self.live = set()
        self.released = []
        self.lines = queue.Queue()
        self.tail = collections.deque(maxlen=STDERR_KEPT)
        threading.Thread(target=_reader, args=(proc.stdout, self.lines), daemon=True).start()
        self.stderr_thread = threading.Thread(target=_stderr_reader, daemon=True,
                                              args=(proc.stderr, self.tail, self.passthrough))
        self.stderr_thread.start()
        weakref.finalize(self, _kill, proc)
        try:
            answer = self._exchange("hello", {"protocol": PROTOCOL, "settings": self.settings},
                                    max(self.timeout, HELLO_TIMEOUT))
        except (Refused, NotApplicable, EngineError) as e:
            if self.proc is not None:
                _kill(self.proc)
                self.proc = None
            raise AdapterFailure("`%s` refused hello: %s" % (
                self.command, e.message if isinstance(e, EngineError) else e))
        if answer.get("protocol") != PROTOCOL:
            self._fail("answered hello with protocol %r, not %d" % (answer.get("protocol"),
                                                                   PROTOCOL))
        self.engine = answer
        self.name = str(answer.get("engine") or self.name)
        unobserved = answer.get("unobserved") or []
        if not isinstance(unobserved, list) or any(u not in OBSERVATIONS for u in unobserved):
            self._fail("answered hello with unobserved %r (a list from %s)" % (
                unobserved, ", ".join(OBSERVATIONS)))
        self.unobserved = frozenset(unobserved)

    def close(self) -> None:
        """Sends shutdown and waits for the process to exit (killing it when
        it does not)."""
        proc = self.proc
        if proc is None:
            return
        try:
            self._exchange("shutdown", {}, min(self.timeout, 10.0))
            proc.wait(timeout=10)
        except (AdapterFailure, subprocess.TimeoutExpired):
            pass
        _kill(proc)
        self.proc = None

    def _stopped(self) -> str:
        """How the process ended (waiting briefly for it), for messages."""
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if self.stderr_thread is not None:
            self.stderr_thread.join(timeout=2)
        if rc < 0:
            try:
                return "was killed by signal %s" % signal.Signals(-rc).name
            except ValueError:
                return "was killed by signal %d" % -rc
        return "exited with status %d" % rc

    def _fail(self, what: str, method: str = "hello") -> NoReturn:
        """Ends the process and raises AdapterFailure: the command, what went
        wrong and the last lines of its stderr."""
        if self.proc is not None:
            _kill(self.proc)
            if self.stderr_thread is not None:
                self.stderr_thread.join(timeout=2)
        self.proc = None
        tail = list(self.tail)[-STDERR_QUOTED:]
        raise AdapterFailure("`%s` %s (%s, request %d)%s" % (
            self.command, what, method, self.next_id - 1,
            "; its stderr ends: " + " | ".join(tail) if tail else "; nothing on its stderr"))

    def _exchange(self, method: str, params: Dict[str, Any], timeout: float) -> Dict[str, Any]:
        """One request and its result (raises Refused, NotApplicable or
        AdapterFailure)."""
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        ident = self.next_id
        self.next_id += 1
        try:
            proc.stdin.write((json.dumps({"id": ident, "method": method, "params": params},
                                         separators=(",", ":")) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self._fail(self._stopped(), method)
        try:
            raw = self.lines.get(timeout=timeout)
        except queue.Empty:
            self._fail("gave no answer within %g s (--adapter-timeout)" % timeout, method)
        if raw is None:
            self._fail(self._stopped(), method)
        assert raw is not None
        text = raw.decode("utf-8", "replace").strip()
        try:
            answer = json.loads(text)
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or ("result" in answer) == ("error" in answer):
            self._fail("wrote a line that is not an answer (stdout carries answers only): %s" %
                       _cut(text), method)
        if answer.get("id") != ident:
            self._fail("answered id %r to request %d" % (answer.get("id"), ident), method)
        if "error" in answer:
            err = answer["error"]
            kind = err.get("type") if isinstance(err, dict) else None
            message = str(err.get("message", "")) if isinstance(err, dict) else ""
            if kind == "refused":
                raise Refused(message or "refused")
            if kind == "not_applicable":
                raise NotApplicable(message or "not applicable")
            if kind == "failure":
                raise EngineError(self.name, message)
            self._fail("answered an error of unknown type: %s" % _cut(text), method)
        result = answer["result"]
        if not isinstance(result, dict):
            self._fail("answered a result that is not an object: %s" % _cut(text), method)
        return result

    def request(self, method: str, params: Dict[str, Any]) -> Dict[str, Any]:
        """Sends one request (starting the process when it is not running,
        after a failure) and returns its result."""
        if self.proc is None:
            self.start()
        with self.lock:
            released, self.released = self.released, []
        if released:
            self._exchange("release", {"handles": released}, self.timeout)
            self.live.difference_update(released)
        return self._exchange(method, params, self.timeout)

    # -- handles ------------------------------------------------------------------
    def _id(self, h: Any) -> str:
        if not isinstance(h, ProcessHandle):
            raise TypeError("not a handle of this engine: %r" % (h,))
        if h.generation != self.generation or self.proc is None:
            raise AdapterFailure("`%s`: a layout of an engine process that has ended" %
                                 self.command)
        return h.id

    def _release_later(self, ident: str, generation: int) -> None:
        if generation == self.generation:
            with self.lock:
                self.released.append(ident)

    def _field(self, result: Dict[str, Any], key: str, method: str) -> Any:
        if key not in result:
            self._fail("answered %s without %r: %s" % (method, key, _cut(json.dumps(result))),
                       method)
        return result[key]

    def _new(self, result: Dict[str, Any], method: str) -> ProcessHandle:
        ident = self._field(result, "handle", method)
        if not isinstance(ident, str) or not ident:
            self._fail("answered %s with handle %r (a non-empty string)" % (method, ident), method)
        if ident in self.live:
            self._fail("answered %s with handle %r, which it gave before and was not released" %
                       (method, ident), method)
        self.live.add(ident)
        h = ProcessHandle(ident, self.generation)
        weakref.finalize(h, self._release_later, ident, self.generation)
        return h

    def _changed(self, cache: Any, method: str, params: Dict[str, Any]) -> Optional[ProcessHandle]:
        params = dict(params, cache=self._id(cache))
        result = self.request(method, params)
        ident = self._field(result, "handle", method)
        if ident is None or ident == params["cache"]:
            return None
        return self._new(result, method)

    # -- the Adapter methods ----------------------------------------------------
    def create(self, rows: int, layers: List[Layer]) -> ProcessHandle:
        return self._new(self.request("create", {
            "rows": rows, "layers": [layer.as_dict() for layer in layers]}), "create")

    def forward(self, cache: Any, columns: int, ids: List[List[int]],
                positions: List[List[int]], left: List[int], right: List[int],
                decode: bool) -> ForwardResult:
        result = self.request("forward", {
            "cache": self._id(cache), "columns": columns, "ids": ids, "positions": positions,
            "left": left, "right": right, "decode": decode})
        try:
            seen: Dict[QueryKey, List[Item]] = {}
            for s in self._field(result, "seen", "forward"):
                seen[(int(s["layer"]), int(s["row"]), int(s["pos"]))] = [
                    i if isinstance(i, str) else (int(i[0]), int(i[1])) for i in s["items"]]
            out: Optional[Dict[QueryKey, List[float]]] = None
            if result.get("out") is not None:
                out = {(int(o["layer"]), int(o["row"]), int(o["pos"])):
                       [float(v) for v in o["values"]] for o in result["out"]}
        except (KeyError, TypeError, ValueError, IndexError) as e:
            self._fail("answered forward with a malformed result (%s: %s): %s" % (
                type(e).__name__, e, _cut(json.dumps(result))), "forward")
        return ForwardResult(seen, out)

    def trim(self, cache: Any, n: int, bypass: bool) -> Optional[ProcessHandle]:
        return self._changed(cache, "trim", {"n": n, "bypass": bypass})

    def arm(self, cache: Any) -> Optional[ProcessHandle]:
        return self._changed(cache, "arm", {})

    def accept(self, cache: Any, keep: List[int]) -> Optional[ProcessHandle]:
        return self._changed(cache, "accept", {"keep": keep})

    def fork(self, cache: Any) -> ProcessHandle:
        return self._new(self.request("fork", {"cache": self._id(cache)}), "fork")

    def filter(self, cache: Any, rows: List[int]) -> Optional[ProcessHandle]:
        return self._changed(cache, "filter", {"rows": rows})

    def join(self, cache: Any, other: Any) -> Optional[ProcessHandle]:
        return self._changed(cache, "join", {"other": self._id(other)})

    def extract(self, cache: Any, row: int) -> ProcessHandle:
        return self._new(self.request("extract", {"cache": self._id(cache), "row": row}),
                         "extract")

    def save(self, cache: Any) -> bytes:
        data = self._field(self.request("save", {"cache": self._id(cache)}), "data", "save")
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError:
            self._fail("answered save with data that is not base64", "save")

    def load(self, data: bytes, like: Any) -> ProcessHandle:
        return self._new(self.request("load", {"data": base64.b64encode(data).decode(),
                                               "like": self._id(like)}), "load")

    def reload(self, cache: Any) -> ProcessHandle:
        return self._new(self.request("reload", {"cache": self._id(cache)}), "reload")

    def positions(self, cache: Any) -> List[int]:
        v = self._field(self.request("positions", {"cache": self._id(cache)}), "positions",
                        "positions")
        if not isinstance(v, list) or not all(isinstance(x, int) for x in v):
            self._fail("answered positions with %s (a list of integers)" % _cut(json.dumps(v)),
                       "positions")
        return list(v)

    def _observe(self, method: str, cache: Any, layer: int) -> Any:
        return self._field(self.request(method, {"cache": self._id(cache), "layer": layer}),
                           method, method)

    def trimmable(self, cache: Any, layer: int) -> bool:
        return bool(self._observe("trimmable", cache, layer))

    def kind(self, cache: Any, layer: int) -> str:
        return str(self._observe("kind", cache, layer))

    def bytes_per_token(self, cache: Any, layer: int) -> int:
        v = self._observe("bytes_per_token", cache, layer)
        if not isinstance(v, int):
            self._fail("answered bytes_per_token with %r (an integer)" % (v,), "bytes_per_token")
        return int(v)

    def difference(self, a: Any, b: Any) -> Optional[str]:
        v = self._field(self.request("difference", {"a": self._id(a), "b": self._id(b)}),
                        "difference", "difference")
        return None if v is None else str(v)


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
