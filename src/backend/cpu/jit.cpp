#include "backend/cpu/jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernel/prelude_files.h"

extern char** environ;

namespace alloy::cpu {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTarget = "cpu";
// Defaults of ALLOY_COMPILE_MEMORY_MB and ALLOY_COMPILE_TIMEOUT: far above what a kernel needs
// (a few hundred MB, seconds), far below what a runaway compile takes.
constexpr uint64_t kDefaultCompileMemoryMB = 8192;
constexpr uint64_t kDefaultCompileSeconds = 300;
constexpr const char* kBaseFlags[] = {"-std=c++20",      "-O2", "-fPIC", "-shared", "-march=native",
                                      "-fno-math-errno", "-w"};

bool is_executable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `name` if it holds a '/', else the first executable `name` on $PATH; "" when none.
std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs.remove_prefix(colon == std::string_view::npos ? dirs.size() : colon + 1);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (is_executable(candidate)) return candidate;
  }
  return "";
}

// Limits on one run of the host compiler (docs/reliability.md): a header of nested macros can
// drive it to tens of GB or for hours. 0: none.
struct ProcessLimits {
  uint64_t memory_bytes = 0;  // RLIMIT_AS of the compiler and its children
  uint64_t seconds = 0;       // wall clock; the process group is killed after it
};

// $name as a positive integer (in `unit`s), else `fallback`; throws for a malformed value.
uint64_t env_limit(const char* name, uint64_t fallback, uint64_t unit) {
  const char* env = std::getenv(name);
  if (!env || !*env) return fallback * unit;
  std::string_view s(env);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    throw std::invalid_argument(std::string(name) + " must be a non-negative integer, got '" + env +
                                "'");
  return v * unit;
}

ProcessLimits compile_limits() {
  return {env_limit("ALLOY_COMPILE_MEMORY_MB", kDefaultCompileMemoryMB, 1ull << 20),
          env_limit("ALLOY_COMPILE_TIMEOUT", kDefaultCompileSeconds, 1)};
}

// Runs argv[0] (a path) with stdout+stderr captured; returns the exit status (-1 if it could not
// start, 128+signal if killed). fork + execve, not system(): no shell, no quoting issues; not
// posix_spawn, which cannot set the child's resource limits. The child leads its own process
// group so that a timeout kills the compiler's own children too. Between fork and execve the
// child makes only system calls (everything it needs is prepared before the fork).
// LC_ALL=C keeps diagnostics in plain ASCII for the caller that parses them.
int run_process(const std::vector<std::string>& args, std::string* output,
                const ProcessLimits& limits = {}, bool* timed_out = nullptr) {
  output->clear();
  if (timed_out) *timed_out = false;
  std::vector<char*> argv;
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
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct rlimit as_limit {};
  as_limit.rlim_cur = as_limit.rlim_max = static_cast<rlim_t>(limits.memory_bytes);
  // Errors from the child, reported through a second pipe (closed by a successful execve).
  int err_fds[2];
  if (::pipe2(err_fds, O_CLOEXEC) != 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (devnull >= 0) ::close(devnull);
    return -1;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (limits.memory_bytes) ::setrlimit(RLIMIT_AS, &as_limit);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execve(argv[0], argv.data(), envp.data());
    int e = errno;
    ssize_t w = ::write(err_fds[1], &e, sizeof e);
    (void)w;
    ::_exit(127);
  }
  ::close(fds[1]);
  ::close(err_fds[1]);
  if (devnull >= 0) ::close(devnull);
  if (pid < 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(err_fds[0]);
    *output = std::string("cannot run ") + args[0] + ": " + std::strerror(e);
    return -1;
  }
  ::setpgid(pid, pid);  // also from the parent: no window where a kill(-pid) misses
  int exec_errno = 0;
  ssize_t got = ::read(err_fds[0], &exec_errno, sizeof exec_errno);
  ::close(err_fds[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    ::close(fds[0]);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    *output = std::string("cannot run ") + args[0] + ": " + std::strerror(exec_errno);
    return -1;
  }
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + std::chrono::seconds(limits.seconds);
  bool killed = false;
  char buf[4096];
  for (;;) {
    int wait_ms = -1;
    if (limits.seconds && !killed) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
      wait_ms = left > 0 ? static_cast<int>(std::min<long long>(left, 1 << 30)) : 0;
    }
    struct pollfd pfd {
      fds[0], POLLIN, 0
    };
    int pr = ::poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {  // the time limit: stop the compiler and everything it started
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
                 : (config.use_default_cache_dir ? cache::default_dir() : std::nullopt)) {}

Jit::~Jit() {
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
    toolchain_ = Toolchain{path, version + "\ncpu: " + cpu_identity()};
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
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/alloy-XXXXXX";
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

std::string Jit::flags_string(const JitOptions& options) const {
  std::string s;
  for (const char* f : kBaseFlags) (s += f) += '\n';
  for (const std::string& f : options.flags) (s += f) += '\n';
  return s;
}

std::string Jit::key(const std::string& cpp_source, const JitOptions& options) {
  return cache::key_hex(cpp_source, kTarget, compiler_identity(), flags_string(options),
                        prelude_hash());
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

std::shared_ptr<Library> Jit::load_or_build(const std::string& source, const JitOptions& options,
                                            const std::string& key) {
  std::string error;
  if (cache_.has_disk()) {
    if (auto path = cache_.load_file(kTarget, key)) {
      if (auto lib = open_library(*path, key, &error)) return lib;
      // Verified bytes that do not load (e.g. built against another libstdc++): rebuild.
      cache_.remove(kTarget, key);
    }
  }

  const Toolchain& tc = toolchain();
  const fs::path& include = prelude_dir();
  // Work files have per-process names: processes compiling the same kernel must not share (and
  // rename away) each other's source. A cache folder that cannot take them (full, read-only)
  // falls back to the private folder.
  fs::path work = work_dir();
  std::string stem = key + "-" + unique_suffix();
  fs::path src = work / (stem + ".cpp");
  try {
    cache::write_file_atomic(src, source);
  } catch (const fs::filesystem_error& e) {
    fs::path fallback = private_dir();
    if (work == fallback)
      throw std::runtime_error(std::string("cannot write the kernel source for the CPU JIT: ") +
                               e.what());
    work = fallback;
    src = work / (stem + ".cpp");
    try {
      cache::write_file_atomic(src, source);
    } catch (const fs::filesystem_error& e2) {
      throw std::runtime_error(std::string("cannot write the kernel source for the CPU JIT: ") +
                               e2.what());
    }
  }
  fs::path out = work / (stem + ".so");

  std::string log;
  ProcessLimits limits = compile_limits();
  bool timed_out = false;
  auto run_compiler = [&] {
    std::vector<std::string> args = {tc.path};
    for (const char* f : kBaseFlags) args.emplace_back(f);
    for (const std::string& f : options.flags) args.push_back(f);
    args.push_back("-I");
    args.push_back(include.string());
    args.push_back("-o");
    args.push_back(out.string());
    args.push_back(src.string());
    return run_process(args, &log, limits, &timed_out);
  };
  int rc = run_compiler();
  if (rc != 0 && log.find("No space left on device") != std::string::npos &&
      work != private_dir()) {
    // The cache's disk filled up under the compiler: once more in the private folder.
    ::unlink(out.c_str());
    ::unlink(src.c_str());
    work = private_dir();
    src = work / (stem + ".cpp");
    out = work / (stem + ".so");
    try {
      cache::write_file_atomic(src, source);
    } catch (const fs::filesystem_error& e) {
      throw std::runtime_error(std::string("cannot write the kernel source for the CPU JIT: ") +
                               e.what());
    }
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
