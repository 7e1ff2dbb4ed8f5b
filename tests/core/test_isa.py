"""The program ISA (core/isa.py), declared once: the Python verifier (``steps.check``) and the
native runner's own (core/runner.cpp, from the generated header) refuse the same programs,
at the same step, and the runner loads nothing it refuses, nor a program of another ISA
version. A fuzz (tests/isa_fuzz_worker.py, in a process of its own) mutates real programs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import sdk
from sdk import _diskcache as cache
from sdk.core import graph_cache, isa, native
from sdk.core import steps as st
from tests import fresh

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    native.module() is None, reason=f"the native runner does not build here: {native.why_not()}"
)

I, C, A, E, RS, FR, RET = st.INPUT, st.CONST, st.ALIAS, st.EMPTY, st.RESTRIDE, st.FREE, st.RETURN
END = (RET, [(0, 0)])
RELU = (st.CALL, "aten::relu", "")

#: (what, program, slots, what both verifiers' messages say)
BAD = [
    ("read unwritten", [(I, 0, 0), (A, 2, 1), END], 3, r"step 1 \(alias.*src: reads slot 1 unwritten"),
    ("read after free", [(I, 0, 0), (FR, 0), (A, 1, 0), END], 2, r"step 2\b.*reads slot 0 unwritten"),
    ("write out of range", [(I, 5, 0), END], 3, r"step 0\b.*dst: 5 out of range"),
    ("call out out of range", [(I, 0, 0), (*RELU, [(0, 0)], [7], False), END], 3, r"step 1\b.*outs: 7 out of range"),
    ("optional slot -5", [(I, 0, 0), (*RELU, [(3, [-5])], [1], False), END], 3, r"step 1\b.*-5 out of range"),
    ("unknown argument tag", [(I, 0, 0), (*RELU, [(9, 0)], [1], False), END], 3, r"step 1\b.*unknown"),
    ("strides not one per size", [(E, 0, [2, 3], [1], torch.float32, "cpu"), END], 1, r"step 0\b.*2 sizes but 1 strides"),
    ("negative size", [(E, 0, [-1], [1], torch.float32, "cpu"), END], 1, r"step 0\b.*sizes: -1 out of range"),
    ("not a device", [(E, 0, [1], [1], torch.float32, "nodevice"), END], 1, r"step 0\b.*not a device"),
    ("restride dim", [(I, 0, 0), (RS, 0, [2], [1, 1]), END], 1, r"step 1\b.*dimension 2 of 2 strides"),
    ("launch cap", [(I, 0, 0), (st.LAUNCH, 1, [0] * 97, [], False, None, 0, len), END], 1, r"step 1\b.*97 launch arguments, more than 96"),
    ("null address", [(I, 0, 0), (st.LAUNCH, 0, [0], [], False, None, 0, len), END], 1, r"step 1\b.*address"),
    ("return not last", [(I, 0, 0), END, (I, 1, 0), END], 2, r"step 1\b.*a return before the last step"),
    ("no return", [(I, 0, 0)], 1, r"the program does not end with a return"),
    ("unknown opcode", [(I, 0, 0), (99, 0), END], 1, r"step 1\b.*unknown opcode"),
    ("field missing", [(I, 0), END], 1, r"step 0\b.*1 fields; input takes 2"),
    ("a bool for a slot", [(I, True, 0), END], 1, r"step 0\b.*dst is a bool, not an int"),
    ("a step not a tuple", [[I, 0, 0], END], 1, r"step 0\b.*a step is a tuple"),
    ("a constant not a tensor", [(C, 0, "c0"), END], 1, r"step 0\b.*tensor is a str"),
    ("a slot over 64 bits", [(I, 0, 0), (A, 1, 2**64), END], 2, r"step 1\b.*src: .*out of range"),
]  # fmt: skip


@pytest.mark.parametrize("program,n_slots,says", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_both_verifiers_refuse_each_violation_naming_step_and_problem(program, n_slots, says):
    with pytest.raises(ValueError, match="invalid program: " + says):
        st.check(program, n_slots)
    with pytest.raises(ValueError, match="sdk runner: invalid program: " + says):
        native.module().Program(program, n_slots, lambda positions: None, isa.VERSION)


@pytest.mark.parametrize(
    "call,says",
    [
        (("aten::relu", "", [(st.SLOT, 0), (st.SLOT, 0)]), "aten::relu. takes 1 arguments"),
        (("aten::narrow", "", [(st.SLOT, 0), (st.VALUE, 2**70), (st.VALUE, 0), (st.VALUE, 1)]), ""),
        (("aten::no_such_op", "", []), "no_such_op"),
    ],
    ids=["argument count", "an int over 64 bits", "unknown op"],
)
def test_what_an_ops_schema_refuses_is_a_value_error_naming_the_step(call, says):
    """Past the verifier (which knows no schema), the decoder's refusals name the step too,
    as a ValueError (an int over 64 bits was an OverflowError of the conversion)."""
    program = [(I, 0, 0), (st.CALL, *call, [1], False), (RET, [(0, 1)])]
    st.check(program, 2)
    with pytest.raises(ValueError, match=r"sdk runner: step 1 \(call\): .*" + says):
        native.module().Program(program, 2, lambda positions: None, isa.VERSION)


def test_the_runner_refuses_a_program_of_another_isa_version():
    good = [(I, 0, 0), END]
    st.check(good, 1)
    assert len(native.module().Program(good, 1, lambda positions: None, isa.VERSION)) == 2
    with pytest.raises(ValueError, match=f"written for ISA version {isa.VERSION + 1}, this runner"):
        native.module().Program(good, 1, lambda positions: None, isa.VERSION + 1)
    assert (native.module().ISA_VERSION, native.module().MAX_ARGS) == (
        isa.VERSION,
        isa.MAX_LAUNCH_ARGS,
    )


def test_the_runner_source_holds_no_opcode_of_its_own():
    """The opcodes, the cap and the layouts reach runner.cpp only through the generated
    header: none is written in it by hand."""
    text = (ROOT / "core" / "runner.cpp").read_text()
    for op in isa.OPCODES:
        assert f"{op.name} = {op.number}" not in text, op.name
    assert "96" not in text
    built = native.source()
    for op in isa.OPCODES:
        assert f"  {op.name} = {op.number}," in built, op.name
        assert f"namespace {op.name} {{ constexpr int" in built, op.name


def _rewrite_entries(cache_dir: Path, edit) -> int:
    """Apply ``edit(doc)`` to every whole-graph cache entry, written back as a valid entry
    (what a cache another process wrote, or a hostile one, may hold)."""
    n = 0
    for entry in (cache_dir / graph_cache.NAMESPACE).iterdir():
        data = entry.read_bytes()
        pos = len(cache._MAGIC)
        key_len = int.from_bytes(data[pos : pos + 4], "little")
        key = data[pos + 4 : pos + 4 + key_len].decode()
        doc, blobs = graph_cache.unpack(cache._decode(data, key))
        edit(doc)
        graph_cache.store().put(key, graph_cache.pack(doc, blobs))
        n += 1
    return n


def _slot_out_of_range(doc: dict) -> None:
    steps = doc["wrapper"]["steps"]["v"]  # the encoded list of steps
    ret = steps[-1]["v"]  # (RETURN, items): its first item's slot
    ret[1]["v"][0]["v"][1] = {"t": "int", "v": str(10**6)}


@pytest.mark.parametrize(
    "edit",
    [lambda doc: doc["wrapper"].update(isa=isa.VERSION + 1), _slot_out_of_range],
    ids=["another isa version", "a slot out of range"],
)
def test_a_cached_program_neither_executor_takes_is_a_miss(tmp_path, monkeypatch, edit):
    """A cached program the runner refuses and the step interpreter (core/interp.py) refuses
    too (they verify the same table) is compiled again and stored anew: the entry is a miss."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(1)

    x, w = torch.randn(8, 16), torch.randn(16, 4)
    torch._dynamo.reset()
    native = sdk.backend("cpu_cpp", runner="native")  # (pinned: SDK_RUNNER may say otherwise)
    assert sdk.explain(f, x, w, backend=native).graphs[0].runner == "native"
    assert _rewrite_entries(tmp_path / "cache", edit) == 1
    torch._dynamo.reset()
    (graph,) = sdk.explain(f, x, w, backend=native).graphs
    assert graph.cache == "stored" and graph.runner == "native", (graph.cache, graph.runner)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, backend="sdk:cpu_cpp")(x, w), f(x, w))


def test_fuzzed_programs_the_two_verifiers_agree_and_nothing_crashes():
    """Real programs (and one written by hand with the opcodes they lack), mutated 400
    times: the runner's verifier refuses a mutant iff steps.check does, at the same step, and
    the process does not crash (a segfault fails here, as a negative return code)."""
    proc = fresh.run(
        [sys.executable, "-m", "tests.isa_fuzz_worker", "--seed", "0", "--mutations", "400"],
        env=fresh.one_thread(),
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["problems"] == [], report["problems"][:10]
    assert set(report["opcodes"]) == set(st.NAMES), report["opcodes"]
    counts = report["counts"]
    assert counts["both refused"] >= 200 and counts["both accepted"] >= 10, counts
