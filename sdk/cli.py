"""``python -m sdk``: list plugins, run the demo model, explain a compile, run the benchmarks,
look after the cache, list what becomes of each ATen op (ops), check a plugin (conformance),
start a plugin (new-plugin)."""

from __future__ import annotations

import argparse
import os
import sys


def _cmd_list(args: argparse.Namespace) -> int:
    from sdk import list_plugins

    rows = list_plugins()
    if not rows:
        print("no SDK plugins discovered (entry-point group 'sdk.plugins')")
        return 1
    cols = ["name", "version", "distribution", "devices", "kind", "status"]
    widths = {c: max(len(c), *(len(r[c]) for r in rows)) for c in cols[:-1]}
    print("  ".join(c.ljust(widths.get(c, 0)) for c in cols))
    for r in rows:
        print("  ".join(r[c].ljust(widths.get(c, 0)) for c in cols))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from sdk.tools.demo import run_demo

    return run_demo(plugin=args.plugin, model=args.model, steps=args.steps)


def _cmd_explain(args: argparse.Namespace) -> int:
    from sdk.tools.demo import explain_model

    options = {}
    if args.chain:
        options["chain"] = [n.strip().removeprefix("sdk:") for n in args.chain.split(",")]
    if args.min_partition_size is not None:
        options["min_partition_size"] = args.min_partition_size
    return explain_model(
        args.plugin, args.model, args.target, args.inference, options, verbose=args.verbose
    )


def _bench_option_error(args: argparse.Namespace) -> str | None:
    """An option of ``bench`` that the chosen ``--suite`` does not take, or a bad ``--repeat``
    (argparse cannot tie options to the value of another)."""
    if args.suite == "kernels":
        extra = [f"--{n}" for n in ("size", "dtype") if getattr(args, n)]
        extra += ["--profile"] if args.profile else []
        if extra:
            return f"{', '.join(extra)}: only with --suite models"
    if args.repeat < 0:
        return "--repeat must be >= 0"
    return None


def _cmd_bench(args: argparse.Namespace) -> int:
    error = _bench_option_error(args)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.plot:
        from sdk.tools import bench_plot

        why = bench_plot.missing()
        if why:  # before the run, not after it
            print(f"error: {why}", file=sys.stderr)
            return 2
        args.json = args.json or bench_plot.json_beside(args.plot)
    if args.suite == "models":
        from sdk.tools import bench_models

        rc = bench_models.main(args)
    else:
        from sdk.tools import bench

        rc = bench.main(args)
    if args.plot and not args.list and os.path.exists(args.json):
        n = bench_plot.plot_file(args.json, args.plot)
        print(f"plot: {args.plot} ({n} rows with both ratios; results in {args.json})")
    return rc


def _cmd_cache(args: argparse.Namespace) -> int:
    from sdk.core import graph_cache

    try:
        if args.action == "info":
            info = graph_cache.info(args.namespace)
            print(f"cache directory: {info['root']}")
            print(f"whole-graph cache: {info['graph_cache']}")
            spaces = info["namespaces"]
            for name, n in spaces.items():
                temp = (
                    f", {n['temp']} temporary ({n['stale']} left by killed processes: "
                    "`cache clear` removes them)"
                    if n["temp"]
                    else ""
                )
                print(f"  {name:<18} {n['files']:6d} files {n['bytes'] / 2**20:10.1f} MiB{temp}")
            if not spaces:
                print("  (empty)")
        else:
            in_use: list = []
            n = graph_cache.clear(args.namespace, in_use=in_use)
            print(f"removed {n} files")
            if in_use:
                print(
                    f"kept {len(in_use)} lock file{'s' if len(in_use) > 1 else ''} that a "
                    "running build holds (a later `cache clear` removes them): "
                    + ", ".join(str(p) for p in in_use)
                )
    except ValueError as exc:
        print(f"error: --namespace: {exc}, such as {graph_cache.NAMESPACE!r}", file=sys.stderr)
        return 2
    except OSError as exc:  # a refused directory (CacheDirRefused), or one that broke
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


#: what each place of ``sdk ops`` means, as its heading says it
_OPS_HEADINGS = {
    "lowered": "lowered to loop IR: ATen op, then the IR ops its lowering produced "
    "(sdk.ir.OPS; reduce:<op> is a reduction; a view or copy produces none)",
    "decomposed": "decomposed before lowering (AOTAutograd traces them into the ops of "
    "their decomposition; name one, `python -m sdk ops gelu`, to see those and their IR ops)",
    "library": "library calls: run between the kernels by a library",
    "fallback": "neither: run through ATen, op by op, between the kernels",
}


def _cmd_ops(args: argparse.Namespace) -> int:
    from sdk import SDKError
    from sdk.core import oplist

    try:
        if args.plugin:
            from sdk.core.pipeline import Session
            from sdk.core.registry import registry

            tables = oplist.plugin_tables(Session(registry(), args.plugin, None, {}))
        else:
            tables = oplist.core_tables()
        ops = oplist.resolve(args.ops) if args.ops else None
    except (SDKError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    entries = oplist.listing(tables, ops)
    who = (
        f"a compile by sdk:{args.plugin}"
        if args.plugin
        else "the core alone (--plugin NAME: a plugin's compile)"
    )
    print(f"what becomes of each ATen op in {who}; torch {_torch_version()}")
    for place in oplist.PLACES:
        if args.place and place != args.place:
            continue
        rows = [e for e in entries if e.place == place]
        if not rows:
            continue
        print(f"\n{place} ({len(rows)}): {_OPS_HEADINGS[place]}")
        width = max(len(e.op) for e in rows)
        for e in rows:
            what = " ".join(e.ir)
            if e.becomes:
                what = f"-> {', '.join(e.becomes)}"
            if e.note:
                what = f"{what}  ({e.note})" if what else f"({e.note})"
            print(f"  {e.op.ljust(width)}  {what}".rstrip())
    return 0


def _torch_version() -> str:
    import torch

    return torch.__version__


def _cmd_conformance(args: argparse.Namespace) -> int:
    import pytest

    from sdk import SDKError, conformance
    from sdk import _config as config

    try:  # an unknown or unavailable plugin: one line now, not after pytest has started
        for name in args.plugins:
            conformance.require(name)
    except SDKError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    argv = [f"--sdk-plugin={n}" for n in args.plugins]
    argv += [
        f"--sdk-compare={args.compare}",
        f"--sdk-opinfo={args.opinfo}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:logging",
        # sdk is imported before pytest starts (this command is in it): a project
        # whose pytest configuration turns warnings into errors must still run it
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if not any(_verbose(a) for a in args.pytest_args):  # (-- -v: each check's name)
        argv.append("-q")
    if args.isolate:
        argv.append("--sdk-isolate")
    if args.device:
        argv.append(f"--sdk-device={args.device}")
    if args.samples is not None:
        argv.append(f"--sdk-samples={args.samples}")
    if config.variable("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        argv += ["-p", "sdk.conformance.pytest_plugin"]
    return int(pytest.main(argv + list(args.pytest_args)))


def _verbose(arg: str) -> bool:
    """Whether a pytest argument asks for more output (``-v``, ``-vv``, ``--verbose``)."""
    return arg == "--verbose" or (len(arg) > 1 and arg[0] == "-" and set(arg[1:]) == {"v"})


def _cmd_new_plugin(args: argparse.Namespace) -> int:
    from sdk.scaffold import generate, module_name

    try:
        root = generate(args.name, args.dest, c_like=args.c_like, graph=args.graph)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # root exists, --dest is a file, unwritable, full, ...
        print(f"error: cannot write the plugin under --dest {args.dest!r}: {exc}", file=sys.stderr)
        return 2
    check = f"python -m sdk conformance {args.name}"  # kernel-level and graph-level alike
    print(
        f"wrote {root} (package {module_name(args.name)}); next:\n"
        f"  pip install -e {root}\n  python -m sdk list\n  {check}\n"
        "bring it up with options fallback=False and debug=True: they raise what would "
        "fall back"
    )
    return 0


def _add_list(sub: argparse._SubParsersAction) -> None:
    """``list``: the discovered plugins."""
    sub.add_parser("list", help="list discovered plugins and their status").set_defaults(
        func=_cmd_list
    )


def _add_run(sub: argparse._SubParsersAction) -> None:
    """``run``: the demo model against eager."""
    run = sub.add_parser("run", help="compile a small real model, check it against eager, time it")
    run.add_argument(
        "--plugin",
        default=None,
        help="codegen plugin (default: cuda_triton on a GPU, else cpu_cpp)",
    )
    run.add_argument("--model", default="gpt2", choices=["gpt2", "mlp"])
    run.add_argument(
        "--steps",
        type=int,
        default=20,
        help="timed training steps of each, compiled and eager, in 5 alternating rounds "
        "(default 20; 0: no timing)",
    )
    run.set_defaults(func=_cmd_run)


def _add_explain(sub: argparse._SubParsersAction) -> None:
    """``explain``: sdk.explain's report of a model's compile."""
    explain = sub.add_parser(
        "explain",
        help="compile a model and print what went where (sdk.explain's report)",
        description="Compile a training step (or --inference forward) of a model with "
        "sdk:PLUGIN and print sdk.explain's report: for each graph its kernels, library "
        "calls and fallbacks with their reasons; with --chain, its partitions (plugin, "
        "ops, tensors crossing each boundary) and why each op went where it went. "
        "TARGET is MODULE:FUNCTION (MODULE imported from the current directory, as "
        "python -m does) or path/to/file.py:FUNCTION, a function of no arguments returning "
        "(model or function, tuple of example inputs); without it, --model names a built-in "
        "one.",
    )
    explain.add_argument("target", nargs="?", default=None, metavar="TARGET")
    explain.add_argument(
        "--plugin", default=None, help="plugin (default: cuda_triton on a GPU, else cpu_cpp)"
    )
    explain.add_argument(
        "--chain", default="", help="comma-separated plugins after it (options['chain'])"
    )
    explain.add_argument("--min-partition-size", type=int, default=None)
    explain.add_argument("--model", default="mlp", choices=["gpt2", "mlp"])
    explain.add_argument(
        "--inference", action="store_true", help="a forward under no_grad, not a training step"
    )
    explain.add_argument(
        "--verbose",
        action="store_true",
        help="every detail: each kernel's ATen ops in full (lines of any length), the graph "
        "passes that rewrote nothing",
    )
    explain.set_defaults(func=_cmd_explain)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """``bench``: the benchmark suites."""
    bench = sub.add_parser(
        "bench",
        help="time workloads through sdk, Inductor and eager",
        description="Time workloads through sdk:<plugin>, Inductor and eager in one process: "
        "median ms, ratios, cold compile, a correctness check per row. "
        "--suite kernels (default): microbenchmarks. --suite models: torchvision, "
        "timm and HF transformers models (inference and training steps) in bf16 "
        "and fp32, random weights, checked with Dynamo's RMSE rule against fp64; "
        "on CUDA also device launches per step. Exit status 1 on any sdk "
        "MISMATCH or error.",
    )
    bench.add_argument(
        "--suite",
        choices=["kernels", "models"],
        default="kernels",
        help="kernels: microbenchmarks (default); models: real models",
    )
    bench.add_argument(
        "--plugin",
        default=None,
        help="codegen plugin (default: cuda_triton on a GPU, else cpu_cpp)",
    )
    bench.add_argument(
        "--only",
        default=None,
        help="comma-separated row names; for --suite models also model names "
        "(both dtypes) and shell patterns, e.g. 'resnet18,*_train_fp32'",
    )
    bench.add_argument(
        "--size",
        choices=["small", "full"],
        default=None,
        help="models: full = sizes a user would run (default on a GPU), small = "
        "tiny configs that run in minutes on a CPU (default without a GPU)",
    )
    bench.add_argument(
        "--dtype",
        choices=["bf16", "fp32", "all"],
        default=None,
        help="models: only the rows of this dtype (default: all)",
    )
    bench.add_argument(
        "--profile",
        action="store_true",
        help="models: print the CUDA launches per step and device time per "
        "kernel class of each backend (always in --json; CUDA only)",
    )
    bench.add_argument("--list", action="store_true", help="print the selected row names and exit")
    bench.add_argument(
        "--mode",
        default=None,
        choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"],
        help="torch.compile mode for Inductor and the sdk alike (default: default); "
        "reduce-overhead: CUDA graphs on a GPU",
    )
    bench.add_argument("--repeat", type=int, default=0, help="timed runs (0: automatic)")
    bench.add_argument("--json", default=None, help="also write the results to this file")
    bench.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="also draw sdk/Inductor and sdk/eager per row as a bar chart into FILE (.png, "
        ".svg, .pdf); the results go to --json, else next to FILE as .json; needs matplotlib "
        "(pip install 'torch-backend-sdk[plot]')",
    )
    bench.set_defaults(func=_cmd_bench)


def _add_cache(sub: argparse._SubParsersAction) -> None:
    """``cache``: the per-user cache."""
    cache = sub.add_parser(
        "cache",
        help="the per-user cache: where it is and what it holds, or clear it",
        description="The per-user cache (SDK_CACHE_DIR, else ~/.cache/torch-backend-sdk): "
        "compiled C++ libraries, Triton autotuning results and whole compiled "
        "programs (namespace 'programs'), one directory per namespace.",
    )
    cache.add_argument("action", choices=["info", "clear"])
    cache.add_argument("--namespace", default=None, help="only this namespace (e.g. programs, cpp)")
    cache.set_defaults(func=_cmd_cache)


def _add_ops(sub: argparse._SubParsersAction) -> None:
    """``ops``: what becomes of each ATen op."""
    ops = sub.add_parser(
        "ops",
        help="list what becomes of each ATen op: lowered (to which IR ops), decomposed, "
        "a library call, or run through ATen",
        description="List, from the core's own tables, what becomes of each ATen op a graph "
        "can hold: lowered to loop IR (with the IR ops its lowering produces, found by "
        "lowering it once on meta tensors: what a C-like table must render), decomposed "
        "before lowering, a library call (matrix products, convolutions, attention: ATen, "
        "or a plugin's sdk_extern), or none of these (run through ATen, op by op). With "
        "--plugin, that plugin's decompositions, kept ops, refusals and lowerings count.",
    )
    ops.add_argument(
        "ops", nargs="*", metavar="OP", help="only these ops: elu, aten.elu, aten.elu.default"
    )
    ops.add_argument("--plugin", default=None, help="as a compile by this plugin does")
    ops.add_argument(
        "--place", choices=["lowered", "decomposed", "library", "fallback"], default=None
    )
    ops.set_defaults(func=_cmd_ops)


def _add_conformance(sub: argparse._SubParsersAction) -> None:
    """``conformance``: the vendor conformance suite."""
    conf = sub.add_parser(
        "conformance",
        help="run the vendor conformance suite on a plugin (pytest)",
        description="Run the conformance suite (OpInfo sweep forward and fw+bw against eager, "
        "fusion through explain, options, dynamic sizes, fault injection, cache hostility) on "
        "sdk:NAME and the built-in plugins of its device, and print a summary. The "
        "same as `pytest --sdk-plugin=NAME`. Exit status 1 when a check fails.",
    )
    conf.add_argument(
        "plugins", nargs="+", metavar="NAME", help="plugin(s) to check: kernel- or graph-level"
    )
    conf.add_argument(
        "--compare",
        default="builtin",
        help="plugins to run beside them: builtin (default), none, or names",
    )
    conf.add_argument(
        "--opinfo",
        default="default",
        help="OpInfo ops: quick, default, all, or comma-separated names (pytest: --sdk-opinfo)",
    )
    conf.add_argument(
        "--samples",
        type=int,
        default=None,
        metavar="N",
        help="sample inputs compared per OpInfo case, the first N (pytest: --sdk-samples; "
        "default 3)",
    )
    conf.add_argument(
        "--device", default=None, help="device type of the test tensors (pytest: --sdk-device)"
    )
    conf.add_argument(
        "--isolate",
        action="store_true",
        help="run each check in a process of its own: a plugin that crashes the process (a "
        "segfault, an abort) fails that check, named, and the run goes on (pytest: "
        "--sdk-isolate; slower: a process per check)",
    )
    conf.set_defaults(func=_cmd_conformance)
    conf.epilog = (
        "More pytest arguments go after --, e.g. -- -x -k fusion; -- -v names each check as "
        "it starts"
    )


def _add_new_plugin(sub: argparse._SubParsersAction) -> None:
    """``new-plugin``: a plugin package to start from."""
    new = sub.add_parser(
        "new-plugin",
        help="write a plugin package to start from",
        description="Write <dest>/<NAME>-sdk-plugin: pyproject.toml with the entry points, a "
        "README and the package <NAME>_sdk_plugin. Without --c-like every hook is "
        "there and every op runs through ATen; with --c-like it renders C with "
        "OpenMP from a table of op strings (fusion, training); with --graph it is a "
        "graph-level plugin (hook API 3) handing whole subgraphs to a vendor compiler.",
    )
    new.add_argument(
        "name",
        help="plugin name: a lower-case Python identifier of at most 40 ASCII characters, "
        "starting with a letter, e.g. acme_npu",
    )
    new.add_argument(
        "--c-like",
        action="store_true",
        help="a working C/OpenMP renderer (sdk.clike) instead of the hook skeleton",
    )
    new.add_argument(
        "--graph",
        action="store_true",
        help="a graph-level plugin (claims ops, compiles whole partitions) to start from",
    )
    new.add_argument("--dest", default=".", help="directory to write into (default: .)")
    new.set_defaults(func=_cmd_new_plugin)


def _parser() -> argparse.ArgumentParser:
    """The command line's parser. Neither building it nor ``--help`` nor ``--version``
    imports torch (``import sdk`` does not): each command imports what it needs when it
    runs (tests/tools/test_cli_startup.py)."""
    from sdk import __version__

    parser = argparse.ArgumentParser(prog="python -m sdk", description=__doc__)
    parser.add_argument("--version", action="version", version=f"torch-backend-sdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_list(sub)
    _add_run(sub)
    _add_explain(sub)
    _add_bench(sub)
    _add_cache(sub)
    _add_ops(sub)
    _add_conformance(sub)
    _add_new_plugin(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.pytest_args = rest
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
