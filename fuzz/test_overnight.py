#!/usr/bin/env python3
"""Unit tests of fuzz/overnight's triage helpers (run by ctest)."""
import importlib.machinery
import importlib.util
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("overnight", os.path.join(HERE, "overnight"))
_spec = importlib.util.spec_from_loader("overnight", _loader)
overnight = importlib.util.module_from_spec(_spec)
_loader.exec_module(overnight)

TRACE = "trace 1\nrows 1\nlayer k kv heads=1 dim=1\ndecode\n"


class ExtractLayoutTrace(unittest.TestCase):
    def test_reference_annotation_wins(self):
        out = ("# target AVX2\n" + TRACE +
               "==== annotated trace (model), exit 0\n" + TRACE + "expect sees k r0 p0: 0\n====\n"
               "Highway target: AVX2\n--- reference (exit 0)\n"
               "==== annotated trace (reference kernels), exit 0\n" + TRACE +
               "expect sees k r0 p0: 0\nexpect out k r0 p0: 0.5\n====\n")
        text, code = overnight.extract_layout_trace(out)
        self.assertEqual(code, 0)
        self.assertTrue(text.startswith("# target AVX2\ntrace 1\n"))
        self.assertIn("expect out k r0 p0: 0.5\n", text)

    def test_model_annotation_and_its_exit(self):
        out = ("# target SSE4\n" + TRACE +
               "==== annotated trace (model), exit 1\n" + TRACE + "expect sees k r0 p0: 0\n====\n"
               "difference: exit status: runner 0, model 1\n==== model: exit 0\n")
        text, code = overnight.extract_layout_trace(out)
        self.assertEqual(code, 1)
        self.assertEqual(text, "# target SSE4\n" + TRACE + "expect sees k r0 p0: 0\n")

    def test_divergence_report_without_annotation(self):
        out = ("# target SCALAR\n" + TRACE + "==== trace (fuzz_layout_ops.trace)\n" + TRACE +
               "==== model: exit 1\n")
        text, code = overnight.extract_layout_trace(out)
        self.assertEqual(code, 1)
        self.assertEqual(text, "# target SCALAR\n" + TRACE)

    def test_printed_trace_only(self):
        out = "# target AVX2\n" + TRACE + "==12345==ERROR: AddressSanitizer: heap-buffer-overflow\n"
        text, code = overnight.extract_layout_trace(out)
        self.assertIsNone(code)
        self.assertEqual(text, "# target AVX2\n" + TRACE)

    def test_nothing(self):
        self.assertEqual(overnight.extract_layout_trace("INFO: nothing here\n"), (None, None))


if __name__ == "__main__":
    unittest.main()
