"""The hook specification: the whole contract between the SDK core and a plugin.

A plugin is a module (or object) with functions named after these hooks and
decorated with :data:`sdk.hookimpl`. It is found through the ``sdk.plugins``
entry-point group (docs/vendor-guide.md, "The plugin contract"). pluggy checks every
hookimpl against this file when the plugin is registered: a misspelt hook name
or an argument the spec lacks makes the plugin *unavailable*, with the reason,
and leaves every other plugin working.

This module is the hook specification pluggy reads: it defines the identity hooks and
imports the others from the modules that define them, one per group, in the order of a
compile: ``sdk/hookspecs_kernel.py`` (a kernel-level plugin's compile: decompositions,
lowering, scheduling, codegen), ``sdk/hookspecs_graph.py`` (a graph-level plugin's
partitions) and ``sdk/hookspecs_events.py`` (wrappers and observers).

Which plugins a hook reaches:

* identity hooks (``sdk_plugin_info``, ``sdk_plugin_status``) are called on one
  plugin at a time;
* compile hooks (decompositions to codegen) are called on the *codegen plugin of
  the compile* only, so one vendor can never change another vendor's compile;
* ``sdk_wrap_compiled`` reaches the wrapper plugins the compile asked for
  (``mode="reduce-overhead"`` or ``options={"wrappers": [...]}``);
* observer hooks (``sdk_on_*``) reach every available plugin, each plugin on its own: one
  that raises is recorded in the graph's report (``hook_faults``) and warned about, and
  neither the compile nor another plugin's observer notices (strict mode, ``fallback=False``
  or ``debug=True``, raises :class:`sdk.PluginHookError` instead).

Every hook receives only what it names; a hookimpl may take a subset of the
arguments. Every hook appeared in hook-API version 1 but ``sdk_cache_key`` (version 2),
the graph-level hooks (version 3), ``sdk_kernel_limits`` and ``sdk_extern`` (version 4),
``sdk_graph_passes`` (version 5), ``sdk_preferences`` and ``sdk_kernel_choices`` (version 6);
version 7 added answers and fields, not hooks: ``sdk_claim_nodes`` may answer
:class:`sdk.ClaimGroups`, ``PluginInfo.frozen_parameters``, ``CompiledSubgraph``'s
``preallocated_outputs`` and ``aliases``.
Each docstring ends with the version its hook appeared in; the vendor guide's
"Versioning" has the table of hook-API versions and the SDK releases that provide them.

What an exception from a hook means
-----------------------------------

A hook says "no" by returning a value (``Support.no(reason)``, ``None``), never by
raising. An exception means the hook failed, and where it was raised decides what the
core does with it:

* **identity hooks**: the plugin is unavailable, with the hook and the error as the
  reason (``python -m sdk list``); every other plugin works on.
* **compile hooks of a kernel-level plugin** (``sdk_decompositions`` through
  ``sdk_compile_kernels``, ``sdk_cache_key`` included; ``debug`` off): *the whole
  graph* goes to the next plugin of ``options["chain"]``, else runs in ATen op by op,
  the plugin, hook and error being each fallback's reason in ``sdk.explain``. There is
  no per-op fallback from an exception: to send one op to ATen, refuse it in
  ``sdk_op_support``.
* **the same during a symbolic compile** (the plugin declares
  ``Capability.SYMBOLIC_SIZES`` and the graph has symbolic sizes): the core first
  compiles the graph *per concrete shape* instead (``GraphReport.sizes`` says why), and
  applies the rule above only if a per-shape compile raises too. Raise ``TypeError`` for
  a symbolic size you cannot handle (any exception does the same; TypeError says what
  it is).
* **graph-level hooks** (hook API 3): ``sdk_claim_nodes`` raising refuses every node
  (a fault in the report); ``sdk_compile_subgraph`` raising refuses *that partition*
  only (per shape first, where its inputs are symbolic), which the next kernel-level
  plugin of the chain compiles, else ATen; ``sdk_load_subgraph`` raising is a cache miss.
* **run time**: a compiled kernel (:data:`sdk.KernelFn`) or a partition's function
  that raises when called makes the core run that call's graph again in ATen. If ATen
  raises too, the inputs were at fault (an index out of range): *your* exception
  reaches the caller and the program stays. Otherwise the program was wrong where eager
  is not, and ATen runs this graph from then on, with the reason in its report. A
  program that had begun writing its inputs in place (``CompileContext.written_inputs``)
  is not run again: your exception reaches the caller, with a note, and ATen runs the
  graph from the next call on. ``torch.OutOfMemoryError`` always propagates.
* **observers and wrappers**: a fault of their own plugin only, listed in the graph's
  report (``hook_faults``) and warned about once (:class:`sdk.PluginHookWarning`); a
  wrapper that raises leaves the graph unwrapped.
* **``sdk_kernel_choices``** (hook API 6; measuring is optional): a fault of its plugin only,
  as an observer's; that kernel keeps the source ``sdk_render_kernel`` gave it.
* **a graph pass** (a :class:`sdk.GraphPass` of the plugin's, from ``sdk_graph_passes``)
  that raises when it runs: the same, for that pass: the graph compiles without it.
* :class:`sdk.SDKError` (or a subclass), raised on purpose by any compile hook: not a
  failure to recover from but an error for the user (an option value the plugin cannot
  honour); it reaches the caller as it is (inside torch's ``BackendCompilerFailed``)
  and nothing falls back.

Strict mode changes the recoveries into errors: ``options={"fallback": False}`` raises
:class:`sdk.SDKError` naming the plugin, hook and error where a graph would have fallen
back (:class:`sdk.LoweringError`, a subclass, where an op or a partition would have run in
ATen); ``debug=True`` (or ``SDK_DEBUG=1``) lets the plugin's own exception
propagate (as the ``__cause__`` of one naming the plugin and the hook); both raise
:class:`sdk.PluginHookError` for an observer or wrapper that raised, and let a kernel's
run-time exception propagate. Without strict mode, a partition or a kernel-level plugin's
graph that falls back (to the next plugin of the chain, or ATen) gives one
:class:`sdk.PluginFallbackWarning` per plugin and reason, naming its ops.

Fake tensors and real ones
--------------------------

The core calls the compile hooks while AOTAutograd traces, inside its ``FakeTensorMode``:
a tensor a hook makes with a torch factory (``torch.ones(1)``) would be a fake one (sizes,
no data). The hooks that build what runs, ``sdk_extern``, ``sdk_compile_kernels``,
``sdk_compile_subgraph`` and ``sdk_load_subgraph``, are called *outside* that mode: a
tensor they make is real (a constant, an example to trace or export with). What they are
given stays as it was: ``example_inputs`` and ``node.meta["val"]`` are fake tensors (sizes,
strides, dtypes; no data; symbolic sizes where dynamic). The other compile hooks
(``sdk_decompositions`` to ``sdk_render_kernel``, ``sdk_claim_nodes``, ``sdk_cache_key``,
``sdk_kernel_choices``) run inside it: read metadata there, make no tensors. A compiled
function (``KernelFn``, ``CompiledSubgraph.fn``) is called with real tensors; a graph-level
plugin's function is called with no Python dispatch mode active (AOTAutograd checks a
program's first call under one), so a runtime that calls ATen itself is not seen by it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# the marker, and the hooks of the other groups from the modules that define them (imported
# so: this module is the one namespace pluggy reads, ``PluginManager.add_hookspecs(sdk.hookspecs)``)
from sdk._hookspec import ENTRY_POINT_GROUP, PROJECT, hookspec  # noqa: F401
from sdk.hookspecs_events import (  # noqa: F401
    sdk_on_fallback,
    sdk_on_graph_compiled,
    sdk_on_kernel_compiled,
    sdk_wrap_compiled,
)
from sdk.hookspecs_graph import (  # noqa: F401
    sdk_claim_nodes,
    sdk_compile_subgraph,
    sdk_load_subgraph,
)
from sdk.hookspecs_kernel import (  # noqa: F401
    sdk_cache_key,
    sdk_can_fuse,
    sdk_compile_kernels,
    sdk_decompositions,
    sdk_extern,
    sdk_graph_passes,
    sdk_keep_ops,
    sdk_kernel_choices,
    sdk_kernel_limits,
    sdk_lower_op,
    sdk_op_support,
    sdk_render_kernel,
)

if TYPE_CHECKING:
    from sdk.capabilities import Preferences
    from sdk.plugin import PluginInfo


# ---------------------------------------------------------------------------
# Identity: called on one plugin at a time
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_plugin_info() -> PluginInfo:
    """Describe the plugin: name, version, hook-API version, devices, kind, capabilities.

    Called once, right after the plugin module is imported and registered, and
    before any other hook. A plugin whose ``hook_api`` the core does not support
    is unregistered and listed as unavailable.

    :return: a :class:`sdk.PluginInfo` whose ``name`` is the plugin's entry-point name and
        whose ``hook_api`` is a literal (the version written against, not
        ``sdk.HOOK_API_VERSION``). Stops at first non-None result (each plugin answers for
        itself only).
    :raises: an exception, or a return value that is not a PluginInfo, makes the plugin
        unavailable with that reason.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_plugin_status() -> str | None:
    """Say whether the plugin can run on this machine now.

    Called lazily: by ``python -m sdk list`` and before the plugin's first
    compile. Keep it cheap and free of side effects (no device initialisation
    beyond a query such as ``torch.cuda.is_available()``).

    :return: ``None`` when usable, else the reason it is not *and the fix*, e.g.
        ``"no CUDA device visible (torch.cuda.is_available() is False); run on a
        GPU machine or set TRITON_INTERPRET=1 to run kernels on CPU tensors"``. Where it
        runs but cannot compile here (no compiler), that reason as an
        :class:`sdk.CompileUnavailable`: the plugin stays usable, the programs the caches
        hold run, and a graph or partition that needs a compile runs in the chain or ATen,
        with one warning per process. Stops at first non-None result.
    :raises: an exception makes the plugin unavailable, with the error as the reason.

    API version: 1.
    """


@hookspec(firstresult=True)
def sdk_preferences() -> Preferences | None:
    """Say what the plugin prefers the core to make: a channels-last layout around library
    convolutions, a product's or convolution's bias added in the generated kernel, recomputing
    transcendentals. The core's output computes the same either way; only its speed on the
    device differs (:class:`sdk.Preferences` says what each field makes the core do)::

        @sdk.hookimpl
        def sdk_preferences():
            return sdk.Preferences(channels_last=True, mm_bias_in_kernel=True)

    Called once, when the plugin is loaded (after ``sdk_plugin_info``); the core reads the
    answer as ``ctx.preferences`` in every compile (and only there: no capability stands for
    a preference since hook API 6). A plugin of hook API 5 or earlier that does not answer
    gets the preferences it declared as ``Capability`` members
    (``Capability.CHANNELS_LAST``), with one :class:`sdk.SDKDeprecationWarning`.

    :return: a :class:`sdk.Preferences`, or None for its defaults (all off). Stops at first
        non-None result (each plugin answers for itself only).
    :raises: an exception, or a return value that is not a Preferences, makes the plugin
        unavailable with that reason.

    Appeared in hook-API version 6.
    """


__all__ = [name for name in dir() if name.startswith("sdk_")] + ["hookspec", "PROJECT"]
