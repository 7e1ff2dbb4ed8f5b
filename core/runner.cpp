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

// ATen, pybind11 and torch's Python types; not <torch/extension.h>: its C++ frontend
// (torch/all.h) is unused here, and parsing it took a quarter of the runner's build time
#include <ATen/ATen.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>

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

// A torch.dtype's scalar type (what torch::python::detail::py_object_to_dtype does, in the
// C++ frontend's header)
at::ScalarType dtype_of(py::handle h) {
  if (!THPDtype_Check(h.ptr())) {
    throw std::invalid_argument("sdk runner: expected a torch.dtype");
  }
  return reinterpret_cast<THPDtype*>(h.ptr())->scalar_type;
}

// A size, stride or offset list: int literals, some replaced at run time by registers'
// values (a graph of symbolic sizes). Decoded from operands: an int, or (r,) a register.
struct Ops {
  std::vector<int64_t> v;                 // the literals (0 where a register goes)
  std::vector<std::pair<size_t, int>> regs;  // (position, register)

  // the values for this call: the literals themselves where no register is read
  const std::vector<int64_t>& get(const std::vector<int64_t>& R, std::vector<int64_t>& tmp) const {
    if (regs.empty()) return v;
    tmp = v;
    for (const auto& [i, r] : regs) tmp[i] = R[r];
    return tmp;
  }
};

// one operand: a literal, or (r,) a register (reg set, literal 0)
std::pair<int64_t, int> operand(const py::handle& h) {
  if (PyTuple_Check(h.ptr())) return {0, py::reinterpret_borrow<py::tuple>(h)[0].cast<int>()};
  return {h.cast<int64_t>(), -1};
}

Ops operands(const py::handle& h) {
  Ops o;
  for (const auto& x : h) {
    auto [v, r] = operand(x);
    if (r >= 0) o.regs.emplace_back(o.v.size(), r);
    o.v.push_back(v);
  }
  return o;
}

struct Arg {
  int kind = SLOT;
  int slot = -1;  // SLOT; REG: the register
  bool wrap = false;  // REG where the schema takes a Tensor: pushed as a wrapped number
  c10::IValue value;
  std::vector<int> slots;
  Ops ints;       // INTS
  py::object py;  // CALL_PY's VALUE: the object as is
};

struct Spec {  // CALL_PY's output: any value, or a tensor of this layout, dtype and device
  bool tensor = false;
  Ops sizes, strides;
  py::object dtype, device;
};

struct Step {
  int op = 0;
  int dst = -1;  // a slot; INPUT_SIZE, INPUT_INT, EXPR: the register written
  int src = -1;  // a slot; INPUT_SIZE, INPUT_INT: the graph input's position
  Ops sizes, strides;
  std::vector<int64_t> dims;
  int64_t offset = 0;
  int offset_reg = -1;  // VIEW, AS_STRIDED: the register of the offset, or -1 (offset)
  int which = 0;        // INPUT_SIZE: 0 size(dims[0]), 1 stride(dims[0]), 2 storage offset
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
  // RETURN: (ITEM_SLOT, slot), (ITEM_VALUE, index into constants) or (ITEM_REG, register)
  std::vector<std::pair<int, int>> items;
  std::vector<py::object> constants;
  // EXPR: the postfix terms, (kind, literal or register); the stack depth they need
  std::vector<std::pair<int, int64_t>> terms;
  size_t depth = 0;
  // CALL_PY: the keyword names of the last arguments, the outputs' specs, who for errors
  py::object names, who;
  std::vector<Spec> specs;
};

using I = std::intptr_t;

// the deepest EXPR stack the runner evaluates (a size expression is a few terms deep)
constexpr size_t kMaxDepth = 64;

// One call's graph inputs: the tensors (undefined where an input is another value), and the
// ints among the others (a size Dynamo passes as a Python int), by position
struct Inputs {
  std::vector<at::Tensor> tensors;
  std::vector<std::optional<int64_t>> ints;  // empty where every input is a tensor

  const at::Tensor& tensor(int i) const {
    const at::Tensor& t = tensors.at(i);
    if (!t.defined()) {
      throw std::invalid_argument("sdk runner: graph input " + std::to_string(i) +
                                  " is not a tensor");
    }
    return t;
  }

  int64_t integer(int i) const {
    if (static_cast<size_t>(i) >= ints.size() || !ints[i]) {
      throw std::invalid_argument("sdk runner: graph input " + std::to_string(i) +
                                  " is not an int");
    }
    return *ints[i];
  }
};

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
  Verifier(int n_slots, int n_regs) : n_slots_(n_slots), n_regs_(n_regs) {
    if (n_slots < 0) {
      throw std::invalid_argument("sdk runner: invalid program: " + std::to_string(n_slots) +
                                  " slots");
    }
    if (n_regs < 0) {
      throw std::invalid_argument("sdk runner: invalid program: " + std::to_string(n_regs) +
                                  " registers");
    }
    written_.assign(n_slots, false);
    regs_written_.assign(n_regs, false);
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
    reg_writes_.clear();
    Py_ssize_t sizes = -1, strides = -1, capped = 0;
    std::vector<int64_t> dims;
    PyObject* terms = nullptr;
    for (int k = 0; k < layout.n; ++k) {
      PyObject* x = PyTuple_GET_ITEM(s, k + 1);
      field(layout.fields[k], layout.kinds[k], x);
      const Kind kind = layout.kinds[k];
      if (kind == K_SIZES) sizes = PySequence_Size(x);
      if (kind == K_STRIDES) strides = PySequence_Size(x);
      if (kind == K_DIMS) dims = ints(x);
      if (kind == K_TERMS) terms = x;
      if (layout.capped[k]) capped += PySequence_Size(x);
    }
    one_stride_per_size(sizes, strides);
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
    if (terms != nullptr) one_value_left(terms);
    for (int slot : frees_) written_[slot] = false;
    for (int slot : writes_) written_[slot] = true;
    for (int r : reg_writes_) regs_written_[r] = true;
  }

  void one_stride_per_size(Py_ssize_t sizes, Py_ssize_t strides) const {
    if (sizes >= 0 && strides >= 0 && sizes != strides) {
      fail(std::to_string(sizes) + " sizes but " + std::to_string(strides) + " strides");
    }
  }

  // EXPR's postfix terms (each checked): no term pops more than the stack holds, one left
  void one_value_left(PyObject* terms) const {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(terms);
    int64_t depth = 0;
    for (size_t k = 0; k < seq.size(); ++k) {
      const int pops = kTermPops[py::tuple(seq[k])[0].cast<int>()];
      if (depth < pops) {
        fail("terms: term " + std::to_string(k) + " pops " + std::to_string(pops) +
             " values of " + std::to_string(depth));
      }
      depth += 1 - pops;
    }
    if (depth != 1) fail("terms: " + std::to_string(depth) + " values left, not 1");
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
      case K_STRIDES: item = K_STRIDES; break;
      case K_NAMES: item = K_NAME; break;
      case K_TERMS: item = K_TERMS; break;
      case K_SPECS: item = K_SPECS; break;
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
      case K_REGISTER_WRITE:
        reg_writes_.push_back(static_cast<int>(integer(x, name, 0, n_regs_ - 1LL)));
        return;
      case K_REGISTER_READ:
        reg_read(x, name);
        return;
      case K_SIZES:  // an item of the list: a size operand
        if (is_register(x)) return reg_read(PyTuple_GET_ITEM(x, 0), name);
        integer(x, name, 0, LLONG_MAX);
        return;
      case K_STRIDES:  // an item of the list: an int operand
      case K_OFFSET:
        if (is_register(x)) return reg_read(PyTuple_GET_ITEM(x, 0), name);
        integer(x, name, LLONG_MIN, LLONG_MAX);
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
      case K_TERMS:
        variant(name, x, kTerms, std::size(kTerms));
        return;
      case K_SPECS:
        variant(name, x, kSpecs, std::size(kSpecs));
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
    Py_ssize_t sizes = -1, strides = -1;
    for (int k = 0; k < layout.n; ++k) {
      PyObject* y = PyTuple_GET_ITEM(x, k + 1);
      field(name + " " + layout.fields[k], layout.kinds[k], y);
      if (layout.kinds[k] == K_SIZES) sizes = PySequence_Size(y);
      if (layout.kinds[k] == K_STRIDES) strides = PySequence_Size(y);
    }
    one_stride_per_size(sizes, strides);
  }

  static bool is_register(PyObject* x) { return PyTuple_Check(x) && PyTuple_GET_SIZE(x) == 1; }

  void reg_read(PyObject* x, const std::string& name) {
    const int64_t r = integer(x, name, 0, n_regs_ - 1LL);
    if (!regs_written_[r]) fail(name + ": reads register " + std::to_string(r) + " unwritten");
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

  int n_slots_, n_regs_;
  std::vector<bool> written_, regs_written_;
  std::vector<int> writes_, frees_, reg_writes_;
  size_t step_ = 0;
  int op_ = -1;
};

class Program {
 public:
  // `version`: the ISA version the program was written for (core/isa.py's VERSION)
  // `n_regs`: the int64 registers the steps use (the sizes of a graph of symbolic sizes)
  Program(const py::list& steps, int n_slots, py::object mark_writes, int version, int n_regs)
      : n_slots_(n_slots), n_regs_(n_regs), mark_writes_(std::move(mark_writes)) {
    if (version != kVersion) {
      throw std::invalid_argument("sdk runner: the program was written for ISA version " +
                                  std::to_string(version) + ", this runner runs version " +
                                  std::to_string(kVersion) + " (core/isa.py)");
    }
    Verifier(n_slots, n_regs).program(steps);  // before any step is decoded: see Verifier
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
    Inputs in;
    in.tensors.reserve(args.size());
    for (const auto& a : args) {  // (a list from AOTAutograd, a tuple from a wrapper)
      PyObject* o = a.ptr();
      if (THPVariable_Check(o)) {
        in.tensors.push_back(THPVariable_Unpack(o));
        continue;
      }
      // another value (an int size, a float, None: the program reads only ints, by INPUT_INT)
      in.tensors.emplace_back();
      if (in.ints.empty()) in.ints.assign(args.size(), std::nullopt);
      if (PyLong_Check(o) && !PyBool_Check(o)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow == 0 && !(v == -1 && PyErr_Occurred())) {
          in.ints[in.tensors.size() - 1] = v;
        }
        PyErr_Clear();
      }
    }
    if (guarded_ && !fits(in.tensors)) {
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    }
    std::vector<at::Tensor> slots(n_slots_);
    std::vector<int64_t> regs(n_regs_);
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
          execute(s, in, slots, regs);
          step_ns_[i] += std::chrono::duration<double, std::nano>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
          continue;
        }
        execute(s, in, slots, regs);
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
      auto [kind, x] = ret->items[k];
      if (kind == ITEM_SLOT) {
        const at::Tensor& t = slots[x];
        out[k] = t.defined() ? py::reinterpret_steal<py::object>(THPVariable_Wrap(t)) : py::none();
      } else if (kind == ITEM_REG) {
        out[k] = py::int_(regs[x]);
      } else {
        out[k] = ret->constants[x];
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
        s.sizes = operands(t[F::EMPTY::sizes]);
        s.strides = operands(t[F::EMPTY::strides]);
        auto dtype = dtype_of(t[F::EMPTY::dtype]);
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
        s.sizes = operands(t[F::VIEW::sizes]);
        s.strides = operands(t[F::VIEW::strides]);
        std::tie(s.offset, s.offset_reg) = operand(t[F::VIEW::offset]);
        break;
      case AS_STRIDED:
        s.dst = t[F::AS_STRIDED::dst].cast<int>();
        s.src = t[F::AS_STRIDED::src].cast<int>();
        s.sizes = operands(t[F::AS_STRIDED::sizes]);
        s.strides = operands(t[F::AS_STRIDED::strides]);
        std::tie(s.offset, s.offset_reg) = operand(t[F::AS_STRIDED::offset]);
        s.relative = t[F::AS_STRIDED::relative].cast<bool>();
        break;
      case LAUNCH:
        s.fn = reinterpret_cast<void*>(t[F::LAUNCH::address].cast<std::uintptr_t>());
        s.slots = t[F::LAUNCH::slots].cast<std::vector<int>>();
        s.sizes = operands(t[F::LAUNCH::sizes]);
        s.checked = t[F::LAUNCH::checked].cast<bool>();
        s.error = py::reinterpret_borrow<py::object>(t[F::LAUNCH::error]);
        s.state = reinterpret_cast<void*>(t[F::LAUNCH::state].cast<std::uintptr_t>());
        s.python = py::reinterpret_borrow<py::object>(t[F::LAUNCH::function]);
        break;
      case LAUNCH_PY:
        s.python = py::reinterpret_borrow<py::object>(t[F::LAUNCH_PY::function]);
        s.slots = t[F::LAUNCH_PY::slots].cast<std::vector<int>>();
        s.sizes = operands(t[F::LAUNCH_PY::sizes]);
        break;
      case CALL:
        build_call(s, t);
        break;
      case RESTRIDE:
        s.dst = t[F::RESTRIDE::slot].cast<int>();
        s.dims = ints(t[F::RESTRIDE::dims]);
        s.strides = operands(t[F::RESTRIDE::strides]);
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
          const int kind = it[0].cast<int>();
          if (kind == ITEM_VALUE) {
            s.items.emplace_back(kind, static_cast<int>(s.constants.size()));
            s.constants.push_back(py::reinterpret_borrow<py::object>(it[1]));
          } else {
            s.items.emplace_back(kind, it[1].cast<int>());
          }
        }
        break;
      case INPUT_SIZE:
        s.dst = t[F::INPUT_SIZE::reg].cast<int>();
        s.src = t[F::INPUT_SIZE::index].cast<int>();
        s.which = t[F::INPUT_SIZE::which].cast<int>();
        if (s.which > 2) throw std::invalid_argument("which is 0, 1 or 2");
        s.dims = {t[F::INPUT_SIZE::dim].cast<int64_t>()};
        break;
      case INPUT_INT:
        s.dst = t[F::INPUT_INT::reg].cast<int>();
        s.src = t[F::INPUT_INT::index].cast<int>();
        break;
      case EXPR: {
        s.dst = t[F::EXPR::reg].cast<int>();
        int64_t depth = 0;
        for (const auto& item : t[F::EXPR::terms]) {
          py::tuple it = item.cast<py::tuple>();
          const int kind = it[0].cast<int>();
          s.terms.emplace_back(kind, it.size() > 1 ? it[1].cast<int64_t>() : 0);
          depth += 1 - kTermPops[kind];
          s.depth = std::max(s.depth, static_cast<size_t>(depth));
        }
        if (s.depth > kMaxDepth) throw std::invalid_argument("an expression over 64 deep");
        break;
      }
      case CALL_PY:
        build_call_py(s, t);
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
        case REG: {
          arg.slot = a[1].cast<int>();
          // a size where the schema takes a Tensor (x + x.size(1) run by ATen): a wrapped
          // number, as NUMBER's and as torch's Python argument parser makes
          c10::TypePtr type = formal.type();
          if (auto opt = type->castRaw<c10::OptionalType>()) type = opt->getElementType();
          arg.wrap = type->kind() == c10::TypeKind::TensorType;
          break;
        }
        case INTS:
          arg.ints = operands(a[1]);
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

  // CALL_PY: the plugin's function, its arguments as Python values (no schema converts
  // them), the keyword names of the last ones, the checker and the outputs' specs
  static void build_call_py(Step& s, const py::tuple& t) {
    s.python = py::reinterpret_borrow<py::object>(t[F::CALL_PY::function]);
    s.error = py::reinterpret_borrow<py::object>(t[F::CALL_PY::check]);
    s.who = py::reinterpret_borrow<py::object>(t[F::CALL_PY::who]);
    s.names = py::tuple(t[F::CALL_PY::names].cast<py::sequence>());
    for (const auto& h : t[F::CALL_PY::args]) {
      py::tuple a = h.cast<py::tuple>();
      Arg arg;
      arg.kind = a[0].cast<int>();
      switch (arg.kind) {
        case SLOT:
        case REG:
          arg.slot = a[1].cast<int>();
          break;
        case VALUE:
          arg.py = py::reinterpret_borrow<py::object>(a[1]);
          break;
        case TENSORS:
        case OPTIONAL_TENSORS:
          arg.slots = a[1].cast<std::vector<int>>();
          break;
        case INTS:
          arg.ints = operands(a[1]);
          break;
        default:
          throw std::invalid_argument("a plugin function's argument of kind " +
                                      std::to_string(arg.kind) + " (no schema to convert it)");
      }
      s.args.push_back(std::move(arg));
    }
    if (py::len(s.names) > s.args.size()) {
      throw std::invalid_argument("more keyword names than arguments");
    }
    for (const auto& h : t[F::CALL_PY::specs]) {
      py::tuple sp = h.cast<py::tuple>();
      Spec spec;
      spec.tensor = sp[0].cast<int>() == SPEC_TENSOR;
      if (spec.tensor) {
        spec.sizes = operands(sp[1]);
        spec.strides = operands(sp[2]);
        spec.dtype = sp[3];
        spec.device = sp[4];
      }
      s.specs.push_back(std::move(spec));
    }
    s.outs = t[F::CALL_PY::outs].cast<std::vector<int>>();
    s.relative = t[F::CALL_PY::multi].cast<bool>();  // multi: the function returns several
  }

  void execute(const Step& s, const Inputs& in, std::vector<at::Tensor>& slots,
               std::vector<int64_t>& regs) {
    std::vector<int64_t> size_tmp, stride_tmp;  // sizes and strides that read registers
    switch (s.op) {
      case INPUT:
        slots[s.dst] = in.tensor(s.src);
        return;
      case INPUT_SIZE: {
        const at::Tensor& t = in.tensor(s.src);
        regs[s.dst] = s.which == 0   ? t.size(s.dims[0])
                      : s.which == 1 ? t.stride(s.dims[0])
                                     : t.storage_offset();
        return;
      }
      case INPUT_INT:
        regs[s.dst] = in.integer(s.src);
        return;
      case EXPR:
        regs[s.dst] = evaluate(s, regs);
        return;
      case CALL_PY:
        call_python(s, slots, regs);
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
          slots[s.dst] = at::detail::empty_strided_generic(
              s.sizes.get(regs, size_tmp), s.strides.get(regs, stride_tmp), s.allocator, s.keys,
              s.scalar_type);
        } else {
          slots[s.dst] = at::empty_strided(s.sizes.get(regs, size_tmp),
                                           s.strides.get(regs, stride_tmp), s.options);
        }
        return;
      }
      case VIEW:
        slots[s.dst] = reinterpret(slots[s.src], s.sizes.get(regs, size_tmp),
                                   s.strides.get(regs, stride_tmp), offset_of(s, regs));
        return;
      case AS_STRIDED: {
        const at::Tensor& src = slots[s.src];
        const int64_t delta = offset_of(s, regs);
        int64_t offset = s.relative ? src.storage_offset() + delta : delta;
        slots[s.dst] = at::as_strided(src, s.sizes.get(regs, size_tmp), s.strides.get(regs, stride_tmp),
                                      offset);
        return;
      }
      case LAUNCH: {
        I a[kMaxLaunchArgs];
        size_t n = 0;
        for (int slot : s.slots) a[n++] = reinterpret_cast<I>(slots[slot].data_ptr());
        for (int64_t v : s.sizes.get(regs, size_tmp)) a[n++] = static_cast<I>(v);
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
          launch_python(s, slots, regs);
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
            case REG:
              if (a.wrap) {
                at::Tensor w = c10::scalar_to_tensor(c10::Scalar(regs[a.slot]));
                w.unsafeGetTensorImpl()->set_wrapped_number(true);
                stack.emplace_back(std::move(w));
              } else {
                stack.emplace_back(regs[a.slot]);
              }
              break;
            case INTS: {
              std::vector<int64_t> tmp;
              stack.emplace_back(c10::List<int64_t>(a.ints.get(regs, tmp)));
              break;
            }
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
        const std::vector<int64_t>& want = s.strides.get(regs, stride_tmp);
        for (size_t k = 0; k < s.dims.size(); ++k) {
          int64_t d = s.dims[k];
          if (t.stride(d) != want[d]) {
            at::Tensor out = at::empty_strided(t.sizes(), want, t.options());
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
        launch_python(s, slots, regs);
        return;
      default:
        throw std::logic_error("sdk runner: unexpected opcode " + std::to_string(s.op));
    }
  }

  static void launch_python(const Step& s, const std::vector<at::Tensor>& slots,
                            const std::vector<int64_t>& regs) {
    py::gil_scoped_acquire gil;
    std::vector<int64_t> tmp;
    const std::vector<int64_t>& sizes = s.sizes.get(regs, tmp);
    py::tuple args(s.slots.size() + sizes.size());
    size_t k = 0;
    for (int slot : s.slots) {
      args[k++] = py::reinterpret_steal<py::object>(THPVariable_Wrap(slots[slot]));
    }
    for (int64_t v : sizes) args[k++] = py::int_(v);
    s.python(*args);
  }

  static int64_t offset_of(const Step& s, const std::vector<int64_t>& regs) {
    return s.offset_reg >= 0 ? regs[s.offset_reg] : s.offset;
  }

  // EXPR: the postfix terms over a stack (its depth checked at decode); // and % as Python's
  static int64_t evaluate(const Step& s, const std::vector<int64_t>& regs) {
    int64_t stack[kMaxDepth];
    size_t n = 0;
    for (const auto& [kind, x] : s.terms) {
      if (kind == TERM_LIT) {
        stack[n++] = x;
        continue;
      }
      if (kind == TERM_REG) {
        stack[n++] = regs[x];
        continue;
      }
      if (kind == TERM_NEG) {
        stack[n - 1] = -stack[n - 1];
        continue;
      }
      const int64_t b = stack[--n], a = stack[n - 1];
      int64_t& out = stack[n - 1];
      switch (kind) {
        case TERM_ADD: out = a + b; break;
        case TERM_MUL: out = a * b; break;
        default: {  // TERM_FLOORDIV, TERM_MOD
          if (b == 0) {
            py::gil_scoped_acquire gil;
            PyErr_SetString(PyExc_ZeroDivisionError, "integer division or modulo by zero");
            throw py::error_already_set();
          }
          int64_t q = a / b, r = a % b;
          if (r != 0 && ((r < 0) != (b < 0))) {
            q -= 1;
            r += b;
          }
          out = kind == TERM_FLOORDIV ? q : r;
        }
      }
    }
    return stack[0];
  }

  // CALL_PY: the plugin's function called with its arguments, its result checked (the
  // wrapper's _vendor_result: its errors name the function and what it returned), the
  // checked tensors into the outputs' slots
  static void call_python(const Step& s, std::vector<at::Tensor>& slots,
                          const std::vector<int64_t>& regs) {
    py::gil_scoped_acquire gil;
    const size_t n_kw = py::len(s.names), n_pos = s.args.size() - n_kw;
    py::tuple pos(n_pos);
    py::dict kw;
    std::vector<int64_t> tmp;
    for (size_t k = 0; k < s.args.size(); ++k) {
      const Arg& a = s.args[k];
      py::object v;
      switch (a.kind) {
        case SLOT:
          v = wrap(slots[a.slot]);
          break;
        case REG:
          v = py::int_(regs[a.slot]);
          break;
        case VALUE:
          v = a.py;
          break;
        case INTS:
          v = py::cast(a.ints.get(regs, tmp));
          break;
        default: {  // TENSORS, OPTIONAL_TENSORS
          py::list list;
          for (int slot : a.slots) list.append(slot < 0 ? py::none() : wrap(slots[slot]));
          v = list;
        }
      }
      if (k < n_pos) {
        pos[k] = v;
      } else {
        kw[py::tuple(s.names)[k - n_pos]] = v;
      }
    }
    py::object result = s.python(*pos, **kw);
    py::tuple specs(s.specs.size());
    for (size_t k = 0; k < s.specs.size(); ++k) {
      const Spec& sp = s.specs[k];
      if (!sp.tensor) {
        specs[k] = py::none();
        continue;
      }
      std::vector<int64_t> a, b;
      specs[k] = py::make_tuple(py::tuple(py::cast(sp.sizes.get(regs, a))),
                                py::tuple(py::cast(sp.strides.get(regs, b))), sp.dtype, sp.device);
    }
    py::tuple checked = s.error(result, specs, py::bool_(s.relative), s.who);
    for (size_t k = 0; k < s.outs.size() && k < checked.size(); ++k) {
      if (s.outs[k] < 0) continue;
      PyObject* o = checked[k].ptr();
      slots[s.outs[k]] = THPVariable_Check(o) ? THPVariable_Unpack(o) : at::Tensor();
    }
  }

  static py::object wrap(const at::Tensor& t) {
    return t.defined() ? py::reinterpret_steal<py::object>(THPVariable_Wrap(t)) : py::none();
  }

  int n_slots_, n_regs_;
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
      .def(py::init<const py::list&, int, py::object, int, int>(), py::arg("steps"),
           py::arg("n_slots"), py::arg("mark_writes"), py::arg("version"), py::arg("n_regs") = 0)
      .def("__len__", &Program::size)
      .def("guard", &Program::set_guard)
      .def("time_steps", &Program::set_timed)
      .def("step_ns", &Program::step_ns)
      .def("__call__", run)
      .def("run", run);
  m.attr("MAX_ARGS") = kMaxLaunchArgs;
  m.attr("ISA_VERSION") = kVersion;
}
