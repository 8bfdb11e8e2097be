#include "backend/cuda/jit.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <unordered_set>

#include "alloy/errors.h"
#include "cache/compile_cache.h"
#include "core/prelude_files.h"
#include "core/trace.h"
#include "msl/prelude_select.h"

namespace alloy::cuda {
namespace {

struct Prelude {
  std::vector<nvrtc::Header> headers;  // point into prelude::embedded_files()
  std::string hash;
};

const Prelude& prelude() {
  static const Prelude* p = [] {
    auto* p = new Prelude();
    for (const auto& f : prelude::embedded_files())
      p->headers.push_back({f.path.data(), f.text.data()});  // string literals: NUL-terminated
    p->hash = std::string(prelude::embedded_hash());
    return p;
  }();
  return *p;
}

std::string cache_target(const nvrtc::Target& t) {
  return t.cubin ? "cuda-" + t.arch : "cuda-" + t.arch + "-ptx";
}

// "--std=c++20" -> "--std": options that replace a base option of the same name.
std::string_view option_name(std::string_view o) {
  while (!o.empty() && o.front() == '-') o.remove_prefix(1);
  return o.substr(0, o.find('='));
}

// The base options not overridden by the kernel's own, then the kernel's (all but the target).
std::vector<std::string> effective_options(const KernelSource& k) {
  std::vector<std::string> out;
  for (const auto& b : base_options()) {
    bool overridden = false;
    for (const auto& o : k.options) overridden |= option_name(o) == option_name(b);
    if (!overridden) out.push_back(b);
  }
  out.insert(out.end(), k.options.begin(), k.options.end());
  return out;
}

std::string joined_options(const KernelSource& k) {
  std::string flags;
  for (const auto& o : effective_options(k)) flags += o + '\n';
  return flags;
}

// NVRTC's options for `k` and `t` (the PCH's come after them).
std::vector<std::string> nvrtc_options(const KernelSource& k, const nvrtc::Target& t) {
  std::vector<std::string> options;
  options.push_back("--gpu-architecture=" + t.arch);
  for (auto& o : effective_options(k)) options.push_back(std::move(o));
  return options;
}

// The prelude's headers for `source`: metal/math.h with the translation's math selection already
// evaluated (the same program, fewer directives for NVRTC's preprocessor: msl::math_header_for),
// held by `math_h`.
std::vector<nvrtc::Header> nvrtc_headers(const std::string& source, std::string* math_h) {
  std::vector<nvrtc::Header> headers = prelude().headers;
  for (auto& h : headers)
    if (std::string_view(h.name) == "metal/math.h") {
      *math_h = msl::math_header_for(source, h.text);
      if (!math_h->empty()) h.text = math_h->c_str();
    }
  return headers;
}

bool is_elf(const std::vector<char>& b) {
  return b.size() >= 4 && std::memcmp(b.data(),
                                      "\x7f"
                                      "ELF",
                                      4) == 0;
}

// The image in the disk cache, if any (verified by the cache; a cubin must also look like one).
std::optional<std::vector<char>> from_disk(const nvrtc::Target& t, const std::string& key) {
  auto& cache = cache::CompileCache::global();
  auto bytes = cache.load(cache_target(t), key);
  if (bytes && t.cubin && !is_elf(*bytes)) {
    cache.remove(cache_target(t), key);
    return std::nullopt;
  }
  return bytes;
}

CompiledImage compile_for(const KernelSource& k, const nvrtc::Target& t, std::string key) {
  CompiledImage out;
  out.target = t;
  out.key = std::move(key);
  if (auto bytes = from_disk(t, out.key)) {
    out.bytes = std::move(*bytes);
    out.from_disk = true;
    return out;
  }
  std::vector<std::string> options = nvrtc_options(k, t);
  // NVRTC's automatic PCH of the prelude (nvrtc::auto_pch_options): not in the key, since it
  // changes no output.
  nvrtc::AutoPch pch = nvrtc::auto_pch(k.source, options);
  for (auto& o : pch.options) options.push_back(std::move(o));
  std::string image;
  auto t0 = std::chrono::steady_clock::now();
  std::string math_h;
  std::vector<nvrtc::Header> headers = nvrtc_headers(k.source, &math_h);
  try {
    image = nvrtc::compile(pch.source.empty() ? k.source : pch.source, k.program_name, headers,
                           options, t.cubin);
  } catch (const nvrtc::CompileFailure& e) {
    throw CompileError(
        k.name,
        fmt::format("NVRTC failed to compile kernel {} for {}:\n{}", k.name, t.arch, e.log()),
        e.log());
  }
  double compile_ms = trace::ms_since(t0);
  auto t1 = std::chrono::steady_clock::now();
  out.bytes.assign(image.begin(), image.end());
  cache::CompileCache::global().store(cache_target(t), out.key, out.bytes);
  if (trace::build())
    std::fprintf(stderr, "alloy: %s: NVRTC %.3f ms (%zu bytes), cache store %.3f ms\n",
                 k.name.c_str(), compile_ms, out.bytes.size(), trace::ms_since(t1));
  return out;
}

std::shared_ptr<Module> load_image(Context& ctx, const KernelSource& k, CompiledImage image) {
  const Driver& drv = ctx.driver();
  auto m = std::make_shared<Module>();
  m->target = cache_target(image.target);
  m->key = image.key;
  m->from_disk = image.from_disk;
  ctx.make_current();
  CUresult r = drv.cuModuleLoadData(&m->handle, image.bytes.data());
  if (r != CUDA_SUCCESS) {
    ctx.check_usable();
    if (image.from_disk) {
      // A cached image this driver rejects: drop it so the next attempt recompiles.
      cache::CompileCache::global().remove(m->target, m->key);
    }
    std::string hint;
    if (r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION || r == CUDA_ERROR_INVALID_IMAGE ||
        r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_PTX) {
      nvrtc::Version v = nvrtc::version();
      hint = fmt::format(
          " (NVRTC {}.{} at {} made it; the driver is CUDA {}.{}: a driver older "
          "than NVRTC may not load its output)",
          v.major, v.minor, nvrtc::library_path(), drv.version / 1000, drv.version % 1000 / 10);
    }
    throw Error(k.name, fmt::format("cannot load kernel {} for {}: {}{}", k.name, image.target.arch,
                                    error_string(drv, r), hint));
  }
  // Defined when a threadgroup object of the module lives in dynamic shared memory.
  CUdeviceptr marker = 0;
  size_t marker_bytes = 0;
  bool large_threadgroup =
      drv.cuModuleGetGlobal(&marker, &marker_bytes, m->handle,
                            "_ZN12alloy_target8tg_largeILi1EEE") == CUDA_SUCCESS;
  for (const auto& entry : k.entries) {
    Function& f = m->functions.emplace_back();
    f.large_threadgroup = large_threadgroup;
    f.entry = entry;
    f.kernel = k.name;
    f.one_group_per_block = k.one_group_per_block;
    r = drv.cuModuleGetFunction(&f.handle, m->handle, entry.c_str());
    if (r != CUDA_SUCCESS) {
      throw Error(k.name, fmt::format("kernel {}: entry {} not found in the compiled module: {}",
                                      k.name, entry, error_string(drv, r)));
    }
    auto attr = [&](int a) {
      int v = 0;
      ctx.check(drv.cuFuncGetAttribute(&v, a, f.handle), "cuFuncGetAttribute");
      return v;
    };
    f.max_threads = attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    f.static_shared = attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    f.num_regs = attr(CU_FUNC_ATTRIBUTE_NUM_REGS);
    f.local_bytes = attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  }
  return m;
}

}  // namespace

const std::vector<std::string>& base_options() {
  // -default-device: functions and namespace-scope variables of the user's header need no
  // __device__ (Metal has no host code); C++17 is what NVRTC and Metal's C++14 both accept.
  static const std::vector<std::string>& options =
      *new std::vector<std::string>({"--std=c++17", "-default-device"});
  return options;
}

std::string cache_key(const KernelSource& k, const nvrtc::Target& t) {
  return cache::key_hex(k.source, cache_target(t), nvrtc::compiler_id(), joined_options(k),
                        prelude().hash);
}

CompiledImage compile(const KernelSource& k, const nvrtc::Target& t) {
  return compile_for(k, t, cache_key(k, t));
}

nvrtc::WarmUp warm_up_compile(const KernelSource& k, const nvrtc::Target& t) {
  nvrtc::WarmUp w;
  w.source = k.source;
  w.program_name = k.program_name;
  w.options = nvrtc_options(k, t);
  w.cubin = t.cubin;
  std::string math_h;
  for (const auto& h : nvrtc_headers(k.source, &math_h)) w.headers.emplace_back(h.name, h.text);
  return w;
}

namespace {
// The memory level is keyed by what the source and options give (the compiler is fixed for the
// process) and by the entries, since a Module holds the entries it was asked for.
std::string memory_key(const KernelSource& k) {
  std::string entries;
  for (const auto& e : k.entries) entries += e + '\n';
  return cache::hash_hex({k.source, joined_options(k), entries});
}

// Memory keys of the modules load() has returned in this process.
struct Loaded {
  std::mutex mu;
  std::unordered_set<std::string> keys;
};
Loaded& loaded() {
  static Loaded* l = new Loaded();  // leaked: background compiles may run during exit
  return *l;
}
}  // namespace

bool is_loaded_or_cached(Context& ctx, const KernelSource& k) {
  {
    Loaded& l = loaded();
    std::lock_guard lock(l.mu);
    if (l.keys.count(memory_key(k))) return true;
  }
  auto& cache = cache::CompileCache::global();
  if (!cache.has_disk()) return false;
  nvrtc::Target native{ctx.info().arch, true};
  std::error_code ec;
  return std::filesystem::exists(cache.entry_path(cache_target(native), cache_key(k, native)), ec);
}

std::shared_ptr<const Module> load(Context& ctx, const KernelSource& k) {
  const DeviceInfo& info = ctx.info();
  std::string mem_key = memory_key(k);
  // Modules belong to one device's context: one memory entry per device (the disk cache, of
  // cubins, is shared by devices of one architecture).
  std::string mem_target = "cuda-" + info.arch + "-module";
  if (info.ordinal != 0) mem_target += "-gpu" + std::to_string(info.ordinal);
  auto any = cache::CompileCache::global().get_or_build(mem_target, mem_key, [&] {
    // Try the device's own architecture in the disk cache before loading NVRTC (loading it
    // takes milliseconds); only a miss, or a device newer than NVRTC, needs NVRTC itself.
    auto t0 = std::chrono::steady_clock::now();
    nvrtc::Target native{info.arch, true};
    std::string key = cache_key(k, native);
    if (auto bytes = from_disk(native, key)) {
      double disk_ms = trace::ms_since(t0);
      auto t1 = std::chrono::steady_clock::now();
      CompiledImage image{std::move(*bytes), native, key, true};
      auto m = load_image(ctx, k, std::move(image));
      if (trace::build())
        std::fprintf(stderr,
                     "alloy: %s: cubin from disk %.3f ms (key and read), module load %.3f ms\n",
                     k.name.c_str(), disk_ms, trace::ms_since(t1));
      return std::static_pointer_cast<void>(m);
    }
    nvrtc::Target t = nvrtc::target_for(info.cc_major, info.cc_minor);
    CompiledImage image = compile_for(k, t, t.arch == native.arch ? key : cache_key(k, t));
    auto t1 = std::chrono::steady_clock::now();
    auto m = load_image(ctx, k, std::move(image));
    if (trace::build())
      std::fprintf(stderr, "alloy: %s: module load %.3f ms\n", k.name.c_str(), trace::ms_since(t1));
    return std::static_pointer_cast<void>(m);
  });
  {
    Loaded& l = loaded();
    std::lock_guard lock(l.mu);
    l.keys.insert(std::move(mem_key));
  }
  return std::static_pointer_cast<const Module>(any);
}

}  // namespace alloy::cuda
