import os
import sys

SOURCE_DIR = os.environ.get("KVSPEC_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("KVSPEC_BUILD_DIR", os.path.join(SOURCE_DIR, "build", "dev"))
if os.path.join(BUILD_DIR, "python") not in sys.path:
    sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
