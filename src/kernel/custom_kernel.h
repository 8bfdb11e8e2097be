// The CustomKernel primitive: one metal_kernel call in the graph.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "alloy/kernel.h"
#include "core/buffer.h"
#include "core/primitive.h"
#include "kernel/compile_pool.h"
#include "kernel/launch.h"
#include "kernel/program.h"
#include "msl/signature.h"
#include "prelude/cuda/abi.h"

namespace alloy::kernel {

/// One generated source of a metal_kernel (fixed dtypes, small-array/scalar kinds, template
/// arguments) and its programs, one per target / robust / CUDA shape-parameter layout. A call
/// whose program is not built yet starts its compile on the compile pool (start()); the
/// evaluation takes that compile's result, or runs it itself if no pool thread took it yet
/// (program()). Each program compiles once however many threads ask for it meanwhile.
struct KernelVariant {
  msl::GeneratedSource generated;
  SourceMap map;
  std::string math_mode;
  std::string spec_key;  // the spec's content key (the cache key's prefix)

  /// The program, compiled here if needed (or waiting for the compile start() queued, running
  /// queued compiles meanwhile). Throws what the compile threw (alloy::CompileError with the
  /// user's lines ...) to the evaluations that waited for it; a failed compile is then dropped:
  /// the next request compiles again.
  const Program& program(msl::Target target, bool robust, bool shapes_spill = false);
  using ProgramJob = CompileJob<std::shared_ptr<Program>>;
  /// Queues the program's compile on the compile pool (kernel/compile_pool.h, compile_soon)
  /// unless it is built or queued already; returns at once with the job (null when built). The
  /// caller keeps the job for as long as it may need the program: a queued compile that nobody
  /// holds any more (its call's outputs dropped unevaluated) is skipped. Errors wait for
  /// program().
  std::shared_ptr<ProgramJob> start(msl::Target target, bool robust, bool shapes_spill = false);
  /// Whether program(target, robust, shapes_spill) is built (one atomic load, no lock).
  bool built(msl::Target target, bool robust, bool shapes_spill = false) const {
    return ready[slot(target, robust, shapes_spill)].load(std::memory_order_acquire) != nullptr;
  }

 private:
  static constexpr int kSlots = 8;  // [target][robust][CUDA: shapes_spill]
  static int slot(msl::Target target, bool robust, bool shapes_spill);
  // A job compiling the program of slot(target, robust, shapes_spill) (captures `this`: variants
  // live in a process-wide cache that is never emptied).
  std::shared_ptr<ProgramJob> make_job(msl::Target target, bool robust, bool shapes_spill);

  std::mutex mu;
  std::shared_ptr<Program> programs[kSlots];  // built
  std::weak_ptr<ProgramJob> jobs[kSlots];     // compiling or queued (held by the calls' primitives)
  // programs[i] once built (never replaced while the variant lives): read without the lock by
  // every later call and evaluation.
  std::atomic<const Program*> ready[kSlots] = {};
};

/// How a metal_kernel binds the buffers of `generated`: outputs never alias (each is a fresh
/// allocation); the shape/strides/ndim buffers are in the CUDA launch block (`shapes_spill`: in
/// the block or in device memory, for calls whose shapes do not fit); small inputs either.
BindOptions call_bind_options(const msl::GeneratedSource& generated, bool robust,
                              bool shapes_spill = false);

/// Whether the shape/strides/ndim parameters of `inputs` fit in `capacity` bytes of a launch's
/// parameter block (Backend::by_value_capacity; 16-byte aligned each).
bool shape_params_fit(const std::vector<Array>& inputs, const std::vector<msl::Binding>& bindings,
                      size_t capacity);

/// Binds a metal_kernel call's arrays (evaluated; row-contiguous where the kernel needs it) and
/// their shape/strides/ndim parameters to `launch` for a launch on `device` (host arrays given
/// to a GPU kernel travel by value; `shapes_in_block`: the shape parameters must travel in the
/// launch's parameter block, as the non-spill CUDA variant reads them).
void bind_call(LaunchBuilder& launch, const KernelSpec& spec,
               const std::vector<msl::Binding>& bindings, const std::vector<Array>& inputs,
               const std::vector<Array>& outputs, Device device, bool shapes_in_block);

/// The generated source of a call (signature text MLX writes for these inputs).
msl::GeneratedSource call_generated_source(const MetalKernel& kernel,
                                           const std::vector<Array>& inputs,
                                           const KernelCall& call);

struct LaunchRecord;  // custom_kernel.cpp

/// One metal_kernel call in the graph: the kernel's specification, the call's dtypes and template
/// arguments, and its geometry as expressions of the input shapes. Pure: the compiled variants
/// live in a process-wide cache keyed by content (variant_for), looked up at evaluation on the
/// device the call runs on.
class CustomKernel : public Primitive {
 public:
  CustomKernel(std::shared_ptr<const KernelSpec> spec, std::vector<Dtype> output_dtypes,
               TemplateArgs template_args, DimsExpr grid, DimsExpr threadgroup,
               std::vector<std::vector<ShapeExpr>> output_shapes, std::optional<double> init_value,
               const std::string& spec_key = {},
               std::shared_ptr<KernelVariant> variant_hint = nullptr, std::string hint_key = "");
  const char* name() const override { return "CustomKernel"; }
  std::string label() const override { return "CustomKernel(" + spec_->name + ")"; }
  std::vector<Shape> output_shapes(const std::vector<Array>& inputs) const override;
  PrimitiveState state() const override;
  static std::shared_ptr<CustomKernel> from_state(const PrimitiveState& s);
  void eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  void eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) override;
  /// On the CPU: the variant of these inputs is the call's (no cache look-up), its program is
  /// built, and the launch runs on the calling thread (kInlineThreads).
  bool runs_inline(const std::vector<Array>& inputs) const override;
  /// A CPU launch of one threadgroup, or of at most this many threads in all, runs on the
  /// calling thread: the executor hands a launch to the pool only beyond 8192 threads' work (a
  /// fiber-mode thread counted 16), cpu::run's `grain`.
  static constexpr uint64_t kInlineThreads = 512;

  const KernelSpec& spec() const { return *spec_; }
  /// The launch geometry (grid, threadgroup) for these inputs, validated: std::invalid_argument
  /// names the kernel.
  std::pair<Dims, Dims> geometry(const std::vector<Array>& inputs) const;
  /// Starts the compile of the program that evaluating this primitive on `device` will use
  /// (KernelVariant::start), unless it is built already. `inputs`: those of the call that made
  /// the primitive.
  void start_compile(const std::vector<Array>& inputs, Device device);
  /// The output shapes for the inputs of the call that made this primitive, kept before it is
  /// shared: the pending ops of that call and of identical calls (MetalKernel's call plan)
  /// borrow them and output_dtypes() (make_pending_borrowed).
  void keep_call_shapes(std::vector<Shape> shapes) { call_shapes_ = std::move(shapes); }
  const std::vector<Shape>& call_shapes() const { return call_shapes_; }
  const std::vector<Dtype>& output_dtypes() const { return output_dtypes_; }
  /// Whether a later evaluation on inputs laid out as the last ones launches the prepared
  /// launch (made at the second evaluation where the backend prepares launches; tests).
  bool launch_is_prepared() const { return launch_.record.load() != nullptr; }

 private:
  std::shared_ptr<KernelVariant> variant(const std::vector<Array>& inputs) const;
  /// The hint is the variant for these inputs (their dtype/kind letters match its key).
  bool hint_matches(const std::vector<Array>& inputs) const;
  /// The same without a reference-count round trip when the hint matches (evaluation): the hint
  /// itself, else the variant found, kept alive in `holder`.
  KernelVariant& variant_ref(const std::vector<Array>& inputs,
                             std::shared_ptr<KernelVariant>& holder) const;
  // Both targets: one binding through the device's backend (kernel/launch.h).
  void eval(const std::vector<Array>& inputs, std::vector<Array>& outputs);
  std::shared_ptr<const KernelSpec> spec_;
  // Content hash of the spec (the variant cache's key prefix); empty when the hint holds it (no
  // string copy per call).
  const std::string& spec_key() const { return spec_key_.empty() ? hint_->spec_key : spec_key_; }
  std::string spec_key_;
  std::vector<Dtype> output_dtypes_;
  TemplateArgs template_args_;
  DimsExpr grid_, threadgroup_;
  std::vector<std::vector<ShapeExpr>> output_shapes_;
  std::vector<Shape> call_shapes_;  // not state: see keep_call_shapes
  std::optional<double> init_value_;
  bool robust_;
  // Not state: the variant the call that built this primitive looked up, and its variant key
  // (evaluation on inputs of the same kinds skips the process-wide cache).
  std::shared_ptr<KernelVariant> hint_;
  std::string hint_key_;
  // Grid and threadgroup when both are numbers (most calls), validated once here; otherwise
  // computed from the input shapes at each evaluation.
  bool fixed_geometry_ = false;
  Dims fixed_grid_{}, fixed_threadgroup_{};
  bool fixed_inline_ = false;  // with fixed_geometry_: the CPU launch runs on the caller
  // Not state: the compile start_compile queued, kept alive while this primitive may need it.
  std::shared_ptr<KernelVariant::ProgramJob> compile_;
  // Not state: the launch prepared at this primitive's second evaluation (a repeated call
  // shares the primitive: MetalKernel's call plan), for later evaluations on inputs laid out
  // alike (LaunchRecord). Set once, never replaced.
  struct RecordSlot {
    std::atomic<const LaunchRecord*> record{nullptr};
    std::atomic<uint32_t> evaluations{0};
    RecordSlot() = default;
    RecordSlot(const RecordSlot&) = delete;
    RecordSlot& operator=(const RecordSlot&) = delete;
    ~RecordSlot();
  };
  RecordSlot launch_;
  void keep_launch(LaunchBuilder& launch, const CompiledKernel& k, const std::vector<Array>& in,
                   const std::vector<msl::Binding>& bindings, Device device);
};

/// Content hash of everything in a spec that changes the generated text or its compilation.
std::string spec_content_key(const KernelSpec& spec);

/// The compiled-variant cache entry of `spec` for inputs/dtypes/template arguments (generated on
/// first use; shared process-wide by every kernel object with the same content).
std::shared_ptr<KernelVariant> variant_for(const std::shared_ptr<const KernelSpec>& spec,
                                           const std::string& spec_key,
                                           const std::vector<Array>& inputs,
                                           const std::vector<Dtype>& output_dtypes,
                                           const TemplateArgs& template_args);

/// Compiles the kernel of a metal_kernel call with NVRTC for `arch` (e.g. "sm_90"), no GPU
/// needed. Returns "" when it compiled, or why it could not be tried (NVRTC not found); throws
/// alloy::CompileError when the translated source does not compile.
std::string compile_call_cubin(const MetalKernel& kernel, const std::vector<Array>& inputs,
                               const KernelCall& call, const std::string& arch);

/// The CUDA translation of a metal_kernel call, as the GPU would build it for these inputs
/// (robust mode and shape-parameter variant included); `map` receives its source map.
msl::Translation call_gpu_translation(const MetalKernel& kernel, const std::vector<Array>& inputs,
                                      const KernelCall& call, SourceMap* map);

/// The Metal source of a call and where the user's lines are in it.
SourceMap call_source_map(const KernelSpec& spec, const std::string& msl);

}  // namespace alloy::kernel
