// Host-compiler JIT: C++ source -> shared object -> dlopen, through the compile cache.
//
//   auto lib = alloy::cpu::compile(cpp_source, {.flags = {"-DALLOY_MATH_FAST"}});
//   auto fn = reinterpret_cast<alloy_cpu_group_fn>(lib->symbol("alloy_group_0"));
//
// The compiler is found at run time ($ALLOY_CXX, else c++, g++, clang++ on PATH). Kernels are built
// with -march=native, so the cache key includes the compiler's identity (its --version output) and
// the CPU's identity. The prelude headers embedded in the library are written once to
// <cache dir>/prelude-<hash>/ and passed with -I; their hash is part of the key.
//
// Precompiled prelude (g++ with a disk cache; ALLOY_CPU_PCH=0 turns it off): parsing the prelude
// is most of a small kernel's compile time, so the whole prelude is precompiled once per
// compiler, flags and prelude (<cache>/cpu-pch/<key>.bin, a verified cache entry like a kernel,
// reached through <key>.h.gch next to <key>.h) and kernels are compiled with `-include <key>.h`.
// The first compile that finds no precompiled header starts building it on a background thread
// and compiles without it; later compiles use it once it is there.
//
// Tiers (docs/cpu-backend.md, "Tiered compile"): JitOptions::quick compiles the same source at
// -O1 under its own key, for a kernel's first call while the backend compiles the full tier in
// the background; cached() says whether the full library is at hand without compiling it.
//
// One compile per kernel: threads of a process asking for the same key wait for one build (the
// cache's memory level); processes sharing a disk cache take <cache>/cpu/<key>.lock before
// compiling, and one that finds it held waits for the holder's entry (a holder that died or
// outlived the compile time limit is taken over).
#pragma once
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cache/compile_cache.h"

namespace alloy::cpu {

/// The host compiler rejected a source. The caller maps the log's line numbers back to the user's
/// source (see msl/) and raises alloy::CompileError.
class CompileFailure : public std::runtime_error {
 public:
  CompileFailure(const std::string& compiler, std::string log, std::filesystem::path source);
  /// The compiler's output (stderr and stdout), untouched.
  const std::string& log() const { return log_; }
  /// The source file the compiler was given; its name appears in the log. Kept after the failure.
  const std::filesystem::path& source_path() const { return source_; }

 private:
  std::string log_;
  std::filesystem::path source_;
};

/// A loaded kernel library; dlclose'd when the last reference goes.
class Library {
 public:
  Library(void* handle, std::string key, std::filesystem::path path)
      : handle_(handle), key_(std::move(key)), path_(std::move(path)) {}
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  /// The exported symbol, or nullptr when the library has none of that name.
  void* symbol(const char* name) const;
  /// The cache key the library was built under.
  const std::string& key() const { return key_; }
  /// The file it was loaded from (may no longer exist when the disk cache is off).
  const std::filesystem::path& path() const { return path_; }

 private:
  void* handle_;
  std::string key_;
  std::filesystem::path path_;
};

struct JitOptions {
  /// Extra compiler flags and defines (math mode, robust mode, ...), appended after the base flags
  /// (-std=c++20 -O2 -fPIC -shared -march=native, hidden visibility, no semantic interposition, no
  /// math errno or traps, the vectoriser's dynamic cost model; see jit.cpp). Part of the key.
  std::vector<std::string> flags;
  /// The quick tier of a tiered compile (docs/cpu-backend.md, "Tiered compile"): -O1 instead of
  /// -O2 (no vectoriser, less inlining: ~0.7x the compile time, far slower code with the same
  /// results), against the full tier's precompiled prelude. Its own cache entry (the flags differ).
  bool quick = false;
  /// Compiled in the background (a tiered compile's full tier): counted apart (Counters), not
  /// part of the key.
  bool background = false;
};

struct JitConfig {
  /// Disk cache root; default cache::default_dir() ($ALLOY_CACHE_DIR or ~/.cache/alloy). When it
  /// cannot be used, work files go to a per-process temp folder and nothing is kept.
  std::optional<std::filesystem::path> cache_dir;
  bool use_default_cache_dir = true;  // false + no cache_dir: no disk cache at all
  /// Compiler program (name on PATH, or a path); default $ALLOY_CXX, else c++, g++, clang++.
  std::string compiler;
};

class Jit {
 public:
  explicit Jit(JitConfig config = {});
  ~Jit();
  Jit(const Jit&) = delete;
  Jit& operator=(const Jit&) = delete;

  /// The process-wide JIT (default config, read from the environment on first use).
  static Jit& global();

  /// Compiles (or fetches from the cache) and loads `cpp_source`. Throws CompileFailure when the
  /// compiler rejects it, std::runtime_error when no compiler is found or loading fails.
  std::shared_ptr<Library> compile(const std::string& cpp_source, const JitOptions& options = {});

  /// The cache key compile() would use.
  std::string key(const std::string& cpp_source, const JitOptions& options = {});
  /// Whether compile() would find the library without compiling: loaded or being built in this
  /// process, or an entry in the disk cache (not verified here; compile() verifies it).
  bool cached(const std::string& cpp_source, const JitOptions& options = {});

  /// Resolved compiler path and its identity (--version output + CPU identity), probed lazily.
  const std::string& compiler();
  const std::string& compiler_identity();
  /// Folder holding the prelude headers (written on first use).
  const std::filesystem::path& prelude_dir();
  /// Hash of the embedded prelude headers (part of every key).
  const std::string& prelude_hash();

  cache::CompileCache& cache() { return cache_; }

  /// Whether kernels are compiled against a precompiled prelude (g++, disk cache, ALLOY_CPU_PCH
  /// not 0). Part of every key.
  bool pch_enabled();
  /// Waits for the background precompiled-header builds in flight (tests and benchmarks).
  void wait_pch();
  /// Compiles this Jit ran with a precompiled prelude / without one, and precompiled headers it
  /// built.
  struct Counters {
    uint64_t with_pch = 0, without_pch = 0, pch_builds = 0;
    uint64_t quick = 0, full = 0;  // compiler runs of each tier
    uint64_t background = 0;       // compiler runs of JitOptions::background (included above)
  };
  Counters counters();

 private:
  struct Toolchain {
    std::string path;      // resolved compiler
    std::string identity;  // --version output + CPU identity
    bool clang = false;    // clang's flags where they differ from g++'s
  };
  struct PchBuild;
  const Toolchain& toolchain();
  std::vector<std::string> compile_flags(const JitOptions& options);
  std::string flags_string(const JitOptions& options);
  // The -include argument of a ready precompiled prelude for `flags`, or "" (none yet: starts a
  // background build unless one ran already).
  std::string pch_include(const std::vector<std::string>& flags);
  void build_pch(const std::shared_ptr<PchBuild>& b, std::vector<std::string> flags);
  bool link_pch(const std::filesystem::path& payload, const std::filesystem::path& header);
  std::shared_ptr<Library> load_or_build(const std::string& source, const JitOptions& options,
                                         const std::string& key);
  std::filesystem::path work_dir();
  std::filesystem::path private_dir();

  std::string requested_compiler_;
  cache::CompileCache cache_;
  cache::CompileCache pch_cache_;  // the same folder; its own statistics
  std::once_flag toolchain_once_, prelude_once_, prelude_dir_once_, work_once_, private_once_;
  std::optional<Toolchain> toolchain_;
  std::string toolchain_error_;
  std::string prelude_hash_;
  std::filesystem::path prelude_dir_;
  std::string prelude_error_;
  std::filesystem::path work_dir_;     // <cache>/tmp when usable: sources and objects
  std::filesystem::path private_dir_;  // per-process temp folder, removed in the destructor
  int pch_setting_ = -1;               // -1: not read yet; ALLOY_CPU_PCH
  std::mutex pch_mu_;
  std::unordered_map<std::string, std::shared_ptr<PchBuild>> pch_;  // by precompiled-header key
  Counters counters_;                                               // guarded by pch_mu_
};

/// Jit::global().compile(...).
std::shared_ptr<Library> compile(const std::string& cpp_source, const JitOptions& options = {});

}  // namespace alloy::cpu
