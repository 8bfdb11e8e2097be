// The disk cache under faults (issue 16, docs/reliability.md): processes compiling one kernel at
// once with a slow compiler, a process killed with SIGKILL in the middle of a compile, each kind
// of damage found in cache folders (a damaged prelude, <cache>/tmp that is a file, entries that
// are FIFOs), a full disk and a read-only cache. Every case must end with the kernel compiled and
// correct, and no lookup may block.
//
// Processes: the test binary runs itself (`/proc/self/exe --gtest_filter=CacheFaultsChild.*`)
// with ALLOY_TEST_CHILD_CACHE set to the cache folder; the child compiles and checks one kernel.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/cpu/jit.h"
#include "scoped_env.h"

using namespace alloy;
using namespace alloy::cpu;
namespace fs = std::filesystem;

extern char** environ;

namespace {

// Uses a prelude header, so a damaged prelude folder would break it.
const char* kSource = R"(#include "cpu/abi.h"
extern "C" ALLOY_CPU_EXPORT int answer() { return ALLOY_CPU_MAX_BUFFERS - 22; }
)";

fs::path fresh_dir(const std::string& tag) {
  static std::atomic<int> n{0};
  fs::path p = fs::temp_directory_path() / ("alloy-cache-faults-" + tag + "-" +
                                            std::to_string(::getpid()) + "-" + std::to_string(n++));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// A compiler wrapper: `--version` at once, otherwise sleeps $ALLOY_TEST_CXX_DELAY seconds first.
fs::path slow_compiler(const fs::path& dir) {
  fs::path p = dir / "slow-c++";
  std::ofstream f(p);
  f << "#!/bin/sh\n"
       "if [ \"$1\" = --version ]; then exec c++ --version; fi\n"
       "if [ -n \"$ALLOY_TEST_CXX_PIDFILE\" ]; then echo $$ > \"$ALLOY_TEST_CXX_PIDFILE\"; fi\n"
       "sleep \"${ALLOY_TEST_CXX_DELAY:-0}\"\n"
       "exec c++ \"$@\"\n";
  f.close();
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  return p;
}

JitConfig config_for(const fs::path& cache, const std::string& compiler = "") {
  JitConfig c;
  c.cache_dir = cache;
  c.compiler = compiler;
  return c;
}

// Compiles kSource with a fresh Jit (a new process, as far as the cache can tell) and checks it.
void expect_compiles(const JitConfig& config) {
  Jit jit(config);
  auto lib = jit.compile(kSource);
  auto fn = reinterpret_cast<int (*)()>(lib->symbol("answer"));
  ASSERT_NE(fn, nullptr);
  EXPECT_EQ(fn(), 42);
}

// Runs the check with a deadline: a lookup that blocks (a FIFO) fails the test instead of
// hanging it. `unblock` is called on timeout so the stuck thread can finish.
void expect_compiles_within(const JitConfig& config, std::chrono::seconds limit,
                            const std::function<void()>& unblock) {
  auto done = std::async(std::launch::async, [config] {
    Jit jit(config);
    auto lib = jit.compile(kSource);
    auto fn = reinterpret_cast<int (*)()>(lib->symbol("answer"));
    return fn ? fn() : -1;
  });
  if (done.wait_for(limit) != std::future_status::ready) {
    ADD_FAILURE() << "the cache lookup blocked";
    unblock();
  }
  EXPECT_EQ(done.get(), 42);
}

// Starts this test binary as a child running CacheFaultsChild.Compile with `env` added.
pid_t spawn_child(const std::vector<std::string>& env) {
  std::vector<std::string> args = {"/proc/self/exe", "--gtest_filter=CacheFaultsChild.Compile"};
  std::vector<std::string> envs;
  // The parent's environment, without gtest's sharding (a sharded run would give the child
  // another shard, where its one test may not be).
  for (char** e = environ; *e; ++e) {
    std::string_view v(*e);
    if (v.rfind("GTEST_TOTAL_SHARDS=", 0) == 0 || v.rfind("GTEST_SHARD_INDEX=", 0) == 0 ||
        v.rfind("GTEST_SHARD_STATUS_FILE=", 0) == 0)
      continue;
    envs.emplace_back(*e);
  }
  for (auto& e : env) envs.push_back(e);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  argv[0] = exe.data();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

size_t count_files(const fs::path& dir) {
  std::error_code ec;
  size_t n = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++n;
  return n;
}

// True when this process may mount file systems (root in a namespace that allows it).
bool try_mount(const char* type, const fs::path& target, unsigned long flags, const char* data,
               const char* source = "none") {
  return ::mount(source, target.c_str(), type, flags, data) == 0;
}

}  // namespace

// The child side of the process tests (skipped unless started by them).
TEST(CacheFaultsChild, Compile) {
  const char* cache = std::getenv("ALLOY_TEST_CHILD_CACHE");
  if (!cache) GTEST_SKIP() << "runs as a child of the CacheFaults tests";
  const char* cxx = std::getenv("ALLOY_TEST_CHILD_CXX");
  expect_compiles(config_for(cache, cxx ? cxx : ""));
}

TEST(CacheFaults, ConcurrentProcessesWithADelayedCompiler) {
  // All processes wrote the same <cache>/tmp/<key>.cpp; the first to finish renamed it away and
  // a slower compiler failed with "No such file or directory".
  fs::path dir = fresh_dir("concurrent");
  fs::path cxx = slow_compiler(dir);
  std::vector<pid_t> pids;
  for (int i = 0; i < 6; ++i) {
    pid_t pid = spawn_child({"ALLOY_TEST_CHILD_CACHE=" + (dir / "cache").string(),
                             "ALLOY_TEST_CHILD_CXX=" + cxx.string(),
                             "ALLOY_TEST_CXX_DELAY=" + std::to_string(i % 3) + ".5"});
    ASSERT_GT(pid, 0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) EXPECT_EQ(wait_child(pid), 0) << "a process failed to compile";
  EXPECT_EQ(count_files(dir / "cache" / "tmp"), 0u) << "work files left behind";
  expect_compiles(config_for(dir / "cache"));
  fs::remove_all(dir);
}

TEST(CacheFaults, KillDuringACompileThenOrphansAreRemoved) {
  fs::path dir = fresh_dir("kill");
  fs::path cxx = slow_compiler(dir);
  fs::path pidfile = dir / "compiler.pid";
  pid_t pid = spawn_child({"ALLOY_TEST_CHILD_CACHE=" + (dir / "cache").string(),
                           "ALLOY_TEST_CHILD_CXX=" + cxx.string(), "ALLOY_TEST_CXX_DELAY=20",
                           "ALLOY_TEST_CXX_PIDFILE=" + pidfile.string()});
  ASSERT_GT(pid, 0);
  // Wait until the child has written its work file, then kill it mid-compile.
  for (int i = 0; i < 200 && count_files(dir / "cache" / "tmp") == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GT(count_files(dir / "cache" / "tmp"), 0u);
  ::kill(pid, SIGKILL);
  EXPECT_EQ(wait_child(pid), 128 + SIGKILL);
  // The compiler leads its own process group; it outlives the killed process (as it would):
  // stop it here so it does not write into the folder after the test.
  for (int i = 0; i < 100 && !fs::exists(pidfile); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (std::ifstream in(pidfile); in) {
    pid_t compiler = 0;
    if (in >> compiler && compiler > 1) ::kill(-compiler, SIGKILL);
  }
  // A half-written entry, as a kill during the entry's write leaves.
  fs::create_directories(dir / "cache" / "cpu");
  std::ofstream(dir / "cache" / "cpu" / "0123.bin.tmp.AbCdEf") << "half";
  std::ofstream(dir / "cache" / "tmp" / "recent.cpp") << "a compile in flight";
  // The next process compiles, and removes orphans older than the age limit (not recent files).
  auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  for (auto& e : fs::directory_iterator(dir / "cache" / "tmp"))
    if (e.path().filename() != "recent.cpp") fs::last_write_time(e.path(), two_hours_ago);
  fs::last_write_time(dir / "cache" / "cpu" / "0123.bin.tmp.AbCdEf", two_hours_ago);
  expect_compiles(config_for(dir / "cache"));
  EXPECT_FALSE(fs::exists(dir / "cache" / "cpu" / "0123.bin.tmp.AbCdEf"));
  EXPECT_TRUE(fs::exists(dir / "cache" / "tmp" / "recent.cpp"));
  EXPECT_EQ(count_files(dir / "cache" / "tmp"), 1u);
  fs::remove_all(dir);
}

TEST(CacheFaults, DamagedPreludeIsRebuilt) {
  // A damaged prelude folder was never re-checked: every new kernel failed with an error that
  // blamed the user's code.
  fs::path dir = fresh_dir("prelude");
  expect_compiles(config_for(dir));
  fs::path prelude;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("prelude-")) prelude = e.path();
  ASSERT_FALSE(prelude.empty());
  auto clear = [&] {
    for (auto& e : fs::directory_iterator(dir / "cpu")) fs::remove(e.path());
  };
  // Edited, removed, replaced by a FIFO: each time a fresh process must still compile.
  clear();
  std::ofstream(prelude / "cpu" / "abi.h") << "#error damaged\n";
  expect_compiles(config_for(dir));
  clear();
  fs::remove(prelude / "cpu" / "abi.h");
  expect_compiles(config_for(dir));
  clear();
  fs::remove(prelude / "cpu" / "abi.h");
  ASSERT_EQ(::mkfifo((prelude / "cpu" / "abi.h").c_str(), 0644), 0);
  expect_compiles_within(config_for(dir), std::chrono::seconds(60), [&] {
    int fd = ::open((prelude / "cpu" / "abi.h").c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  fs::remove_all(dir);
}

TEST(CacheFaults, TmpThatIsAFile) {
  fs::path dir = fresh_dir("tmpfile");
  std::ofstream(dir / "tmp") << "not a folder";
  expect_compiles(config_for(dir));
  fs::remove_all(dir);
}

TEST(CacheFaults, EntriesThatAreFifosNeverBlock) {
  // An entry that was a FIFO blocked the next lookup forever.
  fs::path dir = fresh_dir("fifo");
  std::string key;
  {
    Jit jit(config_for(dir));
    key = jit.key(kSource);
    jit.compile(kSource);
  }
  for (const char* ext : {".meta", ".bin"}) {
    SCOPED_TRACE(ext);
    fs::path entry = dir / "cpu" / (key + ext);
    fs::remove(entry);
    ASSERT_EQ(::mkfifo(entry.c_str(), 0644), 0);
    expect_compiles_within(config_for(dir), std::chrono::seconds(60), [&] {
      int fd = ::open(entry.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    });
  }
  // The compiler identity cached under compilers/.
  for (auto& e : fs::directory_iterator(dir / "compilers")) {
    fs::remove(e.path());
    ASSERT_EQ(::mkfifo(e.path().c_str(), 0644), 0);
    expect_compiles_within(config_for(dir), std::chrono::seconds(60), [&] {
      int fd = ::open(e.path().c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    });
  }
  fs::remove_all(dir);
}

TEST(CacheFaults, FullDiskFallsBackToAPrivateFolder) {
  // A full disk made every kernel fail ("cannot write the prelude headers").
  fs::path dir = fresh_dir("full");
  // Test-only fault injection: every file the cache creates under `dir` fails with ENOSPC.
  {
    alloy::testing::ScopedEnv full("ALLOY_TEST_FULL_DISK", dir.string());
    expect_compiles(config_for(dir));
  }
  // A real full file system, where this process may mount one.
  fs::path mnt = dir / "tmpfs";
  fs::create_directories(mnt);
  if (try_mount("tmpfs", mnt, 0, "size=64k")) {
    {
      std::ofstream fill(mnt / "fill", std::ios::binary);
      std::string block(4096, 'x');
      while (fill.write(block.data(), block.size()) && fill.flush()) {
      }
    }
    expect_compiles(config_for(mnt / "cache"));
    ::umount2(mnt.c_str(), MNT_DETACH);
  } else {
    std::printf("[ info ] no tmpfs mount here: the full disk was simulated only\n");
  }
  fs::remove_all(dir);
}

TEST(CacheFaults, ReadOnlyCache) {
  fs::path dir = fresh_dir("ro");
  expect_compiles(config_for(dir / "cache"));  // an entry and a prelude exist
  fs::path ro = dir / "ro";
  fs::create_directories(ro);
  if (!try_mount(nullptr, ro, MS_BIND, nullptr, (dir / "cache").c_str())) {
    fs::remove_all(dir);
    GTEST_SKIP() << "cannot bind-mount here; the full-disk test covers unwritable folders";
  }
  bool ro_ok =
      try_mount(nullptr, ro, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr, (dir / "cache").c_str());
  if (ro_ok) {
    expect_compiles(config_for(ro));  // the entry, read-only
    // A new kernel: compiled in a private folder, nothing written to the cache.
    Jit jit(config_for(ro));
    auto lib = jit.compile(
        "#include \"cpu/abi.h\"\nextern \"C\" ALLOY_CPU_EXPORT int seven() { return 7; }");
    auto fn = reinterpret_cast<int (*)()>(lib->symbol("seven"));
    ASSERT_NE(fn, nullptr);
    EXPECT_EQ(fn(), 7);
  }
  ::umount2(ro.c_str(), MNT_DETACH);
  fs::remove_all(dir);
  if (!ro_ok) GTEST_SKIP() << "cannot remount read-only here";
}
