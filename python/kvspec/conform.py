"""The conformance runner: drives any engine's cache through kvspec traces.

    kvspec-conform --adapter MODULE[:CLASS] [--json] FILE...
    python3 -m kvspec.conform --adapter MODULE[:CLASS] [--json] FILE...
    python3 -m kvspec.conform --adapter-command 'CMD ARGS' [--setting KEY=VALUE]... FILE...

``MODULE`` alone means ``MODULE:Adapter`` (kvspec.adapter explains the
protocol); a bare name of an adapter shipped with kvspec (``reference``,
``numpy_cache``, ``naive_ring``, ``llama_cpp``) means the module
``kvspec.adapters.NAME``, and ``onnxruntime`` its engine process.
``--adapter-command`` runs any process that speaks the adapter protocol
(docs/adapter-protocol.md, kvspec.process); ``--setting`` options go to
every adapter alike (``Adapter.configure``, or the protocol's hello). An
adapter that cannot be had (not installed, an unknown setting, a process
that fails its hello) stops the run before any trace, exit status 2. FILE is a trace (``.trace``, parsed by kvspec's own parser; needs
the compiled module) or its emitted form (``.json``, corpus/emitted/).

For every statement the runner checks the trace's own expectations. When
the compiled module is present it also runs kvspec's core on the same trace
(kvspec.adapters.reference) in lockstep and compares every observable after
every statement: refused or not, what each query saw (and the outputs, when
the adapter gives them), positions, and per layer the kind, trimmability and
bytes per token; the first divergence is reported with the trace line,
expected (the reference) and got (the adapter). Without the module it checks
the traces' own expectations alone and says so.

Output: one line per trace (``pass FILE``, ``fail FILE:LINE: ...`` or
``not applicable FILE: reason``), then ``N passed, N failed, N not
applicable``. ``--json`` prints the same as one JSON document; ``--html
DIR`` also writes it as a page (kvspec.report_page). Exit status
0 when nothing failed, 1 otherwise, 2 for bad usage.
"""

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple, Type, Union

from . import adapters
from . import program as programs
from .adapter import Adapter as Adapter, ForwardResult as ForwardResult
from .errors import NotApplicable, TraceSyntaxError
from .lockstep import MAX_ROWS as MAX_ROWS, OUT_TOLERANCE as OUT_TOLERANCE, Failure as Failure, \
    Lockstep
from .process import DEFAULT_TIMEOUT, AdapterFailure, ProcessAdapter
from .program import Program

#: What names an adapter: ``"MODULE[:CLASS]"``, an adapter class or an instance.
AdapterSpec = Union[str, Type[Adapter], Adapter]


class Result:
    """The outcome of one trace: status "pass", "fail" or "not applicable"."""

    def __init__(self, file: str, status: str, line: Optional[int] = None,
                 message: str = "") -> None:
        self.file = file
        self.path = file  # the file given to the runner (.trace or .json)
        self.status = status
        self.line = line
        self.message = message
        # expectations not compared because the adapter declares them
        # unobserved (Adapter.unobserved): statement -> count
        self.unchecked: Dict[str, int] = {}

    def text(self) -> str:
        if self.status == "pass":
            if self.unchecked:
                return "pass %s (not compared: %s)" % (self.file, ", ".join(
                    "%d %s" % (n, op) for op, n in sorted(self.unchecked.items())))
            return "pass %s" % self.file
        if self.status == "fail":
            where = self.file if self.line is None else "%s:%d" % (self.file, self.line)
            return "fail %s: %s" % (where, self.message)
        return "not applicable %s: %s" % (self.file, self.message)

    def as_dict(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"file": self.file, "path": self.path, "status": self.status, "line": self.line,
             "message": self.message}
        if self.unchecked:
            d["unchecked"] = dict(self.unchecked)
        return d


def verdict_of_line(line: str) -> Optional[Tuple[str, str]]:
    """The inverse of a result's text, as the engines' verdict files keep it:
    (file, "pass FILE" / "fail FILE:LINE" / "not applicable FILE") from one
    runner output line, or None for any other line."""
    if line.startswith("pass "):
        f = line[5:].split(" ")[0]
        return f, "pass " + f
    if line.startswith("fail "):
        where = line[5:].split(": ")[0]
        return where.split(":")[0], "fail " + where
    if line.startswith("not applicable "):
        f = line[len("not applicable "):].split(": ")[0]
        return f, "not applicable " + f
    return None


def load_adapter(spec: AdapterSpec, settings: Optional[Mapping[str, str]] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Adapter:
    """An adapter instance from ``MODULE[:CLASS]`` (an instance or class is
    also accepted as is). A bare name (no dot) of a module in
    kvspec.adapters means that module: ``llama_cpp`` is
    ``kvspec.adapters.llama_cpp``, not another package of that name; a bare
    name of kvspec.adapters.PROCESS_ENGINES (``onnxruntime``) is that
    engine's process. With ``settings`` (``--setting``), the adapter's
    ``configure`` is called with them (a process adapter is started then)."""
    adapter: Adapter
    if not isinstance(spec, str):
        adapter = spec() if isinstance(spec, type) else spec
    else:
        module_name, _, class_name = spec.partition(":")
        if "." not in module_name and not class_name and \
                importlib.util.find_spec("kvspec.adapters." + module_name) is None and \
                module_name in adapters.PROCESS_ENGINES:
            adapter = ProcessAdapter(adapters.engine_command(module_name), timeout=timeout)
        else:
            if "." not in module_name and \
                    importlib.util.find_spec("kvspec.adapters." + module_name) is not None:
                module_name = "kvspec.adapters." + module_name
            module = importlib.import_module(module_name)
            adapter = getattr(module, class_name or "Adapter")()
    if settings is not None:
        adapter.configure(settings)
    return adapter


def open_adapter(spec: Optional[AdapterSpec] = None, command: Optional[str] = None,
                 settings: Optional[Mapping[str, str]] = None,
                 timeout: float = DEFAULT_TIMEOUT) -> Adapter:
    """The adapter of a run, configured (a process adapter started and past
    its hello): ``spec`` as load_adapter takes it, or ``command``, a process
    that speaks the protocol. Raises AdapterFailure, EngineNotFound,
    ImportError or ValueError (an unknown setting) when it cannot be had."""
    if command is not None:
        return load_adapter(ProcessAdapter(command, timeout=timeout), settings or {})
    assert spec is not None
    return load_adapter(spec, settings or {}, timeout)


def close_adapter(adapter: Adapter) -> None:
    """Ends an adapter's process, if it has one."""
    if isinstance(adapter, ProcessAdapter):
        adapter.close()


def have_core() -> bool:
    """Whether the compiled module kvspec._core is importable."""
    from . import HAVE_CORE
    return HAVE_CORE


def run_program(prog: Program, adapter: AdapterSpec, reference: Optional[Adapter] = None,
                lenient: bool = False) -> Result:
    """Runs one parsed program; returns a :class:`Result`."""
    run = Lockstep(prog, load_adapter(adapter), reference, lenient)
    try:
        run.run()
    except NotApplicable as e:
        return Result(prog.file, "not applicable", message=e.reason)
    except Failure as e:
        return Result(prog.file, "fail", e.line, e.message)
    result = Result(prog.file, "pass")
    result.unchecked = run.unchecked
    return result


def run_file(path: str, adapter: AdapterSpec, compare: bool = True,
             lenient: bool = False) -> Result:
    """Runs one file (.trace or .json); returns a :class:`Result`."""
    try:
        prog = programs.load(path)
    except (TraceSyntaxError, ValueError, OSError) as e:
        return Result(path, "fail", message=str(e))
    # A .json file reports the trace it was emitted from, with that trace's
    # lines; a .trace file reports itself.
    if not path.endswith(".json"):
        prog.file = path
    reference: Optional[Adapter] = None
    if compare and have_core():
        from .adapters.reference import Adapter as Reference
        reference = Reference()
    try:
        adapter = load_adapter(adapter)
        result = run_program(prog, adapter, reference, lenient)
    except AdapterFailure as e:  # the engine's process failed, or answered a failure
        result = Result(prog.file, "fail", message="adapter failure: %s" % e)
    except Exception as e:  # an adapter bug is a failure of that trace, not a crash
        result = Result(prog.file, "fail", message="%s: %s" % (type(e).__name__, e))
    result.path = path
    return result


def summary(results: Sequence[Result]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "not applicable")}
    return "%d passed, %d failed, %d not applicable" % (
        counts["pass"], counts["fail"], counts["not applicable"])


def run(adapter: AdapterSpec, files: Sequence[str], compare: bool = True,
        as_json: bool = False, out: Optional[TextIO] = None,
        lenient: bool = False) -> List[Result]:
    """Runs every file with the adapter (a ``MODULE[:CLASS]`` string, a class
    or an instance); prints the report to ``out`` (default stdout) and
    returns the list of :class:`Result`."""
    out = out or sys.stdout
    results: List[Result] = []
    if compare and have_core():
        mode = "compared with kvspec's core"
    elif compare:
        mode = "pure Python: the traces' own expectations only (kvspec._core not available)"
    else:
        mode = "the traces' own expectations only (--no-compare)"
    start = time.monotonic()
    for path in files:
        result = run_file(path, adapter, compare, lenient)
        results.append(result)
        if not as_json:
            print(result.text(), file=out)
    if as_json:
        json.dump({"mode": mode, "results": [r.as_dict() for r in results],
                   "passed": sum(r.status == "pass" for r in results),
                   "failed": sum(r.status == "fail" for r in results),
                   "not_applicable": sum(r.status == "not applicable" for r in results),
                   "seconds": round(time.monotonic() - start, 3)}, out, indent=1)
        print(file=out)
    else:
        print("# mode: %s" % mode, file=out)
        print(summary(results), file=out)
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line (``kvspec-conform``, ``python3 -m kvspec.conform``);
    returns the exit status."""
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    parser = argparse.ArgumentParser(
        prog=script if script == "kvspec-conform" else "python3 -m kvspec.conform",
        description="Runs kvspec traces against an engine's cache through an adapter.")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--adapter", metavar="NAME",
                       help="a bundled engine (llama_cpp, onnxruntime, numpy_cache, ...) or "
                       "MODULE[:CLASS] of a Python adapter (MODULE alone: MODULE:Adapter)")
    which.add_argument("--adapter-command", metavar="'CMD ARGS'",
                       help="an engine process that speaks the adapter protocol "
                       "(docs/adapter-protocol.md), e.g. 'node my-adapter.mjs'")
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="an engine setting, repeatable; every adapter gets them the same "
                        "way (Adapter.configure, or the protocol's hello)")
    parser.add_argument("--adapter-timeout", type=float, default=DEFAULT_TIMEOUT,
                        metavar="SECONDS", help="seconds an engine process may take to answer "
                        "(default %(default)g)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-compare", action="store_true",
                        help="check the traces' own expectations only, even with the module")
    parser.add_argument("files", nargs="*", help=".trace or emitted .json files")
    parser.add_argument("--html", metavar="DIR",
                        help="also write the verdicts as a page, DIR/index.html "
                        "(kvspec.report_page: several engines' saved --json reports side by side)")
    parser.add_argument("--random", type=int, metavar="N",
                        help="run N random programs (kvspec.hypothesis) instead of files")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--lenient-refusals", action="store_true",
                        help="undo and count an operation the reference refuses and the "
                        "engine accepts, and go on (needs the module)")
    parser.add_argument("--kinds", default="kv,rotating",
                        help="random mode: the layer kinds drawn, from kv, rotating, ssm and "
                        "kv-full (a kv layer without a window)")
    parser.add_argument("--keep-going", action="store_true",
                        help="random mode: a failure does not end the run; it is shrunk, "
                        "stored in --out and classified, later failures of the same class "
                        "are counted; the summary gives failures per class")
    parser.add_argument("--out", metavar="DIR",
                        help="random mode: where shrunk failing traces are written (default: "
                        "the working directory; with --keep-going ./kvspec-random-SEED)")
    parser.add_argument("--progress", type=float, default=60, metavar="SECONDS",
                        help="random mode: a progress line at least this often (0: none)")
    parser.add_argument("--time-budget", type=float, metavar="SECONDS",
                        help="random mode with --keep-going: start no new segment of examples "
                        "after this many seconds (the summary says the run was stopped)")
    parser.add_argument("--shrink-seconds", type=float, metavar="SECONDS",
                        help="random mode with --keep-going: stop shrinking a failure after "
                        "this many seconds and keep the smallest program found so far")
    args = parser.parse_args(argv)
    settings: Dict[str, str] = {}
    for item in args.setting:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            parser.error("--setting %r: expected KEY=VALUE" % item)
        settings[key.strip()] = value.strip()
    if args.adapter_timeout <= 0:
        parser.error("--adapter-timeout: expected a positive number of seconds")
    if args.random is None and not args.files:
        parser.error("no trace files given")
    try:
        adapter = open_adapter(args.adapter, args.adapter_command, settings, args.adapter_timeout)
    except AdapterFailure as e:  # names the command
        parser.exit(2, "%s: error: %s\n" % (parser.prog, e))
    except (adapters.EngineNotFound, ImportError, AttributeError, ValueError) as e:
        # no trace has run: the adapter cannot be had as asked
        parser.exit(2, "%s: error: adapter %s: %s\n" % (
            parser.prog, args.adapter or repr(args.adapter_command), e))
    except Exception as e:  # e.g. an engine library that is not installed
        parser.exit(2, "%s: error: adapter %s: %s: %s\n" % (
            parser.prog, args.adapter or repr(args.adapter_command), type(e).__name__, e))
    try:
        return _main_run(parser, args, adapter)
    finally:
        close_adapter(adapter)


def _main_run(parser: argparse.ArgumentParser, args: argparse.Namespace,
              adapter: Adapter) -> int:
    if args.random is not None:
        from . import hypothesis as hyp
        kinds = args.kinds.split(",")
        bad = [k for k in kinds if k not in ("kv", "rotating", "ssm", "kv-full")]
        if bad:
            parser.error("--kinds: unknown kind %s" % ", ".join(bad))
        from . import findings
        findings.SETTINGS = dict(getattr(adapter, "settings", {}) or {})
        failed = hyp.run_random(adapter, args.random, args.seed, args.max_steps,
                                failure_dir=args.out, lenient=args.lenient_refusals,
                                kinds=kinds, keep_going=args.keep_going,
                                progress=args.progress, time_budget=args.time_budget,
                                shrink_seconds=args.shrink_seconds)
        return 1 if failed else 0
    results = run(adapter, args.files, compare=not args.no_compare, as_json=args.json,
                  lenient=args.lenient_refusals)
    if args.html:
        from . import report_page
        page = report_page.write_page(args.html, [report_page.Engine(
            args.adapter, [report_page.Verdict(r.file, r.status, r.line, r.message)
                           for r in results])])
        print("# verdict page: %s" % page, file=sys.stderr)
    return 1 if any(r.status == "fail" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
