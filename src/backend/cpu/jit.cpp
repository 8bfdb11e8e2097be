#include "backend/cpu/jit.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
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

#include "core/trace.h"
#include "core/prelude_files.h"

extern char** environ;

namespace alloy::cpu {
namespace fs = std::filesystem;

namespace {

constexpr const char* kTarget = "cpu";
constexpr const char* kPchTarget = "cpu-pch";
// -fvisibility=hidden / -fno-semantic-interposition: the kernel a group entry calls is not
// interposable, so it inlines into the thread loop (an exported function of a -fPIC object is
// otherwise called through the PLT for every thread). -fno-trapping-math: Metal has no
// floating-point exception flags, and without it the vectoriser may not speculate a conditional
// float operation. Results are unchanged by all three.
constexpr const char* kBaseFlags[] = {"-std=c++20",
                                      "-O2",
                                      "-fPIC",
                                      "-shared",
                                      "-march=native",
                                      "-fno-math-errno",
                                      "-fno-trapping-math",
                                      "-fvisibility=hidden",
                                      "-fno-semantic-interposition",
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

// Runs argv[0] (a path) with stdout+stderr captured; returns the exit status (-1 if it could not
// start, 128+signal if killed). posix_spawn, not system(): no shell, no quoting issues.
// LC_ALL=C keeps diagnostics in plain ASCII for the caller that parses them.
// `started` (optional) runs with the child's pid, which is then the id of a process group of its
// own (so that the compiler and the programs it runs can be killed together); when it returns
// false the group is killed at once.
int run_process(const std::vector<std::string>& args, std::string* output,
                const std::function<bool(pid_t)>& started = nullptr) {
  output->clear();
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
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  if (started) {
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
  }
  pid_t pid;
  int rc = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    *output = std::string("cannot run ") + args[0] + ": " + std::strerror(rc);
    return -1;
  }
  if (started && !started(pid)) ::kill(-pid, SIGKILL);
  char buf[4096];
  for (;;) {
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
  if (own_work_dir_) {
    std::error_code ec;
    fs::remove_all(work_dir_, ec);
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
      std::ifstream in(id_file, std::ios::binary);
      if (in) version.assign(std::istreambuf_iterator<char>(in), {});
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

fs::path Jit::work_dir() {
  std::call_once(work_once_, [&] {
    if (cache_.has_disk()) {
      work_dir_ = cache_.temp_dir();
      return;
    }
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/alloy-XXXXXX";
    if (::mkdtemp(pattern.data())) {
      work_dir_ = pattern;
      own_work_dir_ = true;
    }
  });
  if (work_dir_.empty()) {
    throw std::runtime_error("cannot create a work folder for the CPU JIT (cache: " +
                             cache_.disk_error() + "; temp folder not writable)");
  }
  return work_dir_;
}

// The prelude headers, written once under <cache>/prelude-<hash>/ (or the work folder without a
// disk cache). Written into a temp folder then renamed, so a concurrent process never sees a
// half-written prelude; a `.complete` marker tells a finished folder from a foreign one.
const fs::path& Jit::prelude_dir() {
  const std::string& hash = prelude_hash();
  std::call_once(prelude_dir_once_, [&] {
    fs::path root = cache_.has_disk() ? cache_.dir() : work_dir();
    fs::path final_dir = root / ("prelude-" + hash);
    std::error_code ec;
    if (fs::exists(final_dir / ".complete", ec)) {
      prelude_dir_ = final_dir;
      return;
    }
    fs::path tmp = root / ("prelude-" + hash + ".tmp-" + unique_suffix());
    try {
      for (const auto& f : prelude::embedded_files()) {
        fs::path p = tmp / f.path;
        fs::create_directories(p.parent_path());
        cache::write_file_atomic(p, f.text);
      }
      fs::create_directories(tmp);
      cache::write_file_atomic(tmp / ".complete", hash);
    } catch (const fs::filesystem_error& e) {
      fs::remove_all(tmp, ec);
      prelude_error_ = std::string("cannot write the prelude headers: ") + e.what();
      return;
    }
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (::rename(tmp.c_str(), final_dir.c_str()) == 0) break;
      // Another process finished first (rename onto a non-empty folder fails): use theirs. A
      // folder without the marker is debris (e.g. edited by hand): replace it once.
      if (fs::exists(final_dir / ".complete", ec)) break;
      fs::remove_all(final_dir, ec);
    }
    fs::remove_all(tmp, ec);  // no-op when the rename succeeded
    if (fs::exists(final_dir / ".complete", ec)) {
      prelude_dir_ = final_dir;
    } else {
      prelude_error_ = "cannot create the prelude folder " + final_dir.string();
    }
  });
  if (prelude_dir_.empty()) throw std::runtime_error(prelude_error_);
  return prelude_dir_;
}

std::vector<std::string> Jit::compile_flags(const JitOptions& options) {
  std::vector<std::string> flags(std::begin(kBaseFlags), std::end(kBaseFlags));
  if (toolchain().clang) {
    flags.insert(flags.end(), std::begin(kClangFlags), std::end(kClangFlags));
  } else {
    flags.insert(flags.end(), std::begin(kGccFlags), std::end(kGccFlags));
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
  return s;
}

bool Jit::pch_enabled() {
  std::lock_guard<std::mutex> lock(pch_mu_);
  if (pch_setting_ < 0) {
    const char* env = std::getenv("ALLOY_CPU_PCH");
    bool off = env && (std::string_view(env) == "0" || std::string_view(env) == "off");
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
    int rc = run_process(args, &log, [&](pid_t pid) {
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
  fs::path work = work_dir();
  fs::path src = work / (key + ".cpp");
  fs::path out = work / (key + "-" + unique_suffix() + ".so");
  try {
    cache::write_file_atomic(src, source);
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error(std::string("cannot write the kernel source for the CPU JIT: ") +
                             e.what());
  }

  std::vector<std::string> flags = compile_flags(options);
  // The precompiled prelude holds every part of the prelude; a source that defines its own
  // versions of prelude helpers (ALLOY_USER_*, user definitions win) must not see them.
  std::string pch =
      source.find("#define ALLOY_USER_") == std::string::npos ? pch_include(flags) : "";
  std::vector<std::string> args = {tc.path};
  args.insert(args.end(), flags.begin(), flags.end());
  if (!pch.empty()) {
    args.push_back("-include");
    args.push_back(pch);
  }
  {
    std::lock_guard<std::mutex> lock(pch_mu_);
    ++(pch.empty() ? counters_.without_pch : counters_.with_pch);
  }
  args.push_back("-I");
  args.push_back(include.string());
  args.push_back("-o");
  args.push_back(out.string());
  args.push_back(src.string());
  std::string log;
  int rc = run_process(args, &log);
  if (rc != 0 || !fs::exists(out)) {
    ::unlink(out.c_str());
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
