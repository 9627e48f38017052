import os
import subprocess
import sys

SOURCE_DIR = os.environ.get("KVSPEC_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("KVSPEC_BUILD_DIR", os.path.join(SOURCE_DIR, "build", "dev"))
if os.path.join(BUILD_DIR, "python") not in sys.path:
    sys.path.insert(0, os.path.join(BUILD_DIR, "python"))


def load_under_one_gib(path, env):
    """Loads `path` with kvspec.program.load in a process limited to 1 GiB of
    address space; what it prints: the TraceSyntaxError's message."""
    code = ("import resource, kvspec.program as p\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "try:\n"
            "    p.load(%r)\n"
            "except p.TraceSyntaxError as e:\n"
            "    print(e)\n" % str(path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def sparse_file(path, size=8 << 30):
    with open(path, "wb") as f:
        f.truncate(size)
    return path
