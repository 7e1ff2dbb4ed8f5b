"""The stages of a compile, each a module with typed inputs and outputs.

One Dynamo graph goes through :mod:`.aot` (capture and AOTAutograd, or a warm restore from
its cache), which hands each ATen graph to :mod:`.partition` (a chain's split between its
plugins) or else to :mod:`.build` (lowering, scheduling, memory planning and codegen, through
:mod:`core.program`), whose result :mod:`.wrap` wraps (run-time fallback, wrapper plugins) and
publishes. A stage takes a :class:`~core.session.CompileSession` and a :class:`.job.Job` and
returns a :class:`.job.Built`; each records its time in ``GraphReport.stage_seconds``
(``sdk.explain`` prints them, ``TORCH_LOGS=+sdk`` logs them as they end).
"""
