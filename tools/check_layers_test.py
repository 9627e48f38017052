#!/usr/bin/env python3
"""Tests of tools/check_layers.py (run by ctest as layers.check_test): it
passes a tree that keeps the layers and fails, naming the file and the
chain, each kind of violation the rules forbid, directly or through a
header."""
import importlib.util
import sys
import tempfile
import unittest
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "check_layers", Path(__file__).resolve().parent / "check_layers.py")
assert _spec and _spec.loader
check_layers = importlib.util.module_from_spec(_spec)
sys.modules["check_layers"] = check_layers
_spec.loader.exec_module(check_layers)


class Tree:
    """A throwaway source tree of files with the given includes."""

    def __init__(self, files):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        for path, includes in files.items():
            target = self.root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(f'#include "kvspec/{i}"\n' for i in includes) +
                              "#include <vector>\n#include \"hwy/base.h\"\n")

    def __enter__(self):
        return self.root

    def __exit__(self, *exc):
        self.dir.cleanup()


GOOD = {
    "base/status.h": [],
    "base/layer_config.h": ["base/status.h"],
    "kernels/attention.h": [],
    "kernels/attention.cc": ["kernels/attention.h"],
    "kernels/attention_test.cc": ["kernels/attention.h", "testing/target_params.h"],
    "core/layout.h": ["base/layer_config.h", "kernels/attention.h"],
    "core/codec/codec.cc": ["core/layout.h"],
    "core/codec/codec_test.cc": ["runner/runner.h"],
    "trace/program.h": ["base/layer_config.h"],
    "runner/runner.h": ["trace/program.h", "core/layout.h"],
    "testing/trace_model.h": ["trace/program.h"],
    "testing/values_oracle.cc": ["testing/trace_model.h", "base/status.h"],
    "testing/target_params.h": [],
}


def violations(changes):
    files = dict(GOOD)
    files.update(changes)
    with Tree(files) as root:
        return check_layers.check(root)


class CheckLayersTest(unittest.TestCase):
    def test_a_tree_that_keeps_the_layers_passes(self):
        self.assertEqual(violations({}), [])

    def test_core_including_the_runner_fails(self):
        found = violations({"core/layout.cc": ["core/layout.h", "runner/runner.h"]})
        self.assertEqual(len(found), 1)
        self.assertIn("core/layout.cc: includes runner/runner.h", found[0])

    def test_core_including_the_trace_format_through_a_header_fails(self):
        found = violations({"core/batch.h": ["trace/program.h"],
                            "core/batch.cc": ["core/batch.h"]})
        self.assertTrue(any(f.startswith("core/batch.cc: includes core/batch.h -> trace/program.h")
                            for f in found), found)

    def test_kernels_including_core_fails(self):
        found = violations({"kernels/conv1d.cc": ["core/layout.h"]})
        self.assertTrue(any(f.startswith("kernels/conv1d.cc: includes core/layout.h") for f in found),
                        found)

    def test_kernel_tests_may_use_testing_but_not_core(self):
        self.assertEqual(violations({"kernels/conv1d_test.cc": ["testing/target_params.h"]}), [])
        found = violations({"kernels/conv1d_test.cc": ["core/layout.h"]})
        self.assertEqual(len(found), 1, found)

    def test_the_oracle_including_core_or_kernels_fails(self):
        for bad in ("core/layout.h", "kernels/attention.h"):
            found = violations({"testing/values_oracle.h": [bad]})
            self.assertTrue(any(f.startswith("testing/values_oracle.h") for f in found), found)
        found = violations({"testing/trace_model.h": ["kernels/attention.h"]})
        self.assertTrue(any(f.startswith("testing/values_oracle.cc: includes testing/trace_model.h"
                                         " -> kernels/attention.h") for f in found), found)

    def test_the_format_including_core_fails(self):
        found = violations({"trace/program.h": ["base/layer_config.h", "core/layout.h"]})
        self.assertTrue(any(f.startswith("trace/program.h: includes core/layout.h") for f in found),
                        found)

    def test_main_exit_status(self):
        with Tree(GOOD) as root:
            self.assertEqual(check_layers.main([str(root)]), 0)
        with Tree(dict(GOOD, **{"kernels/x.cc": ["core/layout.h"]})) as root:
            self.assertEqual(check_layers.main([str(root)]), 1)
        self.assertEqual(check_layers.main(["/nonexistent/kvspec"]), 2)

    def test_this_checkout_keeps_the_layers(self):
        root = Path(__file__).resolve().parent.parent
        self.assertEqual(check_layers.check(root), [])


if __name__ == "__main__":
    unittest.main(argv=sys.argv)
