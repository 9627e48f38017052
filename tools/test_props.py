#!/usr/bin/env python3
"""Tests of tools/props, the properties' overnight driver (run by ctest).

usage: test_props.py BUILD_DIR [unittest options]

- A short run (about 8 s) of one real property on every target of
  BUILD_DIR: its summary and state file, then a resumed run.
- A fake property binary (a Python script standing in for a gtest binary)
  that fails with the same shrunk case on two targets and with another
  one on a third: de-duplication, the stored trace and .repro files.
- --import into a temporary regression folder: de-duplication by case.
Everything is written under a temporary folder.
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "props")
BUILD = None

_loader = importlib.machinery.SourceFileLoader("props", DRIVER)
_spec = importlib.util.spec_from_loader("props", _loader)
props = importlib.util.module_from_spec(_spec)
_loader.exec_module(props)


def run_driver(*args):
    return subprocess.run([sys.executable, DRIVER] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120)


class RealProperty(unittest.TestCase):
    def test_short_run_summary_state_and_resume(self):
        prop = "Targets/RingTargets.OutputsDoNotDependOnPhaseOrCapacity/*"
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "out")
            r = run_driver("--build-dir", BUILD, "--out", out, "--seconds", "8", "--jobs", "1",
                           "--interval", "3", "--slice", "1", "--max-sizes", "5,20",
                           # short runs, so that every target runs within the budget even
                           # in a sanitizer build
                           "--set", "*=max_success=20", prop)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertRegex(r.stdout, r"\] \d+/8 s, \d+ runs, \d+ cases")
            self.assertIn("RingTargets.OutputsDoNotDependOnPhaseOrCapacity:", r.stdout)
            summary_line = [l for l in r.stdout.splitlines()
                            if l.strip().startswith("RingTargets.OutputsDoNotDependOnPhaseOrCapacity ")]
            self.assertEqual(len(summary_line), 1, r.stdout)
            with open(os.path.join(out, "state.json")) as f:
                state = json.load(f)
            tests = state["tests"]
            self.assertGreaterEqual(len(tests), 1)
            # Every target of the CPU has its own test, and each ran cases.
            targets = subprocess.run([os.path.join(BUILD, "kvspec"), "targets"],
                                     stdout=subprocess.PIPE, text=True).stdout
            runnable = targets.split("runnable:")[1].split()
            self.assertEqual(sorted(props.test_target(t) for t in tests), sorted(runnable))
            for name, t in tests.items():
                self.assertGreater(t["runs"], 0, name)
                self.assertGreater(t["cases"], 0, name)
            cells = summary_line[0].split()[1:-1]
            self.assertEqual(len(cells), len(runnable))
            self.assertEqual(sum(int(c) for c in cells),
                             sum(t["cases"] for t in tests.values()))
            self.assertEqual(state["failures"], {})
            with open(os.path.join(out, "summary.json")) as f:
                self.assertEqual(json.load(f)["runs"], state["runs"])
            # Resumed: the counts add up.
            r2 = run_driver("--build-dir", BUILD, "--out", out, "--seconds", "2", "--jobs", "1",
                            "--slice", "1", prop)
            self.assertEqual(r2.returncode, 0, r2.stdout)
            self.assertIn("resuming from", r2.stdout)
            with open(os.path.join(out, "state.json")) as f:
                state2 = json.load(f)
            self.assertGreater(state2["runs"], state["runs"])
            self.assertEqual(state2["base_seed"], state["base_seed"])


FAKE = textwrap.dedent('''\
    #!PYTHON
    # Stands in for a gtest property binary: one suite, three targets.
    import os, sys
    tests = ["Targets/FakeTargets.Prop/AVX2", "Targets/FakeTargets.Prop/SSE4",
             "Targets/FakeTargets.Prop/SCALAR", "Fake.Plain"]
    if "--gtest_list_tests" in sys.argv:
        print("Running main() from fake")
        print("Fake.\\n  Plain")
        print("Targets/FakeTargets.")
        for t in tests[:3]:
            print("  " + t.split(".")[1] + "  # GetParam() = 1")
        sys.exit(0)
    name = [a for a in sys.argv if a.startswith("--gtest_filter=")][0].split("=", 1)[1]
    if name == "Fake.Plain":
        print("[       OK ] Fake.Plain")
        sys.exit(0)
    params = os.environ["RC_PARAMS"]
    print("Using configuration: " + params)
    target = name.rsplit("/", 1)[1]
    print("Falsifiable after 7 tests and 3 shrinks")
    print("std::tuple<int>: (%d)" % (3 if target == "SCALAR" else 1))
    if target != "SCALAR":
        d = os.environ["KVSPEC_REGRESSION_DIR"]
        path = os.path.join(d, "Prop-0000abcd.trace")
        with open(path, "w") as f:
            f.write("# a failure on %s, seed in %s\\n# target: %s\\n" % (target, params, target))
            f.write("trace 1\\nrows 1\\nlayer a kv heads=1 dim=1\\ndecode\\nexpect positions 2\\n")
        print("regression trace written: " + path)
    print('RC_PARAMS="reproduce=FAKE%s"' % target)
    print("[  FAILED  ] " + name)
    sys.exit(1)
''').replace("PYTHON", sys.executable)


class FakeProperty(unittest.TestCase):
    def test_failures_are_deduplicated_and_stored(self):
        with tempfile.TemporaryDirectory() as tmp:
            build = os.path.join(tmp, "build")
            os.makedirs(os.path.join(build, "properties"))
            fake = os.path.join(build, "properties", "fake_props")
            with open(fake, "w") as f:
                f.write(FAKE)
            os.chmod(fake, 0o755)
            out = os.path.join(tmp, "out")
            r = run_driver("--build-dir", build, "--out", out, "--seconds", "6", "--jobs", "2",
                           "--max-failures", "2")
            self.assertEqual(r.returncode, 1, r.stdout)
            with open(os.path.join(out, "state.json")) as f:
                state = json.load(f)
            failures = state["failures"]
            kinds = sorted(f["kind"] for f in failures.values())
            # One trace failure (AVX2 and SSE4: the same case) and one repro.
            self.assertEqual(kinds, ["repro", "trace"], r.stdout)
            trace = [f for f in failures.values() if f["kind"] == "trace"][0]
            self.assertEqual(sorted(trace["targets"]), ["AVX2", "SSE4"])
            self.assertEqual(trace["count"], 4)  # two runs on each, then stopped
            repro = [f for f in failures.values() if f["kind"] == "repro"][0]
            self.assertEqual(repro["targets"], ["SCALAR"])
            self.assertEqual(repro["count"], 2)
            # The plain test ran once (deterministic), and no more.
            self.assertEqual(state["tests"]["Fake.Plain"]["runs"], 1)
            self.assertTrue(state["tests"]["Fake.Plain"]["deterministic"])
            stored = sorted(os.listdir(os.path.join(out, "failures")))
            self.assertIn("Prop-0000abcd.trace", stored)
            repro_file = [s for s in stored if s.endswith(".repro")]
            self.assertEqual(len(repro_file), 1)
            with open(os.path.join(out, "failures", repro_file[0])) as f:
                text = f.read()
            self.assertIn("target: SCALAR\n", text)
            self.assertIn("reproduce: reproduce=FAKESCALAR\n", text)
            self.assertRegex(text, r"\nseed: \d+\n")
            self.assertIn("binary: properties/fake_props\n", text)
            self.assertIn("NEW FAILURE (trace)", r.stdout)
            self.assertIn("keep:   cp ", r.stdout)
            self.assertIn("(x4 on AVX2,SSE4)", r.stdout)
            self.assertIn("Prop, failing at trace: 1 cases (4 runs) on AVX2,SSE4", r.stdout)
            self.assertIn("keep all:  ", r.stdout)
            # The per-run folders are gone; nothing is left running.
            self.assertEqual(os.listdir(os.path.join(out, "runs")), [])


class Import(unittest.TestCase):
    def write(self, path, text):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)

    def test_import_deduplicates_by_case(self):
        body = "trace 1\nrows 1\nlayer a kv heads=1 dim=1\ndecode\nexpect positions 1\n"
        with tempfile.TemporaryDirectory() as tmp:
            into = os.path.join(tmp, "regressions")
            src = os.path.join(tmp, "artifact")
            self.write(os.path.join(into, "properties", "Old-1.trace"), "# old comment\n" + body)
            # The same case with other comments and blank lines: skipped.
            self.write(os.path.join(src, "failures", "Same-2.trace"),
                       "# found elsewhere\n# target: AVX2\n\n" + body)
            # A new case: copied to properties/.
            self.write(os.path.join(src, "failures", "New-3.trace"), body + "decode\n")
            # A fuzz finding's trace keeps its folder.
            self.write(os.path.join(src, "fuzz_layout_ops", "crash-4.trace"), body + "trim 1\n")
            # Two repro records with one key: the second is skipped.
            self.write(os.path.join(src, "failures", "P-5.repro"), "key: 12345678\nproperty: A\n")
            self.write(os.path.join(src, "more", "P-6.repro"), "key: 12345678\nproperty: A/SSE4\n")
            self.write(os.path.join(src, "failures", "P-5.log"), "not a failure file\n")
            r = run_driver("--import", src, "--into", into)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertIn("import: 3 copied, 2 already there", r.stdout)
            self.assertTrue(os.path.exists(os.path.join(into, "properties", "New-3.trace")))
            self.assertTrue(os.path.exists(os.path.join(into, "fuzz_layout_ops", "crash-4.trace")))
            self.assertTrue(os.path.exists(os.path.join(into, "properties", "P-5.repro")))
            self.assertFalse(os.path.exists(os.path.join(into, "properties", "Same-2.trace")))
            self.assertFalse(os.path.exists(os.path.join(into, "properties", "P-6.repro")))
            self.assertFalse(os.path.exists(os.path.join(into, "properties", "P-5.log")))
            # Again: nothing new.
            r = run_driver("--import", src, "--into", into)
            self.assertIn("import: 0 copied, 5 already there", r.stdout)


class Helpers(unittest.TestCase):
    def test_names(self):
        t = "Targets/LayoutTargets.KvOperationSequencesMatchTheModel/AVX2"
        self.assertEqual(props.property_name(t), "LayoutTargets.KvOperationSequencesMatchTheModel")
        self.assertEqual(props.test_target(t), "AVX2")
        self.assertEqual(props.test_target("LayoutProps.RopeOffsetIsAValue"), "-")

    def test_set_patterns(self):
        sets = props.parse_sets(["Layout=max_success=5", "*/SSE4=max_size=7"])
        self.assertEqual(props.settings_for(sets, "Targets/LayoutTargets.X/SSE4"),
                         {"max_success": "5", "max_size": "7"})
        self.assertEqual(props.settings_for(sets, "Targets/RingTargets.X/AVX2"), {})


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_props.py BUILD_DIR")
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main()
