// The one interface between the stack and a device (DESIGN.md §1). src/backend/cpu and
// src/backend/cuda implement it and plug themselves in at link time (cpu_backend(),
// gpu_backend() are defined there); nothing above core includes a backend. A backend owns:
//   - memory: allocate (freed through the Buffer's deleter), copies, fills;
//   - streams and events (CPU streams are the scheduler's worker threads: the CPU backend's
//     stream calls are no-ops);
//   - code: compile a translation (the translator's output for the backend's target) into a
//     module, and launch one of its functions from a backend-neutral LaunchDesc, which the kernel
//     layer's one argument binder (src/kernel/launch.h) builds for metal_kernel and library calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "alloy/array.h"
#include "core/blas.h"
#include "core/buffer.h"
#include "prelude/cuda/abi.h"

namespace alloy {

/// One [[buffer(n)]] argument of a launch (n = its position in LaunchDesc::args).
struct LaunchArg {
  enum class Kind : uint8_t {
    memory,  // memory of the launch's device
    bytes,   // host bytes the backend delivers with the launch (CUDA: in the launch's parameter
             // block, or a small device buffer when they do not fit)
    block,   // host bytes that must travel in the parameter block (the translation reads them
             // there: BindOptions::block_buffers); packed before `bytes` arguments
  };
  const void* data = nullptr;  // bytes: may be reused once launch() returns
  uint64_t nbytes = 0;
  Kind kind = Kind::memory;
};

/// One out-of-range access a robust-mode kernel reported (the access itself was suppressed).
struct OobRecord {
  uint32_t buffer = 0;
  int64_t index = 0;
  uint32_t thread[3] = {0, 0, 0};  // thread_position_in_grid
};

/// Everything a backend needs to launch one compiled function.
struct LaunchDesc {
  const void* function = nullptr;       // one of CompiledModule::functions
  uint32_t grid[3] = {1, 1, 1};         // threads per grid (Metal dispatchThreads)
  uint32_t threadgroup[3] = {1, 1, 1};  // threads per threadgroup as dispatched
  const LaunchArg* args = nullptr;
  uint32_t num_args = 0;
  uint64_t tg_param_bytes[8] = {};  // sizes of the [[threadgroup(n)]] parameters
  const char* label = "";           // the kernel, for messages
  /// Names [[buffer(n)]] in messages (the kernel's parameter name); null: by index. Used only
  /// while launch() runs.
  const std::function<std::string(uint32_t)>* buffer_names = nullptr;
  /// Robust mode: receives the kept out-of-range accesses and their total count (the launch
  /// then completes before launch() returns). Null: not a robust launch.
  std::vector<OobRecord>* oob = nullptr;
  uint64_t* oob_total = nullptr;
};

/// One entry of a translation, as the backend needs it to launch it.
struct CompileEntry {
  std::vector<int> param_buffers;  // CUDA: [[buffer(n)]] passed as entry parameters, in order
  int coarsen = 1;                 // CUDA: threadgroups one block runs along x
  bool fibers = false;             // CPU: groups run as one fiber per thread
  // CUDA: the layout of the entry's parameter block (prelude/cuda/abi.h), the translator's
  // msl::KernelEntry::cuda_block: what the entry declares and the backend packs.
  alloy_cuda_param_layout cuda_block = alloy_cuda_layout(0, 0, false, 0);
};

/// A translation to compile. Entry i is the function `alloy_entry_<i>` (CUDA) or
/// `alloy_group_<i>` / `alloy_thread_<i>` (CPU) of `code`.
struct CompileRequest {
  std::string label;      // kernel or library name, for messages
  std::string code;       // the translated source
  std::string filename;   // the name the compiler's diagnostics show for the user's text
  std::string math_mode;  // "safe", "relaxed" or "fast" (MLX's compile options)
  std::vector<CompileEntry> entries;
};

/// A compiled and loaded translation.
struct CompiledModule {
  std::shared_ptr<void> module;        // keeps the code loaded
  std::vector<const void*> functions;  // per entry; valid while `module` lives
  /// Empty, or work that makes faster code for the same functions (CUDA: a quick first compile
  /// of coarsened entries, the full one here) and switches `functions` to it when done; the
  /// caller runs it once, on a background thread. Launches meanwhile use the first code (same
  /// results). It keeps what it needs alive and reports nothing (failure keeps the first code).
  std::function<void()> refine;
};

/// A memory range of a recorded launch sequence that changes from replay to replay (compile's
/// inputs and outputs).
struct ExternalRange {
  const void* ptr = nullptr;
  size_t nbytes = 0;
};

/// Recorded launches that replay as one unit (CUDA graphs: docs/compile.md). Owns the memory
/// the launches used besides the external ranges. Replays are serialized on the device.
class LaunchGraph {
 public:
  virtual ~LaunchGraph() = default;
  /// Kernel launches in the graph.
  virtual int launches() const = 0;
  /// Enqueues the launches on the calling thread's current stream, with external range k at
  /// `ptrs[k]` (same size as recorded). Throws alloy::Error when the launch fails.
  virtual void launch(const void* const* ptrs, size_t count) = 0;
  /// Node parameter rewrites done so far (launches whose external pointers changed).
  virtual int64_t updates() const = 0;
  /// Whether some recorded launch takes a pointer into external range k.
  virtual bool uses(size_t external) const = 0;
};

/// A launch packed once (Backend::prepare) for launches that differ from it only in the
/// addresses of their memory arguments: a repeated kernel call's (docs/architecture.md, "The
/// prepared launch"). Owned by the caller; valid while the launched function's module lives.
class PreparedLaunch {
 public:
  virtual ~PreparedLaunch() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device::Type type() const = 0;
  virtual std::string device_name() const = 0;

  // ---- memory (enqueued on the calling thread's current stream where the device has streams)
  /// Memory of the device (CUDA: the caching allocator, freed stream-ordered). Throws
  /// alloy::OutOfMemory.
  virtual std::shared_ptr<Buffer> allocate(size_t nbytes) = 0;
  /// Host -> device (the host memory may be reused at return).
  virtual void copy_to_device(void* dst, const void* src, size_t nbytes) = 0;
  /// Device -> host; waits for the device's work first (reading waits for the producers).
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes) = 0;
  /// Device -> device.
  virtual void copy_device(void* dst, const void* src, size_t nbytes) = 0;
  /// Strided copy of `shape` elements of `src_dtype` (element strides) into row-major `dst`,
  /// converted to `dst_dtype`.
  virtual void copy_strided(const void* src, const Shape& shape, const Strides& strides,
                            Dtype src_dtype, void* dst, Dtype dst_dtype) = 0;
  /// Fills nbytes with a repeated 8/16/32-bit pattern.
  virtual void fill(void* dst, size_t nbytes, uint32_t pattern, int pattern_bytes) = 0;
  /// Waits for every stream; rethrows errors of asynchronous work, naming the kernel.
  virtual void synchronize() = 0;

  // ---- streams and events. A stream handle is the backend's own (a CUstream); nullptr stands
  // for the backend's default stream. Enqueue calls go to the calling thread's current stream.
  /// A new stream, owned by the backend for the rest of the process.
  virtual void* create_stream() = 0;
  /// Makes an external stream (e.g. PyTorch's) usable as a stream of Alloy's.
  virtual void register_stream(void* stream) = 0;
  /// The stream enqueue calls of the calling thread go to (nullptr: the default stream).
  virtual void set_current_stream(void* stream) = 0;
  /// Waits for the work enqueued on `stream`; rethrows its errors as synchronize() does.
  virtual void synchronize_stream(void* stream) = 0;
  /// An event that completes when the work enqueued on `stream` so far has completed.
  virtual std::shared_ptr<void> record_event(void* stream) = 0;
  /// Makes later work on `stream` wait for `event` (on the device; the host does not block).
  virtual void stream_wait(void* stream, const std::shared_ptr<void>& event) = 0;
  /// Blocks the host until `event` completed.
  virtual void event_synchronize(const std::shared_ptr<void>& event) = 0;

  // ---- code
  /// Compiles (through the compile cache) and loads `request`. Throws alloy::CompileError whose
  /// raw_log() is the compiler's log (the kernel layer maps it to the user's lines).
  virtual CompiledModule compile(const CompileRequest& request) = 0;
  /// Enqueues one launch. Throws std::invalid_argument for a launch the function cannot take
  /// (threadgroup above its limit: MLX raises ValueError there), alloy::NotSupported for shapes
  /// the device cannot launch, alloy::Error for failures. A grid with no threads runs nothing.
  virtual void launch(const LaunchDesc& launch) = 0;
  /// `launch` packed once: its function, dims, threadgroup parameters and bytes/block
  /// arguments (constants of every later launch of it). nullptr when the backend does not
  /// prepare launches or not this one (robust mode, arguments that spill to device memory): the
  /// caller launches with launch(). Launches nothing; what launch() would reject is rejected at
  /// each launch_prepared().
  virtual std::unique_ptr<PreparedLaunch> prepare(const LaunchDesc& launch) {
    (void)launch;
    return nullptr;
  }
  /// Enqueues `prepared` with memory argument n at `data[n]` (entries of other arguments are not
  /// read), as launch() would the description it was prepared from with those addresses.
  /// False, enqueuing nothing, when it cannot now (a launch graph being recorded: the caller
  /// launches with launch()). Throws what launch() throws.
  virtual bool launch_prepared(const PreparedLaunch& prepared, const void* const* data) {
    (void)prepared;
    (void)data;
    return false;
  }
  /// Bytes of `bytes`/`block` arguments one launch carries without extra memory (CUDA: its
  /// parameter block); the translator's spill variant is used beyond it.
  virtual size_t by_value_capacity() const = 0;

  // ---- launch graphs (compile's replay; docs/compile.md)
  /// Starts recording the launches the calling thread enqueues from now on (they still run);
  /// false when the backend cannot (then nothing records).
  virtual bool begin_recording() { return false; }
  /// Ends the recording: a graph of what was launched, in which `external` ranges are parameters
  /// of each replay; nullptr with *why set when the recorded work cannot be replayed that way.
  virtual std::unique_ptr<LaunchGraph> end_recording(const std::vector<ExternalRange>& external,
                                                     std::string* why) {
    (void)external;
    if (why) *why = "the backend does not record launches";
    return nullptr;
  }

  // ---- BLAS: the vendor's library, loaded at run time (OpenBLAS on the CPU, cuBLAS on CUDA)
  /// Enqueues the product `g` (core/blas.h) like a launch. Throws alloy::NotSupported when the
  /// library cannot be loaded or does not take g.dtype (the CPU's: float32 and float64; CUDA's:
  /// float32, float16, bfloat16 with float accumulation).
  virtual void gemm(const blas::Gemm& g) = 0;
  /// Whether the BLAS library loads (and why not).
  virtual bool blas_available(std::string* why = nullptr) = 0;
  /// The BLAS library's file (on the CPU with OpenBLAS's configuration string), loading it now.
  /// Throws alloy::NotSupported when it cannot be loaded.
  virtual std::string blas_library() = 0;
};

/// GPUs a process can address: indices 0 .. kMaxGpus - 1.
constexpr int kMaxGpus = 64;

/// The CPU backend (always present).
Backend& cpu_backend();
/// The backend of GPU `index` (a CUDA ordinal of those CUDA_VISIBLE_DEVICES shows), created on
/// first use; nullptr when there is no such GPU (no driver, or index >= gpu_count()).
Backend* gpu_backend(int index = 0);
/// How many GPUs there are (0 without a driver).
int gpu_count();
/// Why gpu_backend(index) is nullptr ("" when it is not).
std::string gpu_unavailable_reason(int index);
/// The backend of `device`; throws std::invalid_argument when the device is not present.
Backend& backend(Device device);

/// Compiling for a GPU without one (CI builds every conformance kernel for sm_90 this way, and
/// `alloy translate --target ptx` shows the code): the image for `arch` ("sm_90"), a cubin, or
/// NUL-terminated PTX when `ptx`. Throws alloy::CompileError (raw_log() = the compiler's log),
/// alloy::Error when no GPU compiler is found.
std::vector<char> gpu_compile_offline(const CompileRequest& request, const std::string& arch,
                                      bool ptx);
/// True when a GPU compiler (NVRTC) can be loaded; otherwise `why` says what was looked for.
bool gpu_compiler_available(std::string* why = nullptr);

}  // namespace alloy
