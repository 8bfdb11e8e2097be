// metal_kernel: MLX's mx.fast.metal_kernel on Alloy. A call validates its arguments, generates
// MLX's Metal text for the input/output dtypes and template arguments, queues the compile of
// that text on the compile pool (unless it is built) and returns pending outputs of a
// CustomKernel primitive; evaluation takes the compiled program (waiting for it, or compiling it
// itself when no pool thread took it yet) and launches.
#include "kernel/custom_kernel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <tbb/spin_mutex.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "alloy/errors.h"
#include "alloy/kernel.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/hot.h"
#include "kernel/launch.h"
#include "kernel/limits.h"
#include "kernel/program.h"
#include "kernel/robust_reports.h"
#include "msl/signature.h"

namespace alloy {

namespace detail {
// What a metal_kernel object computes once: its spec's content key.
struct KernelVariants {
  std::string spec_key;
  // The variant of the last call (a model calls one kernel object with the same dtypes again and
  // again): found without building the cache key or taking the cache's lock.
  // Guards last_key, last and plan. A spin lock (its release is a plain store: one atomic update
  // fewer per call than a mutex, issue 9 item 7): held only to compare or copy them; what they
  // replace is released after it (a primitive or variant may free compiled modules).
  tbb::spin_mutex mu;
  std::string last_key;  // variant_key() of the last call
  std::shared_ptr<kernel::KernelVariant> last;
  // The last call given as numbers (no shape expressions), and what it made: a call with the same
  // arguments on inputs of the same dtypes and shapes shares its primitive (primitives are
  // immutable) and output shapes instead of building and validating them again.
  struct Plan {
    Device device;
    std::vector<Dtype> input_dtypes;
    std::vector<Shape> input_shapes;
    std::vector<Shape> output_shapes;
    std::vector<Dtype> output_dtypes;
    Dims grid{}, threadgroup{};
    TemplateArgs template_args;
    std::optional<double> init_value;
    // Holds the output shapes for these inputs and the output dtypes, which the pending ops of
    // repeated calls borrow (no copy, no reference count per call).
    std::shared_ptr<kernel::CustomKernel> primitive;

    bool matches(Device dev, const std::vector<Array>& in, const KernelCall& call) const {
      // (Dims compared element by element: std::array's == calls memcmp.)
      auto same_dims = [](const Dims& a, const Dims& b) {
        return a[0] == b[0] && a[1] == b[1] && a[2] == b[2];
      };
      if (!primitive || dev != device || in.size() != input_dtypes.size() ||
          !same_dims(call.grid, grid) || !same_dims(call.threadgroup, threadgroup) ||
          call.init_value != init_value || !same_list(call.output_dtypes, output_dtypes) ||
          !same_list(call.output_shapes, output_shapes) || call.template_args != template_args)
        return false;
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i].dtype() != input_dtypes[i] || !same_list(in[i].shape(), input_shapes[i]))
          return false;
      return true;
    }
  };
  Plan plan;
};
}  // namespace detail

namespace kernel {

int KernelVariant::slot(msl::Target target, bool robust, bool shapes_spill) {
  bool cuda = target == msl::Target::cuda;
  return (cuda ? 4 : 0) + (robust ? 2 : 0) + (cuda && shapes_spill ? 1 : 0);
}

std::shared_ptr<KernelVariant::ProgramJob> KernelVariant::make_job(msl::Target target, bool robust,
                                                                   bool shapes_spill) {
  bool spill = target == msl::Target::cuda && shapes_spill;
  return std::make_shared<ProgramJob>([this, target, robust, spill] {
    return Program::build(map, target, math_mode, call_bind_options(generated, robust, spill));
  });
}

const Program& KernelVariant::program(msl::Target target, bool robust, bool shapes_spill) {
  int i = slot(target, robust, shapes_spill);
  if (const Program* p = ready[i].load(std::memory_order_acquire)) return *p;  // built: no lock
  std::shared_ptr<ProgramJob> job;
  {
    std::lock_guard lock(mu);
    if (programs[i]) return *programs[i];
    job = jobs[i].lock();
    if (!job) jobs[i] = job = make_job(target, robust, shapes_spill);
  }
  try {
    std::shared_ptr<Program> p = job->get();  // here, unless a pool thread took it
    std::lock_guard lock(mu);
    if (!programs[i]) {
      programs[i] = p;
      ready[i].store(p.get(), std::memory_order_release);
    }
    if (jobs[i].lock() == job) jobs[i].reset();
    return *programs[i];  // lives as long as the variant
  } catch (...) {
    // Not kept: the next evaluation compiles again, as one that found no program always did.
    std::lock_guard lock(mu);
    if (jobs[i].lock() == job) jobs[i].reset();
    throw;
  }
}

std::shared_ptr<KernelVariant::ProgramJob> KernelVariant::start(msl::Target target, bool robust,
                                                                bool shapes_spill) {
  int i = slot(target, robust, shapes_spill);
  if (ready[i].load(std::memory_order_acquire)) return nullptr;  // a memory hit: one load
  std::shared_ptr<ProgramJob> job;
  {
    std::lock_guard lock(mu);
    if (programs[i]) return nullptr;
    if ((job = jobs[i].lock())) return job;  // queued or compiling already
    jobs[i] = job = make_job(target, robust, shapes_spill);
  }
  // A compile queued alone is usually run by the evaluation that needs it (no thread handoff on
  // a warm first call); compiles queued together run on the pool's threads at once. The queue
  // holds the job weakly: one whose callers all dropped it is skipped.
  compile_soon([weak = std::weak_ptr<ProgramJob>(job)] {
    if (auto j = weak.lock()) j->run();
  });
  return job;
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
  const uint8_t* v = static_cast<const uint8_t*>(node_of(one)->data());
  void* dst = node_of(out)->data();
  Backend& be = backend(out.device());
  // memset-style fill when the element is a repeated 1/2/4-byte pattern (always for 0).
  for (int w : {1, 2, 4}) {
    if (item % w) continue;
    bool repeats = true;
    for (size_t b = w; b < item; ++b) repeats &= v[b] == v[b % w];
    if (!repeats) continue;
    uint32_t pattern = 0;
    std::memcpy(&pattern, v, w);
    be.fill(dst, n * item, pattern, w);
    return;
  }
  std::vector<uint8_t> host(n * item);
  for (size_t i = 0; i < n; ++i) std::memcpy(host.data() + i * item, v, item);
  be.copy_to_device(dst, host.data(), host.size());
}
}  // namespace

// ---- CustomKernel primitive ------------------------------------------------------------------

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
char input_kind(const Array& a) {
  return a.ndim() == 0 ? 's' : (a.size() < 8 ? 'c' : 'd');
}

std::string variant_key(const std::vector<Array>& inputs, const std::vector<Dtype>& output_dtypes,
                        const TemplateArgs& template_args) {
  std::string key;  // short keys stay in the string's own storage: no allocation per call
  for (auto& a : inputs) {
    key += static_cast<char>('A' + static_cast<int>(a.dtype()));
    key += input_kind(a);
  }
  key += '|';
  for (auto d : output_dtypes) key += static_cast<char>('A' + static_cast<int>(d));
  key += '|';
  for (auto& [n, v] : template_args) {
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

namespace {

DimsExpr constant_dims(const Dims& d) {
  return {ShapeExpr(d[0]), ShapeExpr(d[1]), ShapeExpr(d[2])};
}

std::vector<Shape> shapes_of(const std::vector<Array>& inputs) {
  std::vector<Shape> s;
  s.reserve(inputs.size());
  for (auto& a : inputs) s.push_back(a.shape());
  return s;
}

Dims eval_dims(const DimsExpr& e, const std::vector<Array>& inputs) {
  Dims d;
  std::vector<Shape> shapes;
  for (int i = 0; i < 3; ++i) {
    if (e[i].is_constant()) {
      d[i] = static_cast<int>(e[i].eval({}));
      continue;
    }
    if (shapes.empty()) shapes = shapes_of(inputs);
    int64_t v = e[i].eval(shapes);
    if (v > INT32_MAX || v < INT32_MIN)
      throw std::invalid_argument(
          fmt::format("launch dimension {} = {} does not fit in 32 bits", e[i].str(), v));
    d[i] = static_cast<int>(v);
  }
  return d;
}

void check_grid(const std::string& kernel, const Dims& grid, const Dims& tg) {
  long double tg_threads = 1;  // three dimensions of up to 2^31 - 1 do not fit 64 bits
  for (int d = 0; d < 3; ++d) {
    if (grid[d] < 0)
      throw std::invalid_argument(
          fmt::format("[metal_kernel] grid dimensions must be >= 0, got ({}, {}, {}) (kernel '{}')",
                      grid[0], grid[1], grid[2], kernel));
    if (tg[d] <= 0)
      throw std::invalid_argument(fmt::format(
          "[metal_kernel] threadgroup dimensions must be > 0, got ({}, {}, {}) (kernel '{}')",
          tg[0], tg[1], tg[2], kernel));
    tg_threads *= tg[d];
  }
  if (tg_threads > 1024)
    throw std::invalid_argument(
        fmt::format("[metal_kernel] threadgroup ({}, {}, {}) has {:.0f} threads; the maximum is "
                    "1024",
                    tg[0], tg[1], tg[2], static_cast<double>(tg_threads)));
  check_grid_threads("[metal_kernel]", kernel, grid);
}

// The process-wide cache of generated/compiled variants, keyed by content.
struct VariantCache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<KernelVariant>> map;
};
VariantCache& variant_cache() {
  static VariantCache* c = new VariantCache;  // lives until exit (kernels may run at exit)
  return *c;
}
}  // namespace

std::string spec_content_key(const KernelSpec& spec) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto add = [&](const std::string& s) {
    uint64_t n = s.size();
    XXH3_64bits_update(st, &n, sizeof n);
    XXH3_64bits_update(st, s.data(), s.size());
  };
  add(spec.name);
  for (auto& n : spec.input_names) add("i:" + n);
  for (auto& n : spec.output_names) add("o:" + n);
  add(spec.source);
  add(spec.header);
  add(spec.math_mode);
  add(std::string{spec.ensure_row_contiguous ? '1' : '0', spec.atomic_outputs ? '1' : '0',
                  spec.robust ? '1' : '0'});
  uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}", h);
}

namespace {
// A CPU launch the executor runs on the calling thread (CustomKernel::kInlineThreads).
bool launch_runs_inline(const Dims& grid, const Dims& threadgroup) {
  Dims tg = effective_threadgroup(grid, threadgroup);
  uint64_t threads = 1, groups = 1;
  for (int d = 0; d < 3; ++d) {
    if (grid[d] == 0) return true;  // nothing runs
    if (grid[d] < 0 || tg[d] <= 0) return false;
    auto g = static_cast<uint64_t>(grid[d]), t = static_cast<uint64_t>(tg[d]);
    threads *= g;
    groups *= (g + t - 1) / t;
  }
  return groups == 1 || threads <= CustomKernel::kInlineThreads;
}

std::shared_ptr<KernelVariant> variant_for_key(const std::shared_ptr<const KernelSpec>& spec,
                                               const std::string& spec_key, const std::string& vkey,
                                               const std::vector<Array>& inputs,
                                               const std::vector<Dtype>& output_dtypes,
                                               const TemplateArgs& template_args) {
  std::string key = spec_key;
  key += '#';
  key += vkey;
  auto& cache = variant_cache();
  {
    std::lock_guard lock(cache.mu);
    auto it = cache.map.find(key);
    if (it != cache.map.end()) return it->second;
  }
  auto gen =
      msl::write_kernel_source(*spec, signature_inputs(inputs), output_dtypes, template_args);
  auto variant = std::make_shared<KernelVariant>();
  variant->map = call_source_map(*spec, gen.source);
  variant->generated = std::move(gen);
  variant->math_mode = spec->math_mode;
  variant->spec_key = spec_key;
  std::lock_guard lock(cache.mu);
  return cache.map.emplace(key, variant).first->second;
}
}  // namespace

std::shared_ptr<KernelVariant> variant_for(const std::shared_ptr<const KernelSpec>& spec,
                                           const std::string& spec_key,
                                           const std::vector<Array>& inputs,
                                           const std::vector<Dtype>& output_dtypes,
                                           const TemplateArgs& template_args) {
  return variant_for_key(spec, spec_key, variant_key(inputs, output_dtypes, template_args), inputs,
                         output_dtypes, template_args);
}

CustomKernel::CustomKernel(std::shared_ptr<const KernelSpec> spec, std::vector<Dtype> output_dtypes,
                           TemplateArgs template_args, DimsExpr grid, DimsExpr threadgroup,
                           std::vector<std::vector<ShapeExpr>> output_shapes,
                           std::optional<double> init_value, const std::string& spec_key,
                           std::shared_ptr<KernelVariant> variant_hint, std::string hint_key)
    : spec_(std::move(spec)),
      spec_key_(variant_hint && !spec_key.empty() && variant_hint->spec_key == spec_key
                    ? std::string()
                : spec_key.empty() ? spec_content_key(*spec_)
                                   : spec_key),
      output_dtypes_(std::move(output_dtypes)),
      template_args_(std::move(template_args)),
      grid_(std::move(grid)),
      threadgroup_(std::move(threadgroup)),
      output_shapes_(std::move(output_shapes)),
      init_value_(init_value),
      robust_(spec_->robust || robust_by_default()),
      hint_(std::move(variant_hint)),
      hint_key_(std::move(hint_key)) {
  bool numbers = true;
  for (int d = 0; d < 3; ++d) numbers &= grid_[d].is_constant() && threadgroup_[d].is_constant();
  if (!numbers) return;
  try {
    auto [g, t] = geometry({});
    fixed_grid_ = g;
    fixed_threadgroup_ = t;
    fixed_geometry_ = true;
    fixed_inline_ = launch_runs_inline(g, t);
  } catch (const std::invalid_argument&) {
    // Invalid numbers: every evaluation computes them again and reports the error.
  }
}

std::vector<Shape> CustomKernel::output_shapes(const std::vector<Array>& inputs) const {
  std::vector<Shape> out;
  out.reserve(output_shapes_.size());
  std::vector<Shape> shapes;
  for (auto& dims : output_shapes_) {
    Shape s;
    s.reserve(dims.size());
    std::optional<std::string> negative;  // the first negative dimension's expression, if any
    for (auto& e : dims) {
      if (!e.is_constant() && shapes.empty()) shapes = shapes_of(inputs);
      int64_t v = e.eval(shapes);
      if (v < 0 && !negative) negative = e.is_constant() ? "" : " (" + e.str() + ")";
      s.push_back(v);
    }
    if (negative)
      throw std::invalid_argument(
          fmt::format("[metal_kernel] kernel '{}': output shape ({}{}) has a negative dimension{}",
                      spec_->name, fmt::join(s, ", "), s.size() == 1 ? "," : "", *negative));
    out.push_back(std::move(s));
  }
  return out;
}

std::pair<Dims, Dims> CustomKernel::geometry(const std::vector<Array>& inputs) const {
  Dims g = eval_dims(grid_, inputs), t = eval_dims(threadgroup_, inputs);
  check_grid(spec_->name, g, t);
  return {g, t};
}

void CustomKernel::start_compile(const std::vector<Array>& inputs, Device device) {
  // The variant of the call that made this primitive (its hint), else the lookup eval() does.
  std::shared_ptr<KernelVariant> v = hint_ ? hint_ : variant(inputs);
  // The program eval() will ask for (same target, robust flag and shape-parameter layout).
  bool gpu = device.type == Device::Type::gpu;
  bool spill = gpu && !shape_params_fit(inputs, v->generated.bindings, ALLOY_CUDA_INLINE_BYTES);
  compile_ = v->start(gpu ? msl::Target::cuda : msl::Target::cpu, robust_, spill);
}

bool CustomKernel::hint_matches(const std::vector<Array>& inputs) const {
  // The inputs' part of the key matches the call that built this primitive (the rest comes from
  // this primitive's own dtypes and template arguments): its variant, without building the key.
  if (!hint_ || hint_key_.size() <= 2 * inputs.size() || hint_key_[2 * inputs.size()] != '|')
    return false;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (hint_key_[2 * i] != static_cast<char>('A' + static_cast<int>(inputs[i].dtype())) ||
        hint_key_[2 * i + 1] != input_kind(inputs[i]))
      return false;
  return true;
}

KernelVariant& CustomKernel::variant_ref(const std::vector<Array>& inputs,
                                         std::shared_ptr<KernelVariant>& holder) const {
  if (hint_matches(inputs)) return *hint_;
  holder = variant(inputs);
  return *holder;
}

std::shared_ptr<KernelVariant> CustomKernel::variant(const std::vector<Array>& inputs) const {
  if (hint_matches(inputs)) return hint_;
  std::string vkey = variant_key(inputs, output_dtypes_, template_args_);
  if (hint_ && vkey == hint_key_) return hint_;
  return variant_for_key(spec_, spec_key(), vkey, inputs, output_dtypes_, template_args_);
}

namespace {
std::vector<int64_t> dims_code(const std::vector<ShapeExpr>& dims) {
  // [n, len0, code0..., len1, code1...]
  std::vector<int64_t> row{static_cast<int64_t>(dims.size())};
  for (auto& e : dims) {
    auto code = e.code();
    row.push_back(static_cast<int64_t>(code.size()));
    row.insert(row.end(), code.begin(), code.end());
  }
  return row;
}
std::vector<ShapeExpr> dims_from_code(const std::vector<int64_t>& row) {
  std::vector<ShapeExpr> out;
  if (row.empty()) throw std::invalid_argument("CustomKernel state: empty dims");
  size_t i = 1;
  for (int64_t k = 0; k < row[0]; ++k) {
    if (i >= row.size()) throw std::invalid_argument("CustomKernel state: truncated dims");
    int64_t len = row[i++];
    if (len < 0 || i + len > row.size())
      throw std::invalid_argument("CustomKernel state: truncated dims");
    out.push_back(
        ShapeExpr::from_code(std::vector<int64_t>(row.begin() + i, row.begin() + i + len)));
    i += len;
  }
  return out;
}
}  // namespace

PrimitiveState CustomKernel::state() const {
  PrimitiveState s(1);
  const KernelSpec& k = *spec_;
  s.set("name", k.name)
      .set("input_names", k.input_names)
      .set("output_names", k.output_names)
      .set("source", k.source)
      .set("header", k.header)
      .set("ensure_row_contiguous", k.ensure_row_contiguous)
      .set("atomic_outputs", k.atomic_outputs)
      .set("math_mode", k.math_mode)
      .set("robust", k.robust);
  std::vector<std::string> dtypes, tnames;
  std::vector<int64_t> tkinds, tvalues;
  for (auto d : output_dtypes_) dtypes.emplace_back(dtype_name(d));
  for (auto& [n, v] : template_args_) {
    tnames.push_back(n);
    if (auto* t = std::get_if<Dtype>(&v)) {
      tkinds.push_back(0);
      tvalues.push_back(static_cast<int64_t>(*t));
    } else if (auto* b = std::get_if<bool>(&v)) {
      tkinds.push_back(1);
      tvalues.push_back(*b);
    } else {
      tkinds.push_back(2);
      tvalues.push_back(std::get<int>(v));
    }
  }
  s.set("output_dtypes", dtypes)
      .set("template_names", tnames)
      .set("template_kinds", tkinds)
      .set("template_values", tvalues);
  s.set("grid", dims_code({grid_[0], grid_[1], grid_[2]}))
      .set("threadgroup", dims_code({threadgroup_[0], threadgroup_[1], threadgroup_[2]}));
  std::vector<std::vector<int64_t>> shapes;
  for (auto& o : output_shapes_) shapes.push_back(dims_code(o));
  s.set("output_shapes", shapes);
  s.set("has_init_value", init_value_.has_value()).set("init_value", init_value_.value_or(0.0));
  return s;
}

std::shared_ptr<CustomKernel> CustomKernel::from_state(const PrimitiveState& s) {
  if (s.version() != 1)
    throw std::invalid_argument(
        fmt::format("CustomKernel state version {} is not supported (1 is)", s.version()));
  using Strings = std::vector<std::string>;
  using Ints = std::vector<int64_t>;
  auto spec = std::make_shared<KernelSpec>();
  spec->name = s.get_string("name");
  spec->input_names = s.get_as<Strings>("input_names");
  spec->output_names = s.get_as<Strings>("output_names");
  spec->source = s.get_string("source");
  spec->header = s.get_string("header");
  spec->ensure_row_contiguous = s.get_as<bool>("ensure_row_contiguous");
  spec->atomic_outputs = s.get_as<bool>("atomic_outputs");
  spec->math_mode = s.get_string("math_mode");
  check_math_mode(spec->math_mode);
  spec->robust = s.get_as<bool>("robust");
  std::vector<Dtype> dtypes;
  for (auto& d : s.get_as<Strings>("output_dtypes")) dtypes.push_back(dtype_from_name(d));
  const auto& tn = s.get_as<Strings>("template_names");
  const auto& tk = s.get_as<Ints>("template_kinds");
  const auto& tv = s.get_as<Ints>("template_values");
  if (tn.size() != tk.size() || tn.size() != tv.size())
    throw std::invalid_argument("CustomKernel state: template argument lists differ in length");
  TemplateArgs targs;
  for (size_t i = 0; i < tn.size(); ++i) {
    if (tk[i] == 0) {
      if (tv[i] < 0 || tv[i] > static_cast<int64_t>(Dtype::complex64))
        throw std::invalid_argument("CustomKernel state: bad dtype template argument");
      targs.emplace_back(tn[i], static_cast<Dtype>(tv[i]));
    } else if (tk[i] == 1) {
      targs.emplace_back(tn[i], tv[i] != 0);
    } else {
      targs.emplace_back(tn[i], static_cast<int>(tv[i]));
    }
  }
  auto g = dims_from_code(s.get_as<Ints>("grid"));
  auto t = dims_from_code(s.get_as<Ints>("threadgroup"));
  if (g.size() != 3 || t.size() != 3)
    throw std::invalid_argument("CustomKernel state: grid and threadgroup need 3 dimensions");
  std::vector<std::vector<ShapeExpr>> shapes;
  for (auto& row : s.get_as<std::vector<Ints>>("output_shapes"))
    shapes.push_back(dims_from_code(row));
  if (shapes.size() != spec->output_names.size() || dtypes.size() != spec->output_names.size())
    throw std::invalid_argument(
        "CustomKernel state: output shapes/dtypes do not match the outputs");
  std::optional<double> init;
  if (s.get_as<bool>("has_init_value")) init = s.get_as<double>("init_value");
  return std::make_shared<CustomKernel>(spec, std::move(dtypes), std::move(targs),
                                        DimsExpr{g[0], g[1], g[2]}, DimsExpr{t[0], t[1], t[2]},
                                        std::move(shapes), init);
}

ALLOY_REGISTER_PRIMITIVE(CustomKernel,
                         [](const PrimitiveState& s) { return CustomKernel::from_state(s); })

namespace {
// Inputs arrive evaluated, and row-contiguous where the kernel asks for it (the call inserted the
// copies): evaluation never evaluates.

// Bytes of the shape/strides/ndim parameter of an input of `ndim` dimensions (a 0-d input has a
// one-element shape and strides: Metal never sees an empty buffer).
size_t shape_param_bytes(msl::BindingKind kind, int ndim) {
  size_t n = static_cast<size_t>(std::max(1, ndim));
  return kind == msl::BindingKind::input_shape     ? n * 4
         : kind == msl::BindingKind::input_strides ? n * 8
                                                   : 4;
}

// A shape/strides/ndim parameter (`name_shape` ...) of input `a` in MLX's types, into `out`.
size_t write_shape_param(msl::BindingKind kind, const Array& a, void* out) {
  int nd = a.ndim();
  if (kind == msl::BindingKind::input_ndim) {
    int32_t v = nd;
    std::memcpy(out, &v, 4);
    return 4;
  }
  if (kind == msl::BindingKind::input_shape) {
    auto* p = static_cast<int32_t*>(out);
    for (int d = 0; d < nd; ++d) p[d] = static_cast<int32_t>(a.shape()[d]);
    if (nd == 0) p[0] = 1;
    return static_cast<size_t>(std::max(1, nd)) * 4;
  }
  auto* p = static_cast<int64_t*>(out);
  for (int d = 0; d < nd; ++d) p[d] = a.strides()[d];
  if (nd == 0) p[0] = 0;
  return static_cast<size_t>(std::max(1, nd)) * 8;
}
}  // namespace

bool shape_params_fit(const std::vector<Array>& in, const std::vector<msl::Binding>& bindings,
                      size_t capacity) {
  size_t bytes = 0;
  for (const auto& b : bindings) {
    if (b.kind == msl::BindingKind::input || b.kind == msl::BindingKind::output) continue;
    bytes += (shape_param_bytes(b.kind, in[b.index].ndim()) + 15) / 16 * 16;
  }
  return bytes <= capacity;
}

void bind_call(LaunchBuilder& launch, const KernelSpec& spec,
               const std::vector<msl::Binding>& bindings, const std::vector<Array>& in,
               const std::vector<Array>& outputs, Device device, bool shapes_in_block) {
  alignas(16) unsigned char param[8 * 64];
  for (size_t i = 0; i < bindings.size(); ++i) {
    const auto& b = bindings[i];
    auto n = static_cast<uint32_t>(i);
    switch (b.kind) {
      case msl::BindingKind::input: {
        const Array& a = in[b.index];
        // A small row-contiguous host array bound to a GPU kernel (MetalKernel::operator()
        // leaves those on the host): its bytes travel with the launch.
        if (a.device().type != device.type)
          launch.bytes(n, node_of(a)->data(), a.nbytes());
        else
          launch.memory(n, a);
        break;
      }
      case msl::BindingKind::output:
        launch.memory(n, outputs[b.index]);
        break;
      default: {
        const Array& a = in[b.index];
        if (a.ndim() > 64)
          throw std::invalid_argument(fmt::format(
              "[metal_kernel] kernel '{}': input '{}' has {} dimensions; at most 64 are supported",
              spec.name, spec.input_names[b.index], a.ndim()));
        launch.bytes(n, param, write_shape_param(b.kind, a, param), shapes_in_block);
      }
    }
  }
}

ALLOY_HOT void CustomKernel::eval_cpu(const std::vector<Array>& inputs,
                                      std::vector<Array>& outputs) {
  eval(inputs, outputs);
}

ALLOY_HOT void CustomKernel::eval_gpu(const std::vector<Array>& inputs,
                                      std::vector<Array>& outputs) {
  eval(inputs, outputs);
}

bool CustomKernel::runs_inline(const std::vector<Array>& in) const {
  // Nothing here may wait or throw: anything unusual is left to eval() on the usual path (its
  // errors included).
  if (!hint_matches(in) || !hint_->built(msl::Target::cpu, robust_)) return false;
  if (fixed_geometry_) return fixed_inline_;
  try {
    auto [grid, tg] = geometry(in);
    return launch_runs_inline(grid, tg);
  } catch (...) {
    return false;
  }
}

/// A primitive's launch prepared once (Backend::prepare) and what it was prepared for: the
/// device, the inputs' dtypes, devices and layouts (the shape parameters and the variant are
/// constants of the prepared launch), and the array each memory argument takes.
struct LaunchRecord {
  static constexpr int kNotMemory = std::numeric_limits<int>::min();
  struct Input {
    Dtype dtype;
    Device device;
    Shape shape;
    Strides strides;
  };
  Device device;
  std::vector<Input> inputs;
  std::vector<int> sources;  // per [[buffer(n)]]: input k as k, output k as -1 - k, or kNotMemory
  std::unique_ptr<PreparedLaunch> prepared;

  ALLOY_HOT bool matches(Device d, const std::vector<Array>& in) const {
    if (d != device || in.size() != inputs.size()) return false;
    for (size_t i = 0; i < in.size(); ++i) {
      const ArrayNode& n = *node_of(in[i]);
      const Input& r = inputs[i];
      if (n.dtype != r.dtype || n.device != r.device || !same_list(n.shape, r.shape) ||
          !same_list(n.strides, r.strides))
        return false;
    }
    return true;
  }
  ALLOY_HOT bool launch(Backend& be, const std::vector<Array>& in,
                        const std::vector<Array>& outputs, const std::string& label) const {
    const void* data[LaunchBuilder::kMaxArgs];
    for (size_t n = 0; n < sources.size(); ++n) {
      int s = sources[n];
      if (s >= 0)
        data[n] = node_of(in[static_cast<size_t>(s)])->data();
      else if (s != kNotMemory)
        data[n] = node_of(outputs[static_cast<size_t>(-1 - s)])->data();
    }
    return launch_prepared(be, *prepared, data, "metal_kernel", label);
  }
};

CustomKernel::RecordSlot::~RecordSlot() {
  delete record.load();
}

void CustomKernel::keep_launch(LaunchBuilder& launch, const CompiledKernel& k,
                               const std::vector<Array>& in,
                               const std::vector<msl::Binding>& bindings, Device device) {
  // A host array given to a GPU kernel travels by value: its bytes are no constant.
  for (auto& a : in)
    if (a.device() != device) return;
  auto prepared = launch.prepare(k, device);
  if (!prepared) return;  // (the CPU's backend prepares none)
  auto r = std::make_unique<LaunchRecord>();
  r->device = device;
  r->prepared = std::move(prepared);
  for (auto& a : in) {
    const ArrayNode& n = *node_of(a);
    r->inputs.push_back({n.dtype, n.device, n.shape, n.strides});
  }
  r->sources.assign(bindings.size(), LaunchRecord::kNotMemory);
  for (size_t i = 0; i < bindings.size(); ++i) {
    const auto& b = bindings[i];
    if (b.kind == msl::BindingKind::input)
      r->sources[i] = static_cast<int>(b.index);
    else if (b.kind == msl::BindingKind::output)
      r->sources[i] = -1 - static_cast<int>(b.index);
  }
  const LaunchRecord* none = nullptr;
  if (launch_.record.compare_exchange_strong(none, r.get(), std::memory_order_acq_rel)) r.release();
}

ALLOY_HOT void CustomKernel::eval(const std::vector<Array>& in, std::vector<Array>& outputs) {
  Device device = outputs.front().device();
  Backend& be = backend(device);
  for (auto& o : outputs) allocate_output(o);
  if (init_value_)
    for (auto& o : outputs) fill_value(o, *init_value_);
  // A repeated evaluation on inputs laid out as when its launch was prepared: the addresses
  // change, nothing else (docs/architecture.md, "The prepared launch").
  if (const LaunchRecord* r = launch_.record.load(std::memory_order_acquire);
      r && r->matches(device, in) && r->launch(be, in, outputs, spec_->name))
    return;
  std::shared_ptr<KernelVariant> holder;
  KernelVariant& variant_ = variant_ref(in, holder);
  const auto& bindings = variant_.generated.bindings;
  auto [grid_, threadgroup_] =
      fixed_geometry_ ? std::pair{fixed_grid_, fixed_threadgroup_} : geometry(in);
  // Shape parameters too large for the launch's parameter block (many inputs of many
  // dimensions): the program variant that reads them from wherever the launch puts them.
  bool block = be.type() == Device::Type::gpu;
  bool spill = block && !shape_params_fit(in, bindings, be.by_value_capacity());
  const Program& program =
      variant_.program(block ? msl::Target::cuda : msl::Target::cpu, robust_, spill);
  const CompiledKernel& k = program.kernels().front();
  LaunchBuilder launch("metal_kernel", spec_->name);
  bind_call(launch, *spec_, bindings, in, outputs, device, block && !spill);
  if (grid_[0] == 0 || grid_[1] == 0 || grid_[2] == 0) return;  // nothing runs
  launch.dims(grid_, effective_threadgroup(grid_, threadgroup_));
  launch.launch(k, device, robust_, [&](uint32_t b) { return buffer_name(*spec_, bindings, b); });
  // The second evaluation (a repeated call's) prepares the launch for the next ones. Only with
  // the hint's variant, which this primitive keeps alive with its programs.
  if (!robust_ && !holder && launch_.evaluations.load(std::memory_order_relaxed) < 2 &&
      launch_.evaluations.fetch_add(1, std::memory_order_relaxed) == 1)
    keep_launch(launch, k, in, bindings, device);
}

}  // namespace kernel

// ---- public API ------------------------------------------------------------------------------

MetalKernel::MetalKernel(std::shared_ptr<const KernelSpec> spec)
    : spec_(std::move(spec)), variants_(std::make_shared<detail::KernelVariants>()) {
  variants_->spec_key = kernel::spec_content_key(*spec_);
}

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
  if (!gpu_compiler_available(&why)) return why.empty() ? "NVRTC not found" : why;
  SourceMap map;
  auto tr = call_gpu_translation(k, inputs, call, &map);
  compile_cubin(tr, k.spec().math_mode, map, arch);
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
                                                      !shape_params_fit(inputs, gen.bindings,
                                                                        ALLOY_CUDA_INLINE_BYTES))));
}

msl::GeneratedSource kernel::call_generated_source(const MetalKernel& k,
                                                   const std::vector<Array>& inputs,
                                                   const KernelCall& call) {
  return msl::write_kernel_source(k.spec(), signature_inputs(inputs), call.output_dtypes,
                                  call.template_args);
}

std::string MetalKernel::metal_source(const std::vector<Array>& inputs,
                                      const KernelCall& call) const {
  return msl::write_kernel_source(*spec_, kernel::signature_inputs(inputs), call.output_dtypes,
                                  call.template_args)
      .source;
}

std::vector<Array> MetalKernel::operator()(const std::vector<Array>& inputs,
                                           const KernelCall& call) const {
  return (*this)(std::vector<Array>(inputs), call);
}

ALLOY_HOT std::vector<Array> MetalKernel::operator()(std::vector<Array>&& inputs,
                                                     const KernelCall& call) const {
  const KernelSpec& spec = *spec_;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].valid())
      throw std::invalid_argument(fmt::format(
          "[metal_kernel] kernel '{}': input {} is an invalid (empty) array", spec.name,
          i < spec.input_names.size() ? "'" + spec.input_names[i] + "'" : std::to_string(i)));
  if (call.output_shapes.size() != spec.output_names.size() && call.output_shape_exprs.empty())
    throw std::invalid_argument(
        fmt::format("[metal_kernel] Expected `output_shapes` to have size {} but got size {}.\n",
                    spec.output_names.size(), call.output_shapes.size()));
  if (call.output_dtypes.size() != spec.output_names.size())
    throw std::invalid_argument(
        fmt::format("[metal_kernel] Expected `output_dtypes` to have size {} but got size {}.\n",
                    spec.output_names.size(), call.output_dtypes.size()));
  // (default_device() only when no device is given: value_or would call it every time.)
  Device dev = call.stream ? call.stream->device : call.device ? *call.device : default_device();
  if (call.stream && call.device && *call.device != call.stream->device)
    throw std::invalid_argument(
        fmt::format("[metal_kernel] `device` ({}) and `stream` ({}) disagree: give one of them",
                    call.device->str(), call.stream->str()));
  if (dev.type == Device::Type::gpu && !gpu_available())
    throw std::invalid_argument("[metal_kernel] no GPU is available (no CUDA driver or device)");
  for (auto& a : inputs) {
    if (dev.type == Device::Type::gpu && a.dtype() == Dtype::float64)
      throw std::invalid_argument(
          "[metal_kernel] float64 inputs are not supported on the GPU "
          "(Metal has no double)");
  }
  // Inputs live on the kernel's device, except small row-contiguous host arrays (scalars such as
  // Python floats) bound to a GPU kernel: their bytes go with the launch (bind_gpu_call). Copies
  // to row-major and device moves are lazy graph nodes.
  // (In place: the list is this call's own, and becomes the pending op's.)
  std::vector<Array>& in = inputs;
  for (auto& a : in) {
    bool travels = dev.type == Device::Type::gpu && a.device().type == Device::Type::cpu &&
                   a.size() < 8 && a.is_row_contiguous();
    if (a.device() != dev && !travels) a = a.to(dev);
    if (spec.ensure_row_contiguous && !a.is_row_contiguous()) a = a.contiguous();
  }
  bool plain =
      !call.grid_expr && !call.threadgroup_expr && call.output_shape_exprs.empty() && !call.verbose;
  if (plain) {
    std::shared_ptr<kernel::CustomKernel> prim;
    {
      std::lock_guard lock(variants_->mu);
      if (variants_->plan.matches(dev, in, call)) prim = variants_->plan.primitive;
    }
    if (prim) {
      // Validated when the plan was made (the limit on threads per launch included, read from
      // the environment then).
      const auto& shapes = prim->call_shapes();
      const auto& dtypes = prim->output_dtypes();
      return make_pending_borrowed(std::move(prim), std::move(in), shapes, dtypes,
                                   call.stream ? *call.stream : default_stream(dev));
    }
  }
  // Geometry: numbers, or expressions of the input shapes (kept as such in the primitive).
  DimsExpr grid = call.grid_expr ? *call.grid_expr : kernel::constant_dims(call.grid);
  DimsExpr tg =
      call.threadgroup_expr ? *call.threadgroup_expr : kernel::constant_dims(call.threadgroup);
  std::vector<std::vector<ShapeExpr>> shapes;
  if (!call.output_shape_exprs.empty()) {
    if (call.output_shape_exprs.size() != spec.output_names.size())
      throw std::invalid_argument(fmt::format(
          "[metal_kernel] Expected `output_shape_exprs` to have size {} but got size {}.\n",
          spec.output_names.size(), call.output_shape_exprs.size()));
    shapes = call.output_shape_exprs;
  } else {
    for (auto& s : call.output_shapes) shapes.emplace_back(s.begin(), s.end());
  }
  // The generated source for these inputs (cached by content): argument errors (input count,
  // name clashes, template arguments) surface at the call.
  std::string vkey = kernel::variant_key(in, call.output_dtypes, call.template_args);
  std::shared_ptr<kernel::KernelVariant> variant;
  {
    std::lock_guard lock(variants_->mu);
    if (variants_->last && variants_->last_key == vkey) variant = variants_->last;
  }
  if (!variant) {
    variant = kernel::variant_for_key(spec_, variants_->spec_key, vkey, in, call.output_dtypes,
                                      call.template_args);
    std::shared_ptr<kernel::KernelVariant> replaced;  // released after the lock
    std::lock_guard lock(variants_->mu);
    variants_->last_key = vkey;
    replaced = std::exchange(variants_->last, variant);
  }
  auto prim = std::make_shared<kernel::CustomKernel>(spec_, call.output_dtypes, call.template_args,
                                                     grid, tg, std::move(shapes), call.init_value,
                                                     variants_->spec_key, variant, std::move(vkey));
  // Validates the geometry and computes the output shapes now: errors at the call, not later.
  prim->geometry(in);
  auto out_shapes = prim->output_shapes(in);
  if (call.verbose) {
    std::string listing = msl::verbose_listing(spec.name, variant->generated.source);
    std::fwrite(listing.data(), 1, listing.size(), stdout);
    std::fflush(stdout);
  }
  // Nothing is compiled here: the compile of the program this call needs (when not built yet)
  // is queued on the compile pool, so that kernels called one after another and evaluated
  // together compile in parallel; a compile queued alone is left to the evaluation. Compile
  // errors surface at the evaluation, as before.
  prim->start_compile(in, dev);
  // Checked once here: a repeated call borrows them unchecked (make_pending_borrowed).
  check_output_sizes(out_shapes, prim->output_dtypes());
  prim->keep_call_shapes(std::move(out_shapes));
  const auto& kept_shapes = prim->call_shapes();
  const auto& kept_dtypes = prim->output_dtypes();
  if (plain) {
    auto& plan = variants_->plan;
    std::shared_ptr<kernel::CustomKernel> replaced;  // released after the lock
    std::lock_guard lock(variants_->mu);
    plan.device = dev;
    plan.input_dtypes.clear();
    plan.input_shapes.clear();
    for (auto& a : in) {
      plan.input_dtypes.push_back(a.dtype());
      plan.input_shapes.push_back(a.shape());
    }
    plan.output_shapes = call.output_shapes;
    plan.output_dtypes = call.output_dtypes;
    plan.grid = call.grid;
    plan.threadgroup = call.threadgroup;
    plan.template_args = call.template_args;
    plan.init_value = call.init_value;
    replaced = std::exchange(plan.primitive, prim);
  }
  return make_pending_borrowed(std::move(prim), std::move(in), kept_shapes, kept_dtypes,
                               call.stream ? *call.stream : default_stream(dev));
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
