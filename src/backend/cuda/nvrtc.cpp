#include "backend/cuda/nvrtc.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <glob.h>
#include <signal.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <unordered_map>

#include "alloy/errors.h"
#include "core/env.h"
#include "core/files.h"
#include "core/trace.h"
#include "msl/prelude_select.h"

#ifndef ALLOY_CUDA_HOME_DEFAULT
#define ALLOY_CUDA_HOME_DEFAULT "/usr/local/cuda"
#endif

namespace alloy::cuda::nvrtc {
namespace {

// nvrtc.h's types, declared here so the library builds without the CUDA toolkit.
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
constexpr nvrtcResult NVRTC_SUCCESS = 0;
constexpr nvrtcResult NVRTC_ERROR_INVALID_OPTION = 5;
constexpr nvrtcResult NVRTC_ERROR_COMPILATION = 6;

struct Library {
  void* handle = nullptr;
  std::string path;
  std::string error;
  Version version;
  std::vector<int> archs;

  const char* (*nvrtcGetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*nvrtcVersion)(int*, int*) = nullptr;
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int*) = nullptr;
  nvrtcResult (*nvrtcGetSupportedArchs)(int*) = nullptr;
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char* src, const char* name,
                                    int num_headers, const char* const* headers,
                                    const char* const* include_names) = nullptr;
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*) = nullptr;
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int num_options,
                                     const char* const* options) = nullptr;
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*) = nullptr;
};

void add_glob(const std::string& pattern, std::vector<std::string>* out) {
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    // Newest Python (and library version) first: glob sorts ascending.
    for (size_t i = g.gl_pathc; i-- > 0;) out->push_back(g.gl_pathv[i]);
  }
  globfree(&g);
}

// site-packages folders that may hold the nvidia-cuda-nvrtc wheel.
std::vector<std::string> python_site_dirs() {
  std::vector<std::string> dirs;
  // The folder that holds Alloy itself, when it was installed as a Python package
  // (.../site-packages/alloy/_alloy.so): the wheel then sits beside it.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&python_site_dirs), &info) && info.dli_fname) {
    std::filesystem::path p(info.dli_fname);
    for (auto dir = p.parent_path(); !dir.empty() && dir != dir.root_path();
         dir = dir.parent_path()) {
      auto name = dir.filename().string();
      if (name == "site-packages" || name == "dist-packages") {
        dirs.push_back(dir.string());
        break;
      }
    }
  }
  std::vector<std::string> prefixes;
  for (const char* var : {"VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME"}) {
    if (auto v = env::text(var)) prefixes.push_back(*v);
  }
  if (auto home = env::text("HOME")) {
    prefixes.push_back(*home + "/.local");
    add_glob(*home + "/.pyenv/versions/*", &prefixes);
  }
  prefixes.push_back("/usr/local");
  prefixes.push_back("/usr");
  for (const auto& prefix : prefixes) {
    add_glob(prefix + "/lib/python3*/site-packages", &dirs);
    add_glob(prefix + "/lib/python3*/dist-packages", &dirs);
  }
  dirs.push_back("/usr/lib/python3/dist-packages");
  return dirs;
}

// Every place tried, most specific first.
// The explicit and CUDA-home candidates: files, in the order they are tried.
std::vector<std::string> file_candidates() {
  std::vector<std::string> c;
  if (auto explicit_path = env::text("ALLOY_NVRTC_LIBRARY")) c.push_back(*explicit_path);
  std::vector<std::string> homes;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = env::text(var)) homes.push_back(*v);
  }
  homes.push_back(ALLOY_CUDA_HOME_DEFAULT);
  for (const auto& home : homes) {
    for (const char* dir : {"/lib64/", "/lib/"}) {
      for (const char* name : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"}) {
        c.push_back(home + dir + name);
      }
    }
  }
  return c;
}

// Every candidate in order: the files above, then sonames (the loader's search), then conda and
// Python packages (finding those globs folders: only done when needed).
std::vector<std::string> candidates() {
  std::vector<std::string> c = file_candidates();
  for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
    c.push_back(soname);
  }
  if (auto conda = env::text("CONDA_PREFIX")) {
    c.push_back(*conda + "/lib/libnvrtc.so.13");
    c.push_back(*conda + "/lib/libnvrtc.so.12");
  }
  for (const auto& site : python_site_dirs()) {
    c.push_back(site + "/nvidia/cu13/lib/libnvrtc.so.13");
    c.push_back(site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.13");
    c.push_back(site + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
  }
  return c;
}

template <class Fn>
bool bind(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  return fn != nullptr;
}

bool bind_all(Library& l) {
  void* h = l.handle;
  return bind(h, l.nvrtcGetErrorString, "nvrtcGetErrorString") &&
         bind(h, l.nvrtcVersion, "nvrtcVersion") &&
         bind(h, l.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs") &&
         bind(h, l.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs") &&
         bind(h, l.nvrtcCreateProgram, "nvrtcCreateProgram") &&
         bind(h, l.nvrtcDestroyProgram, "nvrtcDestroyProgram") &&
         bind(h, l.nvrtcCompileProgram, "nvrtcCompileProgram") &&
         bind(h, l.nvrtcGetPTXSize, "nvrtcGetPTXSize") && bind(h, l.nvrtcGetPTX, "nvrtcGetPTX") &&
         bind(h, l.nvrtcGetCUBINSize, "nvrtcGetCUBINSize") &&
         bind(h, l.nvrtcGetCUBIN, "nvrtcGetCUBIN") &&
         bind(h, l.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize") &&
         bind(h, l.nvrtcGetProgramLog, "nvrtcGetProgramLog");
}

const std::vector<std::string>& candidate_list() {
  static const auto* c = new std::vector<std::string>(candidates());
  return *c;
}

bool is_file(const std::string& path) {
  if (path.find('/') == std::string::npos) return false;  // a soname: the loader searches
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

// "nvrtc:<real path>:<size>:<mtime ns>", or "" when `path` is not a file.
std::string file_identity(const std::string& path) {
  std::error_code ec;
  auto real = std::filesystem::canonical(path, ec);
  if (ec) return "";
  auto size = std::filesystem::file_size(real, ec);
  if (ec) return "";
  auto mtime = std::filesystem::last_write_time(real, ec);
  if (ec) return "";
  return fmt::format("nvrtc:{}:{}:{}", real.string(), size,
                     static_cast<long long>(mtime.time_since_epoch().count()));
}

Library* load_library() {
  auto* l = new Library();  // leaked: kernels compiled during static destruction still work
  std::string tried;
  for (const auto& path : candidate_list()) {
    if (path.find('/') != std::string::npos && !is_file(path)) continue;
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* why = dlerror();
      tried += fmt::format("\n  {}: {}", path, why ? why : "not loadable");
      continue;
    }
    l->handle = h;
    if (!bind_all(*l)) {
      tried += fmt::format("\n  {}: not a usable NVRTC (missing symbols)", path);
      dlclose(h);
      l->handle = nullptr;
      continue;
    }
    l->path = path;
    // A soname: the file the loader picked.
    Dl_info info{};
    if (path.find('/') == std::string::npos &&
        dladdr(reinterpret_cast<void*>(l->nvrtcVersion), &info) && info.dli_fname) {
      l->path = info.dli_fname;
    }
    l->nvrtcVersion(&l->version.major, &l->version.minor);
    int n = 0;
    if (l->nvrtcGetNumSupportedArchs(&n) == NVRTC_SUCCESS && n > 0) {
      l->archs.resize(n);
      l->nvrtcGetSupportedArchs(l->archs.data());
      std::sort(l->archs.begin(), l->archs.end());
    }
    return l;
  }
  l->error =
      "NVRTC (the CUDA runtime compiler) was not found; set CUDA_HOME, or "
      "ALLOY_NVRTC_LIBRARY to the path of libnvrtc.so, or install the nvidia-cuda-nvrtc "
      "Python package.";
  if (!tried.empty()) l->error += " Tried:" + tried;
  return l;
}

std::atomic<bool>& loaded_flag() {
  static std::atomic<bool> loaded{false};
  return loaded;
}

Library& lib() {
  static Library* l = [] {
    Library* l = load_library();
    loaded_flag().store(true, std::memory_order_release);
    if (trace::build()) {
      if (l->handle)
        std::fprintf(stderr, "alloy: NVRTC %d.%d loaded from %s\n", l->version.major,
                     l->version.minor, l->path.c_str());
      else
        std::fprintf(stderr, "alloy: NVRTC not loaded: %s\n", l->error.c_str());
    }
    return l;
  }();
  return *l;
}

Library& require() {
  Library& l = lib();
  if (!l.handle) throw Error("", l.error);
  return l;
}

// Destroys the program on every path out of compile().
struct ProgramGuard {
  Library& l;
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog) l.nvrtcDestroyProgram(&prog);
  }
};

std::string program_log(Library& l, nvrtcProgram prog) {
  size_t size = 0;
  if (l.nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (l.nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // the terminating NUL
  return log;
}

}  // namespace

bool available() {
  return lib().handle != nullptr;
}
const std::string& load_error() {
  return lib().error;
}
const std::string& library_path() {
  return lib().path;
}

const std::string& compiler_id() {
  // Once NVRTC is loaded, the file it came from.
  if (loaded_flag().load(std::memory_order_acquire)) {
    static const std::string* loaded = new std::string(file_identity(require().path));
    if (loaded->empty()) throw Error("", "cannot identify the NVRTC library " + require().path);
    return *loaded;
  }
  // Before: the first candidate that is a file, which load_library() will load.
  // Candidates before the first soname are files, tried first: the first that exists is what
  // load_library() will load. After them, only loading tells the file.
  static const std::string* predicted = [] {
    for (const auto& path : file_candidates()) {
      if (path.find('/') == std::string::npos) break;  // an explicit soname: loading tells
      if (is_file(path)) return new std::string(file_identity(path));
    }
    return new std::string();
  }();
  if (!predicted->empty()) return *predicted;
  require();  // loads it (or throws)
  return compiler_id();
}

Version version() {
  return require().version;
}
const std::vector<int>& supported_archs() {
  return require().archs;
}

Target target_for(int cc_major, int cc_minor) {
  const auto& archs = supported_archs();
  int want = cc_major * 10 + cc_minor;
  if (std::find(archs.begin(), archs.end(), want) != archs.end()) {
    return {fmt::format("sm_{}", want), true};
  }
  // A device newer than this NVRTC: PTX for the newest architecture below it, which the driver
  // compiles for the device at load time.
  int best = 0;
  for (int a : archs) {
    if (a <= want) best = a;
  }
  if (best == 0) {
    Version v = version();
    throw Error("", fmt::format("NVRTC {}.{} ({}) cannot compile for compute capability {}.{}",
                                v.major, v.minor, library_path(), cc_major, cc_minor));
  }
  return {fmt::format("compute_{}", best), false};
}

namespace {
// Set when a compile with the PCH options failed over the PCH (compile_in_process): no more PCHs
// in this process.
std::atomic<bool>& pch_failed() {
  static std::atomic<bool> failed{false};
  return failed;
}
}  // namespace

constexpr std::string_view kPchMessagesOff = "--pch-messages=false";
constexpr std::string_view kPchDiagSuppress = "-diag-suppress=20283";
// Directive prefixes remembered per process (a hash each) to find their second compile.
constexpr size_t kRememberedPrefixes = 1 << 16;

namespace {
size_t pch_limit() {
  static const size_t limit = [] {
    return static_cast<size_t>(
        env::count("ALLOY_NVRTC_PCH", "a number of precompiled headers from 0 to 4096", 4096)
            .value_or(16));
  }();
  return limit;
}

bool pch_usable() {
  if (pch_limit() == 0 || pch_failed().load(std::memory_order_relaxed)) return false;
  Library& l = require();
  return l.version.major > 12 || (l.version.major == 12 && l.version.minor >= 8);
}

// NVRTC's key for a PCH: the directives before the first other line, and the options. The end of
// the directives of `source` from `from` on: the offset of the first other line.
size_t directives_end(const std::string& source, size_t from = 0) {
  size_t end = from;
  while (end < source.size()) {
    size_t nl = source.find('\n', end);
    size_t next = nl == std::string::npos ? source.size() : nl + 1;
    std::string_view line(source.data() + end, next - end);
    size_t first = line.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && line[first] != '#') break;
    end = next;
  }
  return end;
}

// Hashed (xxHash): a collision only gives the PCH options to another prefix, which NVRTC then
// keys by its own text.
uint64_t prefix_hash(std::string_view prefix, const std::vector<std::string>& options) {
  std::string key(prefix);
  for (const auto& o : options) key += "\n" + o;
  return XXH3_64bits(key.data(), key.size());
}

// Per prefix hash: seen (false), or its PCH asked for (true); and how many PCHs were asked for.
struct PchPrefixes {
  std::mutex mutex;
  std::unordered_map<uint64_t, bool> seen;
  size_t made = 0;
  // Remembers `h` as seen (up to kRememberedPrefixes); true if it was seen before.
  bool see(uint64_t h) {
    if (seen.count(h)) return true;
    if (seen.size() < kRememberedPrefixes) seen.emplace(h, false);
    return false;
  }
  bool has_pch(uint64_t h) const {
    auto it = seen.find(h);
    return it != seen.end() && it->second;
  }
  // Asks for the PCH of `h` if the limit allows (already asked for: true).
  bool make(uint64_t h) {
    if (has_pch(h)) return true;
    if (made >= pch_limit()) return false;
    seen[h] = true;
    ++made;
    return true;
  }
};

PchPrefixes& pch_prefixes() {
  static auto* p = new PchPrefixes();
  return *p;
}

// Without messages: NVRTC would log each PCH made or found incompatible, and warning 20283
// ("PCH creation disabled because #line directive encountered", at the translation's #line
// after the prefix the PCH covers).
std::vector<std::string> pch_options() {
  return {std::string(kAutoPch), std::string(kPchMessagesOff), std::string(kPchDiagSuppress)};
}

// The PCH options for `source`'s directive prefix, under the limit; `at_first` asks for the PCH
// at the prefix's first compile here, otherwise at its second.
std::vector<std::string> prefix_pch_options(const std::string& source,
                                            const std::vector<std::string>& options,
                                            bool at_first) {
  if (!pch_usable()) return {};
  const uint64_t h =
      prefix_hash(std::string_view(source).substr(0, directives_end(source)), options);
  auto& p = pch_prefixes();
  std::lock_guard lock(p.mutex);
  if ((!p.see(h) && !at_first) || !p.make(h)) return {};
  return pch_options();
}
}  // namespace

std::vector<std::string> auto_pch_options(const std::string& source,
                                          const std::vector<std::string>& options) {
  // A prefix's first compile asks for no PCH: making a PCH costs that compile more than the parse
  // it saves (+14 ms on the H200 host, docs/performance.md), so a prefix that one kernel uses
  // costs what it did without; its second compile makes the PCH, the later ones load it.
  return prefix_pch_options(source, options, /*at_first=*/false);
}

void remove_dead_processes_pch_folders(const std::string& dir) {
  // <prefix><pid> for the workers' roots, <prefix><pid>_<n> for NVRTC's folders.
  auto pid_of = [](std::string_view name, std::string_view prefix, bool numbered) -> long {
    if (!name.starts_with(prefix)) return 0;
    name.remove_prefix(prefix.size());
    const size_t digits = std::min(name.find_first_not_of("0123456789"), name.size());
    if (digits == 0 || digits > 9) return 0;
    std::string_view rest = name.substr(digits);
    if (numbered ? (rest.size() < 2 || rest[0] != '_' ||
                    rest.find_first_not_of("0123456789", 1) != std::string_view::npos)
                 : !rest.empty())
      return 0;
    return std::strtol(std::string(name.substr(0, digits)).c_str(), nullptr, 10);
  };
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    long pid = pid_of(name, "__nvrtc_auto_pch_", true);
    if (!pid) pid = pid_of(name, "alloy-nvrtc-pch-", false);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      std::filesystem::remove_all(it->path(), ignored);
    }
  }
}

void remove_dead_processes_pch_folders_once() {
  static std::once_flag once;
  std::call_once(once, [] { remove_dead_processes_pch_folders(temp_dir()); });
}

AutoPch auto_pch(const std::string& source, const std::vector<std::string>& options) {
  remove_dead_processes_pch_folders_once();
  const size_t core_end = directives_end(source);
  const std::string_view marker = msl::kPreludeCoreEnd;
  if (source.compare(core_end, marker.size(), marker) != 0)
    return {auto_pch_options(source, options), {}};
  if (!pch_usable()) return {};
  // The whole selection's prefix: the core's, then the directives after the marker line (the
  // math functions' #defines, metal_stdlib.h). Its source: the marker moved after them (the same
  // declarations in the same order; the lines after keep their numbers).
  const size_t rest = core_end + marker.size();
  const size_t full_end = directives_end(source, rest);
  std::string prefix = source.substr(0, core_end);
  const uint64_t core = prefix_hash(prefix, options);
  prefix.append(source, rest, full_end - rest);
  const uint64_t full = prefix_hash(prefix, options);
  auto whole = [&] { return prefix + std::string(marker) + source.substr(full_end); };
  // The core's PCH first (its prefix's second compile, as auto_pch_options), since kernels of any
  // math selection load it; then a selection's own, at its second compile with the core's PCH
  // there (NVRTC loads the core's PCH for it and saves the whole prefix), for its later compiles.
  auto& p = pch_prefixes();
  std::lock_guard lock(p.mutex);
  const bool core_seen = p.see(core);
  const bool full_seen = p.see(full);
  if (p.has_pch(full)) return {pch_options(), whole()};
  if (!core_seen) return {};
  if (!p.has_pch(core)) return p.make(core) ? AutoPch{pch_options(), {}} : AutoPch{};
  if (full_seen && p.make(full)) return {pch_options(), whole()};
  return {pch_options(), {}};
}

std::vector<std::string> pch_request_options() {
  return pch_usable() ? pch_options() : std::vector<std::string>{};
}

bool auto_pch_failed() {
  return pch_failed().load(std::memory_order_relaxed);
}

std::vector<std::string> without_pch_options(const std::vector<std::string>& options) {
  std::vector<std::string> out;
  for (const auto& o : options)
    if (o != kAutoPch && o != kPchMessagesOff && o != kPchDiagSuppress && !o.starts_with(kPchDir))
      out.push_back(o);
  return out;
}

std::vector<std::string> worker_pch_options(const std::string& source,
                                            const std::vector<std::string>& options,
                                            const std::string& pch_dir) {
  std::vector<std::string> out = without_pch_options(options);
  if (pch_dir.empty() || std::find(options.begin(), options.end(), kAutoPch) == options.end())
    return out;
  // The runtime's --pch says the prefix recurs (auto_pch_options' rule, counted there), so the
  // worker makes the PCH at its first compile of the prefix (the same key; the limit and a failed
  // PCH apply as in a process).
  auto pch = prefix_pch_options(source, out, /*at_first=*/true);
  if (pch.empty()) return out;
  for (auto& o : pch) out.push_back(std::move(o));
  out.push_back(std::string(kPchDir) + pch_dir);
  return out;
}

std::string compile_in_process(const std::string& source, const std::string& program_name,
                               const std::vector<Header>& headers,
                               const std::vector<std::string>& options, bool cubin,
                               std::string* log) {
  Library& l = require();
  std::vector<const char*> names, texts, opts;
  names.reserve(headers.size());
  texts.reserve(headers.size());
  for (const auto& h : headers) {
    names.push_back(h.name);
    texts.push_back(h.text);
  }
  opts.reserve(options.size());
  for (const auto& o : options) {
    // -minimal (NVRTC 12.4+: leaves out the CUDA runtime API declarations, textures and device
    // launches, which translated kernels never use; a few ms less per compile) is a hint: older
    // NVRTCs reject it, so they do without.
    if (o == "-minimal" && (l.version.major < 12 || (l.version.major == 12 && l.version.minor < 4)))
      continue;
    opts.push_back(o.c_str());
  }

  ProgramGuard guard{l};
  nvrtcResult r =
      l.nvrtcCreateProgram(&guard.prog, source.c_str(), program_name.c_str(),
                           static_cast<int>(headers.size()), texts.data(), names.data());
  if (r != NVRTC_SUCCESS) {
    throw Error("", fmt::format("nvrtcCreateProgram failed: {}", l.nvrtcGetErrorString(r)));
  }
  r = l.nvrtcCompileProgram(guard.prog, static_cast<int>(opts.size()), opts.data());
  // kNvvmUnoptimised (the quick first compile's) is a hint too: an NVRTC that rejects it compiles
  // without it. (Same result; the cache key still holds it, and the same NVRTC always rejects it.)
  auto hint = std::find_if(opts.begin(), opts.end(),
                           [](const char* o) { return std::string_view(o) == kNvvmUnoptimised; });
  if (r == NVRTC_ERROR_INVALID_OPTION && hint != opts.end()) {
    opts.erase(hint);
    return compile_in_process(source, program_name, headers,
                              std::vector<std::string>(opts.begin(), opts.end()), cubin, log);
  }
  std::string text = program_log(l, guard.prog);
  // The automatic PCH's options are a hint too (auto_pch_options), never needed for the result: a
  // compile with them that NVRTC rejects (an unknown option) or that fails over the PCH itself
  // ("invalid PCH directory" when NVRTC's PCH folder was removed: a forked child that exits runs
  // NVRTC's clean-up of the folder it shares with its parent) compiles again without them; after
  // a failure over the PCH, this process asks for none any more.
  auto pch = std::find_if(opts.begin(), opts.end(),
                          [](const char* o) { return std::string_view(o) == kAutoPch; });
  const bool over_pch =
      pch != opts.end() && r != NVRTC_SUCCESS && text.find("PCH") != std::string::npos;
  if (over_pch || (r == NVRTC_ERROR_INVALID_OPTION && pch != opts.end())) {
    if (over_pch && !pch_failed().exchange(true) && trace::build())
      std::fprintf(stderr, "alloy: NVRTC's PCH failed, compiling without PCHs from now on: %s\n",
                   text.c_str());
    return compile_in_process(
        source, program_name, headers,
        without_pch_options(std::vector<std::string>(opts.begin(), opts.end())), cubin, log);
  }
  if (r == NVRTC_ERROR_COMPILATION) {
    throw CompileFailure(fmt::format("NVRTC failed to compile {}:\n{}", program_name, text), text);
  }
  if (r != NVRTC_SUCCESS) {
    throw Error("", fmt::format("nvrtcCompileProgram failed for {}: {}\n{}", program_name,
                                l.nvrtcGetErrorString(r), text));
  }
  if (log) *log = std::move(text);

  size_t size = 0;
  std::string image;
  if (cubin) {
    r = l.nvrtcGetCUBINSize(guard.prog, &size);
    if (r == NVRTC_SUCCESS) {
      image.resize(size);
      r = l.nvrtcGetCUBIN(guard.prog, image.data());
    }
  } else {
    r = l.nvrtcGetPTXSize(guard.prog, &size);
    if (r == NVRTC_SUCCESS) {
      image.resize(size);  // includes the terminating NUL cuModuleLoadData needs for PTX
      r = l.nvrtcGetPTX(guard.prog, image.data());
    }
  }
  if (r != NVRTC_SUCCESS || image.empty()) {
    throw Error("", fmt::format("NVRTC produced no {} for {}: {}", cubin ? "cubin" : "PTX",
                                program_name, l.nvrtcGetErrorString(r)));
  }
  return image;
}

}  // namespace alloy::cuda::nvrtc
