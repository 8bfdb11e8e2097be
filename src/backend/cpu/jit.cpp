#include "backend/cpu/jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/env.h"
#include "core/files.h"
#include "core/prelude_files.h"
#include "core/spawn.h"
#include "core/trace.h"

extern char** environ;

namespace alloy::cpu {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTarget = "cpu";
// Defaults of ALLOY_COMPILE_MEMORY_MB and ALLOY_COMPILE_TIMEOUT: far above what a kernel needs
// (a few hundred MB, seconds), far below what a runaway compile takes.
constexpr uint64_t kDefaultCompileMemoryMB = 8192;
constexpr uint64_t kDefaultCompileSeconds = 300;
constexpr const char* kPchTarget = "cpu-pch";
// -fvisibility=hidden / -fno-semantic-interposition: the kernel a group entry calls is not
// interposable, so it inlines into the thread loop (an exported function of a -fPIC object is
// otherwise called through the PLT for every thread). -fno-trapping-math: Metal has no
// floating-point exception flags, and without it the vectoriser may not speculate a conditional
// float operation. Results are unchanged by all three. -fstack-clash-protection: a frame larger
// than a page (a big thread-local array) is probed page by page, so a stack overflow faults on
// the guard page below a fiber's stack (an alloy::Error, fault_guard.h) instead of jumping over it
// into another fiber's stack.
constexpr const char* kBaseFlags[] = {"-std=c++20",
                                      "-O2",
                                      "-fPIC",
                                      "-shared",
                                      "-march=native",
                                      "-fno-math-errno",
                                      "-fno-trapping-math",
                                      "-fvisibility=hidden",
                                      "-fno-semantic-interposition",
                                      "-fstack-clash-protection",
                                      "-w"};
// g++ at -O2 vectorises only loops that need no runtime alias check ("very cheap" cost model);
// a thread loop reading one buffer and writing another needs one.
constexpr const char* kGccFlags[] = {"-fvect-cost-model=dynamic"};
// clang maps math calls to glibc's vector functions only when told (g++ reads the simd
// declarations of cpu/target.h).
#if defined(__x86_64__) && defined(__GLIBC__)
constexpr const char* kClangFlags[] = {"-fveclib=libmvec"};
#else
constexpr const char* kClangFlags[] = {"-fno-math-errno"};
#endif

// What a precompiled prelude holds: the whole prelude (no ALLOY_SELECT, so every optional part
// and math function). A translated kernel's own `#include "metal_stdlib.h"` then finds it already
// included (#pragma once); its selection macros only ever select a subset of this.
constexpr const char* kPchHeader =
    "// Alloy's precompiled CPU prelude (see src/backend/cpu/jit.h).\n"
    "#include \"metal_stdlib.h\"\n"
    "#include \"entry.h\"\n";

// `name` if it holds a '/', else the first executable `name` on $PATH; "" when none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs.remove_prefix(colon == std::string_view::npos ? dirs.size() : colon + 1);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return "";
}

// Limits on one run of the host compiler (docs/reliability.md): a header of nested macros can
// drive it to tens of GB or for hours. 0: none.
struct ProcessLimits {
  uint64_t memory_bytes = 0;  // RLIMIT_AS of the compiler and its children
  uint64_t seconds = 0;       // wall clock; the process group is killed after it
};

// $name as a non-negative integer (in `unit`s), else `fallback`; throws for a malformed value.
uint64_t env_limit(const char* name, uint64_t fallback, uint64_t unit) {
  return env::count(name, "a non-negative integer", ~uint64_t{0} / unit).value_or(fallback) * unit;
}

ProcessLimits compile_limits() {
  return {env_limit("ALLOY_COMPILE_MEMORY_MB", kDefaultCompileMemoryMB, 1ull << 20),
          env_limit("ALLOY_COMPILE_TIMEOUT", kDefaultCompileSeconds, 1)};
}

// Waits for `fd` to be readable until `deadline` (none when `limited` is false); false when the
// deadline passed first.
bool wait_readable(int fd, bool limited, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int wait_ms = -1;
    if (limited) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      wait_ms = left > 0 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 0;
    }
    struct pollfd pfd {
      fd, POLLIN, 0
    };
    int pr = ::poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    return pr != 0;
  }
}

// Runs argv[0] (a path) with stdout+stderr captured; returns the exit status (-1 if it could not
// start, 128+signal if killed). posix_spawn, not fork: fork copies the page tables of this
// process, whose memory is the caller's (a process holding 6 GB took ~350 ms a fork on EPYC-2,
// posix_spawn 0.5 ms: docs/performance.md), and a fork of a threaded process can hang under a
// sanitizer (CI's TSan load test did once). Not system(): no shell between the caller and its
// arguments. The child leads its own process group so that a timeout kills the compiler's own
// children too. posix_spawn cannot set resource limits: with a memory limit the compiler starts
// through `/bin/sh -c 'ulimit -v KB && exec "$0" "$@"'`, which sets RLIMIT_AS before it runs
// the compiler (the arguments pass through "$@", unquoted by no one).
// LC_ALL=C keeps diagnostics in plain ASCII for the caller that parses them.
// `started` (optional) runs with the child's pid (the id of its process group) once it runs;
// when it returns false the group is killed at once.
int run_process(const std::vector<std::string>& args, std::string* output,
                const ProcessLimits& limits = {}, bool* timed_out = nullptr,
                const std::function<bool(pid_t)>& started = nullptr) {
  output->clear();
  if (timed_out) *timed_out = false;
  std::vector<std::string> prefix;
  if (limits.memory_bytes)
    prefix = {"/bin/sh", "-c",
              "ulimit -v " + std::to_string(std::max<uint64_t>(1, limits.memory_bytes >> 10)) +
                  " && exec \"$0\" \"$@\""};
  std::vector<char*> argv;
  for (const std::string& a : prefix) argv.push_back(const_cast<char*>(a.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "LC_ALL=", 7) != 0) env_store.emplace_back(*e);
  }
  env_store.emplace_back("LC_ALL=C");
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;  // CLOEXEC: concurrent spawns must not inherit it
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::seconds(limits.seconds);
  pid_t pid = 0;
  int r = spawn_process(argv.data(), envp.data(), {{fds[1], 1}, {fds[1], 2}}, true, &pid);
  ::close(fds[1]);
  if (r != 0) {
    ::close(fds[0]);
    *output = std::string("cannot run ") + argv[0] + ": " + std::strerror(r);
    return -1;
  }
  if (started && !started(pid)) ::kill(-pid, SIGKILL);
  bool killed = false;
  char buf[4096];
  for (;;) {
    if (!wait_readable(fds[0], limits.seconds && !killed, deadline)) {
      // The time limit: stop the compiler and everything it started.
      ::kill(-pid, SIGKILL);
      killed = true;
      if (timed_out) *timed_out = true;
      continue;
    }
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output->append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Whether a failed compiler run ran out of its address-space limit (GCC: "out of memory
// allocating", "virtual memory exhausted"; clang: "std::bad_alloc", "Cannot allocate memory").
bool out_of_memory(const std::string& log) {
  for (const char* m : {"out of memory", "memory exhausted", "bad_alloc", "Cannot allocate memory"})
    if (log.find(m) != std::string::npos) return true;
  return false;
}

// What -march=native resolves to depends on the CPU: the identity must change when the cache
// folder moves to another machine (shared home directories, containers on other hosts).
std::string cpu_identity() {
  std::string id;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  auto word = [&](unsigned v) { id += std::to_string(v) + ","; };
  unsigned max_leaf = static_cast<unsigned>(__get_cpuid_max(0, nullptr));
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    id.append(reinterpret_cast<const char*>(&b), 4);
    id.append(reinterpret_cast<const char*>(&d), 4);
    id.append(reinterpret_cast<const char*>(&c), 4);
    id += ";";
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    word(a);  // family/model/stepping
    word(c);
    word(d);
    if (c & (1u << 27)) {  // OSXSAVE: which register states the OS enables (AVX, AVX-512)
      unsigned lo, hi;
      __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      word(lo);
    }
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    word(b);
    word(c);
    word(d);
    __cpuid_count(7, 1, a, b, c, d);
    word(a);
  }
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000, nullptr)) >= 0x80000004u) {
    if (__get_cpuid(0x80000001, &a, &b, &c, &d)) {
      word(c);
      word(d);
    }
    for (unsigned leaf = 0x80000002; leaf <= 0x80000004; ++leaf) {
      unsigned r[4] = {0, 0, 0, 0};
      __get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3]);
      id.append(reinterpret_cast<const char*>(r), sizeof r);
    }
  }
#else
  // Other architectures: the first processor's block of /proc/cpuinfo.
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && !line.empty()) id += line + "\n";
#endif
  return id;
}

std::string compiler_version(const std::string& compiler) {
  std::string out;
  int rc = run_process({compiler, "--version"}, &out);
  if (rc != 0) {
    throw std::runtime_error("cannot run the host C++ compiler " + compiler + " --version: " + out);
  }
  return out;
}

std::atomic<uint64_t> g_counter{0};

std::string unique_suffix() {
  return std::to_string(::getpid()) + "-" + std::to_string(g_counter.fetch_add(1));
}

}  // namespace

CompileFailure::CompileFailure(const std::string& compiler, std::string log, fs::path source)
    : std::runtime_error("host compiler " + compiler + " failed on " + source.string() + ":\n" +
                         log),
      log_(std::move(log)),
      source_(std::move(source)) {}

Library::~Library() {
  if (handle_) ::dlclose(handle_);
}

void* Library::symbol(const char* name) const {
  return ::dlsym(handle_, name);
}

Jit::Jit(JitConfig config)
    : requested_compiler_(std::move(config.compiler)),
      cache_(config.cache_dir
                 ? config.cache_dir
                 : (config.use_default_cache_dir ? cache::default_dir() : std::nullopt)),
      pch_cache_(cache_.has_disk() ? std::optional<fs::path>(cache_.dir()) : std::nullopt) {}

namespace {
// Creates `path` exclusively; one older than 10 minutes is debris of a process that died while
// holding it, and is taken over.
bool take_lock(const fs::path& path) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      return true;
    }
    struct stat st {};
    if (errno != EEXIST || ::stat(path.c_str(), &st) != 0) return false;
    if (::time(nullptr) - st.st_mtime < 600) return false;
    ::unlink(path.c_str());
  }
  return false;
}
}  // namespace

// A background build of one precompiled prelude (see jit.h).
struct Jit::PchBuild {
  std::filesystem::path header;  // <cache>/cpu-pch/<key>.h, the -include argument
  std::string key;
  std::atomic<int> state{0};  // kBuilding, kReady, kFailed
  std::mutex mu;              // guards pid and cancelled
  pid_t pid = 0;              // the compiler's process group while it runs
  bool cancelled = false;
  pid_t owner = 0;  // the process that started the thread (a forked child has no such thread)
  std::unique_ptr<std::thread> thread;
  static constexpr int kBuilding = 0, kReady = 1, kFailed = 2;
};

Jit::~Jit() {
  // Stop precompiled-header builds still running: kill the compiler (a process group, so its
  // cc1plus too) and join the thread, which removes its temp files. Threads do not survive fork:
  // a forked child leaves the parent's builds alone.
  for (auto& [key, b] : pch_) {
    if (!b || !b->thread) continue;
    if (b->owner != ::getpid()) {
      (void)b->thread.release();  // not a thread of this process: must not be joined or freed
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(b->mu);
      b->cancelled = true;
      if (b->pid > 0) ::kill(-b->pid, SIGKILL);
    }
    if (b->thread->joinable()) b->thread->join();
  }
  if (!private_dir_.empty()) {
    std::error_code ec;
    fs::remove_all(private_dir_, ec);
  }
}

Jit& Jit::global() {
  static Jit jit;
  return jit;
}

const Jit::Toolchain& Jit::toolchain() {
  std::call_once(toolchain_once_, [&] {
    std::vector<std::string> names;
    std::string origin;
    if (!requested_compiler_.empty()) {
      names = {requested_compiler_};
      origin = "the configured compiler ";
    } else if (const char* env = std::getenv("ALLOY_CXX"); env && *env) {
      names = {env};
      origin = "ALLOY_CXX=";
    } else {
      names = {"c++", "g++", "clang++"};
    }
    std::string path;
    for (const std::string& n : names) {
      path = find_program(n);
      if (!path.empty()) break;
    }
    if (path.empty()) {
      toolchain_error_ =
          origin.empty()
              ? "not supported: no host C++ compiler found for the CPU backend (looked for c++, "
                "g++, clang++ on PATH; set ALLOY_CXX)"
              : origin + names[0] + " is not an executable program";
      return;
    }
    // --version costs a process start (~1 ms): cache it on disk, keyed by the compiler binary's
    // real path, size and modification time, so a warm start does not pay it.
    std::error_code ec;
    fs::path real = fs::canonical(path, ec);
    if (ec) real = path;
    struct stat st {};
    ::stat(real.c_str(), &st);
    std::string version;
    fs::path id_file;
    if (cache_.has_disk()) {
      std::string h = cache::hash_hex(
          {real.string(), std::to_string(st.st_size), std::to_string(st.st_mtim.tv_sec),
           std::to_string(st.st_mtim.tv_nsec), std::to_string(st.st_ino)});
      id_file = cache_.dir() / "compilers" / (h + ".txt");
      std::vector<char> bytes;
      if (cache::read_regular_file(id_file, &bytes)) version.assign(bytes.begin(), bytes.end());
    }
    if (version.empty()) {
      try {
        version = compiler_version(path);
      } catch (const std::exception& e) {
        toolchain_error_ = e.what();
        return;
      }
      if (!id_file.empty()) {
        fs::create_directories(id_file.parent_path(), ec);
        try {
          cache::write_file_atomic(id_file, version);
        } catch (const fs::filesystem_error&) {
        }
      }
    }
    bool clang = version.find("clang") != std::string::npos;
    toolchain_ = Toolchain{path, version + "\ncpu: " + cpu_identity(), clang};
  });
  if (!toolchain_) throw std::runtime_error(toolchain_error_);
  return *toolchain_;
}

const std::string& Jit::compiler() {
  return toolchain().path;
}
const std::string& Jit::compiler_identity() {
  return toolchain().identity;
}

const std::string& Jit::prelude_hash() {
  std::call_once(prelude_once_, [&] {
    prelude_hash_ = cache::hash_hex({"prelude", prelude::embedded_hash()});
  });
  return prelude_hash_;
}

// A per-process folder under $TMPDIR, removed with the Jit: where work files go when the cache
// folder cannot take them (no disk cache, a read-only or full disk).
fs::path Jit::private_dir() {
  std::call_once(private_once_, [&] {
    std::string pattern = temp_dir() + "/alloy-XXXXXX";
    if (::mkdtemp(pattern.data())) private_dir_ = pattern;
  });
  if (private_dir_.empty()) {
    throw std::runtime_error("cannot create a work folder for the CPU JIT (cache: " +
                             (cache_.has_disk() ? cache_.dir().string() : cache_.disk_error()) +
                             "; and no private temp folder under $TMPDIR)");
  }
  return private_dir_;
}

namespace {
bool writable_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(fs::symlink_status(p, ec)) && ::access(p.c_str(), W_OK | X_OK) == 0;
}
// Orphans are older than any compile can take (the compile time limit) and than one hour.
std::chrono::seconds orphan_age() {
  uint64_t limit = kDefaultCompileSeconds;
  try {
    limit = env_limit("ALLOY_COMPILE_TIMEOUT", kDefaultCompileSeconds, 1);
  } catch (const std::invalid_argument&) {
  }
  return std::chrono::seconds(std::max<uint64_t>(3600, 2 * limit));
}
}  // namespace

fs::path Jit::work_dir() {
  std::call_once(work_once_, [&] {
    if (cache_.has_disk()) {
      cache_.remove_orphans(orphan_age());
      fs::path p = cache_.temp_dir();
      if (writable_dir(p)) {
        work_dir_ = p;
        return;
      }
    }
  });
  return work_dir_.empty() ? private_dir() : work_dir_;
}

namespace {
// Whether `dir` holds exactly the embedded prelude (regular files with the right bytes): a folder
// damaged after it was completed (files edited, removed, replaced by FIFOs) must not make every
// kernel fail with an error that blames the user's code.
bool prelude_intact(const fs::path& dir) {
  std::vector<char> bytes;
  for (const auto& f : prelude::embedded_files()) {
    if (!cache::read_regular_file(dir / f.path, &bytes) ||
        std::string_view(bytes.data(), bytes.size()) != f.text)
      return false;
  }
  return true;
}

// Writes the prelude into a new folder next to `final_dir` and moves it into place (replacing a
// damaged one). Throws fs::filesystem_error when the folder cannot be written.
void install_prelude(const fs::path& final_dir, const std::string& hash, const std::string& tag) {
  std::error_code ec;
  fs::path tmp = final_dir.string() + ".tmp-" + tag;
  try {
    for (const auto& f : prelude::embedded_files()) {
      fs::path p = tmp / f.path;
      fs::create_directories(p.parent_path());
      cache::write_file_atomic(p, f.text);
    }
    fs::create_directories(tmp);
    cache::write_file_atomic(tmp / ".complete", hash);
  } catch (const fs::filesystem_error&) {
    fs::remove_all(tmp, ec);
    throw;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::rename(tmp.c_str(), final_dir.c_str()) == 0) break;
    // Another process finished first (rename onto a non-empty folder fails): use theirs if it is
    // intact. Otherwise (debris, a damaged folder) move it aside and try again.
    if (fs::exists(final_dir / ".complete", ec) && prelude_intact(final_dir)) break;
    fs::path old = final_dir.string() + ".old-" + tag;
    if (::rename(final_dir.c_str(), old.c_str()) == 0)
      fs::remove_all(old, ec);
    else
      fs::remove_all(final_dir, ec);
  }
  fs::remove_all(tmp, ec);  // no-op when the rename succeeded
}
}  // namespace

// The prelude headers, written once under <cache>/prelude-<hash>/ (or a private folder without a
// usable disk cache). Written into a temp folder then renamed, so a concurrent process never sees
// a half-written prelude; a `.complete` marker tells a finished folder from a foreign one, and the
// contents are checked once per process (a damaged folder is rebuilt).
const fs::path& Jit::prelude_dir() {
  const std::string& hash = prelude_hash();
  std::call_once(prelude_dir_once_, [&] {
    std::vector<fs::path> roots;
    if (cache_.has_disk()) roots.push_back(cache_.dir());
    try {
      roots.push_back(private_dir());
    } catch (const std::runtime_error& e) {
      prelude_error_ = e.what();
    }
    for (const fs::path& root : roots) {
      fs::path final_dir = root / ("prelude-" + hash);
      std::error_code ec;
      if (fs::exists(final_dir / ".complete", ec) && prelude_intact(final_dir)) {
        prelude_dir_ = final_dir;
        return;
      }
      try {
        install_prelude(final_dir, hash, unique_suffix());
      } catch (const fs::filesystem_error& e) {
        prelude_error_ = std::string("cannot write the prelude headers: ") + e.what();
        continue;  // a full or read-only cache: the private folder
      }
      if (fs::exists(final_dir / ".complete", ec) && prelude_intact(final_dir)) {
        prelude_dir_ = final_dir;
        return;
      }
      prelude_error_ = "cannot create the prelude folder " + final_dir.string();
    }
  });
  if (prelude_dir_.empty()) throw std::runtime_error(prelude_error_);
  return prelude_dir_;
}

std::vector<std::string> Jit::compile_flags(const JitOptions& options) {
  std::vector<std::string> flags(std::begin(kBaseFlags), std::end(kBaseFlags));
  // The quick tier: -O1 (the examples' exp on EPYC-2, g++ CPU time against the full tier's
  // precompiled prelude: -O2 0.092 s, -O1 0.065, -Og 0.057, -O0 0.069; its code ran 2^20 threads
  // in 11-16 ms against -Og's 78-115 ms and the full tier's 0.4-0.7 ms: docs/performance.md).
  if (options.quick)
    std::replace(flags.begin(), flags.end(), std::string("-O2"), std::string("-O1"));
  if (toolchain().clang) {
    flags.insert(flags.end(), std::begin(kClangFlags), std::end(kClangFlags));
  } else {
    flags.insert(flags.end(), std::begin(kGccFlags), std::end(kGccFlags));
    // g++ fuses a multiply feeding an add (-ffp-contract=fast, with -march=native's FMA) in a
    // pass that -O1 leaves out: without it the quick tier's results differ in the last bit from
    // the full tier's and a GPU's (CpuTiered.QuickAndFullTiersAgreeBitForBitOnMultiplyAdds).
    if (options.quick) flags.emplace_back("-fexpensive-optimizations");
  }
  flags.insert(flags.end(), options.flags.begin(), options.flags.end());
  return flags;
}

std::string Jit::flags_string(const JitOptions& options) {
  std::string s;
  for (const std::string& f : compile_flags(options)) (s += f) += '\n';
  // The precompiled prelude derives from the compiler, the flags and the prelude (all in the key
  // already) and kPchHeader; a kernel built against it is the same program as one built without.
  // Kept apart anyway, so that turning it off gives binaries built the plain way.
  if (pch_enabled()) (s += "pch:") += kPchHeader;
  if (options.quick) s += "tier:quick\n";
  return s;
}

bool Jit::pch_enabled() {
  std::lock_guard<std::mutex> lock(pch_mu_);
  if (pch_setting_ < 0) {
    bool off = !env::flag("ALLOY_CPU_PCH", true);
    // g++ only (clang's precompiled headers are another format), and only with a disk cache:
    // built for one process alone, it would cost more than it saves.
    pch_setting_ = !off && cache_.has_disk() && !toolchain().clang;
  }
  return pch_setting_ == 1;
}

Jit::Counters Jit::counters() {
  std::lock_guard<std::mutex> lock(pch_mu_);
  return counters_;
}

void Jit::wait_pch() {
  std::vector<std::shared_ptr<PchBuild>> builds;
  {
    std::lock_guard<std::mutex> lock(pch_mu_);
    for (auto& [key, b] : pch_) builds.push_back(b);
  }
  for (auto& b : builds) {
    while (b->state.load() == PchBuild::kBuilding) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
}

// Makes <key>.h (the header text, the fallback g++ reads when it finds the .gch unusable) and
// <key>.h.gch, a symlink to the verified payload, next to it. Both written as temp + rename.
bool Jit::link_pch(const fs::path& payload, const fs::path& header) {
  std::error_code ec;
  try {
    std::ifstream in(header, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text != kPchHeader) cache::write_file_atomic(header, std::string_view(kPchHeader));
  } catch (const fs::filesystem_error&) {
    return false;
  }
  fs::path gch = header.string() + ".gch";
  if (fs::read_symlink(gch, ec) == payload.filename()) return true;
  fs::path tmp = header.string() + ".gch.tmp-" + unique_suffix();
  fs::create_symlink(payload.filename(), tmp, ec);
  if (ec) return false;
  if (::rename(tmp.c_str(), gch.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

std::string Jit::pch_include(const std::vector<std::string>& flags) {
  if (!pch_enabled()) return "";
  std::string fs_text;
  for (const std::string& f : flags) (fs_text += f) += '\n';
  std::string key = cache::hash_hex(
      {"cpu-pch-1", compiler_identity(), fs_text, prelude_hash(), std::string_view(kPchHeader)});
  std::lock_guard<std::mutex> lock(pch_mu_);
  std::shared_ptr<PchBuild>& b = pch_[key];
  if (b) return b->state.load() == PchBuild::kReady ? b->header.string() : "";
  b = std::make_shared<PchBuild>();
  b->key = key;
  b->header = pch_cache_.entry_path(kPchTarget, key, ".h");
  // Verified like a kernel entry (size and hash), once per process.
  if (auto payload = pch_cache_.load_file(kPchTarget, key)) {
    if (link_pch(*payload, b->header)) {
      b->state = PchBuild::kReady;
      return b->header.string();
    }
  }
  // One build at a time among the processes sharing the cache (test runs start many): the
  // builder holds <key>.lock until it ends. Others compile without it and look again later.
  fs::path lock_file = pch_cache_.entry_path(kPchTarget, key, ".lock");
  if (!take_lock(lock_file)) {
    pch_.erase(key);
    return "";
  }
  b->owner = ::getpid();
  b->thread = std::make_unique<std::thread>([this, build = b, flags, lock_file] {
    build_pch(build, flags);
    ::unlink(lock_file.c_str());
  });
  return "";
}

void Jit::build_pch(const std::shared_ptr<PchBuild>& b, std::vector<std::string> flags) {
  auto t0 = std::chrono::steady_clock::now();
  std::string log;
  bool ok = false;
  fs::path src, out;
  try {
    const Toolchain& tc = toolchain();
    fs::path work = work_dir();
    src = work / (b->key + "-" + unique_suffix() + ".h");
    out = src.string() + ".gch";
    cache::write_file_atomic(src, std::string_view(kPchHeader));
    std::vector<std::string> args = {tc.path};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"-I", prelude_dir().string(), "-x", "c++-header", "-o", out.string(),
                             src.string()});
    int rc = run_process(args, &log, compile_limits(), nullptr, [&](pid_t pid) {
      std::lock_guard<std::mutex> lock(b->mu);
      if (b->cancelled) return false;
      b->pid = pid;
      return true;
    });
    {
      std::lock_guard<std::mutex> lock(b->mu);
      b->pid = 0;
      if (b->cancelled) rc = -1;
    }
    std::error_code ec;
    if (rc == 0 && fs::exists(out, ec) && pch_cache_.store_file(kPchTarget, b->key, out)) {
      ok = link_pch(pch_cache_.entry_path(kPchTarget, b->key, ".bin"), b->header);
    }
  } catch (const std::exception& e) {
    log += e.what();
  }
  if (!src.empty()) ::unlink(src.c_str());
  if (!out.empty()) ::unlink(out.c_str());  // no-op once moved into the cache
  if (trace::build()) {
    std::fprintf(stderr, "alloy: cpu precompiled prelude %s in %.1f ms%s%s\n",
                 ok ? "built" : "not built", trace::ms_since(t0), ok ? "" : ": ",
                 ok ? "" : log.c_str());
  }
  {
    std::lock_guard<std::mutex> lock(pch_mu_);
    if (ok) ++counters_.pch_builds;
  }
  b->state = ok ? PchBuild::kReady : PchBuild::kFailed;
}

std::string Jit::key(const std::string& cpp_source, const JitOptions& options) {
  return cache::key_hex(cpp_source, kTarget, compiler_identity(), flags_string(options),
                        prelude_hash());
}

bool Jit::cached(const std::string& cpp_source, const JitOptions& options) {
  std::string k = key(cpp_source, options);
  if (cache_.in_memory(kTarget, k)) return true;
  if (!cache_.has_disk()) return false;
  std::error_code ec;
  return fs::exists(cache_.entry_path(kTarget, k, ".meta"), ec);
}

std::shared_ptr<Library> Jit::compile(const std::string& cpp_source, const JitOptions& options) {
  std::string k = key(cpp_source, options);
  auto v = cache_.get_or_build(
      kTarget, k, [&]() -> std::shared_ptr<void> { return load_or_build(cpp_source, options, k); });
  return std::static_pointer_cast<Library>(v);
}

namespace {

std::shared_ptr<Library> open_library(const fs::path& path, const std::string& key,
                                      std::string* error) {
  // RTLD_LOCAL: every kernel library exports the same entry names (alloy_group_0, ...).
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = ::dlerror();
    *error = e ? e : "dlopen failed";
    return nullptr;
  }
  return std::make_shared<Library>(h, key, path);
}

}  // namespace

namespace {

// A build lock of one kernel among the processes sharing a disk cache: <cache>/cpu/<key>.lock,
// created exclusively, holding "<pid> <boot id>". A lock whose process is gone (same machine) or
// that is older than the compile time limit is debris and is taken over.
class BuildLock {
 public:
  explicit BuildLock(fs::path path) : path_(std::move(path)) {}
  ~BuildLock() {
    if (held_) ::unlink(path_.c_str());
  }
  BuildLock(const BuildLock&) = delete;
  BuildLock& operator=(const BuildLock&) = delete;

  // Takes the lock, or returns false when a live process holds it. True also when no lock can
  // be made (a full or read-only disk): the caller compiles, as without a disk cache.
  bool take(uint64_t max_age_s) {
    std::error_code ec;
    fs::create_directories(path_.parent_path(), ec);
    for (int attempt = 0; attempt < 2; ++attempt) {
      int fd = ::open(path_.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
      if (fd >= 0) {
        std::string me = std::to_string(::getpid()) + " " + boot_id() + "\n";
        ssize_t w = ::write(fd, me.data(), me.size());
        (void)w;
        ::close(fd);
        held_ = true;
        return true;
      }
      if (errno != EEXIST) return true;
      if (!stale(max_age_s)) return false;
      ::unlink(path_.c_str());
    }
    return false;
  }
  bool exists() const { return ::access(path_.c_str(), F_OK) == 0; }
  bool stale(uint64_t max_age_s) const {
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) return false;  // gone: not stale, free
    if (static_cast<uint64_t>(::time(nullptr) - st.st_mtime) > max_age_s) return true;
    std::ifstream in(path_);
    long pid = 0;
    std::string boot;
    if (!(in >> pid >> boot)) return false;  // being written
    return boot == boot_id() && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 &&
           errno == ESRCH;
  }

 private:
  static const std::string& boot_id() {
    static const std::string id = [] {
      std::ifstream in("/proc/sys/kernel/random/boot_id");
      std::string s;
      in >> s;
      return s.empty() ? std::string("unknown") : s;
    }();
    return id;
  }
  fs::path path_;
  bool held_ = false;
};

}  // namespace

std::shared_ptr<Library> Jit::load_or_build(const std::string& source, const JitOptions& options,
                                            const std::string& key) {
  std::string error;
  std::optional<BuildLock> lock;
  if (cache_.has_disk()) {
    auto from_disk = [&]() -> std::shared_ptr<Library> {
      if (auto path = cache_.load_file(kTarget, key)) {
        if (auto lib = open_library(*path, key, &error)) return lib;
        // Verified bytes that do not load (e.g. built against another libstdc++): rebuild.
        cache_.remove(kTarget, key);
      }
      return nullptr;
    };
    if (auto lib = from_disk()) return lib;
    // Another process compiling the same kernel (test runs and data loaders start many):
    // wait for its entry instead of compiling it again; if it fails or dies, compile here.
    uint64_t limit = std::max<uint64_t>(compile_limits().seconds, 1);
    lock.emplace(cache_.entry_path(kTarget, key, ".lock"));
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(limit);
    bool waited = false;
    while (!lock->take(limit)) {
      waited = true;
      if (std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!lock->exists() || lock->stale(limit)) {
        if (auto lib = from_disk()) return lib;
      }
    }
    // Holding the lock (or given up waiting): the entry may have appeared meanwhile (also when
    // its builder finished between the miss above and the lock).
    std::error_code ec;
    if (waited || fs::exists(cache_.entry_path(kTarget, key, ".meta"), ec))
      if (auto lib = from_disk()) return lib;
  }

  const Toolchain& tc = toolchain();
  const fs::path& include = prelude_dir();
  // Work files have per-process names: processes compiling the same kernel must not share (and
  // rename away) each other's source. A cache folder that cannot take them (full, read-only)
  // falls back to the private folder.
  fs::path work = work_dir();
  std::string stem = key + "-" + unique_suffix();
  fs::path src, out;
  // Writes the source into `work`; the error, or "" when it is written.
  auto write_source = [&]() -> std::string {
    src = work / (stem + ".cpp");
    out = work / (stem + ".so");
    try {
      cache::write_file_atomic(src, source);
      return "";
    } catch (const fs::filesystem_error& e) {
      return e.what();
    }
  };
  auto source_error = [](const std::string& error) {
    return std::runtime_error("cannot write the kernel source for the CPU JIT: " + error);
  };
  // Moves the work files to the private folder; throws when the source cannot be written there.
  auto write_in_private_dir = [&] {
    work = private_dir();
    if (std::string error = write_source(); !error.empty()) throw source_error(error);
  };
  if (std::string error = write_source(); !error.empty()) {
    if (work == private_dir()) throw source_error(error);
    write_in_private_dir();
  }

  std::vector<std::string> flags = compile_flags(options);
  // The precompiled prelude holds every part of the prelude; a source that defines its own
  // versions of prelude helpers (ALLOY_USER_*, user definitions win) must not see them. The quick
  // tier uses the full tier's (g++ accepts a -O2 header in an -Og compile: the optimisation level
  // is not among what a precompiled header must match; one header per flags instead of two).
  std::string pch;
  if (source.find("#define ALLOY_USER_") == std::string::npos) {
    JitOptions full = options;
    full.quick = false;
    pch = pch_include(options.quick ? compile_flags(full) : flags);
  }
  {
    std::lock_guard<std::mutex> lock(pch_mu_);
    ++(pch.empty() ? counters_.without_pch : counters_.with_pch);
    ++(options.quick ? counters_.quick : counters_.full);
    if (options.background) ++counters_.background;
  }
  std::string log;
  ProcessLimits limits = compile_limits();
  bool timed_out = false;
  auto run_compiler = [&] {
    std::vector<std::string> args = {tc.path};
    args.insert(args.end(), flags.begin(), flags.end());
    if (!pch.empty()) args.insert(args.end(), {"-include", pch});
    args.insert(args.end(), {"-I", include.string(), "-o", out.string(), src.string()});
    return run_process(args, &log, limits, &timed_out);
  };
  int rc = run_compiler();
  if (rc != 0 && log.find("No space left on device") != std::string::npos &&
      work != private_dir()) {
    // The cache's disk filled up under the compiler: once more in the private folder.
    ::unlink(out.c_str());
    ::unlink(src.c_str());
    write_in_private_dir();
    rc = run_compiler();
  }
  if (rc != 0 || !fs::exists(out)) {
    ::unlink(out.c_str());
    // Say which limit stopped the compiler, first: the caller shows the raw log when no line of
    // the user's source is to blame.
    if (timed_out)
      log = "alloy: the host compiler was stopped after " + std::to_string(limits.seconds) +
            " s, the compile time limit (set ALLOY_COMPILE_TIMEOUT, in seconds, to raise it; 0 "
            "removes it)\n" +
            log;
    else if (limits.memory_bytes && out_of_memory(log))
      log = "alloy: the host compiler ran out of memory under the compile memory limit of " +
            std::to_string(limits.memory_bytes >> 20) +
            " MB (set ALLOY_COMPILE_MEMORY_MB to raise it; 0 removes it)\n" + log;
    throw CompileFailure(tc.path, log, src);
  }

  fs::path lib_path = out;
  bool stored = cache_.has_disk() && cache_.store_file(kTarget, key, out);
  if (stored) {
    lib_path = cache_.entry_path(kTarget, key, ".bin");
    // Keep the source next to the entry for inspection (best effort).
    if (::rename(src.c_str(), cache_.entry_path(kTarget, key, ".cpp").c_str()) != 0) {
      ::unlink(src.c_str());
    }
  } else {
    ::unlink(src.c_str());
  }
  auto lib = open_library(lib_path, key, &error);
  if (!stored) ::unlink(out.c_str());  // mapped already; nothing to keep
  if (!lib) throw std::runtime_error("cannot load the compiled kernel library: " + error);
  return lib;
}

std::shared_ptr<Library> compile(const std::string& cpp_source, const JitOptions& options) {
  return Jit::global().compile(cpp_source, options);
}

}  // namespace alloy::cpu
