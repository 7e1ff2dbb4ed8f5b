"""Block sizes, kernel shapes and the launch configurations measured against them.

Every number the renderer and the launcher choose comes from here, so tuning
the plugin means reading one file.

Kernel shapes (:func:`plan`)
----------------------------
``pointwise``   no stage has inner ranges: the outer iteration is flattened
                to one index and cut into 1D blocks of ``XBLOCK``.
``pointwise2d`` the same, tiled ``[YBLOCK, XBLOCK]`` when a load is contiguous
                along another outer variable than the last (a transpose):
                the outer variables up to that one index the tile's rows,
                the rest its columns, so loads and stores both coalesce.
``persistent``  reduction kernel whose largest inner range fits one block
                (``<= PERSISTENT_MAX`` elements): ``XBLOCK`` rows per program,
                the whole row in ``RBLOCK = next_power_of_2(inner)`` lanes.
``looped``      longer rows: ``XBLOCK`` rows per program, each stage loops
                over its row in chunks of ``RBLOCK`` with ``[XBLOCK, RBLOCK]``
                accumulators.
``looped`` is also the shape of a column reduction (the rows are contiguous in
                memory, the reduction strided): ``[XBLOCK, RBLOCK]`` tiles of
                many rows and few reduction elements, so loads coalesce.
``split``       a long reduction whose unsplit grid would be too small for the GPU:
                fewer rows than ``MIN_PROGRAMS`` (BatchNorm's statistics over NCHW:
                64 to 256 channels, each of N*H*W elements; the sum of all elements),
                or a column reduction whose narrowest tiles give fewer than that
                (channels-last statistics, gamma/beta gradients). A first kernel
                reduces ``SPLIT`` chunks of each row (of ``XBLOCK`` columns) into
                scratch partials, on a grid of chunks x blocks of rows; the last of
                a block's programs to finish (or a second kernel) combines the
                partials per row and runs the epilogue. A kernel of several reduction
                stages (two-pass variance, BatchNorm's backward) runs as a chain of
                such kernels, the rows' values passed on through scratch
                (:mod:`.split`). The choice depends on ``xnumel``, ``rnumel`` and
                ``outer`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Rows up to this many elements are reduced in one block (persistent reduction).
PERSISTENT_MAX = 4096
#: Split a reduction across programs when rows are at least this long, and the unsplit
#: kernel would launch fewer than ``MIN_PROGRAMS`` programs: a row reduction has one program
#: per row (``XBLOCK=1``), a column reduction one per ``OUTER_MIN_ROWS`` columns at most.
#: (Inductor splits where there are fewer than two outputs per SM and the reduction is over
#: 8192 elements.) Not measured against the unsplit kernels of 33 to 263 rows (BatchNorm's
#: 64 to 256 channels) or of few columns: the gain expected is the occupancy's, C programs
#: each reading N*H*W elements against ``SPLIT_TARGET_PROGRAMS``.
SPLIT_MIN_INNER = 16384
#: ... except a column reduction (outer), split from this many rows on, of one reduction stage
#: or several (BatchNorm's statistics and backward over channels-last activations: a sum,
#: then per column, then per element). Unsplit, a column reduction runs ``cdiv(columns, 16)``
#: programs of [16, 1024] tiles (the tile measured for one-load column sums):
#:
#: * resnet50 training forced to channels-last (H200, torch 2.11, bf16; BENCHMARKS.md "Issues
#:   48 and 49, third session"): four of its backward's unsplit chains, over 512 columns of
#:   12544 rows (32 programs), took 0.13 to 0.18 ms each; split, 0.05 to 0.07.
#: * Whisper-tiny's encoder bias gradients (384 columns of 8 x 1500 rows, fp32) ran on 24
#:   programs: 0.25 ms each, 74 GB/s ("Issues 48 and 49, tenth session").
#: * From 8192 rows (Inductor's bound) down to 512 (H200, ``knob_ab.py``, "Issues 48 and 49,
#:   sixteenth session"): T5-small training's generated kernels 2.57 -> 2.33 ms of device
#:   time a step (RMSNorm's weight gradients, 512 columns of 4096 rows); DistilBERT's
#:   2.03 -> 2.02, GPT-2's and Whisper's the same; the launches the same (the last program of
#:   a split combines). Within GPT-2's step (``all_kernels.py``), its bias gradients (768 to
#:   3072 columns of 4096 rows) took 0.19 ms split against 0.16 unsplit, and its LayerNorm
#:   gamma and beta sums less.
SPLIT_MIN_INNER_COLUMNS = 512
#: Split by the grid's size (above: rows under ``MIN_PROGRAMS``, columns, kernels of several
#: reduction stages as chains: :mod:`.split`), or only as before it was built: at most
#: ``SPLIT_MAX_OUTER`` rows, one reduction stage, no column reduction. On (H200, torch 2.11,
#: BENCHMARKS.md "Issue 49, third session"): the GPU suite, the mode matrix and
#: compute-sanitizer clean; mobilenet_v3_large training bf16, generated kernels 1.57 -> 1.11 ms
#: of device time per step; resnet50 training, the same (1.65 -> 1.63).
SPLIT_BY_GRID = True
#: ... the rows a split took before (``SPLIT_BY_GRID`` off).
SPLIT_MAX_OUTER = 32
#: Each program of a split reduction reduces about this many elements or more: a row of
#: ``rnumel`` is cut into ``cdiv(rnumel * XBLOCK, SPLIT_MIN_CHUNK)`` chunks at most (a column
#: reduction's program reduces ``XBLOCK`` columns of its chunk: ``SPLIT_OUTER_MIN_CHUNK``).
SPLIT_MIN_CHUNK = 4096
#: Programs a split reduction aims for (about 8 per SM of a 132-SM H100/H200).
SPLIT_TARGET_PROGRAMS = 1024
#: ... except a column reduction's: each program reduces ``XBLOCK`` columns of at least
#: ``SPLIT_OUTER_MIN_CHUNK // XBLOCK`` rows (512 rows of 32 columns), on about
#: ``SPLIT_OUTER_TARGET_PROGRAMS`` programs (4 per SM) or fewer; and a column reduction is
#: split only onto more programs than it runs unsplit. Measured on an H200
#: (``benchmarks/column_sums.py``, each kernel's device time alone; BENCHMARKS.md "Issues 48
#: and 49, seventeenth session"): bias and RMSNorm-weight sums, bf16, 768 to 3072 columns of
#: 4096 and 12000 rows, took 0.73x the time of 4096-element chunks on up to 1024 programs
#: with L2 warm and 0.83x flushed (geomeans of 16 shapes); the largest sums (12000 x 1536 to
#: 3072) on 960 to 1008 programs had taken 1.3 to 1.5x.
SPLIT_OUTER_MIN_CHUNK = 16384
SPLIT_OUTER_TARGET_PROGRAMS = 512
#: ... but where chunks that long leave fewer programs than this (2 per SM), the chunks
#: shorten, down to ``SPLIT_MIN_CHUNK`` elements, towards this many programs: short sums
#: (T5-small's RMSNorm weight gradients, 512 columns of 1024 rows: 32 programs unsplit, and
#: no more in chunks of 16384 elements) and BatchNorm's statistics and gradients over
#: channels-last activations of 784 to 12544 rows (mobilenet_v3's: 42 to 200 programs). In
#: training steps on an H200 (``knob_ab.py``, generated kernels' device ms a step, without
#: this floor against with it; BENCHMARKS.md "Issues 48 and 49, eighteenth session"): T5-small
#: 2.413 / 2.326, mobilenet_v3 1.449 / 1.357 (23 launches more: a split BatchNorm normalizes
#: in a kernel of its own), resnet50 2.431 / 2.399, GPT-2 2.040 / 2.031; a floor of 128
#: programs took 2.376, 1.408, 2.386 and 2.046.
SPLIT_OUTER_MIN_PROGRAMS = 264
#: Launch at least this many programs before putting more rows in a block.
MIN_PROGRAMS = 264
#: Largest block of a pointwise kernel.
POINTWISE_XBLOCK = 1024
#: Warps of a pointwise kernel of at least 65536 elements (each block ``POINTWISE_XBLOCK``):
#: 8 elements a thread, 16 bytes of bf16 (Inductor's default too); with 8 warps, a thread
#: took 8 bytes of bf16. On an H200 (``knob_ab.py``, BENCHMARKS.md "Issues 48 and 49,
#: sixteenth session"), GPT-2 training bf16's generated kernels took 2.145 ms of device time
#: a step against 2.205 with 8 warps; resnet50 training bf16 and GPT-2 training fp32, the
#: same (within 4 us). Its GELU had taken 22.7 us forward and 31.1 backward with 8 warps,
#: against Inductor's 16.7 and 22.6.
POINTWISE_WARPS = 4
#: Column reductions (``outer``): rows per block at most / at least, and elements per tile.
#: [32, 64] tiles rather than [64, 64] (H200, triton.testing.do_bench, each kernel alone):
#: column sums of 30522 to 50257 columns over 512 to 8192 rows took 61 to 68% of the time in
#: fp32 and 38 to 50% in bf16 (DistilBERT's and GPT-2's vocabulary bias gradients), 0.89 to
#: 1.12x Inductor's kernel; 8192 columns over 4096 rows, the same either way.
OUTER_XBLOCK = 32
OUTER_MIN_ROWS = 16
OUTER_TILE = 2048
#: ... and per tile where the rows per block fell to ``OUTER_MIN_ROWS`` (few columns, so few
#: programs): each program then loops over long stretches of the reduction, and a larger
#: ``RBLOCK`` keeps more loads in flight per iteration. With [16, 1024] tiles rather than
#: [16, 256] (H200, each kernel alone, L2 flushed), GPT-2's bf16 bias gradients (768 to 3072
#: columns over 4096 rows) took 42 to 59% of their time, and column sums of 128 to 1024
#: columns over 2048 to 401408 rows 31 to 74% (4096 columns over 1024 rows, one iteration
#: either way: the same). Wider tiles ([32, 512]) spilled registers in a fused GELU-backward
#: column sum (ptxas, sm_90); [16, 1024] with 8 warps took 128 registers and no spill.
OUTER_TILE_NARROW = 16384
#: Chunk of a looped reduction.
LOOPED_RBLOCK = 4096
#: ... except rows up to this many elements, read in one chunk of 16 warps: the next loop's
#: read of the row then hits the cache. H100, softmax fp32 (two loops: max and sum, then
#: store), do_bench median against a clone: 8192x8192 at 99 % of copy bandwidth in one
#: chunk against 88 % in 4096-element chunks (Inductor: 99 %); 4096x50257, one chunk of
#: 8192 took 1177 us against 938 us in chunks of 4096, so longer rows keep them.
LOOPED_ONE_CHUNK_MAX = 8192
#: A split reduction's combine runs in the first kernel's last program of each block of rows
#: (:meth:`.split.SplitWriter._last_program`), not in a second kernel: one launch per
#: reduction stage instead of two (BatchNorm's statistics 2 kernels, not 4; its backward 2,
#: not 3). Off: the second kernels, as before.
SPLIT_LAST_PROGRAM_COMBINES = True
#: Partials the last program reads per iteration of its combine loop, per row of its block:
#: [XBLOCK, 64] tiles (2048 values where XBLOCK is a column block's 32).
SPLIT_COMBINE_BLOCK = 64
#: Chunk of the first kernel of a split reduction.
SPLIT_RBLOCK = 2048
#: Columns per block of a split column reduction's first kernel (128 bytes of fp32 a row),
#: and elements per tile: [32, 64] with 8 warps, each program looping over a chunk of about
#: ``SPLIT_OUTER_MIN_CHUNK // XBLOCK`` rows or more. [32, 64] rather than [32, 128] (H200,
#: torch 2.11, Triton 3.6; ``bn_chains.py``, BatchNorm + ReLU training over channels-last
#: bf16, 14 shapes; BENCHMARKS.md "Issue 49, thirty-third session"): ResNet-50's nine shapes
#: 367.7 us against 388.2 (Inductor: 358.6), the backward's sums at 16x256x56x56 30.6 us
#: against 39.1, at 16x256x14x14 6.0 against 7.1; no shape more than 1.8 us slower
#: (16x72x56x56). Wider tiles ([64, 64]) were quicker at the largest shapes only.
SPLIT_OUTER_XBLOCK = 32
SPLIT_OUTER_TILE = 2048
#: Warps of each kernel of a split column reduction's chain.
SPLIT_OUTER_WARPS = 8
#: A split column reduction's chunk rounded up to whole tiles (fewer chunks): 784 rows in
#: tiles of 128 loop 7 times, the last a sixth full; 896 rows, 7 full tiles. Off (as
#: before) until measured: ``benchmarks/bn_chains.py --settings default,whole:SPLIT_WHOLE_TILES=1``.
SPLIT_WHOLE_TILES = False
#: A stage of a split reduction's chain that only stores, over every element (BatchNorm's
#: normalization, its input gradient), runs as a flat kernel of its own: one tile of
#: ``POINTWISE_XBLOCK`` elements a program (:func:`flat_config`), no loop, not on the
#: first kernels' grid of (chunks, blocks of rows). That grid suits the sums (256 chunks of
#: 784 rows of 64 channels at 16x64x112x112, under two waves of 132 SMs); a pointwise stage
#: on it loops over a chunk per program. Off: the stage runs on that grid.
SPLIT_FLAT_STORES = True
#: Columns of a flat kernel's tile where the chain is a column reduction's (128 bytes of
#: bf16): [64, 16] tiles of 1024 elements.
FLAT_COLUMNS = 64
#: A split column reduction's kernels (its first kernels and its flat one) take their blocks
#: of columns from the grid's first axis, which the GPU schedules fastest: programs that run
#: together read neighbouring columns of the same rows (a 256-channel bf16 row is 512 bytes,
#: a block of 32 columns 64 of them), not one block's strip over many rows. Off: chunks
#: (first kernels) and blocks of rows (flat kernels) first, as before. A flat kernel keeps
#: that order where its blocks of rows outnumber the second axis' limit (:data:`GRID_Y_MAX`).
#: H200, torch 2.11, Triton 3.6 (``bn_chains.py``, BatchNorm + ReLU training over
#: channels-last bf16; BENCHMARKS.md "Issue 49, thirty-fourth session"): ResNet-50's nine
#: shapes 360.7 us against 371.5 (Inductor: 364.0), no shape slower; the backward's sums at
#: 16x256x56x56 27.6 us against 31.4.
SPLIT_COLUMNS_FIRST = True
#: The most programs on a CUDA grid's second (and third) axis.
GRID_Y_MAX = 65535
#: L2 eviction hints on the loads of a reduction loop, as Inductor gives them
#: (:meth:`.expressions.ExpressionWriter._eviction`): a streaming load ``evict_first``
#: where it is its buffer's last in the kernel, ``evict_last`` where the kernel reads the
#: buffer again. Off: measured on an H200 (torch 2.11, Triton 3.6; BENCHMARKS.md "Issue 49,
#: twenty-ninth session"), they speed a kernel that reads from DRAM and slow the next one:
#: BatchNorm's backward sums over 16x64x112x112 channels-last bf16 36.1 -> 31.3 us, but the
#: input-gradient kernel after them, which reads the same tensors, 21.2 -> 22.9 and the
#: forward's variance pass 8.9 -> 10.8 (``bn_chains.py``, nine shapes: 390.5 us without,
#: 393.0 with); column sums of a gradient still in L2 (``column_sums.py``, hot) took longer
#: (bias 12000x1536: 9.3 -> 13.3 us), flushed ones less (19.9 -> 17.7); resnet50 training
#: 4.183 ms of device time a step with them, 4.180 without (the last session's run).
EVICTION_HINTS = False


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Plan:
    """The shape of a rendered kernel and its default launch configuration."""

    mode: str  # "pointwise", "pointwise2d", "persistent", "looped" or "split"
    xnumel: int
    rnumel: int  # largest inner range (0 for pointwise)
    config: dict[str, int]  # constexprs and num_warps of the main kernel
    rblock: int = 0  # persistent: the block of the row (a literal in the source)
    split: int = 0  # split: programs per row
    chunk: int = 0  # split: elements per program
    pre_config: dict[str, int] = field(default_factory=dict)  # split: the first kernel's
    outer: bool = False  # split: a column reduction (its columns contiguous in memory)


def _warps(elements: int) -> int:
    if elements >= 4096:
        return 8
    if elements >= 1024:
        return 4
    if elements >= 256:
        return 2
    return 1


#: Largest side of a 2D pointwise tile.
TILE = 64


def tile_2d(ynumel: int, xnumel: int, broadcast: bool = False) -> dict[str, int] | None:
    """Default ``[YBLOCK, XBLOCK]`` tile of a transposing pointwise kernel, or None
    when tiling does not pay (a side under 16) or the grid's y-dimension would overflow.

    ``broadcast``: the loads contiguous along the rows are per-row vectors (indexed by the
    row variables alone), and every access that spans the columns is contiguous along them:
    a row-wise kernel, not a transpose. Such a tile gets 2 warps. The cross-entropy backward
    over GPT-2's vocabulary ([4096, 50257] bf16, per-row statistics and targets) took 0.47 ms
    with 4 warps and 0.30 to 0.32 ms with 2 (H200, two sweeps of that kernel alone). Compiled
    for sm_90 (ptxas), its 64x64 tile takes 252 registers a thread with 4 warps (2 blocks, 8
    warps resident on an SM) and 168 with 2. Transposes keep 4 warps: nothing was measured
    for them."""
    if ynumel < 16 or xnumel < 16:
        return None
    yb, xb = min(TILE, next_power_of_2(ynumel)), min(TILE, next_power_of_2(xnumel))
    if cdiv(ynumel, yb) > GRID_Y_MAX:
        return None
    warps = 2 if broadcast else (4 if xb * yb >= 2048 else 2)
    return {"XBLOCK": xb, "YBLOCK": yb, "num_warps": warps}


def _split_plan(xnumel: int, rnumel: int, outer: bool) -> Plan | None:
    """The split form of a reduction of ``xnumel`` rows of ``rnumel`` elements (``outer``:
    columns, contiguous in memory), or None where the unsplit kernel launches enough
    programs (see :data:`SPLIT_MIN_INNER`) or the reduction is too short for two chunks.

    The first kernel's grid is (chunks, blocks of ``XBLOCK`` rows): one row per program for
    rows, [``SPLIT_OUTER_XBLOCK``, RBLOCK] tiles along the columns for a column reduction;
    the second kernel combines ``SPLIT`` partials per row in [XBLOCK, next_power_of_2(SPLIT)]
    blocks."""
    if not SPLIT_BY_GRID and (outer or xnumel > SPLIT_MAX_OUTER):
        return None
    if outer:
        if cdiv(xnumel, OUTER_MIN_ROWS) >= MIN_PROGRAMS:
            return None
        pre_x = min(SPLIT_OUTER_XBLOCK, next_power_of_2(xnumel))
    else:
        if xnumel >= MIN_PROGRAMS:
            return None
        pre_x = 1
    blocks = cdiv(xnumel, pre_x)
    if outer:
        min_chunk, target = SPLIT_OUTER_MIN_CHUNK, SPLIT_OUTER_TARGET_PROGRAMS
    else:
        min_chunk, target = SPLIT_MIN_CHUNK, SPLIT_TARGET_PROGRAMS
    split = min(cdiv(rnumel * pre_x, min_chunk), max(2, target // max(blocks, 1)))
    if outer and blocks * split < SPLIT_OUTER_MIN_PROGRAMS:
        most = cdiv(rnumel * pre_x, SPLIT_MIN_CHUNK)  # chunks of SPLIT_MIN_CHUNK elements
        split = max(split, min(most, cdiv(SPLIT_OUTER_MIN_PROGRAMS, blocks)))
    if split < 2 or (outer and blocks * split <= cdiv(xnumel, OUTER_MIN_ROWS)):
        return None  # one chunk, or no more programs than unsplit
    chunk = cdiv(rnumel, split)
    if outer:
        rblock = min(SPLIT_OUTER_TILE // pre_x, next_power_of_2(chunk))
        if SPLIT_WHOLE_TILES and cdiv(rnumel, cdiv(chunk, rblock) * rblock) >= 2:
            chunk = cdiv(chunk, rblock) * rblock
            split = cdiv(rnumel, chunk)
        pre = {"XBLOCK": pre_x, "RBLOCK": rblock, "num_warps": SPLIT_OUTER_WARPS}
    else:
        rblock = min(SPLIT_RBLOCK, next_power_of_2(chunk))
        pre = {
            "XBLOCK": 1,
            "RBLOCK": rblock,
            "num_warps": 16 if chunk >= 8192 else _warps(4 * rblock),
        }
    xblock = min(next_power_of_2(xnumel), 16)
    return Plan(
        "split",
        xnumel,
        rnumel,
        {"XBLOCK": xblock, "num_warps": _warps(xblock * next_power_of_2(split))},
        split=split,
        chunk=chunk,
        pre_config=pre,
        outer=outer,
    )


def flat_config(split: Plan) -> dict[str, int]:
    """The configuration of a split chain's flat kernel (:data:`SPLIT_FLAT_STORES`): a tile
    of ``POINTWISE_XBLOCK`` elements, ``POINTWISE_WARPS``; a column reduction's across
    ``FLAT_COLUMNS`` columns or fewer (its loads contiguous along them), a row
    reduction's along one row."""
    xblock = min(FLAT_COLUMNS, next_power_of_2(split.xnumel)) if split.outer else 1
    return {"XBLOCK": xblock, "RBLOCK": POINTWISE_XBLOCK // xblock, "num_warps": POINTWISE_WARPS}


def columns_first(split: Plan, programs_along_rows: int) -> bool:
    """Do the kernels of ``split`` put its blocks of columns on the grid's first axis
    (:data:`SPLIT_COLUMNS_FIRST`), with ``programs_along_rows`` on its second?"""
    return SPLIT_COLUMNS_FIRST and split.outer and programs_along_rows <= GRID_Y_MAX


def plan(
    xnumel: int,
    inner_numels: list[int],
    splittable: bool,
    outer: bool = False,
    looped: bool = False,
) -> Plan:
    """Choose the kernel shape and its default block sizes.

    ``inner_numels``: the numel of every stage with inner ranges (empty for a
    pointwise kernel); ``splittable``: the kernel has the stage form a split reduction
    needs (static sizes, a reduction, inner ranges in its first stage, as many elements in
    every stage with inner ranges: see :mod:`.planning`); ``looped``: a reduction's size is
    symbolic (the numels are hints), so it must loop (it is never split); ``outer``: its largest load is
    contiguous along the rows, not along the reduction (a column sum), so a block
    takes many rows and few reduction elements: each load instruction then reads
    consecutive addresses.
    """
    if not inner_numels:
        xblock = min(POINTWISE_XBLOCK, next_power_of_2(xnumel))
        warps = POINTWISE_WARPS if xnumel >= 65536 else max(1, min(4, xblock // 128))
        return Plan("pointwise", xnumel, 0, {"XBLOCK": xblock, "num_warps": warps})
    rnumel = max(inner_numels)
    min_inner = SPLIT_MIN_INNER_COLUMNS if outer else SPLIT_MIN_INNER
    if splittable and not looped and rnumel >= min_inner:
        split = _split_plan(xnumel, rnumel, outer)
        if split is not None:
            return split
    if outer and xnumel >= 8 * OUTER_MIN_ROWS and rnumel >= 16:
        xblock = OUTER_XBLOCK
        while xblock > OUTER_MIN_ROWS and cdiv(xnumel, xblock) < MIN_PROGRAMS // 2:
            xblock //= 2
        tile = OUTER_TILE_NARROW if xblock <= OUTER_MIN_ROWS else OUTER_TILE
        rblock = min(next_power_of_2(rnumel), tile // xblock)
        return Plan("looped", xnumel, rnumel, {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": 8})
    if looped:
        # the reduction's size is symbolic (``rnumel`` is the compiling call's): a loop over
        # RBLOCK chunks is right for every size; blocks as a persistent kernel's would be
        rblock = min(LOOPED_RBLOCK, next_power_of_2(rnumel))
        xblock = max(1, min(next_power_of_2(xnumel), 4096 // rblock, 256))
        while xblock > 1 and cdiv(xnumel, xblock) < MIN_PROGRAMS:
            xblock //= 2
        return Plan(
            "looped",
            xnumel,
            rnumel,
            {"XBLOCK": xblock, "RBLOCK": rblock, "num_warps": _warps(xblock * rblock)},
        )
    if rnumel <= PERSISTENT_MAX:
        rblock = next_power_of_2(rnumel)
        xblock = max(1, min(next_power_of_2(xnumel), 4096 // rblock, 256))
        while xblock > 1 and cdiv(xnumel, xblock) < MIN_PROGRAMS:
            xblock //= 2
        return Plan(
            "persistent",
            xnumel,
            rnumel,
            {"XBLOCK": xblock, "num_warps": _warps(xblock * rblock)},
            rblock=rblock,
        )
    if rnumel <= LOOPED_ONE_CHUNK_MAX:
        rblock = next_power_of_2(rnumel)
    else:
        rblock = min(LOOPED_RBLOCK, next_power_of_2(rnumel))
    return Plan(
        "looped",
        xnumel,
        rnumel,
        {"XBLOCK": 1, "RBLOCK": rblock, "num_warps": 16 if rblock >= 4096 else 8},
    )


#: Alternatives offered per kernel by default (``sdk_kernel_choices``; the core measures them
#: under its automatic budget): the candidates nearest the default configuration.
DEFAULT_ALTERNATIVES = 3


def label(config: dict[str, Any]) -> str:
    """A configuration as ``sdk.explain`` shows it: ``XBLOCK=64 RBLOCK=512 num_warps=8``."""
    parts = [f"{k}={v}" for k, v in sorted(config.items()) if k not in ("pre", "flat")]
    for kind in ("pre", "flat"):  # (a split chain's first kernels', its flat kernel's)
        if kind in config:
            parts.append(f"{kind}(" + label(config[kind]) + ")")
    return " ".join(parts)


def _distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """How far configuration ``a`` is from ``b``: the sum of the log2 ratios of their numbers."""
    total = 0.0
    for k in set(a) | set(b):
        x, y = a.get(k), b.get(k)
        if isinstance(x, dict) or isinstance(y, dict):
            total += _distance(x or {}, y or {})
        elif x is None or y is None:
            total += 4.0
        else:
            total += abs(int(x).bit_length() - int(y).bit_length())
    return total


def alternatives(meta: dict[str, Any], many: bool = False) -> list[dict[str, int]]:
    """The configurations offered to be measured against the default (which is not among
    them): every candidate with ``many`` (``autotune``), else the
    :data:`DEFAULT_ALTERNATIVES` nearest the default (stable order: nearest first)."""
    cands = candidates(meta)
    default, rest = cands[0], cands[1:]
    if many:
        return rest
    ranked = sorted(range(len(rest)), key=lambda i: (_distance(rest[i], default), i))
    return [rest[i] for i in ranked[:DEFAULT_ALTERNATIVES]]


def candidates(meta: dict[str, Any]) -> list[dict[str, int]]:
    """Configurations the core may measure for a kernel (the default first).

    Only constexprs and ``num_warps`` vary, never the source: a persistent
    kernel keeps its ``RBLOCK`` and a split kernel its ``SPLIT``.
    """
    mode, x = meta["mode"], meta["xnumel"]
    default = dict(meta["config"])
    out: list[dict[str, int]] = [default]
    if mode == "pointwise2d":
        y, x2 = meta["grid"][1][0], meta["grid"][0][0]
        for yb, xb in ((32, 32), (64, 64), (32, 128), (128, 32), (64, 32), (32, 64), (16, 128)):
            if yb <= next_power_of_2(y) and xb <= next_power_of_2(x2):
                for w in (2, 4, 8):
                    out.append({"XBLOCK": xb, "YBLOCK": yb, "num_warps": w})
    elif mode == "pointwise":
        for xb in (256, 512, 1024, 2048):
            for w in (4, 8):
                if xb <= max(next_power_of_2(x), 256):
                    out.append({"XBLOCK": xb, "num_warps": w})
    elif mode == "persistent":
        rb = meta["rblock"]
        for xb in (1, 2, 4, 8, 16, 32):
            if xb * rb <= 16384 and xb <= next_power_of_2(x):
                for w in (2, 4, 8):
                    out.append({"XBLOCK": xb, "num_warps": w})
    elif mode == "looped":
        for xb, rb in ((1, 1024), (1, 2048), (1, 4096), (2, 1024), (4, 512), (8, 256)):
            if xb <= next_power_of_2(x):
                for w in (4, 8, 16):
                    out.append({"XBLOCK": xb, "RBLOCK": rb, "num_warps": w})
    elif mode == "split":
        # (the first kernel's XBLOCK changes its grid, not its source: kept as it is)
        xb = default["pre"]["XBLOCK"]
        rbs = (1024, 2048, 4096) if xb == 1 else tuple(t // xb for t in (2048, 4096, 8192))
        for rb in rbs:
            for w in (8, 16) if xb == 1 else (4, 8):
                out.append({**default, "pre": {"XBLOCK": xb, "RBLOCK": rb, "num_warps": w}})
    seen, uniq = set(), []
    for c in out:
        key = repr(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            uniq.append(c)
    return uniq
