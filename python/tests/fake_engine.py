"""A minimal engine process for the protocol tests (test_process.py): it
answers the adapter protocol for one-layer kv traces of decodes, and
misbehaves as ``argv[1]`` says on its first forward (argv[2], a flag file:
only while it does not exist; it is created then)."""

import json
import os
import signal
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "good"
FLAG = sys.argv[2] if len(sys.argv) > 2 else ""


def answer(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def misbehave(ident):
    if FLAG:
        if os.path.exists(FLAG):
            return False
        open(FLAG, "w").close()
    print("fake engine: about to %s" % MODE, file=sys.stderr, flush=True)
    if MODE == "garbage":
        print("loading weights...", flush=True)
    elif MODE == "wrong_id":
        answer({"id": ident + 5, "result": {"seen": [], "out": None}})
    elif MODE == "silent":
        time.sleep(60)
    elif MODE == "exit":
        sys.exit(3)
    elif MODE == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    elif MODE == "failure":
        answer({"id": ident, "error": {"type": "failure", "message": "out of cheese"}})
    elif MODE == "no_seen":
        answer({"id": ident, "result": {"out": None}})
    else:
        return False
    return True


def main():
    layouts = {}
    count = 0
    for line in sys.stdin:
        req = json.loads(line)
        ident, method, p = req["id"], req["method"], req["params"]
        if method == "hello":
            if MODE == "refuse_hello":
                answer({"id": ident, "error": {"type": "failure", "message": "no GPU here"}})
                continue
            answer({"id": ident, "result": {"protocol": 1, "engine": "fake", "version": "0",
                                            "settings": p["settings"],
                                            "unobserved": ["kind", "trimmable", "bytes_per_token",
                                                           "out"]}})
        elif method == "create":
            count += 1
            layouts["h%d" % count] = [0] * p["rows"]
            answer({"id": ident, "result": {"handle": "h%d" % count}})
        elif method == "positions":
            answer({"id": ident, "result": {"positions": layouts[p["cache"]]}})
        elif method == "forward":
            if misbehave(ident):
                continue
            n = layouts[p["cache"]]
            seen = []
            for r, pos in enumerate(p["positions"]):
                for q in pos:
                    seen.append({"layer": 0, "row": r, "pos": q,
                                 "items": [[x, x] for x in range(q + 1)]})
                n[r] += len(pos)
            answer({"id": ident, "result": {"seen": seen, "out": None}})
        elif method == "release":
            for h in p["handles"]:
                del layouts[h]
            answer({"id": ident, "result": {}})
        elif method == "shutdown":
            answer({"id": ident, "result": {}})
            return 0
        else:
            answer({"id": ident, "error": {"type": "not_applicable",
                                           "message": "%s is not implemented" % method}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
