"""Warm starts (core/warm.py): a later process skips AOTAutograd and the SDK's compile through
torch's AOTAutograd cache, with results bit-equal to the cold process's; MegaCache carries the
SDK's entries to a machine with empty caches; a directory others can write is refused; a
recipe whose programs are gone is rebuilt, not trusted."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import textwrap
import warnings

import pytest
import torch

import sdk
from sdk.core import graph_cache, warm
from tests import fresh

CHILD = textwrap.dedent(
    r"""
    import json, os, sys
    import torch
    import sdk  # (registers the SDK's MegaCache entries: nothing else of the SDK imported)

    mode, out = sys.argv[1], sys.argv[2]
    if mode == "load":  # a machine with empty caches, given the first process's artifacts
        with open(os.environ["ARTIFACTS"], "rb") as f:
            assert torch.compiler.load_cache_artifacts(f.read()) is not None

    from sdk.core import pipeline
    from sdk.core.adapters import aot_cache
    from sdk.core.adapters import torch_private as tp
    from torch._dynamo.utils import compilation_time_metrics, counters
    import torch._functorch._aot_autograd.autograd_cache as autograd_cache

    # every key the SDK's memo answers, compared with the key torch computes for it here
    keys_checked = []
    aot_cache._hook()
    remembered = autograd_cache.autograd_cache_key

    def checked(mod, example_inputs, config, *rest, **kw):
        key, lines = remembered(mod, example_inputs, config, *rest, **kw)
        own = aot_cache._original_key(mod, example_inputs, config, *rest, **kw)[0]
        keys_checked.append(key == own)
        return key, lines

    autograd_cache.autograd_cache_key = checked

    def traced():  # frames Dynamo has traced in this process (those it skips not counted)
        return len(compilation_time_metrics.get("_compile.compile_inner", ()))

    built = []
    real = tp._default_decompositions
    tp._default_decompositions = lambda: built.append(1) or real()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32),
        torch.nn.BatchNorm1d(32),  # its running statistics: written by the program's kernels
        torch.nn.GELU(),
        torch.nn.LayerNorm(32),
        torch.nn.Linear(32, 4),
    )
    x = torch.randn(8, 16)

    STEP = (
        "def step(x):\n"
        "    loss = model(x).square().mean()\n"
        "    loss.backward()  # inside the compiled function, as training loops do\n"
        "    return loss\n"
    )

    def make_step():  # a function of its own code object, which Dynamo has not seen
        env = {"model": model}
        exec(STEP, env)
        return env["step"]

    # the frames Dynamo traces for this step with no compiler at all (the eager backend):
    # the SDK's compilers must add none (Dynamo tracing a backward compiler adds some)
    frames = traced()
    torch.compile(make_step(), backend="eager")(x)
    eager_frames = traced() - frames
    for p in model.parameters():
        p.grad = None
    step = make_step()

    reports = []
    token = pipeline.collect_reports(reports)
    frames = traced()
    loss = torch.compile(step, backend="sdk:cpu_cpp")(x)
    sdk_frames = traced() - frames
    pipeline.stop_collecting(token)
    torch.save([loss.detach(), *(p.grad for p in model.parameters()), *model.buffers()], out)
    info = {
        "warm": {r.kind: r.warm for r in reports},
        "cache": {r.kind: r.cache for r in reports},
        "aot": dict(counters["aot_autograd"]),
        "decompositions_built": len(built),
        "key_memo": aot_cache.KEY_MEMO,
        "keys_checked": keys_checked,
        "sdk_frames": sdk_frames,
        "eager_frames": eager_frames,
    }
    if mode == "cold":
        artifacts = torch.compiler.save_cache_artifacts()
        with open(os.environ["ARTIFACTS"], "wb") as f:
            f.write(artifacts[0])
        info["artifacts"] = {
            kind: len(getattr(artifacts[1], f"{kind}_artifacts"))
            for kind in ("aot_autograd", "sdk_programs")
        }
    print("INFO " + json.dumps(info), flush=True)
    # done: exit without the interpreter's last collections over all that torch made (about
    # 1 s of the process); exit handlers still run
    import gc
    gc.freeze()
    """
)


def _run(tmp_path, mode, sdk_dir, torch_dir):
    out = tmp_path / f"{mode}.pt"
    env = fresh.one_thread(
        SDK_CACHE_DIR=str(sdk_dir),
        TORCHINDUCTOR_CACHE_DIR=str(torch_dir),
        SDK_GRAPH_CACHE="1",
        ARTIFACTS=str(tmp_path / "artifacts.bin"),
    )
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = fresh.run([sys.executable, str(script), mode, str(out)], env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("INFO "))
    return json.loads(line[5:]), torch.load(out)


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """A cold process, a warm one on its caches, and one on empty caches loaded with the cold
    process's MegaCache artifacts."""
    tmp = tmp_path_factory.mktemp("warm")
    first = (tmp / "sdk-cache", tmp / "inductor")
    cold = _run(tmp, "cold", *first)
    warm_ = _run(tmp, "warm", *first)
    shipped = _run(tmp, "load", tmp / "sdk-cache2", tmp / "inductor2")
    return cold, warm_, shipped


def _bit_equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y), (x, y)


def test_a_cold_process_compiles_and_torch_stores_the_result(processes):
    (info, _), _, _ = processes
    assert info["warm"] == {"forward": "miss", "backward": "miss"}, info
    assert info["aot"].get("autograd_cache_saved") == 1, info
    assert info["decompositions_built"] == 1
    assert info["key_memo"] == {"remembered": 0, "computed": 1}, info


def test_a_warm_process_skips_aotautograd_and_is_bit_equal(processes):
    (_, cold), (info, warm_), _ = processes
    assert info["warm"] == {"forward": "hit", "backward": "hit"}, info
    assert info["cache"] == {"forward": "hit", "backward": "hit"}, info
    assert info["aot"].get("autograd_cache_hit") == 1, info
    assert info["decompositions_built"] == 0, "a hit builds no decomposition table"
    _bit_equal(cold, warm_)


def test_a_warm_process_takes_torch_s_key_from_the_memo_and_it_is_torch_s_key(processes):
    """The warm process does not compute torch's AOTAutograd key (its Inductor imports and
    source digests): the SDK remembered it by a digest of what it is computed from. The key
    torch computes in that process is the same."""
    _, (info, _), _ = processes
    assert info["key_memo"] == {"remembered": 1, "computed": 0}, info
    assert info["keys_checked"] == [True], info


def test_the_backward_compiler_is_not_traced_by_dynamo(processes):
    (info, _), (warm_info, _), _ = processes
    # (torch 2.11's eager backend traces one frame more than the SDK's compile does)
    assert info["sdk_frames"] <= info["eager_frames"], info
    assert warm_info["sdk_frames"] <= warm_info["eager_frames"], warm_info


def test_mega_cache_ships_a_warm_start_to_empty_caches(processes):
    (cold_info, cold), _, (info, shipped) = processes
    assert cold_info["artifacts"]["aot_autograd"] >= 1, cold_info
    # forward and backward: their programs, and their recipes' digests
    assert cold_info["artifacts"]["sdk_programs"] == 4, cold_info
    assert info["warm"] == {"forward": "hit", "backward": "hit"}, info
    assert info["cache"] == {"forward": "hit", "backward": "hit"}, info
    _bit_equal(cold, shipped)


# -- in-process: the caches' rules -----------------------------------------------------


def _train(**options):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x = torch.randn(5, 6)

    def step(x):
        loss = model(x).sum()
        loss.backward()
        return loss.detach()

    torch._dynamo.reset()
    report = sdk.explain(step, x, backend="sdk:cpu_cpp", **options)
    return report, [p.grad.clone() for p in model.parameters()]


def test_a_program_gone_from_the_sdk_cache_is_rebuilt_under_the_recipes_key(caches):
    first, grads = _train()
    assert _states(first) == {("miss", "stored")}, str(first)
    assert graph_cache.clear("programs") == len(first.graphs)
    again, grads2 = _train()
    # torch's entries hit; their programs are built again from the stored ATen graphs
    assert _states(again) == {("hit", "stored")}, str(again)
    third, grads3 = _train()
    assert _states(third) == {("hit", "hit")}, str(third)
    # a warm start's report says what the cold compile of each program took
    assert all(g.cold_compile_seconds == 0 for g in again.graphs), str(again)
    for g, cold in zip(third.graphs, again.graphs, strict=True):
        assert 0 < g.cold_compile_seconds <= cold.compile_seconds, (str(third), str(again))
        assert "cold compile took" in str(g)
    _bit_equal(grads, grads2)
    _bit_equal(grads, grads3)


def test_a_float_the_compile_specialized_is_not_served_to_another_value(caches):
    """A Python float Dynamo passes in as a tensor, once its value changed, and that the
    trace specializes (an op's scalar argument): torch's AOTAutograd entry does not key the
    value, so storing it would serve the next value the first one's program, silently
    (Inductor does, pytorch/pytorch#197889). Not stored: every value matches eager, in this
    process and in the next, and the report says why."""

    def f(x, lr):
        return torch._foreach_add([x], [x * 2], alpha=-lr)[0] * lr

    x = torch.randn(4)
    for process in range(2):  # (the second: the first's caches, as a later process)
        torch._dynamo.reset()
        compiled = torch.compile(f, backend="sdk:cpu_cpp")
        with sdk.collect_reports() as reports:
            for lr in (0.1, 0.2, 0.3, 0.4):
                torch.testing.assert_close(
                    compiled(x, lr), f(x, lr), rtol=0, atol=0, msg=f"lr {lr}, {process}"
                )
        notes = [n for g in reports.graphs for n in g.notes if "not stored" in n]
        assert notes and all("does not hold" in n for n in notes), [str(g) for g in reports.graphs]


def _states(report):
    return {(g.warm, g.cache) for g in report.graphs}


def test_other_options_are_another_entry(caches):
    _train()
    other, _ = _train(fusion=False)
    assert {g.warm for g in other.graphs} == {"miss"}, str(other)


def test_a_torch_cache_directory_others_can_write_is_refused(caches):
    shared = caches / "inductor"
    (shared / "aotautograd").mkdir(parents=True)
    os.chmod(shared / "aotautograd", 0o777)
    warm._refused.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report, grads = _train()
    assert [str(w.message) for w in seen if issubclass(w.category, sdk.CacheDirWarning)], [
        str(w.message) for w in seen
    ]
    assert all(g.warm.startswith("off: torch's AOTAutograd cache directory") for g in report.graphs)
    assert not any((shared / "aotautograd").iterdir()), "nothing stored there"
    assert all(torch.isfinite(g).all() for g in grads)


def test_the_cache_off_keeps_torch_s_cache_off(caches):
    report, _ = _train(cache=False)
    assert all(g.warm.startswith("off") for g in report.graphs), str(report)


# -- what is read back from torch's directory is verified -----------------------------------

FLIP_CHILD = textwrap.dedent(
    r"""
    import json, sys
    import torch
    import sdk
    from sdk.core import pipeline, warm

    graphs = []  # the pickled ATen graphs the SDK puts in torch's entries
    real = warm.Recipe.freeze

    def freeze(self, gm):
        state = real(self, gm)
        graphs.append(state["graph"].hex())
        return state

    warm.Recipe.freeze = freeze

    def f(x, y):
        return torch.relu(x) * 2.0 + y

    torch.manual_seed(0)
    base, y = torch.randn(64 * 32 + 1), torch.randn(64, 32)
    # the same sizes and strides (Dynamo's guards hold, torch's entry hits), another offset:
    # a new layout, whose program is built from the stored ATen graph
    x = base[:-1].view(64, 32) if sys.argv[1] == "cold" else base[1:].view(64, 32)
    reports = []
    token = pipeline.collect_reports(reports)
    got = torch.compile(f, backend="sdk:cpu_cpp")(x, y)
    pipeline.stop_collecting(token)
    print("INFO " + json.dumps({
        "warm": [r.warm for r in reports],
        "max_error": (got - f(x, y)).abs().max().item(),
        "graphs": graphs,
    }), flush=True)
    # done: exit without the interpreter's last collections over all that torch made (about
    # 1 s of the process); exit handlers still run
    import gc
    gc.freeze()
    """
)


def _child_info(root, code, *args):
    """Run ``code`` in a fresh process over the caches under ``root`` (the whole-graph cache
    on) and return the JSON it prints after ``INFO ``."""
    env = {
        **os.environ,
        "SDK_CACHE_DIR": str(root / "sdk"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "SDK_GRAPH_CACHE": "1",
        "OMP_NUM_THREADS": "1",
    }
    proc = fresh.run([sys.executable, "-c", code, *args], env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("INFO "))
    return json.loads(line[5:])


def _flip_run(tmp_path, mode):
    return _child_info(tmp_path, FLIP_CHILD, mode)


def test_a_flipped_bit_in_the_stored_aten_graph_is_a_miss_not_a_wrong_result(tmp_path):
    cold = _flip_run(tmp_path, "cold")
    assert cold["warm"] == ["miss"] and cold["max_error"] == 0, cold
    (graph,) = (bytes.fromhex(g) for g in cold["graphs"])
    assert graph.count(b"2.0") == 1, "the constant of `* 2.0`, in the graph's code"
    flipped = graph.replace(b"2.0", bytes([ord("2") ^ 1]) + b".0")  # one bit: `* 3.0`
    entries = [
        p
        for p in (tmp_path / "inductor" / "aotautograd").rglob("*")
        if p.is_file() and graph in p.read_bytes()
    ]
    assert len(entries) == 1, entries
    entries[0].write_bytes(entries[0].read_bytes().replace(graph, flipped))
    warm_ = _flip_run(tmp_path, "warm")  # a new layout: the variant is built from the graph
    assert warm_["max_error"] < 1e-6, warm_
    assert warm_["warm"] == ["miss"], warm_  # compiled afresh, not served from what was read


# -- torch's entries are unpickled only from files and directories private at that lookup ---


class _Planted:
    """Unpickled, it makes the directory ``marker``: what another user's entry could run."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _key_dirs(inductor):
    dirs = [p for p in (inductor / "aotautograd").iterdir() if p.is_dir()]
    assert dirs, "the first compile stored torch's entries"
    return dirs


def _plant(inductor, marker, *, file_mode=0o600, dir_mode=None):
    for d in _key_dirs(inductor):
        path = d / "0-planted"  # read before the real entry (torch reads them sorted)
        path.write_bytes(pickle.dumps(_Planted(str(marker))))
        os.chmod(path, file_mode)
        if dir_mode is not None:
            os.chmod(d, dir_mode)


def _train_again():
    warm._refused.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report, grads = _train()
    return (
        report,
        grads,
        [str(w.message) for w in seen if issubclass(w.category, sdk.CacheDirWarning)],
    )


def _unsafe_key_dir(inductor, marker):
    _plant(inductor, marker, dir_mode=0o777)


def _unsafe_entry(inductor, marker):
    _plant(inductor, marker, file_mode=0o666)


def _foreign_entry(inductor, marker):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    _plant(inductor, marker)
    for d in _key_dirs(inductor):
        os.chown(d / "0-planted", 4242, 4242)


def _unsafe_parent(inductor, marker):
    _plant(inductor, marker)
    os.chmod(inductor.parent, 0o777)  # world-writable, not sticky: anyone can swap inductor/


def _swapped_after_the_check(inductor, marker):
    # after this process checked the directory, another user swaps in one of theirs
    aot = inductor / "aotautograd"
    aot.rename(inductor / "aotautograd.old")
    shutil.copytree(inductor / "aotautograd.old", aot)
    _plant(inductor, marker)
    os.chmod(aot, 0o777)


UNSAFE = {
    "key-dir-0777": _unsafe_key_dir,
    "entry-0666": _unsafe_entry,
    "entry-of-another-user": _foreign_entry,
    "parent-world-writable-not-sticky": _unsafe_parent,
    "swapped-after-the-check": _swapped_after_the_check,
}


@pytest.mark.parametrize("case", UNSAFE)
def test_an_entry_others_could_have_written_is_never_unpickled(tmp_path, monkeypatch, case):
    inductor = tmp_path / "parent" / "inductor"
    inductor.parent.mkdir(mode=0o755)
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "sdk"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(inductor))
    first, grads = _train()
    assert {g.warm for g in first.graphs} == {"miss"}, str(first)
    marker = tmp_path / "unpickled"
    UNSAFE[case](inductor, marker)
    if case == "swapped-after-the-check":
        # the swap comes after the compile's own check of the directory: only a check at
        # the lookup itself sees it
        monkeypatch.setattr(warm, "_torch_dir_refused", lambda: None)
    report, grads2, warned = _train_again()
    assert not marker.exists(), "a pickle others could have written was loaded"
    # one warning per refused lookup (each Dynamo graph's), none per entry or graph kind
    assert 1 <= len(warned) <= len(_key_dirs(inductor)), warned
    assert all("TORCHINDUCTOR_CACHE_DIR" in w for w in warned), warned
    assert not any(g.warm == "hit" for g in report.graphs), str(report)
    _bit_equal(grads, grads2)


def test_a_private_entry_still_hits_through_the_checked_read(caches):
    _train()
    report, _, warned = _train_again()
    assert {g.warm for g in report.graphs} == {"hit"} and not warned, (str(report), warned)


# -- a corrupt entry of torch's is a miss, removed, and stored again -------------------------

CORRUPT_CHILD = textwrap.dedent(
    r"""
    import copy, json, warnings
    import torch
    import sdk
    from sdk.core import pipeline

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    eager = copy.deepcopy(model)
    x = torch.randn(5, 6)
    reports = []
    token = pipeline.collect_reports(reports)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            torch.compile(model, backend="sdk:cpu_cpp")(x).square().mean().backward()
            error = None
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    pipeline.stop_collecting(token)
    info = {
        "warm": [r.warm for r in reports],
        "error": error,
        "warnings": [f"{w.category.__name__}: {w.message}" for w in seen],
    }
    if error is None:
        eager(x).square().mean().backward()
        info["max_error"] = max(
            (p.grad - q.grad).abs().max().item()
            for p, q in zip(model.parameters(), eager.parameters(), strict=True)
        )
    print("INFO " + json.dumps(info), flush=True)
    # done: exit without the interpreter's last collections over all that torch made (about
    # 1 s of the process); exit handlers still run
    import gc
    gc.freeze()
    """
)


def _corrupt_run(root):
    return _child_info(root, CORRUPT_CHILD)


def _torch_entries(root):
    return sorted(
        p
        for p in (root / "inductor" / "aotautograd").rglob("*")
        if p.is_file() and not p.name.startswith(".")
    )


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A cold process's caches: one Dynamo graph, its forward and backward in one entry."""
    root = tmp_path_factory.mktemp("corrupt") / "cold"
    info = _corrupt_run(root)
    assert info["warm"] == ["miss", "miss"] and not info["warnings"], info
    assert info["max_error"] < 1e-6, info
    assert len(_torch_entries(root)) == 1
    return root


def _op_after(data: bytes, field: str, opcode: str) -> int:
    """The position of the first ``opcode`` after the string ``field`` in the pickle."""
    import pickletools

    seen = False
    for op, arg, pos in pickletools.genops(data):
        if op.name == opcode and seen:
            return pos
        seen = seen or (isinstance(arg, str) and arg == field)
    raise AssertionError(f"no {opcode} after {field!r}")


#: one flipped bit in torch's own wrapper data of the entry (not the SDK's recipe): where,
#: and what torch made of it before (the first call failed, in every later process too)
FLIPS = {
    # "AssertionError: expected 1 outputs, got 0" at the first call
    "num_forward_returns": lambda d: _op_after(d, "num_forward_returns", "BININT1") + 1,
    # the forward's outputs taken for the wrong ones: a broadcast error in the backward
    "num_forward": lambda d: _op_after(d, "num_forward", "BININT1") + 1,
    # "expected 2 outputs, got 1"
    "num_mutated_inp_runtime_indices": lambda d: (
        _op_after(d, "num_mutated_inp_runtime_indices", "BININT1") + 1
    ),
    # not a pickle any more (torch skipped it, logging, and kept it for ever)
    "an opcode": lambda d: _op_after(d, "output_info", "APPEND"),
}


@pytest.mark.parametrize("where", FLIPS)
def test_a_flipped_bit_in_torch_s_entry_is_a_miss_then_stored_again(tmp_path, stored, where):
    root = tmp_path / "caches"
    shutil.copytree(stored, root)
    (entry,) = _torch_entries(root)
    data = bytearray(entry.read_bytes())
    data[FLIPS[where](bytes(data))] ^= 1
    entry.write_bytes(bytes(data))

    second = _corrupt_run(root)
    assert second["error"] is None and second["max_error"] < 1e-6, second
    assert second["warm"] == ["miss", "miss"], second  # compiled afresh
    (warned,) = second["warnings"]  # exactly one, naming the entry and what was done
    assert entry.name in warned and "removed" in warned, warned
    assert not entry.exists() or entry.read_bytes() != bytes(data), "the corrupt entry stays"

    if where != "an opcode":
        return  # (what is stored again is torch's own new entry, whatever the flip was)
    third = _corrupt_run(root)  # warm again, with nothing to say
    assert third["warm"] == ["hit", "hit"] and not third["warnings"], third
    assert third["error"] is None and third["max_error"] < 1e-6, third


def test_torch_names_each_entry_by_the_digest_of_its_bytes(stored):
    """What the check of an entry's bytes relies on (torch's _write_to_local_cache)."""
    from torch._inductor.codecache import sha256_hash

    (entry,) = _torch_entries(stored)
    assert entry.name == sha256_hash(entry.read_bytes())


def test_an_intact_entry_that_does_not_unpickle_is_removed_and_the_good_one_hits(caches):
    from torch._inductor.codecache import sha256_hash

    _train()
    planted = []
    for key_dir in _key_dirs(caches / "inductor"):  # (the step's graphs: one entry each)
        # named as torch names it (intact), and read first (torch reads them sorted, up to
        # the first that serves the graph). Names are digests: n candidates all sort after
        # the good entry's name with chance 1/(n + 1), so 1000 of them failed about once in
        # a thousand graphs (a CI run failed so); 10**6, about once in a million
        first = min(p.name for p in key_dir.iterdir())
        junk = next(j for i in range(10**6) if sha256_hash(j := b"junk %d" % i) < first)
        planted.append(key_dir / sha256_hash(junk))
        planted[-1].write_bytes(junk)
    report, _, warned = _train_again()
    assert len(warned) == len(planted), warned  # one per entry, naming it
    for path, message in zip(sorted(planted), sorted(warned), strict=True):
        assert str(path) in message and "does not load" in message and "removed" in message
        assert not path.exists()
    assert {g.warm for g in report.graphs} == {"hit"}, str(report)
