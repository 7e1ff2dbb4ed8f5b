"""What ``sdk.explain`` returns: plain data about each compiled graph."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

#: the longest line ``sdk.explain`` prints by default: longer ones are wrapped, and long
#: lists (a kernel's ATen ops, the ops of a fallback) shortened; ``verbose=True`` prints all
LINE_WIDTH = 160


@dataclass(frozen=True)
class KernelReport:
    """One generated kernel."""

    name: str
    plugin: str
    #: the ATen nodes it covers, as "node_name: aten.op.overload"; "output: copy" is a copy
    #: the core made (an output given its own buffer, or eager's layout), not a call of the graph
    nodes: tuple[str, ...]
    source: str
    #: the buffers it reads and writes (``Kernel.args`` of kind "in"/"inout", and
    #: "out"/"inout"): what ``sdk.KernelLimits`` counts
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    @property
    def ops(self) -> tuple[str, ...]:
        return tuple(n.split(": ", 1)[-1] for n in self.nodes)

    @property
    def buffers(self) -> int:
        """Distinct buffer (pointer) arguments of the kernel."""
        return len(set(self.inputs) | set(self.outputs))


@dataclass(frozen=True)
class KernelChoiceReport:
    """The measured choice for one kernel (``sdk_kernel_choices``, hook API 6): each
    candidate the plugin offered and what one call of it took, and the one kept.

    ``times`` holds ``(label, seconds per call)`` in the order measured, the rendered
    kernel (``default``) first; seconds is None for a candidate that failed to build or run
    (``errors`` says why) or was not timed before the budget ran out. ``reused``: the choice
    came from the kernel-choice cache (measured by an earlier process), not measured now.
    On a whole-graph cache hit the report is the cold compile's (nothing is measured).
    """

    kernel: str
    chosen: str
    times: tuple[tuple[str, float | None], ...]
    bytes: int = 0  # the core's estimate of the memory the kernel moves, which ranked it
    reused: bool = False
    errors: tuple[tuple[str, str], ...] = ()  # (label, why it was not timed)

    def __str__(self) -> str:
        def one(label: str, s: float | None) -> str:
            mark = "*" if label == self.chosen else ""
            return f"{label}{mark} {s * 1e6:.1f}us" if s is not None else f"{label}{mark} -"

        how = "reused" if self.reused else "measured"
        return (
            f"kernel {self.kernel} ({self.bytes / 2**20:.1f} MiB) {how}: "
            + ", ".join(one(lab, s) for lab, s in self.times)
            + f" -> {self.chosen}"
            + "".join(f"; {lab}: {why}" for lab, why in self.errors)
        )


@dataclass(frozen=True)
class ExternReport:
    """A library call (mm, conv, attention, ...) the IR runs outside generated kernels on
    purpose: through ATen, or through the function the plugin's ``sdk_extern`` supplied
    (``plugin`` names it then)."""

    op: str
    node: str
    plugin: str = ""  # "": ATen runs it


@dataclass(frozen=True)
class FusionRefusal:
    """A fusion the scheduler considered and did not make, with the reason."""

    first: str
    second: str
    reason: str


@dataclass(frozen=True)
class FallbackReport:
    """An ATen op run op by op instead of inside a generated kernel."""

    op: str
    reason: str
    node: str = ""


@dataclass(frozen=True)
class HookFault:
    """A plugin's hook that raised while this graph compiled or ran; the SDK went on
    without it (an observer's answer is lost, a wrapper's wrapping is not applied)."""

    plugin: str
    hook: str
    error: str  # "ExceptionType: message"


@dataclass(frozen=True)
class PassReport:
    """One rewrite of the ATen graph before lowering (a :class:`sdk.GraphPass`): the core's
    (``plugin`` empty) or one the compile's plugin added through ``sdk_graph_passes``."""

    name: str
    rewrites: int  # the places it changed (0: it ran and found nothing to do)
    plugin: str = ""  # the plugin that added it; "" for the core's passes
    #: a core pass the compile's plugin turned off (``sdk_graph_passes``): it did not run
    off: bool = False

    def __str__(self) -> str:
        by = f" (sdk:{self.plugin})" if self.plugin else ""
        if self.off:
            return f"{self.name}: off"
        return f"{self.name}{by}: {self.rewrites} rewrite" + ("" if self.rewrites == 1 else "s")


@dataclass(frozen=True)
class PartitionReport:
    """One partition of a graph split between the plugins of a chain (``options["chain"]``).

    ``plugin`` claimed its ops; ``compiled_by`` ran them ("aten" when every plugin failed);
    ``note`` says why they differ. ``inputs``/``outputs``: the tensors crossing the
    partition's boundary (count and bytes; sizes unknown at compile time count 0 bytes).
    """

    name: str
    plugin: str
    compiled_by: str
    nodes: tuple[str, ...]  # "node_name: aten.op.overload"
    inputs: int = 0
    input_bytes: int = 0
    outputs: int = 0
    output_bytes: int = 0
    cache: str = ""  # a graph-level plugin's artifact: "hit", "stored", "off" or why not
    note: str = ""
    #: what runs a kernel-level plugin's program (GraphReport.runner); "" where none runs it
    #: (a graph-level plugin's partition, or ATen's)
    runner: str = ""
    #: seconds the partition's compile took (a graph-level plugin's: the cache, the plugin's
    #: compile or load, its worker process where isolated; a kernel-level plugin's build)
    compile_seconds: float = 0.0
    #: of those, seconds in the graph-level plugin's ``sdk_compile_subgraph`` (the vendor's
    #: compiler; measured in its worker where isolated); 0 where it was not called (a hit)
    plugin_seconds: float = 0.0


@dataclass(frozen=True)
class OpPlacement:
    """Where one op of a partitioned graph went, and why the plugins before it refused it."""

    node: str
    op: str
    plugin: str  # "aten" when no plugin of the chain claimed it
    refusals: tuple[tuple[str, str], ...] = ()  # (plugin, reason), in the chain's order


@dataclass(frozen=True)
class GraphBreak:
    """Where Dynamo broke the graph, and why: Dynamo's own reason."""

    reason: str  # Dynamo's text, whole (several lines on newer torch versions)
    where: str = ""  # "file.py:12 in fn": the user's line it broke at

    @property
    def summary(self) -> str:
        """The reason on one line: its first line, and Dynamo's explanation where it gives
        one ("Explanation: ..."); a raw code of Dynamo's, said in words."""
        lines = [ln.strip() for ln in self.reason.strip().splitlines() if ln.strip()]
        if not lines:
            return "(no reason given)"
        if lines[0] in _RAW_CODES:
            return _RAW_CODES[lines[0]]
        explained = next((ln for ln in lines[1:] if ln.startswith("Explanation:")), "")
        return lines[0] + (
            f" ({explained.removeprefix('Explanation:').strip()})" if explained else ""
        )

    @property
    def hints(self) -> list[str]:
        """torch's advice for this break ("Hint: ..." lines), without its generic ones
        (filing an issue)."""
        out = []
        for ln in self.reason.splitlines():
            ln = ln.strip()
            if ln.startswith("Hint:"):
                hint = ln.removeprefix("Hint:").strip()
                if hint and "file an issue" not in hint.lower():
                    out.append(hint)
        return out

    def __str__(self) -> str:
        hints = self.hints
        return f"graph break{f' at {self.where}' if self.where else ''}: {self.summary}" + (
            f"; hint: {hints[0]}" if hints else ""
        )


#: Dynamo's reasons that are codes, not sentences (the reason a graph ended before a step
#: it could not trace; the break logged at the same line says which)
_RAW_CODES = {
    "step_unsupported": "Dynamo could not trace the next step here, so the graph ends before "
    "it and the step runs eagerly",
}


@dataclass(frozen=True)
class CallCounts:
    """Where a graph's ATen calls went (:attr:`GraphReport.calls`), each counted once; the
    five add up to :attr:`GraphReport.aten_ops`."""

    kernels: int = 0  # inside generated kernels
    externs: int = 0  # library calls: ATen's, or the plugin's own (``sdk_extern``)
    fallbacks: int = 0  # run through ATen, op by op
    #: views and aliases: index arithmetic over another buffer, no code of their own
    views: int = 0
    #: the rest, no code of their own either ("size or merged calls"): size arithmetic of
    #: symbolic shapes, and calls a graph pass merged into another (a ReLU into its
    #: product's library call)
    folded: int = 0

    @property
    def with_code(self) -> int:
        """The calls that run code: in kernels, library calls and fallbacks."""
        return self.kernels + self.externs + self.fallbacks


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


@dataclass
class GraphReport:
    """One graph handed to the plugin: a forward, backward or inference graph."""

    name: str
    kind: str  # "forward", "backward" or "inference"
    plugin: str
    kernels: list[KernelReport] = field(default_factory=list)
    externs: list[ExternReport] = field(default_factory=list)
    fallbacks: list[FallbackReport] = field(default_factory=list)
    #: the fusions the plugin refused: its ``sdk_can_fuse`` vetoes, and those its
    #: ``sdk_kernel_limits`` forbid (``explain`` prints these)
    fusion_refusals: list[FusionRefusal] = field(default_factory=list)
    #: the fusions the core's own rules refused before the plugin was asked (loop nests
    #: that differ, a cycle through another kernel, a capability the plugin lacks)
    core_fusion_refusals: list[FusionRefusal] = field(default_factory=list)
    aten_ops: int = 0  # ATen calls in the graph (views included)
    view_nodes: tuple[str, ...] = ()  # ATen calls folded into index arithmetic (views)
    compile_seconds: float = 0.0
    #: on a hit of the whole-graph cache: what the program's compile took when it was built
    #: and stored (the time the hit saved); 0.0 when unknown or not a hit
    cold_compile_seconds: float = 0.0
    #: the compile's stages and what each took, in seconds: "aot" (AOTAutograd, until this
    #: graph reached the core; forward and inference graphs), "restore" (a warm start's),
    #: "partition" (a chain's split, its partitions' compiles included), "build" (lowering
    #: through codegen, every variant built so far), "wrap" (the wrapper plugins)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    #: the build stage's own stages and what each took, in seconds, in the order they ran
    #: (``core/build_stages``: "passes", "lower", "schedule", "render", "compile",
    #: "measure", "program"), every variant built so far; empty where nothing was built (a
    #: hit of the whole-graph cache, a warm start, a graph split between a chain's plugins)
    build_stages: dict[str, float] = field(default_factory=dict)
    #: a forward or inference graph that ended where Dynamo broke the graph: why (Dynamo's
    #: reason, and the user's line); None when the graph ended at the function's return
    graph_break: GraphBreak | None = None
    wrappers: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)  # from CompileContext.note
    #: the whole-graph cache: "hit" (rebuilt from it), "stored", "off", or why not stored
    cache: str = ""
    #: AOTAutograd's cache (warm starts): "hit" (restored in a later process: AOTAutograd,
    #: decompositions and the compile skipped), "miss" (compiled; torch stores the result if
    #: it can), or "off: <why>"
    warm: str = ""
    #: what runs the program: "native" (the SDK's C++ runner, one Python->C++ crossing per
    #: call) or "python: <why>" (the step interpreter, core/interp.py: the runner cannot take
    #: a step of this program, cannot be built here, or ``options={"runner": "python"}``);
    #: with runner="check": "check: ..." (both executors, compared), or
    #: "python: not checked by runner='check': <why>" (one executor only)
    runner: str = ""
    #: the kernels the native runner launches through Python, by name: their launchers
    #: carry no C entry point (``sdk.NativeEntry``), so each launch takes the GIL and a
    #: Python call; empty where none does or the runner does not run the program
    python_launches: tuple[str, ...] = ()
    #: the program: its steps (kernel launches and library calls in order, over the memory
    #: plan), one per line, as both the native runner and the interpreter run them; "" where
    #: the graph has no program of the SDK's (it runs in ATen)
    program: str = ""
    #: sizes: "static"; "symbolic: s0, s1" (one program for every value of those sizes);
    #: or "per shape: <why not symbolic>" (a variant compiled for each concrete shape)
    sizes: str = "static"
    #: hooks of any plugin that raised for this graph, in order
    hook_faults: list[HookFault] = field(default_factory=list)
    #: a graph split between the plugins of a chain: its partitions and where each op went
    #: (empty when one plugin compiled the whole graph); each kernel-level partition is also a
    #: GraphReport of its own, named ``<graph>.<partition>``
    partitions: list[PartitionReport] = field(default_factory=list)
    placements: list[OpPlacement] = field(default_factory=list)
    #: why the plugins of the chain before ``plugin`` did not compile this graph, in the
    #: chain's order ("sdk:<name> failed: <exception>"); empty when the first one did.
    #: ``explain`` prints it as a note ("compiled by sdk:<plugin> after: ...")
    chain_failures: list[str] = field(default_factory=list)
    #: the steps whose bits may change from run to run, and why: library calls and
    #: fallbacks of the ops the plugin declares in ``PluginInfo.nondeterministic_ops``
    #: ("aten.index_add.default (index_add): atomic adds ..."); empty: the same inputs
    #: give the same bits in every run
    nondeterministic: list[str] = field(default_factory=list)
    #: the rewrites of the graph before lowering (``core/passes`` and the plugin's own,
    #: ``sdk_graph_passes``), in the order they ran, with what each changed; the core's
    #: passes the plugin turned off are listed with ``off``. Empty where nothing was lowered
    #: (a graph split between the plugins of a chain: see its partitions' reports; a graph
    #: that runs in ATen)
    passes: list[PassReport] = field(default_factory=list)
    #: kernel choices measured at compile time (``sdk_kernel_choices``; the ``tune_budget_s``
    #: option), one per kernel whose candidates were timed or reused, largest first
    choices: list[KernelChoiceReport] = field(default_factory=list)
    #: one line on the measuring: how many kernels, the time it took against the budget, and
    #: what was left unmeasured and why ("" when nothing was offered or the budget is 0)
    tuning: str = ""

    @property
    def views(self) -> int:
        return len(self.view_nodes)

    @property
    def calls(self) -> CallCounts:
        """Where the graph's ATen calls went: in kernels, library calls, fallbacks, or no code
        of their own (views; size arithmetic and calls merged into another)."""
        in_kernels = {n for k in self.kernels for n in k.nodes if not n.startswith("output: ")}
        views = len(set(self.view_nodes) - in_kernels)
        counted = len(in_kernels) + len(self.externs) + len(self.fallbacks) + views
        return CallCounts(
            len(in_kernels),
            len(self.externs),
            len(self.fallbacks),
            views,
            max(self.aten_ops - counted, 0),
        )

    @property
    def generated_fraction(self) -> float:
        """Share of the graph's ATen calls that run code (:attr:`CallCounts.with_code`: not
        views, not size arithmetic) that run inside generated kernels; 0.0 where none runs
        code. For a graph split between the plugins of a chain: the share of its ATen calls
        inside partitions a plugin compiled."""
        if self.partitions:
            inside = sum(len(p.nodes) for p in self.partitions if p.compiled_by != "aten")
            return min(inside / self.aten_ops, 1.0) if self.aten_ops else 1.0
        calls = self.calls
        return calls.kernels / calls.with_code if calls.with_code else 0.0

    def calls_line(self) -> str:
        """Where the ATen calls went, and the share of those that run code in generated
        kernels: "calls: 26 in 5 kernels, 5 externs, 0 fallbacks, 35 views (no code of
        their own); 84% of those that run code in generated kernels"."""
        c = self.calls
        where = (
            f"{c.kernels} in {_n(len(self.kernels), 'kernel')}" if self.kernels else "0 in kernels"
        )
        free = [_n(c.views, "view")] if c.views else []
        free += [_n(c.folded, "size or merged call")] if c.folded else []
        share = (
            f"{self.generated_fraction:.0%} of those that run code in generated kernels"
            if c.with_code
            else "no call runs code"
        )
        own = "its own" if c.views + c.folded == 1 else "their own"
        return (
            f"calls: {where}, {_n(c.externs, 'extern')}, {_n(c.fallbacks, 'fallback')}"
            + (f", {' and '.join(free)} (no code of {own})" if free else "")
            + f"; {share}"
        )

    def stages_line(self) -> str:
        """The stages and their times, in the order they run: "aot 0.12s, build 0.30s"."""
        order = ("aot", "restore", "partition", "build", "wrap")
        known = [s for s in order if s in self.stage_seconds]
        known += [s for s in self.stage_seconds if s not in order]
        return ", ".join(f"{s} {self.stage_seconds[s]:.2f}s" for s in known)

    def _compiled_in(self) -> str:
        took = f"compiled in {self.compile_seconds:.2f}s"
        if self.cache != "hit":
            return took
        if self.cold_compile_seconds > 0:
            return f"{took} (cache hit; cold compile took {self.cold_compile_seconds:.2f}s)"
        return f"{took} (program from the graph cache)"

    def _fallback_lines(self, shown: dict[str, str], verbose: bool = False) -> list[str]:
        """The fallbacks, one entry per reason: the reason once, with the ops it sent to
        ATen (a compiler error that failed the graph's kernels gives every op of it the same
        reason), its further lines indented. A reason of several lines whose first line
        ``shown`` holds (printed whole for an earlier graph) is given by that line only."""
        groups: dict[str, list[FallbackReport]] = {}
        for f in self.fallbacks:
            groups.setdefault(f.reason, []).append(f)
        lines = []
        for reason, group in groups.items():
            first, *rest = reason.splitlines() or [""]
            if len(group) == 1:
                lines.append(f"  fallback {group[0].op} ({group[0].node}): {first}")
            else:
                nodes: dict[str, list[str]] = {}
                for f in group:
                    nodes.setdefault(f.op, []).extend([f.node] if f.node else [])
                ops = [f"{op} ({', '.join(n)})" if n else op for op, n in nodes.items()]
                lines += [
                    f"  fallback of {len(group)} ops: {first}",
                    listed("    ops: ", ops, verbose, count=False),
                ]
            if rest and first in shown:
                lines[-1 if len(group) == 1 else -2] += (
                    f" (the rest as for graph {shown[first]} above)"
                )
            elif rest:
                shown[first] = self.name
                lines += [f"    {ln}" for ln in rest]
        return lines

    def _split_headline(self) -> str:
        plugins = ", ".join(dict.fromkeys(f"sdk:{p.compiled_by}" for p in self.partitions))
        return (
            f"graph {self.name} [{self.kind}] split by the chain of sdk:{self.plugin}: "
            f"{self.aten_ops} ATen calls, {len(self.partitions)} partitions ({plugins}), "
            f"{len(self.fallbacks)} ops in ATen, {self.generated_fraction:.0%} in compiled "
            f"partitions, {self._compiled_in()}"
            + (f", wrapped by {', '.join(self.wrappers)}" if self.wrappers else "")
        )

    def __str__(self) -> str:
        return self.text()

    def text(self, shown: dict[str, str] | None = None, *, verbose: bool = False) -> str:
        """What ``str()`` gives: no line over :data:`LINE_WIDTH` characters, a kernel's ops
        and a fallback's past that counted ("... (12 more)"); with ``verbose`` every detail
        (all ops, the graph passes that rewrote nothing), however long its lines. ``shown``:
        the first lines of the fallback reasons of several lines printed whole so far, each
        with its graph's name (an :class:`ExplainReport` passes one for all its graphs, so
        that a compiler error that sent several graphs to ATen is printed whole once),
        filled in here."""
        lines = self._lines({} if shown is None else shown, verbose)
        return "\n".join(lines if verbose else fit(lines))

    def _lines(self, shown: dict[str, str], verbose: bool) -> list[str]:
        if self.partitions or self.placements:
            return [self._split_headline(), *self._detail_lines(shown, verbose)]
        lines = [
            f"graph {self.name} [{self.kind}] by sdk:{self.plugin}: "
            f"{_n(self.aten_ops, 'ATen call')}, {self._compiled_in()}"
            + (f", wrapped by {', '.join(self.wrappers)}" if self.wrappers else "")
            + (", AOTAutograd skipped (warm start)" if self.warm == "hit" else "")
            + (f", sizes {self.sizes}" if self.sizes != "static" else "")
            + (f", {self.runner.replace(': ', ' program (', 1)})" if ": " in self.runner else "")
            + (", native runner" if self.runner == "native" else "")
            + self._python_launches_note(),
            f"  {self.calls_line()}",
        ]
        return lines + self._detail_lines(shown, verbose)

    def _python_launches_note(self) -> str:
        names = self.python_launches
        if not names:
            return ""
        shown = ", ".join(names[:3]) + (f", ... ({len(names) - 3} more)" if len(names) > 3 else "")
        return f" ({_n(len(names), 'kernel')} launched through Python, no C entry: {shown})"

    def _detail_lines(self, shown: dict[str, str], verbose: bool = False) -> list[str]:
        lines = []
        for k in self.kernels:
            lines.append(listed(f"  kernel {k.name}: ", k.ops, verbose))
        for e in self.externs:
            lines.append(
                f"  extern {e.op} ({e.node})" + (f" by sdk:{e.plugin}" if e.plugin else "")
            )
        lines += self._fallback_lines(shown, verbose)
        # (a pass that found nothing to rewrite changed nothing; one the plugin turned off is
        # its choice, which changed what the graph became)
        changed = [p for p in self.passes if p.rewrites or p.off or verbose]
        if changed:
            lines.append(f"  passes: {', '.join(str(p) for p in changed)}")
        if self.stage_seconds:
            lines.append(f"  stages: {self.stages_line()}")
        if self.build_stages:
            shown = ", ".join(f"{s} {t:.3f}s" for s, t in self.build_stages.items())
            lines.append(f"  build stages: {shown}")
        if self.tuning:
            lines.append(f"  kernel choices: {self.tuning}")
        for c in self.choices:
            lines.append(f"  {c}")
        for p in self.partitions:
            by = p.plugin if p.compiled_by == p.plugin else f"{p.plugin} -> {p.compiled_by}"
            lines.append(
                f"  partition {p.name} ({by}): {len(p.nodes)} ops, in {p.inputs} tensors "
                f"({p.input_bytes} B), out {p.outputs} tensors ({p.output_bytes} B)"
                + (f", cache {p.cache}" if p.cache else "")
                + _partition_time(p)
                + (f"; {p.note}" if p.note else "")
            )
        for pl in self.placements:
            if pl.refusals:
                why = "; ".join(f"{plugin}: {reason}" for plugin, reason in pl.refusals)
                lines.append(f"  op {pl.node} ({pl.op}) -> {pl.plugin}, refused by {why}")
        for step in self.nondeterministic:
            lines.append(f"  not deterministic: {step}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        for h in self.hook_faults:
            lines.append(f"  hook fault: sdk:{h.plugin} {h.hook} raised {h.error}")
        for r in self.fusion_refusals:  # the core's own refusals are many, and routine
            lines.append(f"  not fused {r.first} + {r.second}: {r.reason}")
        return lines


def _partition_time(p: PartitionReport) -> str:
    if p.compile_seconds <= 0:
        return ""
    vendor = f" (sdk_compile_subgraph {p.plugin_seconds:.2f}s)" if p.plugin_seconds > 0 else ""
    return f", compiled in {p.compile_seconds:.2f}s{vendor}"


@dataclass
class ExplainReport:
    """Everything one ``sdk.explain`` call reports: the graphs that ran for its inputs."""

    graphs: list[GraphReport] = field(default_factory=list)
    #: each graph break of the run, with Dynamo's reason and the user's line, in order
    breaks: list[GraphBreak] = field(default_factory=list)
    #: whether ``explain`` compiled: False when every graph reported was compiled earlier
    #: in this process (explain only ran them); ``compile_note`` says why it compiled
    compiled_now: bool = False
    #: one line: "compiled now: <why>", or "no new compile: ..."; "" outside ``explain``
    compile_note: str = ""
    #: the Dynamo graphs the SDK compiled during the ``explain`` call
    dynamo_compiles: int = 0
    #: ``str()`` gives every detail (``sdk.explain(..., verbose=True)``): see :meth:`text`
    verbose: bool = False

    @property
    def graph_breaks(self) -> int:
        return len(self.breaks)

    @property
    def kernels(self) -> list[KernelReport]:
        return [k for g in self.graphs for k in g.kernels]

    @property
    def fallbacks(self) -> list[FallbackReport]:
        return [f for g in self.graphs for f in g.fallbacks]

    @property
    def externs(self) -> list[ExternReport]:
        return [e for g in self.graphs for e in g.externs]

    @property
    def hook_faults(self) -> list[HookFault]:
        return [h for g in self.graphs for h in g.hook_faults]

    @property
    def generated_fraction(self) -> float | None:
        """Over all its graphs, the share of the ATen calls that run code which run in
        generated kernels (each graph's :attr:`GraphReport.generated_fraction`, weighted by
        its calls that run code; a graph split by a chain by all its calls); None where no
        graph runs code."""
        weights = [(g.aten_ops if g.partitions else g.calls.with_code) for g in self.graphs]
        total = sum(weights)
        if not total:
            return None
        return sum(g.generated_fraction * w for g, w in zip(self.graphs, weights)) / total

    @property
    def nondeterministic(self) -> list[str]:
        """Every graph's steps whose bits may change from run to run, with why."""
        return [f"{g.name}: {s}" for g in self.graphs for s in g.nondeterministic]

    def __str__(self) -> str:
        return self.text()

    def text(self, verbose: bool | None = None) -> str:
        """The report: by default (``verbose`` None: :attr:`verbose`, False unless
        ``explain`` was asked) no line over :data:`LINE_WIDTH` characters, long lists of ops
        shortened, the graph passes that rewrote nothing left out; with ``verbose``, all."""
        verbose = self.verbose if verbose is None else verbose
        head = (
            f"{len(self.graphs)} graph(s), {len(self.kernels)} kernel(s), "
            f"{len(self.fallbacks)} fallback(s), {self.graph_breaks} graph break(s)"
            + (f", {len(self.hook_faults)} hook fault(s)" if self.hook_faults else "")
        )
        lines = [head, *([self.compile_note] if self.compile_note else [])]
        lines += [f"  {b}" for b in self.breaks]
        shown: dict[str, str] = {}  # (a compiler error is printed whole once)
        for g in self.graphs:
            lines += g._lines(shown, verbose)
        if verbose:
            return "\n".join(lines)
        out = fit(lines)
        if any(_SHORTENED in ln for ln in out):
            out.append("(lists shortened: sdk.explain(..., verbose=True) prints them whole)")
        return "\n".join(out)


#: how a shortened list ends: "... (12 more)"
_SHORTENED = " more)"


def listed(
    prefix: str, items: tuple[str, ...] | list[str], verbose: bool, count: bool = True
) -> str:
    """``prefix`` and the ``items``, comma-separated; unless ``verbose``, within
    :data:`LINE_WIDTH`: as many as fit, then how many were left out, with (``count``) their
    number first ("12 ops: aten.mul.Tensor, aten.add.Tensor, ... (10 more)")."""
    whole = prefix + ", ".join(items)
    if verbose or len(whole) <= LINE_WIDTH:
        return whole
    head = f"{prefix}{len(items)} ops: " if count else prefix
    shown: list[str] = []
    for item in items:
        rest = len(items) - len(shown) - 1
        tail = f", ... ({rest}{_SHORTENED}" if rest else ""
        if len(head + ", ".join([*shown, item]) + tail) > LINE_WIDTH:
            break
        shown.append(item)
    left = len(items) - len(shown)
    return f"{head}{', '.join([*shown, ''])}... ({left}{_SHORTENED}"


def fit(lines: list[str]) -> list[str]:
    """Each line of more than :data:`LINE_WIDTH` characters wrapped at spaces, its further
    lines indented under its first (a word longer than a line is cut)."""
    out = []
    for line in lines:
        for part in line.splitlines() or [""]:
            if len(part) <= LINE_WIDTH:
                out.append(part)
                continue
            indent = part[: len(part) - len(part.lstrip())]
            out += textwrap.wrap(
                part.strip(),
                LINE_WIDTH,
                initial_indent=indent,
                subsequent_indent=indent + "    ",
                break_on_hyphens=False,
            )
    return out
