// The native runner: executes a compiled graph's program (core/steps.py) with one
// Python->C++ crossing per call. Built once per machine (torch version x SDK version x this
// source) by core/native.py with the system C++ compiler against the installed torch's
// headers; the Python program (core/program.py) is the reference it must match bit for bit.
//
// A program is a list of steps over numbered slots (tensors). Each step is a tuple whose
// first element is its opcode, then its fields. core/isa.py declares each opcode once: its
// number, its fields in order and their kinds, and what it does; core/native.py generates
// from it the header spliced in below, inside the anonymous namespace (`python -m
// sdk.core.native --isa` prints it): the enums (each member with its fields and what it does),
// the version, the launch-argument cap, each opcode's field layout and field positions
// (isa::field::EMPTY::sizes), which the decoder (Program::decode) and the Verifier read.
//
// A program is verified whole when it is loaded (Program's constructor), before any step is
// decoded or can run: the whole-graph cache on disk is a trust boundary, and execute() indexes
// slots unchecked. The Verifier walks the generated layouts as core/steps.py's check does:
// field counts and kinds, every slot in range and written before it is read, strides one
// per size, dims within the strides, a LAUNCH within kMaxLaunchArgs, one RETURN, last; and
// the ISA version the program was written for. Any violation: std::invalid_argument (a
// ValueError in Python) naming the step and the problem, and no Program. What the decoder
// then refuses (an op's schema: its name, its argument count, a constant of another type)
// is a std::invalid_argument naming the step too.

#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

// (inside this namespace, so that its names hide torch's of the same name: DEFAULT)
@ISA@

using namespace isa;
namespace F = isa::field;

struct Arg {
  int kind = SLOT;
  int slot = -1;
  c10::IValue value;
  std::vector<int> slots;
};

struct Step {
  int op = 0;
  int dst = -1;
  int src = -1;
  std::vector<int64_t> sizes, strides, dims;
  int64_t offset = 0;
  bool relative = false;
  at::TensorOptions options;
  c10::Allocator* allocator = nullptr;  // EMPTY: the device's allocator, where registered
  c10::DispatchKeySet keys;
  at::ScalarType scalar_type = at::kFloat;
  at::Tensor tensor;
  // LAUNCH
  void* fn = nullptr;
  void* state = nullptr;
  std::vector<int> slots;
  bool checked = false;
  py::object error;
  py::object python;  // LAUNCH_PY: the kernel function
  // CALL
  std::optional<c10::OperatorHandle> handle;
  std::vector<Arg> args;
  std::vector<int> outs;
  // RETURN: (slot, -1) or (-1, index into constants)
  std::vector<std::pair<int, int>> items;
  std::vector<py::object> constants;
};

using I = std::intptr_t;

// what a state-convention kernel function returns when the runner must launch it by Python
constexpr int64_t kNotNative = -2;

// A C function of n pointer-or-int64 arguments (the same registers on the 64-bit ABIs the
// toolchain targets), its int result (0: fine) where `checked`.
int64_t call_c(void* f, const I* a, size_t n, bool checked);

at::Tensor reinterpret(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides,
                       int64_t increment) {
  // what torch's _reinterpret_tensor does: a new tensor over the same storage, no view record
  at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(t.storage()),
                                                              t.key_set(), t.dtype());
  auto* impl = out.unsafeGetTensorImpl();
  impl->set_storage_offset(t.storage_offset() + increment);
  impl->set_sizes_and_strides(sizes, strides);
  return out;
}

std::vector<int64_t> ints(const py::handle& h) { return h.cast<std::vector<int64_t>>(); }

// The load-time verifier (see the top of this file): the generated layouts, walked as
// core/steps.py's check walks core/isa.py's table; the two must agree on every program.
class Verifier {
 public:
  explicit Verifier(int n_slots) : n_slots_(n_slots) {
    if (n_slots < 0) {
      throw std::invalid_argument("sdk runner: invalid program: " + std::to_string(n_slots) +
                                  " slots");
    }
    written_.assign(n_slots, false);
  }

  void program(const py::list& steps) {
    const size_t n = steps.size();
    for (step_ = 0; step_ < n; ++step_) {
      op_ = -1;
      check_step(steps[step_]);
      if (op_ == RETURN && step_ + 1 != n) fail("a return before the last step");
    }
    if (n == 0 || op_ != RETURN) {
      throw std::invalid_argument(
          "sdk runner: invalid program: the program does not end with a return");
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    std::string where = "sdk runner: invalid program: step " + std::to_string(step_);
    if (op_ >= 0) where += std::string(" (") + kOps[op_].name + ")";
    throw std::invalid_argument(where + ": " + what);
  }

  static std::string type_name(PyObject* o) { return Py_TYPE(o)->tp_name; }

  void check_step(py::handle h) {
    PyObject* s = h.ptr();
    if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) == 0) fail("a step is a tuple, its opcode first");
    const int64_t code = tag(PyTuple_GET_ITEM(s, 0), "opcode", std::size(kOps));
    op_ = static_cast<int>(code);
    const Layout& layout = kOps[op_];
    const Py_ssize_t n = PyTuple_GET_SIZE(s) - 1;
    if (n != layout.n) {
      fail(std::to_string(n) + " fields; " + layout.name + " takes " + std::to_string(layout.n));
    }
    writes_.clear();
    frees_.clear();
    Py_ssize_t sizes = -1, strides = -1, capped = 0;
    std::vector<int64_t> dims;
    for (int k = 0; k < layout.n; ++k) {
      PyObject* x = PyTuple_GET_ITEM(s, k + 1);
      field(layout.fields[k], layout.kinds[k], x);
      const Kind kind = layout.kinds[k];
      if (kind == K_SIZES) sizes = PySequence_Size(x);
      if (kind == K_STRIDES) strides = PySequence_Size(x);
      if (kind == K_DIMS) dims = ints(x);
      if (layout.capped[k]) capped += PySequence_Size(x);
    }
    if (sizes >= 0 && strides >= 0 && sizes != strides) {
      fail(std::to_string(sizes) + " sizes but " + std::to_string(strides) + " strides");
    }
    const Py_ssize_t n_strides = std::max<Py_ssize_t>(strides, 0);
    for (int64_t d : dims) {
      if (d >= n_strides) {
        fail("dimension " + std::to_string(d) + " of " + std::to_string(n_strides) + " strides");
      }
    }
    if (capped > kMaxLaunchArgs) {
      fail(std::to_string(capped) + " launch arguments, more than " +
           std::to_string(kMaxLaunchArgs));
    }
    for (int slot : frees_) written_[slot] = false;
    for (int slot : writes_) written_[slot] = true;
  }

  // a field of `kind`: a list of items (each checked as its item kind), or one value
  void field(const std::string& name, Kind kind, PyObject* x) {
    Kind item;
    switch (kind) {
      case K_SLOT_OUTS: item = K_SLOT_OUTS; break;
      case K_SLOT_LIST_READ: item = K_SLOT_READ; break;
      case K_OPTIONAL_SLOT_LIST_READ: item = K_OPTIONAL_SLOT_LIST_READ; break;
      case K_POSITIONS: item = K_INDEX; break;
      case K_SIZES: item = K_SIZES; break;
      case K_STRIDES: item = K_INT; break;
      case K_DIMS: item = K_INDEX; break;
      case K_ARGS: item = K_ARGS; break;
      case K_ITEMS: item = K_ITEMS; break;
      default:
        one(name, kind, x);
        return;
    }
    if (!PyList_Check(x) && !PyTuple_Check(x)) {
      fail(name + " is a " + type_name(x) + ", not a list");
    }
    py::sequence seq = py::reinterpret_borrow<py::sequence>(x);
    for (size_t i = 0; i < seq.size(); ++i) one(name, item, py::object(seq[i]).ptr());
  }

  // one value of field `name` (one item of a list field, by its item kind)
  void one(const std::string& name, Kind kind, PyObject* x) {
    switch (kind) {
      case K_SLOT_WRITE:
        writes_.push_back(slot(x, name));
        return;
      case K_SLOT_OUTS:  // an item of the list: a slot written, or -1
        if (is_minus_one(x)) return;
        writes_.push_back(slot(x, name));
        return;
      case K_OPTIONAL_SLOT_LIST_READ:  // an item of the list: a slot read, or -1 (None)
        if (is_minus_one(x)) return;
        read(x, name);
        return;
      case K_SLOT_READ:
        read(x, name);
        return;
      case K_SLOT_FREE:
        frees_.push_back(read(x, name));
        return;
      case K_INDEX:
        integer(x, name, 0, INT_MAX);
        return;
      case K_SIZES:  // an item of the list: a size
        integer(x, name, 0, LLONG_MAX);
        return;
      case K_INT:
        integer(x, name, LLONG_MIN, LLONG_MAX);
        return;
      case K_ADDRESS:
        pointer(x, name, 1);
        return;
      case K_STATE:
        pointer(x, name, 0);
        return;
      case K_BOOL:
        if (!PyBool_Check(x)) fail(name + " is a " + type_name(x) + ", not a bool");
        return;
      case K_DTYPE:
        if (!THPDtype_Check(x)) fail(name + " is a " + type_name(x) + ", not a dtype");
        return;
      case K_DEVICE:
        device(x, name);
        return;
      case K_TENSOR:
        if (!THPVariable_Check(x)) fail(name + " is a " + type_name(x) + ", not a tensor");
        return;
      case K_NAME:
        if (!PyUnicode_Check(x)) fail(name + " is a " + type_name(x) + ", not a name");
        return;
      case K_FUNCTION:
        if (!PyCallable_Check(x)) fail(name + " is a " + type_name(x) + ", not a function");
        return;
      case K_ERROR:
        if (x != Py_None && !PyCallable_Check(x)) {
          fail(name + " is a " + type_name(x) + ", not an error");
        }
        return;
      case K_VALUE:
        return;
      case K_NUMBER:
        if (!PyLong_Check(x) && !PyFloat_Check(x)) {
          fail(name + " is a " + type_name(x) + ", not a number");
        }
        return;
      case K_ARGS:
        variant(name, x, kArgs, std::size(kArgs));
        return;
      case K_ITEMS:
        variant(name, x, kItems, std::size(kItems));
        return;
      default:
        fail(name + ": not a field of the runner's form");
    }
  }

  // a tagged tuple of an ARGS or ITEMS list: (tag, fields...)
  void variant(const std::string& name, PyObject* x, const Layout* layouts, size_t count) {
    if (!PyTuple_Check(x) || PyTuple_GET_SIZE(x) == 0) {
      fail(name + ": a " + type_name(x) + ", not a tuple, its tag first");
    }
    const Layout& layout = layouts[tag(PyTuple_GET_ITEM(x, 0), name + " tag", count)];
    if (PyTuple_GET_SIZE(x) - 1 != layout.n) {
      fail(name + ": " + layout.name + " takes " + std::to_string(layout.n) + " fields, not " +
           std::to_string(PyTuple_GET_SIZE(x) - 1));
    }
    for (int k = 0; k < layout.n; ++k) {
      field(name + " " + layout.fields[k], layout.kinds[k], PyTuple_GET_ITEM(x, k + 1));
    }
  }

  int64_t tag(PyObject* x, const std::string& name, size_t count) {
    if (!PyLong_CheckExact(x)) fail(name + " is a " + type_name(x) + ", not an int");
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow != 0 || v < 0 || v >= static_cast<long long>(count)) fail("unknown " + name);
    return v;
  }

  // an exact int (not a bool) in [low, high]
  int64_t integer(PyObject* x, const std::string& name, long long low, long long high) {
    if (!PyLong_CheckExact(x)) fail(name + " is a " + type_name(x) + ", not an int");
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (overflow != 0 || v < low || v > high) {
      fail(name + ": " + (overflow != 0 ? std::string("an int over 64 bits") : std::to_string(v)) +
           " out of range [" + std::to_string(low) + ", " + std::to_string(high) + "]");
    }
    return v;
  }

  void pointer(PyObject* x, const std::string& name, unsigned long long low) {
    if (!PyLong_CheckExact(x)) fail(name + " is a " + type_name(x) + ", not an int");
    const unsigned long long v = PyLong_AsUnsignedLongLong(x);
    if (PyErr_Occurred() != nullptr) {
      PyErr_Clear();
      fail(name + ": not a pointer (negative, or over 64 bits)");
    }
    if (v < low) fail(name + ": a null pointer");
  }

  void device(PyObject* x, const std::string& name) {
    if (!PyUnicode_Check(x)) fail(name + " is a " + type_name(x) + ", not a device");
    try {
      c10::Device parsed(py::handle(x).cast<std::string>());
      (void)parsed;
    } catch (const c10::Error&) {
      fail(name + ": not a device: " + py::handle(x).cast<std::string>());
    }
  }

  static bool is_minus_one(PyObject* x) {
    if (!PyLong_CheckExact(x)) return false;
    int overflow = 0;
    return PyLong_AsLongLongAndOverflow(x, &overflow) == -1 && overflow == 0;
  }

  int slot(PyObject* x, const std::string& name) {
    return static_cast<int>(integer(x, name, 0, static_cast<long long>(n_slots_) - 1));
  }

  int read(PyObject* x, const std::string& name) {
    const int s = slot(x, name);
    if (!written_[s]) fail(name + ": reads slot " + std::to_string(s) + " unwritten");
    return s;
  }

  int n_slots_;
  std::vector<bool> written_;
  std::vector<int> writes_, frees_;
  size_t step_ = 0;
  int op_ = -1;
};

class Program {
 public:
  // `version`: the ISA version the program was written for (core/isa.py's VERSION)
  Program(const py::list& steps, int n_slots, py::object mark_writes, int version)
      : n_slots_(n_slots), mark_writes_(std::move(mark_writes)) {
    if (version != kVersion) {
      throw std::invalid_argument("sdk runner: the program was written for ISA version " +
                                  std::to_string(version) + ", this runner runs version " +
                                  std::to_string(kVersion) + " (core/isa.py)");
    }
    Verifier(n_slots).program(steps);  // before any step is decoded: see Verifier
    for (size_t i = 0; i < steps.size(); ++i) {
      py::tuple t = steps[i].cast<py::tuple>();
      try {
        steps_.push_back(decode(t));
      } catch (const std::exception& e) {
        // what the decoder refuses past the verifier (an op's schema: its name, the count
        // of its arguments, a constant its type does not take), as the verifier's refusals
        throw std::invalid_argument("sdk runner: step " + std::to_string(i) + " (" +
                                    kOps[t[0].cast<int>()].name + "): " + e.what());
      }
    }
  }

  // The per-call check of what the program assumes of its inputs (core/guards.py's
  // make_check, which writes the same in Python): one entry per input,
  // (mode, sizes, strides, offset, device, aligned); mode 0: nothing (Dynamo's guards hold
  // it), 1: sizes (an input handed whole to library calls), 2: sizes, strides, storage
  // offset and device; aligned: the data pointer a multiple of 16 bytes.
  void set_guard(const py::list& specs) {

    std::vector<Guard> guards;
    for (const auto& h : specs) {
      py::tuple t = h.cast<py::tuple>();
      Guard g;
      g.mode = t[0].cast<int>();
      g.sizes = ints(t[1]);
      g.strides = ints(t[2]);
      g.offset = t[3].cast<int64_t>();
      g.device = c10::Device(t[4].cast<std::string>());
      g.aligned = t[5].cast<bool>();
      guards.push_back(std::move(g));
    }
    guards_ = std::move(guards);
    guarded_ = true;
  }

  // Inputs that break the guard run nothing: the call answers NotImplemented and the caller
  // (core/guards.py's Specializing) compiles a variant for them.
  py::object run(const py::sequence& args) {
    std::vector<at::Tensor> in;
    in.reserve(args.size());
    for (const auto& a : args) {  // (a list from AOTAutograd, a tuple from a wrapper)
      if (!THPVariable_Check(a.ptr())) {
        throw std::invalid_argument("sdk runner: a graph input is not a tensor");
      }
      in.push_back(THPVariable_Unpack(a.ptr()));
    }
    if (guarded_ && !fits(in)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    std::vector<at::Tensor> slots(n_slots_);
    const Step* ret = nullptr;
    const Step* written = nullptr;  // the last WRITES passed: the inputs written by then
    size_t i = 0;
    try {
      py::gil_scoped_release nogil;
      for (; i < steps_.size(); ++i) {
        const Step& s = steps_[i];
        if (s.op == RETURN) {
          ret = &s;
          break;
        }
        if (s.op == WRITES) {
          written = &s;
          continue;
        }
        if (timed_) {
          auto t0 = std::chrono::steady_clock::now();
          execute(s, in, slots);
          step_ns_[i] += std::chrono::duration<double, std::nano>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
          continue;
        }
        execute(s, in, slots);
      }
    } catch (py::error_already_set&) {
      if (written != nullptr) mark_writes_(py::cast(written->dims));
      throw;
    } catch (...) {
      if (written != nullptr) mark_writes_(py::cast(written->dims));
      throw;
    }
    if (ret == nullptr) throw std::logic_error("sdk runner: the program has no RETURN");
    py::tuple out(ret->items.size());
    for (size_t k = 0; k < ret->items.size(); ++k) {
      auto [slot, c] = ret->items[k];
      if (slot >= 0) {
        const at::Tensor& t = slots[slot];
        out[k] = t.defined() ? py::reinterpret_steal<py::object>(THPVariable_Wrap(t)) : py::none();
      } else {
        out[k] = ret->constants[c];
      }
    }
    return out;
  }

  size_t size() const { return steps_.size(); }

  // Host time of each step, summed over the calls since timing was switched on
  // (benchmarks/runner_steps.py): where a program's host time goes, step by step.
  void set_timed(bool on) {
    timed_ = on;
    step_ns_.assign(steps_.size(), 0.0);
  }
  std::vector<double> step_ns() const { return step_ns_; }

 private:
  struct Guard {
    int mode = 0;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
    c10::Device device{c10::kCPU};
    bool aligned = false;
  };

  bool fits(const std::vector<at::Tensor>& in) const {
    if (in.size() != guards_.size()) return false;
    for (size_t i = 0; i < in.size(); ++i) {
      const Guard& g = guards_[i];
      const at::Tensor& t = in[i];
      if (g.mode >= 1 && t.sizes() != at::IntArrayRef(g.sizes)) return false;
      if (g.mode == 2 && (t.strides() != at::IntArrayRef(g.strides) ||
                          t.storage_offset() != g.offset || t.device() != g.device)) {
        return false;
      }
      if (g.aligned && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 != 0) return false;
    }
    return true;
  }

  // One step of a verified program, decoded: its fields by their positions in the layout.
  static Step decode(const py::tuple& t) {
    Step s;
    s.op = t[0].cast<int>();
    switch (s.op) {
      case INPUT:
        s.dst = t[F::INPUT::dst].cast<int>();
        s.src = t[F::INPUT::index].cast<int>();
        break;
      case CONST:
        s.dst = t[F::CONST::dst].cast<int>();
        s.tensor = THPVariable_Unpack(t[F::CONST::tensor].ptr());
        break;
      case ALIAS:
        s.dst = t[F::ALIAS::dst].cast<int>();
        s.src = t[F::ALIAS::src].cast<int>();
        break;
      case EMPTY: {
        s.dst = t[F::EMPTY::dst].cast<int>();
        s.sizes = ints(t[F::EMPTY::sizes]);
        s.strides = ints(t[F::EMPTY::strides]);
        auto dtype = torch::python::detail::py_object_to_dtype(t[F::EMPTY::dtype]);
        // (parsed here: TensorOptions::device is noexcept, a c10::Error in it terminates)
        const c10::Device device(t[F::EMPTY::device].cast<std::string>());
        s.options = at::TensorOptions().dtype(dtype).device(device);
        // the device's allocator straight (what torch's empty_strided_cuda does after its
        // device guard, and Inductor's _empty_strided_<device>): no dispatch, about 2 us
        // less a buffer on an H100 host; taken where the device is the current one
        const c10::Device dev = s.options.device();
        if (c10::impl::hasDeviceGuardImpl(dev.type())) {
          try {
            s.allocator = c10::GetAllocator(dev.type());
          } catch (const c10::Error&) {
            s.allocator = nullptr;  // (no allocator registered: the dispatcher's path)
          }
        }
        s.keys = c10::DispatchKeySet(c10::computeDispatchKey(dtype, at::kStrided, dev));
        s.scalar_type = dtype;
        break;
      }
      case VIEW:
        s.dst = t[F::VIEW::dst].cast<int>();
        s.src = t[F::VIEW::src].cast<int>();
        s.sizes = ints(t[F::VIEW::sizes]);
        s.strides = ints(t[F::VIEW::strides]);
        s.offset = t[F::VIEW::offset].cast<int64_t>();
        break;
      case AS_STRIDED:
        s.dst = t[F::AS_STRIDED::dst].cast<int>();
        s.src = t[F::AS_STRIDED::src].cast<int>();
        s.sizes = ints(t[F::AS_STRIDED::sizes]);
        s.strides = ints(t[F::AS_STRIDED::strides]);
        s.offset = t[F::AS_STRIDED::offset].cast<int64_t>();
        s.relative = t[F::AS_STRIDED::relative].cast<bool>();
        break;
      case LAUNCH:
        s.fn = reinterpret_cast<void*>(t[F::LAUNCH::address].cast<std::uintptr_t>());
        s.slots = t[F::LAUNCH::slots].cast<std::vector<int>>();
        s.sizes = ints(t[F::LAUNCH::sizes]);
        s.checked = t[F::LAUNCH::checked].cast<bool>();
        s.error = py::reinterpret_borrow<py::object>(t[F::LAUNCH::error]);
        s.state = reinterpret_cast<void*>(t[F::LAUNCH::state].cast<std::uintptr_t>());
        s.python = py::reinterpret_borrow<py::object>(t[F::LAUNCH::function]);
        break;
      case LAUNCH_PY:
        s.python = py::reinterpret_borrow<py::object>(t[F::LAUNCH_PY::function]);
        s.slots = t[F::LAUNCH_PY::slots].cast<std::vector<int>>();
        s.sizes = ints(t[F::LAUNCH_PY::sizes]);
        break;
      case CALL:
        build_call(s, t);
        break;
      case RESTRIDE:
        s.dst = t[F::RESTRIDE::slot].cast<int>();
        s.dims = ints(t[F::RESTRIDE::dims]);
        s.strides = ints(t[F::RESTRIDE::strides]);
        break;
      case FREE:
        s.dst = t[F::FREE::slot].cast<int>();
        break;
      case WRITES:
        s.dims = ints(t[F::WRITES::positions]);  // the graph inputs written by now
        break;
      case RETURN:
        for (const auto& item : t[F::RETURN::items]) {
          py::tuple it = item.cast<py::tuple>();
          if (it[0].cast<int>() == ITEM_SLOT) {
            s.items.emplace_back(it[1].cast<int>(), -1);
          } else {
            s.items.emplace_back(-1, static_cast<int>(s.constants.size()));
            s.constants.push_back(py::reinterpret_borrow<py::object>(it[1]));
          }
        }
        break;
      default:
        throw std::invalid_argument("unknown opcode " + std::to_string(s.op));
    }
    return s;
  }

  static void build_call(Step& s, const py::tuple& t) {
    auto name = t[F::CALL::name].cast<std::string>();
    auto overload = t[F::CALL::overload].cast<std::string>();
    s.handle = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
    const auto& schema = s.handle->schema();
    py::sequence args = t[F::CALL::args].cast<py::sequence>();
    if (args.size() != schema.arguments().size()) {
      throw std::invalid_argument(name + "." + overload + " takes " +
                                  std::to_string(schema.arguments().size()) +
                                  " arguments, the program gives " + std::to_string(args.size()));
    }
    for (size_t k = 0; k < args.size(); ++k) {
      py::tuple a = args[k].cast<py::tuple>();
      Arg arg;
      arg.kind = a[0].cast<int>();
      const auto& formal = schema.arguments()[k];
      switch (arg.kind) {
        case SLOT:
          arg.slot = a[1].cast<int>();
          break;
        case VALUE:
          arg.value = torch::jit::toIValue(a[1], formal.type());
          break;
        case NUMBER: {
          // a Python number where the schema takes a Tensor: a wrapped-number tensor, as
          // torch's Python argument parser makes (it does not take part in type promotion)
          at::Tensor w = c10::scalar_to_tensor(torch::jit::toIValue(a[1], c10::NumberType::get()).toScalar());
          w.unsafeGetTensorImpl()->set_wrapped_number(true);
          arg.value = w;
          arg.kind = VALUE;
          break;
        }
        case TENSORS:
        case OPTIONAL_TENSORS:
          arg.slots = a[1].cast<std::vector<int>>();
          break;
        case DEFAULT:
          if (!formal.default_value()) {
            throw std::invalid_argument(name + " argument " + formal.name() +
                                        " has no default");
          }
          arg.value = *formal.default_value();
          arg.kind = VALUE;
          break;
        default:
          throw std::invalid_argument("unknown argument kind");
      }
      s.args.push_back(std::move(arg));
    }
    s.outs = t[F::CALL::outs].cast<std::vector<int>>();
    s.relative = t[F::CALL::multi].cast<bool>();  // multi: the op returns several values
  }

  void execute(const Step& s, const std::vector<at::Tensor>& in, std::vector<at::Tensor>& slots) {
    switch (s.op) {
      case INPUT:
        slots[s.dst] = in.at(s.src);
        return;
      case CONST:
        slots[s.dst] = s.tensor;
        return;
      case ALIAS:
        slots[s.dst] = slots[s.src];
        return;
      case EMPTY: {
        const c10::Device dev = s.options.device();
        if (s.allocator != nullptr &&
            (dev.is_cpu() || !dev.has_index() ||
             c10::impl::getDeviceGuardImpl(dev.type())->getDevice() == dev)) {
          slots[s.dst] = at::detail::empty_strided_generic(s.sizes, s.strides, s.allocator,
                                                           s.keys, s.scalar_type);
        } else {
          slots[s.dst] = at::empty_strided(s.sizes, s.strides, s.options);
        }
        return;
      }
      case VIEW:
        slots[s.dst] = reinterpret(slots[s.src], s.sizes, s.strides, s.offset);
        return;
      case AS_STRIDED: {
        const at::Tensor& src = slots[s.src];
        int64_t offset = s.relative ? src.storage_offset() + s.offset : s.offset;
        slots[s.dst] = at::as_strided(src, s.sizes, s.strides, offset);
        return;
      }
      case LAUNCH: {
        I a[kMaxLaunchArgs];
        size_t n = 0;
        for (int slot : s.slots) a[n++] = reinterpret_cast<I>(slots[slot].data_ptr());
        for (int64_t v : s.sizes) a[n++] = static_cast<I>(v);
        int64_t failed;
        if (s.state != nullptr) {
          // f(state, stream, args, nargs): the current stream of the first tensor's device
          void* stream = nullptr;
          if (!s.slots.empty()) {
            const c10::Device device = slots[s.slots[0]].device();
            if (!device.is_cpu()) {
              stream = c10::impl::getDeviceGuardImpl(device.type())->getStream(device).native_handle();
            }
          }
          using StateFn = int64_t (*)(void*, void*, const I*, int64_t);
          failed = reinterpret_cast<StateFn>(s.fn)(s.state, stream, a, static_cast<int64_t>(n));
        } else {
          failed = call_c(s.fn, a, n, s.checked);
        }
        if (failed == kNotNative) {
          launch_python(s, slots);
          return;
        }
        if (failed != 0) {
          py::gil_scoped_acquire gil;
          if (s.error.is_none()) {
            throw std::runtime_error("sdk runner: a native kernel launch failed (status " +
                                     std::to_string(failed) + ")");
          }
          py::object exc = s.error();
          PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
          throw py::error_already_set();
        }
        return;
      }
      case CALL: {
        torch::jit::Stack stack;
        stack.reserve(s.args.size());
        for (const Arg& a : s.args) {
          switch (a.kind) {
            case SLOT: {
              const at::Tensor& t = slots[a.slot];
              if (t.defined()) {
                stack.emplace_back(t);
              } else {
                stack.emplace_back();
              }
              break;
            }
            case VALUE:
              stack.push_back(a.value);
              break;
            case TENSORS: {
              c10::List<at::Tensor> list;
              list.reserve(a.slots.size());
              for (int slot : a.slots) list.push_back(slots[slot]);
              stack.emplace_back(std::move(list));
              break;
            }
            default: {
              c10::List<std::optional<at::Tensor>> list;
              list.reserve(a.slots.size());
              for (int slot : a.slots) {
                list.push_back(slot < 0 ? std::optional<at::Tensor>() : slots[slot]);
              }
              stack.emplace_back(std::move(list));
            }
          }
        }
        s.handle->callBoxed(stack);
        if (s.relative && stack.size() == 1 && stack[0].isTensorList()) {
          auto list = stack[0].toTensorVector();
          for (size_t k = 0; k < s.outs.size() && k < list.size(); ++k) {
            if (s.outs[k] >= 0) slots[s.outs[k]] = list[k];
          }
          return;
        }
        for (size_t k = 0; k < s.outs.size() && k < stack.size(); ++k) {
          if (s.outs[k] < 0) continue;
          slots[s.outs[k]] = stack[k].isTensor() ? stack[k].toTensor() : at::Tensor();
        }
        return;
      }
      case RESTRIDE: {
        at::Tensor& t = slots[s.dst];
        if (!t.defined()) return;
        for (size_t k = 0; k < s.dims.size(); ++k) {
          int64_t d = s.dims[k];
          if (t.stride(d) != s.strides[d]) {
            at::Tensor out = at::empty_strided(t.sizes(), s.strides, t.options());
            out.copy_(t);
            t = out;
            return;
          }
        }
        return;
      }
      case FREE:
        slots[s.dst] = at::Tensor();
        return;
      case LAUNCH_PY:
        launch_python(s, slots);
        return;
      default:
        throw std::logic_error("sdk runner: unexpected opcode " + std::to_string(s.op));
    }
  }

  static void launch_python(const Step& s, const std::vector<at::Tensor>& slots) {
    py::gil_scoped_acquire gil;
    py::tuple args(s.slots.size() + s.sizes.size());
    size_t k = 0;
    for (int slot : s.slots) {
      args[k++] = py::reinterpret_steal<py::object>(THPVariable_Wrap(slots[slot]));
    }
    for (int64_t v : s.sizes) args[k++] = py::int_(v);
    s.python(*args);
  }

  int n_slots_;
  py::object mark_writes_;
  std::vector<Step> steps_;
  std::vector<Guard> guards_;
  bool guarded_ = false;
  bool timed_ = false;
  std::vector<double> step_ns_;
};

}  // namespace

// ---- call_c: generated by core/native.py (one case per arity) ----
@CALL_C@
// (the cases are generated so that any arity up to the limit is a direct call)

PYBIND11_MODULE(SDK_RUNNER_MODULE, m) {
  m.doc() = "the SDK's native runner (core/runner.cpp)";
  // Called as the compiled program itself (`program(args)`): no Python frame around the call.
  // Attributes of its own (the per-call guard reads `layout_free`, `kernel_read`).
  auto run = [](Program& p, const py::sequence& args) -> py::object {
    try {
      return p.run(args);
    } catch (py::error_already_set&) {
      throw;
    } catch (...) {
      torch::translate_exception_to_python(std::current_exception());
      throw py::error_already_set();
    }
  };
  py::class_<Program>(m, "Program", py::dynamic_attr())
      .def(py::init<const py::list&, int, py::object, int>())
      .def("__len__", &Program::size)
      .def("guard", &Program::set_guard)
      .def("time_steps", &Program::set_timed)
      .def("step_ns", &Program::step_ns)
      .def("__call__", run)
      .def("run", run);
  m.attr("MAX_ARGS") = kMaxLaunchArgs;
  m.attr("ISA_VERSION") = kVersion;
}
