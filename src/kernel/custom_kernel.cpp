// metal_kernel: MLX's mx.fast.metal_kernel on Alloy. A call validates its arguments, generates
// MLX's Metal text for the input/output dtypes and template arguments, and returns pending
// outputs of a CustomKernel primitive; evaluation compiles (cached) and launches.
#include "kernel/custom_kernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "alloy/errors.h"
#include "alloy/kernel.h"
#include "backend/cpu/executor.h"
#include "core/array_node.h"
#include "core/gpu_backend.h"
#include "kernel/gpu_program.h"
#include "kernel/limits.h"
#include "kernel/program.h"
#include "kernel/robust_reports.h"
#include "msl/signature.h"

namespace alloy {

namespace detail {
// The compiled variants of one metal_kernel object, keyed by what changes the generated source.
struct KernelVariants {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<kernel::KernelVariant>> map;
};
}  // namespace detail

namespace kernel {

std::shared_ptr<Program> KernelVariant::program(msl::Target target, bool robust,
                                                bool shapes_spill) {
  bool cuda = target == msl::Target::cuda;
  auto& slot = programs[cuda ? 1 : 0][robust ? 1 : 0][cuda && shapes_spill ? 1 : 0];
  std::lock_guard lock(mu);
  if (!slot)
    slot = Program::build(map, target, math_mode,
                          call_bind_options(generated, robust, cuda && shapes_spill));
  return slot;
}

BindOptions call_bind_options(const msl::GeneratedSource& generated, bool robust,
                              bool shapes_spill) {
  BindOptions b;
  b.robust = robust;
  b.distinct_buffers = true;
  for (size_t i = 0; i < generated.bindings.size(); ++i) {
    const auto& binding = generated.bindings[i];
    bool shape =
        binding.kind != msl::BindingKind::input && binding.kind != msl::BindingKind::output;
    if (shape && !shapes_spill)
      b.block_buffers.push_back(static_cast<int>(i));
    else if (shape || binding.small)
      b.small_buffers.push_back(static_cast<int>(i));
  }
  return b;
}

namespace {
void fill_value(const Array& out, double value) {
  size_t n = static_cast<size_t>(out.size()), item = out.itemsize();
  if (n == 0) return;
  // One element of the value in the output's dtype.
  Array one = Array::from_doubles({value}, {}, out.dtype(), Device::cpu());
  const uint8_t* v = static_cast<const uint8_t*>(one.node()->data());
  void* dst = out.node()->data();
  if (out.device().type == Device::Type::gpu) {
    // memset-style fill when the element is a repeated 1/2/4-byte pattern (always for 0).
    for (int w : {1, 2, 4}) {
      if (item % w) continue;
      bool repeats = true;
      for (size_t b = w; b < item; ++b) repeats &= v[b] == v[b % w];
      if (!repeats) continue;
      uint32_t pattern = 0;
      std::memcpy(&pattern, v, w);
      gpu_backend()->fill(dst, n * item, pattern, w);
      return;
    }
    std::vector<uint8_t> host(n * item);
    for (size_t i = 0; i < n; ++i) std::memcpy(host.data() + i * item, v, item);
    gpu_backend()->copy_to_device(dst, host.data(), host.size());
    return;
  }
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < n; ++i) std::memcpy(d + i * item, v, item);
}
}  // namespace

// ---- CustomKernel primitive ------------------------------------------------------------------

CustomKernel::CustomKernel(std::shared_ptr<const KernelSpec> spec,
                           std::shared_ptr<KernelVariant> variant, const KernelCall& call)
    : spec_(std::move(spec)),
      variant_(std::move(variant)),
      output_shapes_(call.output_shapes),
      grid_(call.grid),
      threadgroup_(call.threadgroup),
      init_value_(call.init_value),
      robust_(spec_->robust || robust_by_default()) {}

std::vector<Shape> CustomKernel::output_shapes(const std::vector<Array>&) const {
  return output_shapes_;
}

namespace {
// Small per-launch parameter arrays (`name_shape`, `name_strides`, `name_ndim`) in MLX's types.
struct ShapeParams {
  std::vector<std::vector<int32_t>> shapes;
  std::vector<std::vector<int64_t>> strides;
  std::vector<int32_t> ndims;
};
ShapeParams shape_params(const std::vector<Array>& inputs,
                         const std::vector<msl::Binding>& bindings) {
  ShapeParams p;
  // Only kernels whose body names `x_shape` / `x_strides` / `x_ndim` get them.
  if (std::none_of(bindings.begin(), bindings.end(), [](const msl::Binding& b) {
        return b.kind != msl::BindingKind::input && b.kind != msl::BindingKind::output;
      }))
    return p;
  for (auto& a : inputs) {
    p.shapes.emplace_back(a.shape().begin(), a.shape().end());
    p.strides.emplace_back(a.strides().begin(), a.strides().end());
    p.ndims.push_back(a.ndim());
    // Metal never sees an empty buffer: keep a slot for 0-d arrays.
    if (p.shapes.back().empty()) p.shapes.back().push_back(1);
    if (p.strides.back().empty()) p.strides.back().push_back(0);
  }
  return p;
}

// MLX dispatches min(threadgroup, grid) per dimension.
Dims effective_threadgroup(const Dims& grid, const Dims& tg) {
  Dims t;
  for (int d = 0; d < 3; ++d) t[d] = std::max(1, std::min(tg[d], grid[d]));
  return t;
}

std::vector<Array> prepare_inputs(const KernelSpec& spec, const std::vector<Array>& inputs) {
  std::vector<Array> in;
  in.reserve(inputs.size());
  for (auto& a : inputs) {
    Array x = a;
    if (x.node()->pending) x.eval();
    if (spec.ensure_row_contiguous && !x.is_row_contiguous()) x = x.contiguous();
    in.push_back(x);
  }
  return in;
}
}  // namespace

namespace {
// Parameters in a launch block start on 16-byte boundaries (the widest element is 8 bytes).
size_t block_align(size_t n) {
  return (n + 15) / 16 * 16;
}
// Bytes of the shape/strides/ndim parameter of an input of `ndim` dimensions (a 0-d input has a
// one-element shape and strides: Metal never sees an empty buffer).
size_t shape_param_bytes(msl::BindingKind kind, int ndim) {
  size_t n = static_cast<size_t>(std::max(1, ndim));
  return kind == msl::BindingKind::input_shape     ? n * 4
         : kind == msl::BindingKind::input_strides ? n * 8
                                                   : 4;
}
}  // namespace

std::shared_ptr<Buffer> bind_gpu_call(alloy_cuda_launch& L,
                                      const std::vector<msl::Binding>& bindings,
                                      const std::vector<Array>& in,
                                      const std::vector<Array>& outputs) {
  // Shape/strides/ndim parameters and small host inputs travel in the launch's parameter block
  // (cuda_small_buffer in prelude/entry.h); what does not fit, in one small device buffer.
  ShapeParams sp = shape_params(in, bindings);
  std::vector<uint8_t> packed;
  uint64_t spilled = 0;  // bindings in `packed`; L.buffers holds their offset until it is uploaded
  size_t inline_used = 0;
  auto pack = [&](size_t i, const void* p, size_t n) {
    size_t off = block_align(inline_used);
    if (off + n <= ALLOY_CUDA_INLINE_BYTES) {
      std::memcpy(L.inline_data + off, p, n);
      inline_used = off + n;
      L.inline_mask |= 1ull << i;
    } else {
      off = block_align(packed.size());
      packed.resize(off + n);
      std::memcpy(packed.data() + off, p, n);
      spilled |= 1ull << i;
    }
    L.buffers[i] = reinterpret_cast<void*>(off);
    L.buffer_bytes[i] = n;
  };
  L.num_buffers = static_cast<unsigned>(bindings.size());
  // Shape parameters first: when they fit, all of them are in the block (shape_params_fit).
  for (size_t i = 0; i < bindings.size(); ++i) {
    int j = bindings[i].index;
    auto kind = bindings[i].kind;
    if (kind == msl::BindingKind::input || kind == msl::BindingKind::output) continue;
    size_t bytes = shape_param_bytes(kind, in[j].ndim());
    if (kind == msl::BindingKind::input_shape) pack(i, sp.shapes[j].data(), bytes);
    if (kind == msl::BindingKind::input_strides) pack(i, sp.strides[j].data(), bytes);
    if (kind == msl::BindingKind::input_ndim) pack(i, &sp.ndims[j], bytes);
  }
  for (size_t i = 0; i < bindings.size(); ++i) {
    int j = bindings[i].index;
    if (bindings[i].kind == msl::BindingKind::input) {
      if (in[j].device().type == Device::Type::cpu) {
        // A small row-contiguous host array (MetalKernel::operator() leaves those on the host):
        // its bytes travel with the launch, no copy to the device first.
        pack(i, in[j].node()->data(), in[j].nbytes());
      } else {
        L.buffers[i] = in[j].node()->data();
        L.buffer_bytes[i] = in[j].node()->buffer->nbytes;
      }
    } else if (bindings[i].kind == msl::BindingKind::output) {
      L.buffers[i] = outputs[j].node()->data();
      L.buffer_bytes[i] = outputs[j].nbytes();
    }
  }
  std::shared_ptr<Buffer> params;
  if (!packed.empty()) {
    params = gpu_backend()->allocate(packed.size());
    gpu_backend()->copy_to_device(params->ptr, packed.data(), packed.size());
    for (size_t i = 0; i < bindings.size(); ++i)
      if ((spilled >> i) & 1)
        L.buffers[i] = static_cast<char*>(params->ptr) + reinterpret_cast<uintptr_t>(L.buffers[i]);
  }
  return params;
}

bool shape_params_fit(const std::vector<Array>& in, const std::vector<msl::Binding>& bindings) {
  size_t bytes = 0;
  for (const auto& b : bindings) {
    if (b.kind == msl::BindingKind::input || b.kind == msl::BindingKind::output) continue;
    bytes += block_align(shape_param_bytes(b.kind, in[b.index].ndim()));
  }
  return bytes <= ALLOY_CUDA_INLINE_BYTES;
}

void CustomKernel::eval_cpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  auto program = variant_->program(msl::Target::cpu, robust_);
  const CompiledKernel& k = program->kernels().front();
  std::vector<Array> in = prepare_inputs(*spec_, inputs);
  if (init_value_)
    for (auto& o : outputs) fill_value(o, *init_value_);
  ShapeParams sp = shape_params(in, variant_->generated.bindings);
  const auto& bindings = variant_->generated.bindings;
  std::vector<void*> buffers(bindings.size());
  std::vector<uint64_t> sizes(bindings.size());
  for (size_t i = 0; i < bindings.size(); ++i) {
    int j = bindings[i].index;
    switch (bindings[i].kind) {
      case msl::BindingKind::input:
        buffers[i] = in[j].node()->data();
        sizes[i] = in[j].node()->buffer->nbytes;
        break;
      case msl::BindingKind::input_shape:
        buffers[i] = sp.shapes[j].data();
        sizes[i] = sp.shapes[j].size() * 4;
        break;
      case msl::BindingKind::input_strides:
        buffers[i] = sp.strides[j].data();
        sizes[i] = sp.strides[j].size() * 8;
        break;
      case msl::BindingKind::input_ndim:
        buffers[i] = &sp.ndims[j];
        sizes[i] = 4;
        break;
      case msl::BindingKind::output:
        buffers[i] = outputs[j].node()->data();
        sizes[i] = outputs[j].nbytes();
        break;
    }
  }
  if (grid_[0] == 0 || grid_[1] == 0 || grid_[2] == 0) return;  // nothing runs
  Dims tg = effective_threadgroup(grid_, threadgroup_);
  alloy_cpu_launch L{};
  L.buffers = buffers.data();
  L.buffer_bytes = sizes.data();
  L.num_buffers = static_cast<uint32_t>(buffers.size());
  for (int d = 0; d < 3; ++d) {
    L.grid[d] = static_cast<uint32_t>(grid_[d]);
    L.threadgroup[d] = static_cast<uint32_t>(tg[d]);
  }
  cpu::set_groups(L);
  try {
    cpu::ExecOptions opts;
    opts.kernel = spec_->name;
    cpu::OobLog oob;
    if (robust_) opts.oob = &oob;
    cpu::run(L, k.cpu_group, k.cpu_thread, program->uses_sync(), opts);
    if (robust_)
      collect_cpu_reports(spec_->name, oob,
                          [&](uint32_t b) { return buffer_name(*spec_, bindings, b); });
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(spec_->name,
                fmt::format("[metal_kernel] kernel '{}' failed: {}", spec_->name, e.what()));
  }
}

void CustomKernel::eval_gpu(const std::vector<Array>& inputs, std::vector<Array>& outputs) {
  std::vector<Array> in = prepare_inputs(*spec_, inputs);
  // Shape parameters too large for the launch block (many inputs of many dimensions): the
  // program variant that reads them from wherever the launch puts them.
  bool spill = !shape_params_fit(in, variant_->generated.bindings);
  auto program = variant_->program(msl::Target::cuda, robust_, spill);
  const CompiledKernel& k = program->kernels().front();
  if (init_value_)
    for (auto& o : outputs) fill_value(o, *init_value_);
  const auto& bindings = variant_->generated.bindings;
  if (bindings.size() > ALLOY_CUDA_MAX_BUFFERS)
    throw std::invalid_argument(
        fmt::format("[metal_kernel] kernel '{}' has {} buffers; at most {} "
                    "are supported on the GPU",
                    spec_->name, bindings.size(), ALLOY_CUDA_MAX_BUFFERS));
  alloy_cuda_launch L{};
  std::shared_ptr<Buffer> params = bind_gpu_call(L, bindings, in, outputs);
  if (grid_[0] == 0 || grid_[1] == 0 || grid_[2] == 0) return;
  Dims tg = effective_threadgroup(grid_, threadgroup_);
  for (int d = 0; d < 3; ++d) {
    L.grid[d] = static_cast<unsigned>(grid_[d]);
    L.threadgroup[d] = static_cast<unsigned>(tg[d]);
  }
  // Robust mode: the kernel appends out-of-range records to a small device log.
  GpuOobLog oob;
  if (robust_) oob.attach(L);
  launch_gpu(k, L, 0, spec_->name);
  if (robust_)
    oob.collect(spec_->name, L, [&](uint32_t b) { return buffer_name(*spec_, bindings, b); });
  // `in` copies and `params` may be released now: the CUDA allocator frees stream-ordered, so
  // their memory is reused only by work enqueued after this launch.
}

}  // namespace kernel

// ---- public API ------------------------------------------------------------------------------

MetalKernel::MetalKernel(std::shared_ptr<const KernelSpec> spec)
    : spec_(std::move(spec)), variants_(std::make_shared<detail::KernelVariants>()) {}

MetalKernel metal_kernel(const std::string& name, const std::vector<std::string>& input_names,
                         const std::vector<std::string>& output_names, const std::string& source,
                         const std::string& header, bool ensure_row_contiguous, bool atomic_outputs,
                         const std::map<std::string, std::string>& compile_options, bool robust) {
  auto spec = std::make_shared<KernelSpec>();
  spec->name = name;
  spec->input_names = input_names;
  spec->output_names = output_names;
  spec->source = source;
  spec->header = header;
  spec->ensure_row_contiguous = ensure_row_contiguous;
  spec->atomic_outputs = atomic_outputs;
  spec->robust = robust;
  for (auto& [k, v] : compile_options) {
    if (k != "math_mode")
      throw std::invalid_argument("[metal_kernel] Unknown compile option '" + k +
                                  "'; the only option is 'math_mode'.");
    kernel::check_math_mode(v);
    spec->math_mode = v;
  }
  if (output_names.empty())
    throw std::invalid_argument("[metal_kernel] Must specify at least one output.");
  return MetalKernel(std::move(spec));
}

namespace {
int count_lines(std::string_view s) {
  int n = 1;
  for (char c : s)
    if (c == '\n') ++n;
  return n;
}
int line_of(std::string_view text, size_t pos) {
  int n = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i)
    if (text[i] == '\n') ++n;
  return n;
}

std::vector<msl::SignatureInput> signature_inputs(const std::vector<Array>& inputs) {
  std::vector<msl::SignatureInput> s;
  for (auto& a : inputs) {
    if (!a.valid()) throw std::invalid_argument("[metal_kernel] an input array is empty (invalid)");
    s.push_back({"", a.dtype(), a.ndim(), a.size()});
  }
  return s;
}

// What changes the generated Metal text: input dtypes and kinds (scalar / < 8 elements / array),
// output dtypes and template arguments. (The device does not: a variant compiles per target.)
std::string variant_key(const std::vector<Array>& inputs, const KernelCall& call) {
  std::string key;  // short keys stay in the string's own storage: no allocation per call
  for (auto& a : inputs) {
    key += static_cast<char>('A' + static_cast<int>(a.dtype()));
    key += a.ndim() == 0 ? 's' : (a.size() < 8 ? 'c' : 'd');
  }
  key += '|';
  for (auto d : call.output_dtypes) key += static_cast<char>('A' + static_cast<int>(d));
  key += '|';
  for (auto& [n, v] : call.template_args) {
    key += n;
    key += '=';
    if (auto* t = std::get_if<Dtype>(&v))
      key += "t" + std::to_string(static_cast<int>(*t));
    else if (auto* b = std::get_if<bool>(&v))
      key += *b ? "b1" : "b0";
    else
      key += "i" + std::to_string(std::get<int>(v));
    key += ',';
  }
  return key;
}

}  // namespace

kernel::SourceMap kernel::call_source_map(const KernelSpec& spec, const std::string& msl) {
  kernel::SourceMap m;
  m.label = spec.name;
  m.msl = msl;
  // The generator pastes the header first and the body verbatim: find their line ranges.
  if (!spec.header.empty() && msl.compare(0, spec.header.size(), spec.header) == 0) {
    m.header_first = 1;
    m.header_lines = count_lines(spec.header);
  }
  size_t body = msl.find(spec.source, spec.header.size());
  if (!spec.source.empty() && body != std::string::npos) {
    m.body_first = line_of(msl, body);
    m.body_lines = count_lines(spec.source);
  }
  return m;
}

std::string kernel::compile_call_cubin(const MetalKernel& k, const std::vector<Array>& inputs,
                                       const KernelCall& call, const std::string& arch) {
  std::string why;
  if (!nvrtc_available(&why)) return why.empty() ? "NVRTC not found" : why;
  SourceMap map;
  auto tr = call_gpu_translation(k, inputs, call, &map);
  compile_cubin(tr, k.spec().math_mode, map, "kernel.metal", arch);
  return "";
}

msl::Translation kernel::call_gpu_translation(const MetalKernel& k,
                                              const std::vector<Array>& inputs,
                                              const KernelCall& call, SourceMap* map) {
  auto gen = call_generated_source(k, inputs, call);
  *map = call_source_map(k.spec(), gen.source);
  // The program variant the GPU would run for these inputs (see CustomKernel::eval_gpu).
  return msl::translate(
      gen.source, translate_options(*map, msl::Target::cuda,
                                    call_bind_options(gen, k.spec().robust || robust_by_default(),
                                                      !shape_params_fit(inputs, gen.bindings))));
}

msl::GeneratedSource kernel::call_generated_source(const MetalKernel& k,
                                                   const std::vector<Array>& inputs,
                                                   const KernelCall& call) {
  return msl::write_kernel_source(k.spec(), signature_inputs(inputs), call.output_dtypes,
                                  call.template_args);
}

std::string MetalKernel::metal_source(const std::vector<Array>& inputs,
                                      const KernelCall& call) const {
  return msl::write_kernel_source(*spec_, signature_inputs(inputs), call.output_dtypes,
                                  call.template_args)
      .source;
}

std::vector<Array> MetalKernel::operator()(const std::vector<Array>& inputs,
                                           const KernelCall& call) const {
  const KernelSpec& spec = *spec_;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].valid())
      throw std::invalid_argument(fmt::format(
          "[metal_kernel] kernel '{}': input {} is an invalid (empty) array", spec.name,
          i < spec.input_names.size() ? "'" + spec.input_names[i] + "'" : std::to_string(i)));
  if (call.output_shapes.size() != spec.output_names.size())
    throw std::invalid_argument(
        fmt::format("[metal_kernel] Expected `output_shapes` to have size {} but got size {}.\n",
                    spec.output_names.size(), call.output_shapes.size()));
  if (call.output_dtypes.size() != spec.output_names.size())
    throw std::invalid_argument(
        fmt::format("[metal_kernel] Expected `output_dtypes` to have size {} but got size {}.\n",
                    spec.output_names.size(), call.output_dtypes.size()));
  int64_t tg_threads = 1;
  for (int d = 0; d < 3; ++d) {
    if (call.grid[d] < 0)
      throw std::invalid_argument(
          fmt::format("[metal_kernel] grid dimensions must be >= 0, got "
                      "({}, {}, {})",
                      call.grid[0], call.grid[1], call.grid[2]));
    if (call.threadgroup[d] <= 0)
      throw std::invalid_argument(
          fmt::format("[metal_kernel] threadgroup dimensions must be > 0, "
                      "got ({}, {}, {})",
                      call.threadgroup[0], call.threadgroup[1], call.threadgroup[2]));
    tg_threads *= call.threadgroup[d];
  }
  if (tg_threads > 1024)
    throw std::invalid_argument(
        fmt::format("[metal_kernel] threadgroup ({}, {}, {}) has {} threads; the maximum is 1024",
                    call.threadgroup[0], call.threadgroup[1], call.threadgroup[2], tg_threads));
  kernel::check_grid_threads("[metal_kernel]", spec.name, call.grid);
  Device dev = call.device.value_or(default_device());
  if (dev.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("[metal_kernel] no GPU is available (no CUDA driver or device)");
  for (auto& a : inputs)
    if (a.valid() && dev.type == Device::Type::gpu && a.dtype() == Dtype::float64)
      throw std::invalid_argument(
          "[metal_kernel] float64 inputs are not supported on the GPU "
          "(Metal has no double)");

  // The compiled variant for these dtypes / template args (generated once per kernel object).
  std::string key = variant_key(inputs, call);
  std::shared_ptr<kernel::KernelVariant> variant;
  {
    std::lock_guard lock(variants_->mu);
    auto it = variants_->map.find(key);
    if (it != variants_->map.end()) variant = it->second;
  }
  if (!variant) {
    auto gen = msl::write_kernel_source(spec, signature_inputs(inputs), call.output_dtypes,
                                        call.template_args);
    variant = std::make_shared<kernel::KernelVariant>();
    variant->map = kernel::call_source_map(spec, gen.source);
    variant->generated = std::move(gen);
    variant->math_mode = spec.math_mode;
    std::lock_guard lock(variants_->mu);
    variant = variants_->map.emplace(key, variant).first->second;
  }
  if (call.verbose) {
    std::string listing = msl::verbose_listing(spec.name, variant->generated.source);
    std::fwrite(listing.data(), 1, listing.size(), stdout);
    std::fflush(stdout);
  }
  // Inputs live on the kernel's device, except small row-contiguous host arrays (scalars such as
  // Python floats) bound to a GPU kernel: their bytes go with the launch (bind_gpu_call).
  std::vector<Array> in;
  in.reserve(inputs.size());
  for (auto& a : inputs) {
    bool travels = dev.type == Device::Type::gpu && a.valid() &&
                   a.device().type == Device::Type::cpu && a.size() < 8 && a.is_row_contiguous();
    in.push_back(a.device() == dev || travels ? a : a.to(dev));
  }
  auto prim = std::make_shared<kernel::CustomKernel>(spec_, variant, call);
  return make_pending(prim, std::move(in), call.output_shapes, call.output_dtypes, dev);
}

std::vector<Array> MetalKernel::operator()(const std::vector<Array>& inputs,
                                           const std::vector<Shape>& output_shapes,
                                           const std::vector<Dtype>& output_dtypes, Dims grid,
                                           Dims threadgroup, const TemplateArgs& template_args,
                                           std::optional<double> init_value, bool verbose,
                                           std::optional<Device> device) const {
  KernelCall call;
  call.output_shapes = output_shapes;
  call.output_dtypes = output_dtypes;
  call.grid = grid;
  call.threadgroup = threadgroup;
  call.template_args = template_args;
  call.init_value = init_value;
  call.verbose = verbose;
  call.device = device;
  return (*this)(inputs, call);
}

}  // namespace alloy
