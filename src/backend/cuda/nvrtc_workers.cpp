// nvrtc::compile: one compile at a time in this process, the others in worker processes
// (docs/nvrtc-workers.md). NVRTC holds a process-wide lock while it compiles, so threads alone
// never compile two programs at once; processes do.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <tbb/info.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "alloy/errors.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/nvrtc_wire.h"
#include "core/env.h"
#include "core/files.h"
#include "core/spawn.h"
#include "core/trace.h"

extern char** environ;

namespace alloy::cuda::nvrtc {
namespace {

constexpr const char* kWorkerName = "alloy-nvrtc-worker";
constexpr int kHelloTimeoutMs = 30000;  // a worker that does not greet by then is not one
constexpr int kMaxSpawnFailures = 3;    // then workers are off for the process

struct Worker {
  pid_t pid = -1;
  int fd = -1;
  uint64_t generation = 0;
  std::string pch_dir;  // its PCH folder (<pch_root>/<pid>, made by the worker), "" when none
};

struct Config {
  bool resolved = false;
  int max = 0;           // workers at most (0: none)
  bool prestart = true;  // ALLOY_NVRTC_PRESTART: prestart_workers starts them (default on)
  std::string path;
  std::string why;  // why there are none
};

struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  Config config;
  bool in_process_busy = false;
  bool held = false;  // testing::hold_in_process_slot
  std::vector<Worker> idle;
  std::vector<int> fds;  // every live worker's socket, idle or busy (closed in a forked child)
  int live = 0;          // workers started or starting and not yet ended
  int busy = 0;
  int waiting_callers = 0;     // callers (not background compiles) waiting in acquire
  int waiting_background = 0;  // background compiles waiting in acquire
  uint64_t generation = 0;
  int spawn_failures = 0;
  bool exiting = false;  // the process is exiting: no new workers, busy ones end when done
  // Workers started ahead (prestart_workers) that are greeting or compiling their warm-up: owned
  // by the prestart thread, which makes them idle or ends them; counted in `live`.
  std::vector<Worker> warming;
  bool prestarting = false;  // the prestart thread runs
  // The folder the workers keep NVRTC's PCH files in (one subfolder each), made by this process
  // at its first worker start and removed at its exit ("" until then, or when it cannot be made).
  std::string pch_root;
  pid_t pch_owner = 0;     // the process that made pch_root (a forked child does not remove it)
  bool pch_tried = false;  // make_pch_root ran (once per process: a failure is not retried)
  WorkerStats stats;
  std::atomic<unsigned> fault{0};
};

Pool* the_pool = nullptr;

// A child forked by the application (Python's multiprocessing, say) must not talk to its parent's
// workers, nor keep their sockets open (they would outlive the parent): it closes its copies and
// starts its own workers when it needs some. The CPU JIT's compiler processes need nothing: the
// sockets are close-on-exec. The pool's lock is held across fork, so the child's copy is usable.
void before_fork() {
  the_pool->mu.lock();
}
void after_fork_parent() {
  the_pool->mu.unlock();
}
void after_fork_child() {
  Pool& p = *the_pool;
  for (int fd : p.fds) ::close(fd);
  p.fds.clear();
  p.idle.clear();
  p.stats.live_pids.clear();
  p.live = 0;
  p.busy = 0;
  p.in_process_busy = false;  // the thread that had it is not in this process
  p.pch_root.clear();         // the parent's: this process makes its own when it needs one
  p.pch_tried = false;
  p.warming.clear();  // the parent's prestart thread and its workers are not this process's
  p.prestarting = false;
  ++p.generation;
  p.mu.unlock();
}

void wait_for(pid_t pid);
void forget(Pool& p, const Worker& w);

constexpr const char* kPchFolderPrefix = "alloy-nvrtc-pch-";

// Removes the workers' PCH folder, if this process made it (at exit, with no worker left).
void remove_pch_root(Pool& p) {
  if (p.pch_root.empty() || p.pch_owner != ::getpid()) return;
  std::error_code ec;
  std::filesystem::remove_all(p.pch_root, ec);
  p.pch_root.clear();
}

// Makes the workers' PCH folder ($TMPDIR/alloy-nvrtc-pch-<pid>, mode 0700) at the first worker
// start, after removing those of processes that are gone (killed before their exit handler ran).
// Under the pool's lock. "" when it cannot be made: the workers then compile without the PCH.
void make_pch_root(Pool& p) {
  if (p.pch_tried) return;
  p.pch_tried = true;
  if (!env::flag("ALLOY_NVRTC_WORKER_PCH", true)) return;  // workers compile without the PCH
  std::error_code ec;
  const std::filesystem::path tmp = temp_dir();
  nvrtc::remove_dead_processes_pch_folders(tmp.string());
  auto root = tmp / (kPchFolderPrefix + std::to_string(::getpid()));
  std::filesystem::remove_all(root, ec);  // an earlier process's with this pid
  if (::mkdir(root.c_str(), 0700) != 0) {
    if (trace::build())
      std::fprintf(stderr, "alloy: NVRTC workers compile without the PCH: cannot make %s: %s\n",
                   root.c_str(), std::strerror(errno));
    return;
  }
  p.pch_root = root.string();
  p.pch_owner = ::getpid();
}

// At exit, the idle workers are ended and reaped here rather than left to exit on their own when
// the kernel closes the sockets: their new parent (a container's first process, say) may never
// reap them. All sockets are closed first, so they exit together. A worker busy now (a compile
// the compile pool waits for at exit) is ended when its compile returns (release).
void end_workers_at_exit() {
  Pool& p = *the_pool;
  std::vector<Worker> idle;
  {
    std::unique_lock lock(p.mu);
    p.exiting = true;
    // Workers started ahead and not warm yet: their sockets shut, they exit at once (EOF), and
    // the prestart thread, which owns them, reaps them; it starts no more once `exiting` is set.
    for (const auto& w : p.warming) ::shutdown(w.fd, SHUT_RDWR);
    p.cv.wait_for(lock, std::chrono::seconds(10), [&] { return !p.prestarting; });
    idle.swap(p.idle);
    p.live -= static_cast<int>(idle.size());
    for (const auto& w : idle) forget(p, w);
  }
  for (const auto& w : idle) ::close(w.fd);
  for (const auto& w : idle) wait_for(w.pid);
  std::lock_guard lock(p.mu);
  if (p.live == 0) remove_pch_root(p);  // else when the last busy worker ends (release)
}

Pool& pool() {
  static Pool* p = [] {
    the_pool = new Pool();  // leaked: compiles may run during static destruction
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    std::atexit(end_workers_at_exit);
    return the_pool;
  }();
  return *p;
}

// Where the worker may be: beside the executable or shared library that holds Alloy (the build
// folder's programs, the Python package's alloy/_core*.so), then where `cmake --install` put it.
std::vector<std::string> worker_candidates() {
  std::vector<std::string> c;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&worker_candidates), &info) && info.dli_fname) {
    std::error_code ec;
    auto module = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) c.push_back((module.parent_path() / kWorkerName).string());
  }
#ifdef ALLOY_NVRTC_WORKER_INSTALLED
  c.push_back(ALLOY_NVRTC_WORKER_INSTALLED);
#endif
  return c;
}

Config resolve() {
  Config c;
  c.resolved = true;
  const std::optional<uint64_t> n =
      env::count("ALLOY_NVRTC_WORKERS", "a number of workers from 0 to 1024", 1024);
  if (n == 0u) {
    c.why = "ALLOY_NVRTC_WORKERS=0";
    return c;
  }
  // Half the cores: a process's first burst starts every worker at once, and fresh NVRTC processes
  // slow each other down (20 first calls on the H200 host's 16 cores: ~263 ms cold with 15
  // workers, ~113 ms with 8, ~120 ms with 4; warm 29 / 33 / 58 ms; docs/nvrtc-workers.md).
  c.max = std::max(1, tbb::info::default_concurrency() / 2);
  if (n) c.max = static_cast<int>(*n);
  c.prestart = env::flag("ALLOY_NVRTC_PRESTART", true);
  if (auto set = env::text("ALLOY_NVRTC_WORKER")) {
    const std::string& explicit_path = *set;
    if (is_executable_file(explicit_path)) {
      c.path = explicit_path;
    } else {
      c.why = "ALLOY_NVRTC_WORKER=" + explicit_path + " is not an executable file";
      c.max = 0;
    }
    return c;
  }
  std::string tried;
  for (const auto& path : worker_candidates()) {
    if (is_executable_file(path)) {
      c.path = path;
      return c;
    }
    tried += (tried.empty() ? "" : ", ") + path;
  }
  c.why = std::string("no ") + kWorkerName + " found (tried " + tried + ")";
  c.max = 0;
  return c;
}

void note_config(const Config& c) {
  if (!trace::build()) return;
  if (c.max == 0) {
    std::fprintf(stderr, "alloy: NVRTC workers off: %s; NVRTC compiles run in this process\n",
                 c.why.c_str());
  } else {
    std::fprintf(stderr, "alloy: NVRTC workers: up to %d (%s)\n", c.max, c.path.c_str());
  }
}

void wait_for(pid_t pid) {
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// Ends a worker: closing its socket ends an idle one (EOF); `kill` for one that misbehaved.
void end_worker(const Worker& w, bool kill) {
  if (kill) ::kill(w.pid, SIGKILL);  // not reaped yet, so the pid is still this worker's
  ::close(w.fd);
  wait_for(w.pid);
  if (!w.pch_dir.empty()) {  // a worker's PCH files go with it
    std::error_code ec;
    std::filesystem::remove_all(w.pch_dir, ec);
  }
}

void forget(Pool& p, const Worker& w) {
  auto& pids = p.stats.live_pids;
  pids.erase(std::remove(pids.begin(), pids.end(), w.pid), pids.end());
  p.fds.erase(std::remove(p.fds.begin(), p.fds.end(), w.fd), p.fds.end());
}

// Starts a worker process (its greeting is read by greet); nullopt and `why` when it cannot be.
std::optional<Worker> start_worker(const std::string& path, const std::string& pch_root,
                                   std::string* why) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    *why = std::string("socketpair: ") + std::strerror(errno);
    return std::nullopt;
  }
  int child = sv[1];
  if (child <= 2) {  // dup2 onto itself would keep FD_CLOEXEC: the worker would get no stdin
    child = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 3);
    ::close(sv[1]);
    if (child < 0) {
      *why = std::string("fcntl: ") + std::strerror(errno);
      ::close(sv[0]);
      return std::nullopt;
    }
  }
  std::string library = library_path();
  std::vector<char*> argv{const_cast<char*>(path.c_str()), const_cast<char*>("--nvrtc"),
                          library.data()};
  if (!pch_root.empty()) {
    argv.push_back(const_cast<char*>("--pch-dir"));
    argv.push_back(const_cast<char*>(pch_root.c_str()));
  }
  argv.push_back(nullptr);
  pid_t pid = -1;
  // A process group of its own: a terminal's Ctrl-C interrupts the runtime (Python turns it into
  // KeyboardInterrupt), not its workers; they end when the runtime's socket closes.
  int r = spawn_process(argv.data(), environ, {{child, 0}}, false, &pid);
  ::close(child);
  if (r != 0) {
    *why = "cannot start " + path + ": " + std::strerror(r);
    ::close(sv[0]);
    return std::nullopt;
  }
  return Worker{pid, sv[0], 0, pch_root.empty() ? "" : pch_root + "/" + std::to_string(pid)};
}

// Reads and checks the greeting of a worker start_worker started (waiting at most `timeout_ms`);
// false and `why` when it is not a usable worker (the caller then ends it).
bool greet(const Worker& w, const std::string& path, int timeout_ms, std::string* why) {
  const std::string& library = library_path();
  std::string payload;
  std::string err = wire::read_frame(w.fd, &payload, timeout_ms);
  auto hello = err.empty() ? wire::decode_hello(payload) : std::nullopt;
  if (!hello) {
    *why = path + " is not an NVRTC worker (" + (err.empty() ? "bad greeting" : err) + ")";
  } else if (hello->protocol != wire::kProtocol) {
    *why = path + " speaks protocol " + std::to_string(hello->protocol) + ", not " +
           std::to_string(wire::kProtocol) + " (another build of Alloy)";
  } else if (hello->library != library) {
    *why = path + " loaded " +
           (hello->library.empty() ? "no NVRTC: " + hello->load_error : hello->library) + ", not " +
           library;
  } else {
    return true;
  }
  return false;
}

// Starts a worker and reads its greeting; nullopt (and `why`) when it cannot be used.
std::optional<Worker> spawn(const std::string& path, const std::string& pch_root,
                            std::string* why) {
  auto w = start_worker(path, pch_root, why);
  if (!w) return std::nullopt;
  if (greet(*w, path, kHelloTimeoutMs, why)) return w;
  end_worker(*w, true);
  return std::nullopt;
}

// A worker start that failed (no process, no greeting): after kMaxSpawnFailures of them, workers
// are off for the process. Under the pool's lock.
void note_spawn_failure(Pool& p, const std::string& why) {
  if (trace::build()) std::fprintf(stderr, "alloy: NVRTC worker: %s\n", why.c_str());
  if (++p.spawn_failures >= kMaxSpawnFailures && p.config.max > 0) {
    p.config.max = 0;
    p.config.why = why;
    note_config(p.config);
  }
  p.cv.notify_all();
}

struct Slot {
  enum Kind { kHere, kHereUngated, kWorker } kind = kHereUngated;
  Worker worker;
};

// A caller takes the in-process slot when it is free, else an idle or a new worker, else waits.
// A background compile (BackgroundScope) tries the workers first and takes the slot only when
// every worker is busy, so that the slot stays free for a caller; and it takes nothing while a
// caller waits: in a burst of first calls, the tiered compiles' refines queued by the first
// ones to finish would otherwise take the slot or a worker freed for a caller still waiting.
Slot acquire(Pool& p, bool background) {
  std::unique_lock lock(p.mu);
  if (!p.config.resolved) {
    p.config = resolve();
    note_config(p.config);
  }
  for (;;) {
    // Without workers, compiles run here as they always did (NVRTC's own lock orders them).
    if (p.config.max == 0 || p.exiting) return {Slot::kHereUngated, {}};
    if (background && p.waiting_callers > 0) {
      ++p.waiting_background;
      p.cv.wait(lock);
      --p.waiting_background;
      continue;
    }
    const bool slot_free = !p.in_process_busy && !p.held;
    if (slot_free && !background) {
      p.in_process_busy = true;
      return {Slot::kHere, {}};
    }
    if (!p.idle.empty()) {
      Worker w = p.idle.back();
      p.idle.pop_back();
      p.stats.peak_busy_workers = std::max(p.stats.peak_busy_workers, ++p.busy);
      return {Slot::kWorker, w};
    }
    if (p.live < p.config.max) {
      ++p.live;
      uint64_t generation = p.generation;
      std::string path = p.config.path;
      make_pch_root(p);
      std::string pch_root = p.pch_root;
      lock.unlock();
      auto t0 = std::chrono::steady_clock::now();
      std::string why;
      auto w = spawn(path, pch_root, &why);
      lock.lock();
      if (w) {
        if (trace::build())
          std::fprintf(stderr, "alloy: NVRTC worker %d started in %.1f ms\n",
                       static_cast<int>(w->pid), trace::ms_since(t0));
        w->generation = generation;
        ++p.stats.spawned;
        p.stats.live_pids.push_back(w->pid);
        p.fds.push_back(w->fd);
        p.stats.peak_busy_workers = std::max(p.stats.peak_busy_workers, ++p.busy);
        return {Slot::kWorker, *w};
      }
      --p.live;
      note_spawn_failure(p, why);
      continue;
    }
    if (slot_free) {  // background, every worker busy
      p.in_process_busy = true;
      return {Slot::kHere, {}};
    }
    int& waiting = background ? p.waiting_background : p.waiting_callers;
    ++waiting;
    p.cv.wait(lock);
    --waiting;
  }
}

// `w`, done with a compile or its warm-up (taken off the busy count or the warming list under
// `lock`, which holds p.mu): back to the idle ones, or ended (after the lock) when `failed` (it
// died or misbehaved: killed and reaped), when reset_workers() retired its generation, or when
// the process exits.
void settle(Pool& p, std::unique_lock<std::mutex>& lock, const Worker& w, bool failed) {
  const bool end = failed || w.generation != p.generation || p.exiting;
  if (end) {
    --p.live;
    forget(p, w);
  } else {
    p.idle.push_back(w);
  }
  p.cv.notify_all();
  lock.unlock();
  if (end) {
    end_worker(w, failed);
    std::lock_guard relock(p.mu);
    if (p.exiting && p.live == 0) remove_pch_root(p);
  }
}

// A worker done with a compile.
void release(Pool& p, const Worker& w, bool failed) {
  std::unique_lock lock(p.mu);
  --p.busy;
  settle(p, lock, w, failed);
}

void release_here(Pool& p) {
  std::lock_guard lock(p.mu);
  p.in_process_busy = false;
  p.cv.notify_all();
}

// The compile on worker `w`: the reply, or nullopt and `why` when the worker failed.
std::optional<wire::Reply> ask(const Worker& w, const wire::Request& q, std::string* why) {
  if (!wire::write_frame(w.fd, wire::encode(q))) {
    *why = "it is gone";
    return std::nullopt;
  }
  std::string payload;
  std::string err = wire::read_frame(w.fd, &payload);
  if (!err.empty()) {
    *why = err == "eof" ? "it exited" : "reading its reply: " + err;
    return std::nullopt;
  }
  auto reply = wire::decode_reply(payload);
  if (!reply) *why = "malformed reply";
  return reply;
}

thread_local bool background_thread = false;

// A worker started ahead done with its warm-up (`usable`: it answered).
void finish_warm_up(Pool& p, const Worker& w, bool usable) {
  std::unique_lock lock(p.mu);
  auto& v = p.warming;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Worker& x) { return x.pid == w.pid; }),
          v.end());
  settle(p, lock, w, !usable);
}

// Workers started ahead at most (those past it start at compiles, as before).
constexpr int kMaxPrestarted = 8;

// The prestart thread (prestart_workers): starts the workers one after another (posix_spawn, no
// waiting), then answers their greetings and warm-ups as they come (poll), so that they greet and
// warm up at the same time. They count in `live` from the start: a compile that finds the slot
// taken meanwhile waits for the first to be warm (or the slot) instead of starting another, whose
// cold start would take longer than what is left of a warm-up begun earlier.
void prestart(Pool& p, const std::function<WarmUp()>& make) {
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  if (!available()) {
    if (trace::build())
      std::fprintf(stderr, "alloy: NVRTC workers not started ahead: NVRTC not available\n");
    return;
  }
  WarmUp warm_up = make();
  wire::Request q;
  q.cubin = warm_up.cubin;
  q.source = std::move(warm_up.source);
  q.program_name = std::move(warm_up.program_name);
  q.headers = std::move(warm_up.headers);
  q.options = std::move(warm_up.options);
  if (warm_up.pch)
    for (auto& o : pch_request_options()) q.options.push_back(std::move(o));
  std::unique_lock lock(p.mu);
  if (!p.config.resolved) {
    p.config = resolve();
    note_config(p.config);
  }
  if (!p.config.prestart || p.config.max == 0 || p.exiting) {
    if (trace::build() && p.config.max > 0 && !p.config.prestart)
      std::fprintf(stderr, "alloy: NVRTC workers not started ahead: ALLOY_NVRTC_PRESTART=0\n");
    return;
  }
  // At most kMaxPrestarted: `max` grows with the cores, and every GPU process pays for those
  // started ahead, compiling or not (a job of 8 ranks on a 128-core host would start 512).
  const int n = std::min(p.config.max, kMaxPrestarted) - p.live;
  if (n <= 0) return;
  p.live += n;  // reserved: see above
  make_pch_root(p);
  const std::string path = p.config.path, pch_root = p.pch_root;
  const uint64_t generation = p.generation;
  lock.unlock();
  if (trace::build())
    std::fprintf(stderr, "alloy: NVRTC workers: starting %d ahead (NVRTC loaded in %.1f ms)\n", n,
                 trace::ms_since(t_start));

  struct Pending {
    Worker w;
    clock::time_point started, sent;
    bool greeted = false;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < n; ++i) {
    std::string why;
    auto t0 = clock::now();
    std::optional<Worker> w;
    {
      std::lock_guard g(p.mu);
      if (p.exiting) {  // no more: give the reservations back
        p.live -= n - i;
        p.cv.notify_all();
        break;
      }
    }
    w = start_worker(path, pch_root, &why);
    lock.lock();
    if (!w) {
      --p.live;
      note_spawn_failure(p, why);
      lock.unlock();
      continue;
    }
    if (p.exiting) {
      --p.live;
      p.cv.notify_all();
      lock.unlock();
      end_worker(*w, true);
      continue;
    }
    w->generation = generation;
    p.warming.push_back(*w);
    p.fds.push_back(w->fd);
    p.stats.live_pids.push_back(w->pid);
    lock.unlock();
    pending.push_back({*w, t0, {}, false});
  }

  while (!pending.empty()) {
    std::vector<pollfd> fds;
    int timeout = -1;
    const auto now = clock::now();
    for (const auto& e : pending) {
      fds.push_back({e.w.fd, POLLIN, 0});
      if (!e.greeted) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        e.started + std::chrono::milliseconds(kHelloTimeoutMs) - now)
                        .count();
        left = std::max<long long>(left, 0);
        timeout = timeout < 0 ? static_cast<int>(left) : std::min(timeout, static_cast<int>(left));
      }
    }
    int r = ::poll(fds.data(), fds.size(), timeout);
    if (r < 0 && errno != EINTR) break;  // cannot happen with valid descriptors
    const auto t = clock::now();
    for (size_t i = pending.size(); i-- > 0;) {
      Pending& e = pending[i];
      const bool ready = r > 0 && fds[i].revents != 0;
      const bool late = !e.greeted && t >= e.started + std::chrono::milliseconds(kHelloTimeoutMs);
      if (!ready && !late) continue;
      std::string why;
      bool usable = true, done = false;
      if (!e.greeted) {
        if (!ready) {
          why = path + " is not an NVRTC worker (no greeting)";
          usable = false;
        } else {
          usable = greet(e.w, path, kHelloTimeoutMs, &why);
        }
        lock.lock();
        if (!usable) {
          if (!p.exiting) note_spawn_failure(p, why);
        } else {
          ++p.stats.spawned;
          ++p.stats.prestarted;
          q.flags = p.fault.exchange(0);
        }
        lock.unlock();
        if (usable) {
          if (trace::build())
            std::fprintf(stderr, "alloy: NVRTC worker %d started ahead in %.1f ms\n",
                         static_cast<int>(e.w.pid), trace::ms_since(e.started));
          e.greeted = true;
          e.sent = clock::now();
          try {
            usable = wire::write_frame(e.w.fd, wire::encode(q));
          } catch (const std::bad_alloc&) {
            usable = false;
          }
          if (!usable) why = "it is gone";
        }
        done = !usable;
      } else {
        std::string payload;
        std::string err = wire::read_frame(e.w.fd, &payload);
        auto reply = err.empty() ? wire::decode_reply(payload) : std::nullopt;
        if (!reply) {
          why = !err.empty() ? (err == "eof" ? "it exited" : "reading its reply: " + err)
                             : "malformed reply";
          usable = false;
        } else if (reply->status != wire::ReplyStatus::kOk && trace::build()) {
          // NVRTC is loaded and initialised all the same: the worker stays.
          std::fprintf(stderr, "alloy: NVRTC worker %d: warm-up compile failed: %s\n",
                       static_cast<int>(e.w.pid), reply->message.c_str());
        }
        if (usable) {
          lock.lock();
          ++p.stats.warm_ups;
          lock.unlock();
          if (trace::build())
            std::fprintf(stderr,
                         "alloy: NVRTC worker %d warm %.1f ms after its start (warm-up "
                         "compile %.1f ms)\n",
                         static_cast<int>(e.w.pid), trace::ms_since(e.started),
                         trace::ms_since(e.sent));
        }
        done = true;
      }
      if (!done) continue;
      if (!usable) {
        lock.lock();
        if (e.greeted) ++p.stats.warm_up_failures;
        lock.unlock();
        if (trace::build())
          std::fprintf(stderr, "alloy: NVRTC worker %d started ahead: %s; ended\n",
                       static_cast<int>(e.w.pid), why.c_str());
      }
      finish_warm_up(p, e.w, usable);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
}

}  // namespace

bool prestart_wanted() {
  try {
    return env::flag("ALLOY_NVRTC_PRESTART", true) &&
           env::count("ALLOY_NVRTC_WORKERS", "a number of workers from 0 to 1024", 1024) != 0u;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

void prestart_workers(WarmUp warm_up) {
  prestart_workers([w = std::move(warm_up)] { return w; });
}

void prestart_workers(std::function<WarmUp()> make) {
  try {
    Pool& p = pool();  // here: its exit handler is registered before the thread starts
    {
      std::lock_guard lock(p.mu);
      if (p.prestarting || p.exiting) return;
      p.prestarting = true;
    }
    try {
      std::thread([&p, make = std::move(make)] {
        try {
          prestart(p, make);
        } catch (const std::exception& e) {  // a malformed setting (the next compile says it)
          if (trace::build())
            std::fprintf(stderr, "alloy: NVRTC workers not started ahead: %s\n", e.what());
        }
        std::lock_guard lock(p.mu);
        p.prestarting = false;
        p.cv.notify_all();
      }).detach();
    } catch (...) {  // no thread: nothing started ahead
      std::lock_guard lock(p.mu);
      p.prestarting = false;
      p.cv.notify_all();
    }
  } catch (...) {  // out of memory: compiles start workers as before
  }
}

BackgroundScope::BackgroundScope() : outer_(background_thread) {
  background_thread = true;
}
BackgroundScope::~BackgroundScope() {
  background_thread = outer_;
}
bool in_background() {
  return background_thread;
}

std::string compile(const std::string& source, const std::string& program_name,
                    const std::vector<Header>& headers, const std::vector<std::string>& options,
                    bool cubin, std::string* log) {
  if (!available()) return compile_in_process(source, program_name, headers, options, cubin, log);
  Pool& p = pool();
  const bool background = background_thread;
  Slot slot = acquire(p, background);
  if (background) {
    std::lock_guard lock(p.mu);
    ++p.stats.background;
  }
  if (slot.kind != Slot::kWorker) {
    struct Release {
      Pool& p;
      bool gated;
      ~Release() {
        if (gated) release_here(p);
      }
    } release_guard{p, slot.kind == Slot::kHere};
    {
      std::lock_guard lock(p.mu);
      ++p.stats.in_process;
      if (background) ++p.stats.background_in_process;
    }
    return compile_in_process(source, program_name, headers, options, cubin, log);
  }

  auto t0 = std::chrono::steady_clock::now();
  std::optional<wire::Reply> reply;
  std::string why;
  try {
    wire::Request q;
    q.flags = p.fault.exchange(0);
    q.cubin = cubin;
    q.source = source;
    q.program_name = program_name;
    q.headers.reserve(headers.size());
    for (const auto& h : headers) q.headers.emplace_back(h.name, h.text);
    q.options = options;
    reply = ask(slot.worker, q, &why);
  } catch (const std::bad_alloc&) {
    why = "out of memory";
  }
  // A worker that could not do it (kWorkerError) is healthy: it stays.
  bool worker_failed = !reply;
  if (reply && reply->status == wire::ReplyStatus::kWorkerError) {
    why = "it failed: " + reply->message;
    reply.reset();
  }
  release(p, slot.worker, worker_failed);
  if (!reply) {
    if (trace::build())
      std::fprintf(stderr, "alloy: %s: NVRTC worker %d failed (%s): compiling in this process\n",
                   program_name.c_str(), static_cast<int>(slot.worker.pid), why.c_str());
    {
      std::lock_guard lock(p.mu);
      ++p.stats.fallbacks;
      ++p.stats.in_process;
      if (background) ++p.stats.background_in_process;
    }
    return compile_in_process(source, program_name, headers, options, cubin, log);
  }
  {
    std::lock_guard lock(p.mu);
    ++p.stats.worker_compiles;
  }
  if (trace::build())
    std::fprintf(stderr, "alloy: %s: NVRTC in worker %d %.1f ms%s\n", program_name.c_str(),
                 static_cast<int>(slot.worker.pid), trace::ms_since(t0),
                 background ? " (background)" : "");
  switch (reply->status) {
    case wire::ReplyStatus::kOk:
      if (log) *log = std::move(reply->log);
      return std::move(reply->image);
    case wire::ReplyStatus::kCompileFailure:
      throw CompileFailure(reply->message, std::move(reply->log));
    default:
      throw Error("", reply->message);
  }
}

WorkerStats worker_stats() {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  WorkerStats s = p.stats;
  s.max_workers = p.config.max;
  s.worker_path = p.config.max > 0 ? p.config.path : "";
  s.disabled_why = p.config.why;
  s.pch_dir = p.pch_root;
  s.waiting_callers = p.waiting_callers;
  s.waiting_background = p.waiting_background;
  s.warming = static_cast<int>(p.warming.size());
  s.prestarting = p.prestarting;
  return s;
}

namespace testing {

void fault_next_worker_compile(unsigned flags) {
  pool().fault.store(flags);
}

void hold_in_process_slot(bool held) {
  Pool& p = pool();
  std::lock_guard lock(p.mu);
  p.held = held;
  p.cv.notify_all();
}

void reset_workers() {
  Pool& p = pool();
  std::vector<Worker> idle;
  {
    std::lock_guard lock(p.mu);
    ++p.generation;
    idle.swap(p.idle);
    p.live -= static_cast<int>(idle.size());
    for (const auto& w : idle) forget(p, w);
    auto pids = std::move(p.stats.live_pids);
    p.stats = WorkerStats{};
    p.stats.live_pids = std::move(pids);
    p.spawn_failures = 0;
    p.config = resolve();
    note_config(p.config);
    p.cv.notify_all();
  }
  for (const auto& w : idle) end_worker(w, false);
}

bool wait_for_prestart(std::chrono::milliseconds timeout) {
  Pool& p = pool();
  std::unique_lock lock(p.mu);
  return p.cv.wait_for(lock, timeout, [&] { return !p.prestarting; });
}

}  // namespace testing

}  // namespace alloy::cuda::nvrtc
