"""An in-process kvspec Adapter that drives engines/onnxruntime/adapter.mjs
over JSON lines (used until the runner's --adapter-command lands):
python3 -m kvspec.conform --adapter bridge (with this folder on PYTHONPATH;
KVSPEC_ORT_SETTINGS="buffer=ring" for a setting)."""

import base64
import json
import os
import subprocess

from kvspec.adapter import Adapter as Base, ForwardResult
from kvspec.errors import NotApplicable, Refused

HERE = os.path.dirname(os.path.abspath(__file__))


class Adapter(Base):
    name = "onnxruntime"
    unobserved = frozenset(["kind", "trimmable", "bytes_per_token"])

    def __init__(self):
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "adapter.mjs")], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.id = 0
        settings = dict(kv.split("=", 1) for kv in os.environ.get("KVSPEC_ORT_SETTINGS", "").split(",") if kv)
        self.id = -1
        self.call("hello", protocol=1, settings=settings)

    def call(self, method, **params):
        self.id += 1
        self.proc.stdin.write(json.dumps({"id": self.id, "method": method, "params": params}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the engine exited")
        a = json.loads(line)
        assert a["id"] == self.id, a
        if "error" in a:
            e = a["error"]
            if e["type"] == "refused":
                raise Refused(e["message"])
            if e["type"] == "not_applicable":
                raise NotApplicable(e["message"])
            raise RuntimeError(e["message"])
        return a["result"]

    def create(self, rows, layers):
        return self.call("create", rows=rows, layers=[l.as_dict() for l in layers])["handle"]

    def forward(self, cache, columns, ids, positions, left, right, decode):
        r = self.call("forward", cache=cache, columns=columns, ids=ids, positions=positions, left=left,
                      right=right, decode=decode)
        seen = {(s["layer"], s["row"], s["pos"]): [tuple(i) if isinstance(i, list) else i for i in s["items"]]
                for s in r["seen"]}
        out = {(o["layer"], o["row"], o["pos"]): o["values"] for o in r["out"] or []}
        return ForwardResult(seen, out)

    def trim(self, cache, n, bypass):
        return self.call("trim", cache=cache, n=n, bypass=bypass)["handle"]

    def arm(self, cache):
        return self.call("arm", cache=cache)["handle"]

    def accept(self, cache, keep):
        return self.call("accept", cache=cache, keep=keep)["handle"]

    def fork(self, cache):
        return self.call("fork", cache=cache)["handle"]

    def filter(self, cache, rows):
        return self.call("filter", cache=cache, rows=rows)["handle"]

    def join(self, cache, other):
        return self.call("join", cache=cache, other=other)["handle"]

    def extract(self, cache, row):
        return self.call("extract", cache=cache, row=row)["handle"]

    def save(self, cache):
        return base64.b64decode(self.call("save", cache=cache)["data"])

    def load(self, data, like):
        return self.call("load", data=base64.b64encode(data).decode(), like=like)["handle"]

    def reload(self, cache):
        return self.call("reload", cache=cache)["handle"]

    def positions(self, cache):
        return self.call("positions", cache=cache)["positions"]

    def difference(self, a, b):
        return self.call("difference", a=a, b=b)["difference"]
