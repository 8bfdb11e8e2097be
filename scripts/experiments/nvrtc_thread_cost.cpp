// Does it matter which thread runs NVRTC, and what ran just before? (docs/performance.md, item 1,
// 2026-11-29 "first call in process".) On the H200 host the first call's quick compile on the
// caller's thread took ~29 ms while the full compile of the same kernel, right after it on a
// compile-pool thread, took ~22 ms (bigger code). This compiles Alloy's translation of
// exp(sin(x)) (quick options, then full options) in the bench's pattern -- a pause, the quick
// compile, at once the full one -- on the main thread or on a long-lived second thread, and
// prints median wall and thread-CPU ms of each. No GPU needed (cubin for sm_90). Build and run:
//
//   g++ -std=c++20 -O2 -pthread -I/usr/local/cuda/include scripts/experiments/nvrtc_thread_cost.cpp
//       -L/usr/local/cuda/lib64 -lnvrtc -o /tmp/nvrtc_thread_cost            (one command line)
//   alloy translate --target cuda --name expsin --input inp --input-dtype float32
//       --input-shape 1048576 --output out --output-dtype float32 --source body.metal > k.cu
//   /tmp/nvrtc_thread_cost src/prelude k.cu 9 [pause_ms]
#include <nvrtc.h>
#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

double clock_ms(clockid_t c) {
  timespec t;
  clock_gettime(c, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int counter = 0;

struct Times {
  double wall, cpu;
};

Times compile(const std::string& src0, const std::vector<std::string>& opts) {
  std::string src = src0 + "\n// run " + std::to_string(++counter) + "\n";
  double w0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src.c_str(), "kernel.cu", 0, nullptr, nullptr);
  std::vector<const char*> o;
  for (auto& s : opts) o.push_back(s.c_str());
  if (nvrtcCompileProgram(p, static_cast<int>(o.size()), o.data()) != NVRTC_SUCCESS) {
    std::fprintf(stderr, "compile failed\n");
    std::exit(1);
  }
  size_t n = 0;
  nvrtcGetCUBINSize(p, &n);
  std::vector<char> cubin(n);
  nvrtcGetCUBIN(p, cubin.data());
  nvrtcDestroyProgram(&p);
  return {clock_ms(CLOCK_MONOTONIC) - w0, clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0};
}

// A long-lived thread that runs one job at a time (as a compile-pool worker).
struct Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;
  bool done = false, quit = false;
  std::thread t{[this] {
    for (;;) {
      std::function<void()> j;
      {
        std::unique_lock l(mu);
        cv.wait(l, [&] { return job || quit; });
        if (quit) return;
        j = std::move(job);
        job = nullptr;
      }
      j();
      std::lock_guard l(mu);
      done = true;
      cv.notify_all();
    }
  }};
  void run(std::function<void()> j) {
    std::unique_lock l(mu);
    done = false;
    job = std::move(j);
    cv.notify_all();
    cv.wait(l, [&] { return done; });
  }
  ~Worker() {
    {
      std::lock_guard l(mu);
      quit = true;
      cv.notify_all();
    }
    t.join();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s prelude_dir kernel.cu runs [pause_ms]\n", argv[0]);
    return 2;
  }
  const std::string src = read(argv[2]);
  const int runs = std::max(1, std::atoi(argv[3]));
  const int pause_ms = argc > 4 ? std::atoi(argv[4]) : 300;
  std::vector<std::string> full = {
      "--gpu-architecture=sm_90", "--std=c++17", "-default-device",
      "-DALLOY_MATH_SAFE",        "-minimal",    std::string("-I") + argv[1]};
  std::vector<std::string> quick = full;
  quick.insert(quick.end(), {"-DALLOY_QUICK_ENTRY", "--ptxas-options=-O0", "-maxrregcount=64"});
  Worker w;
  compile(src, quick);  // NVRTC loaded
  w.run([&] { compile(src, full); });
  // Patterns: where the quick compile runs, where the full one runs right after it.
  const char* names[] = {"quick on main, full on worker", "quick on worker, full on main",
                         "quick on main, full on main", "quick on worker, full on worker"};
  std::vector<double> qw[4], qc[4], fw[4], fc[4];
  for (int r = 0; r < runs; ++r) {
    for (int pat = 0; pat < 4; ++pat) {
      bool quick_main = pat == 0 || pat == 2, full_main = pat == 1 || pat == 2;
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      Times q, f;
      if (quick_main) {
        q = compile(src, quick);
      } else {
        w.run([&] { q = compile(src, quick); });
      }
      if (full_main) {
        f = compile(src, full);
      } else {
        w.run([&] { f = compile(src, full); });
      }
      qw[pat].push_back(q.wall);
      qc[pat].push_back(q.cpu);
      fw[pat].push_back(f.wall);
      fc[pat].push_back(f.cpu);
    }
  }
  std::printf("%d runs, pause %d ms; median ms: quick wall / cpu, full wall / cpu\n", runs,
              pause_ms);
  for (int pat = 0; pat < 4; ++pat)
    std::printf("  %6.1f / %6.1f   %6.1f / %6.1f   %s\n", median(qw[pat]), median(qc[pat]),
                median(fw[pat]), median(fc[pat]), names[pat]);
}
