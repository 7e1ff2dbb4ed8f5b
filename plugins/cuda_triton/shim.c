/* cuda_triton's launch shim (plugins/cuda_triton/native.py builds and loads it): kernels
   launched with the CUDA driver's cuLaunchKernel, found with dlsym in libcuda.so.1, so no
   CUDA headers are needed. The marker NOT_NATIVE between at-signs is replaced by
   sdk.NativeEntry.NOT_NATIVE (-2) when it is built. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

typedef int (*launch_fn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void*, void**, void**);
typedef int (*context_fn)(void**);
typedef int (*module_load_fn)(void**, const void*);
typedef int (*get_function_fn)(void**, void*, const char*);
typedef int (*func_get_fn)(int*, int, void*);
typedef int (*func_set_fn)(void*, int, int);
typedef int (*cache_config_fn)(void*, int);
typedef int (*context_device_fn)(int*);
typedef int (*device_attribute_fn)(int*, int, int);
typedef int (*pointer_attribute_fn)(void*, int, unsigned long long);
typedef int (*device_get_fn)(int*, int);
typedef int (*primary_retain_fn)(void**, int);
typedef int (*set_context_fn)(void*);

struct sdk_triton_state {
  void* function;    /* CUfunction; NULL until loaded (from the image, or through Triton) */
  void* context;     /* the CUcontext the function belongs to */
  unsigned grid[3];
  unsigned threads;
  unsigned shared;
  int64_t extra;     /* NULL parameters after the kernel's own (scratch pointers) */
  const void* image; /* the kernel's cubin (its record), or NULL */
  const char* name;  /* the kernel's function in the image */
  int64_t status;    /* the image's load: 0 not tried, 1 loaded, else -(CUresult) or -1000-n */
  int64_t nargs;     /* the kernel's own parameters, when aligned is set */
  const unsigned char* aligned; /* per parameter: must be 16-byte aligned, or NULL */
  int64_t device;    /* the ordinal of the device the kernel was bound for, or -1 */
};

static launch_fn launch_kernel;
static context_fn current_context;
static module_load_fn module_load;
static get_function_fn get_function;
static func_get_fn func_get;
static func_set_fn func_set;
static cache_config_fn cache_config;
static context_device_fn context_device;
static device_attribute_fn device_attribute;
static pointer_attribute_fn pointer_attribute;
static device_get_fn device_get;
static primary_retain_fn primary_retain;
static set_context_fn set_context;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

int64_t sdk_triton_init(void) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) return 1;
  launch_kernel = (launch_fn)dlsym(lib, "cuLaunchKernel");
  current_context = (context_fn)dlsym(lib, "cuCtxGetCurrent");
  module_load = (module_load_fn)dlsym(lib, "cuModuleLoadData");
  get_function = (get_function_fn)dlsym(lib, "cuModuleGetFunction");
  func_get = (func_get_fn)dlsym(lib, "cuFuncGetAttribute");
  func_set = (func_set_fn)dlsym(lib, "cuFuncSetAttribute");
  cache_config = (cache_config_fn)dlsym(lib, "cuFuncSetCacheConfig");
  context_device = (context_device_fn)dlsym(lib, "cuCtxGetDevice");
  device_attribute = (device_attribute_fn)dlsym(lib, "cuDeviceGetAttribute");
  pointer_attribute = (pointer_attribute_fn)dlsym(lib, "cuPointerGetAttribute");
  device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
  primary_retain = (primary_retain_fn)dlsym(lib, "cuDevicePrimaryCtxRetain");
  set_context = (set_context_fn)dlsym(lib, "cuCtxSetCurrent");
  return launch_kernel == 0 || current_context == 0;
}

int64_t sdk_triton_context(void** out) { return current_context(out); }

/* CUDA's enums (cuda.h), and Triton's (its driver.c) */
#define FUNC_MAX_THREADS_PER_BLOCK 0
#define FUNC_SHARED_SIZE_BYTES 1
#define FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define FUNC_SHARED_MEMORY_MODE 17
#define SHARED_MEMORY_MODE_ALLOW_OVERSIZED 3
#define DEVICE_MAX_SHARED_PER_MULTIPROCESSOR 81
#define DEVICE_MAX_SHARED_PER_BLOCK_OPTIN 97
#define FUNC_CACHE_PREFER_SHARED 1

/* Triton's loadBinary: the module, its function, and shared memory over 48 KB opted in */
static int64_t load_image(struct sdk_triton_state* s, void* context) {
  void* module = 0;
  void* function = 0;
  int rc, max_threads = 0, device = 0, optin = 0;
  if (!module_load || !get_function || !func_get || !context_device || !device_attribute)
    return -1001;
  if ((rc = module_load(&module, s->image)) != 0) return -rc;
  if ((rc = get_function(&function, module, s->name)) != 0) return -rc;
  if ((rc = func_get(&max_threads, FUNC_MAX_THREADS_PER_BLOCK, function)) != 0) return -rc;
  if ((unsigned)max_threads < s->threads) return -1002;
  if (s->shared > 49152) {
    if ((rc = context_device(&device)) != 0) return -rc;
    if ((rc = device_attribute(&optin, DEVICE_MAX_SHARED_PER_BLOCK_OPTIN, device)) != 0)
      return -rc;
    if ((unsigned)optin < s->shared || !func_set) return -1003;
    if (func_set(function, FUNC_SHARED_MEMORY_MODE, SHARED_MEMORY_MODE_ALLOW_OVERSIZED) != 0) {
      int total = 0, fixed = 0;
      if (!cache_config || (rc = cache_config(function, FUNC_CACHE_PREFER_SHARED)) != 0)
        return rc ? -rc : -1003;
      if ((rc = device_attribute(&total, DEVICE_MAX_SHARED_PER_MULTIPROCESSOR, device)) != 0)
        return -rc;
      if ((rc = func_get(&fixed, FUNC_SHARED_SIZE_BYTES, function)) != 0) return -rc;
      if ((rc = func_set(function, FUNC_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - fixed)) != 0)
        return -rc;
    }
  }
  s->context = context;
  __atomic_store_n(&s->function, function, __ATOMIC_RELEASE); /* last: launchable now */
  return 1;
}

#define POINTER_DEVICE_ORDINAL 9

/* No context current on this thread (one CUDA's runtime has not used yet: autograd's
   backward thread at its first kernel): the primary context of the kernel's device made
   current, as Triton's loadBinary does, where an argument is memory of that device; else
   NULL, and nothing changed */
static void* primary_context(const struct sdk_triton_state* s, const intptr_t* args,
                             int64_t n) {
  int ordinal = -1, device = 0;
  void* context = 0;
  if (s->device < 0 || !pointer_attribute || !device_get || !primary_retain || !set_context)
    return 0;
  for (int64_t i = 0; i < n && ordinal < 0; ++i)
    if (pointer_attribute(&ordinal, POINTER_DEVICE_ORDINAL, (unsigned long long)args[i]) != 0)
      ordinal = -1;
  if (ordinal != s->device) return 0;
  if (device_get(&device, ordinal) != 0 || primary_retain(&context, device) != 0) return 0;
  if (context == 0 || set_context(context) != 0) return 0;
  return context;
}

/* 0 where the kernel can launch now on args (n pointers, then sizes) in the context current
   (made current from its device's primary context where none is: primary_context), its image
   loaded at the first call; else NOT_NATIVE, and nothing launched */
static int64_t prepare(struct sdk_triton_state* s, const intptr_t* args, int64_t n) {
  void* context = 0;
  if (n < 0 || n + s->extra > 128) return @NOT_NATIVE@;
  if (current_context(&context) != 0) return @NOT_NATIVE@;
  if (context == 0 && (context = primary_context(s, args, n)) == 0) return @NOT_NATIVE@;
  if (__atomic_load_n(&s->function, __ATOMIC_ACQUIRE) == 0) {
    if (s->image == 0) return @NOT_NATIVE@;
    pthread_mutex_lock(&load_lock);
    if (s->function == 0 && s->status == 0) s->status = load_image(s, context);
    pthread_mutex_unlock(&load_lock);
    if (__atomic_load_n(&s->function, __ATOMIC_ACQUIRE) == 0) return @NOT_NATIVE@;
  }
  if (context != s->context) return @NOT_NATIVE@;
  if (s->aligned) {
    if (n != s->nargs) return @NOT_NATIVE@;
    for (int64_t i = 0; i < n; ++i)
      if (s->aligned[i] && (args[i] & 15) != 0) return @NOT_NATIVE@;
  }
  return 0;
}

/* the launch of a kernel prepare() accepted for args: its own parameters, then its extra NULLs */
static int64_t fire(const struct sdk_triton_state* s, const unsigned* grid, void* stream,
                    const intptr_t* args, int64_t n) {
  intptr_t values[128];
  void* params[128];
  int64_t total = n + s->extra;
  for (int64_t i = 0; i < n; ++i) {
    values[i] = args[i];
    params[i] = &values[i];
  }
  for (int64_t i = n; i < total; ++i) {
    values[i] = 0;
    params[i] = &values[i];
  }
  return launch_kernel(s->function, grid[0], grid[1], grid[2], s->threads, 1, 1, s->shared,
                       stream, params, 0);
}

static int64_t launch_on(struct sdk_triton_state* s, const unsigned* grid, void* stream,
                         const intptr_t* args, int64_t n) {
  int64_t rc = prepare(s, args, n);
  return rc != 0 ? rc : fire(s, grid, stream, args, n);
}

int64_t sdk_triton_launch(struct sdk_triton_state* s, void* stream, const intptr_t* args,
                          int64_t n) {
  return launch_on(s, s->grid, stream, args, n);
}

/* ---- split reductions: a chain of kernels ----
   The kernels launch in order, each on the arguments then the chain's scratch buffers (their
   device pointers and the context they were allocated in, registered from Python once the
   buffers exist; published last). All or nothing: every kernel is prepared before the first
   launches, so NOT_NATIVE has launched none and the Python path launches the whole chain. */
#define CHAIN_KERNELS 8
#define CHAIN_SCRATCH 16

struct sdk_triton_chain {
  int64_t nkernels;
  struct sdk_triton_state* kernels[CHAIN_KERNELS];
  int64_t nscratch;
  intptr_t scratch[CHAIN_SCRATCH];
  void* context;   /* the CUcontext of the scratch buffers */
  int64_t ready;   /* the scratch is registered */
  int64_t launched; /* chains launched here (tests read it) */
};

int64_t sdk_triton_launch_chain(struct sdk_triton_chain* c, void* stream, const intptr_t* args,
                                int64_t n) {
  intptr_t all[128];
  int64_t k, rc, total;
  if (!__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE)) return @NOT_NATIVE@;
  total = n + c->nscratch;
  if (n < 0 || c->nscratch < 0 || c->nscratch > CHAIN_SCRATCH || total > 128) return @NOT_NATIVE@;
  if (c->nkernels <= 0 || c->nkernels > CHAIN_KERNELS) return @NOT_NATIVE@;
  for (k = 0; k < n; ++k) all[k] = args[k];
  for (k = 0; k < c->nscratch; ++k) all[n + k] = c->scratch[k];
  for (k = 0; k < c->nkernels; ++k) {
    if ((rc = prepare(c->kernels[k], all, total)) != 0) return rc;
    if (c->kernels[k]->context != c->context) return @NOT_NATIVE@;
  }
  for (k = 0; k < c->nkernels; ++k)
    if ((rc = fire(c->kernels[k], c->kernels[k]->grid, stream, all, total)) != 0) return rc;
  __atomic_fetch_add(&c->launched, 1, __ATOMIC_RELAXED);
  return 0;
}

/* ---- kernels of symbolic sizes ----
   Arguments: nptr pointers, then nsize sizes (int64). Per variant (0: the kernel, 1: its
   persistent alternative, taken where the program WHEN holds) the grid's three axes are
   programs over the sizes, and one state per specialization key Triton compiled (each size's
   divisibility by 16, and whether one needs 64 bits), filled from Python after Triton's
   launch of that key. A program: postfix words, OP_LIT and OP_ARG followed by their operand,
   up to OP_END. */
#define SYM_KEYS 8
#define SYM_CODE 512
#define SYM_DEPTH 32
enum { OP_END, OP_LIT, OP_ARG, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_MOD, OP_NEG, OP_LT,
       OP_LE, OP_GT, OP_GE, OP_EQ, OP_NE, OP_AND, OP_OR, OP_MIN, OP_MAX };
enum { PROG_GRID = 0, PROG_WHEN = 6 }; /* grid of variant v, axis a: PROG_GRID + 3 v + a */

struct sdk_triton_sym {
  int64_t nptr, nsize;
  int64_t start[7];              /* each program's first word in code, or -1 (none) */
  int64_t code[SYM_CODE];
  int64_t nkeys[2];              /* states filled per variant (published last) */
  int64_t keys[2][SYM_KEYS];
  struct sdk_triton_state states[2][SYM_KEYS];
  int64_t launched;              /* launches made here (tests read it) */
};

/* Python's // and % (rounded towards -inf); 0 where b is 0 or the result overflows */
static int floordiv(int64_t a, int64_t b, int64_t* out) {
  if (b == 0 || (b == -1 && a == INT64_MIN)) return 0;
  int64_t q = a / b;
  if (a % b != 0 && ((a < 0) != (b < 0))) --q;
  *out = q;
  return 1;
}

static int modulo(int64_t a, int64_t b, int64_t* out) {
  if (b == 0 || (b == -1 && a == INT64_MIN)) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  *out = r;
  return 1;
}

/* 1 and *out: the program's value; 0: it cannot be evaluated here (a division by zero, an
   overflow, a malformed program: the Python path evaluates it and raises) */
static int evaluate(const struct sdk_triton_sym* k, int64_t at, const int64_t* sizes,
                    int64_t* out) {
  int64_t stack[SYM_DEPTH];
  int64_t n = 0;
  if (at < 0 || at >= SYM_CODE) return 0;
  for (int64_t pc = at; pc < SYM_CODE;) {
    int64_t op = k->code[pc++], a, b, r;
    if (op == OP_END) {
      if (n != 1) return 0;
      *out = stack[0];
      return 1;
    }
    if (op == OP_LIT || op == OP_ARG) {
      if (pc >= SYM_CODE || n >= SYM_DEPTH) return 0;
      int64_t x = k->code[pc++];
      if (op == OP_ARG && (x < 0 || x >= k->nsize)) return 0;
      stack[n++] = op == OP_LIT ? x : sizes[x];
      continue;
    }
    if (op == OP_NEG) {
      if (n < 1 || stack[n - 1] == INT64_MIN) return 0;
      stack[n - 1] = -stack[n - 1];
      continue;
    }
    if (n < 2) return 0;
    b = stack[--n];
    a = stack[n - 1];
    switch (op) {
      case OP_ADD: if (__builtin_add_overflow(a, b, &r)) return 0; break;
      case OP_SUB: if (__builtin_sub_overflow(a, b, &r)) return 0; break;
      case OP_MUL: if (__builtin_mul_overflow(a, b, &r)) return 0; break;
      case OP_FLOORDIV: if (!floordiv(a, b, &r)) return 0; break;
      case OP_MOD: if (!modulo(a, b, &r)) return 0; break;
      case OP_LT: r = a < b; break;
      case OP_LE: r = a <= b; break;
      case OP_GT: r = a > b; break;
      case OP_GE: r = a >= b; break;
      case OP_EQ: r = a == b; break;
      case OP_NE: r = a != b; break;
      case OP_AND: r = a && b; break;
      case OP_OR: r = a || b; break;
      case OP_MIN: r = a < b ? a : b; break;
      case OP_MAX: r = a > b ? a : b; break;
      default: return 0;
    }
    stack[n - 1] = r;
  }
  return 0;
}

/* Triton's specialization of integer arguments: bit i, size i divisible by 16; bit nsize,
   a size that needs 64 bits (as the Python path's key) */
static int64_t spec_key(const int64_t* sizes, int64_t nsize) {
  int64_t key = 0, all = 0;
  for (int64_t i = 0; i < nsize; ++i) {
    if (sizes[i] % 16 == 0) key |= (int64_t)1 << i;
    all |= sizes[i];
  }
  if (all >> 31) key |= (int64_t)1 << nsize;
  return key;
}

/* The variant, grid and key of a launch with these sizes: 1, or 0 (the Python path) */
int64_t sdk_triton_sym_plan(const struct sdk_triton_sym* k, const int64_t* sizes,
                            int64_t* out) {
  int64_t variant = 0, when = 0;
  if (k->nsize < 0 || k->nsize > 62) return 0;
  if (k->start[PROG_WHEN] >= 0) {
    if (!evaluate(k, k->start[PROG_WHEN], sizes, &when)) return 0;
    variant = when != 0;
  }
  out[0] = variant;
  for (int a = 0; a < 3; ++a)
    if (!evaluate(k, k->start[PROG_GRID + 3 * variant + a], sizes, &out[1 + a])) return 0;
  out[4] = spec_key(sizes, k->nsize);
  return 1;
}

int64_t sdk_triton_launch_sym(struct sdk_triton_sym* k, void* stream, const intptr_t* args,
                              int64_t n) {
  int64_t plan[5];
  unsigned grid[3];
  if (n != k->nptr + k->nsize) return @NOT_NATIVE@;
  if (!sdk_triton_sym_plan(k, (const int64_t*)(args + k->nptr), plan)) return @NOT_NATIVE@;
  if (plan[1] <= 0 || plan[2] <= 0 || plan[3] <= 0) return 0; /* nothing to launch */
  if (plan[1] > 2147483647 || plan[2] > 65535 || plan[3] > 65535) return @NOT_NATIVE@;
  for (int a = 0; a < 3; ++a) grid[a] = (unsigned)plan[1 + a];
  int64_t v = plan[0], m = __atomic_load_n(&k->nkeys[v], __ATOMIC_ACQUIRE);
  for (int64_t i = 0; i < m; ++i) {
    if (k->keys[v][i] != plan[4]) continue;
    int64_t rc = launch_on(&k->states[v][i], grid, stream, args, n);
    if (rc == 0) __atomic_fetch_add(&k->launched, 1, __ATOMIC_RELAXED);
    return rc;
  }
  return @NOT_NATIVE@;
}
