// Does NVRTC compile programs in parallel within one process? (issue 17 item 4, CUDA)
//
// On the GPU host, 20 metal_kernel cubins compiled as jobs on a 16-thread pool took as long as one
// after another (BM_ParallelCompileNvrtc20: 1.11x), while on a 2-vCPU machine the same gave
// 1.8-1.9x. This compiles N distinct small programs (sm_90 cubins) serially, on T threads of one
// process, and in P forked processes, and prints wall time, the process's user/system CPU time and
// each compile's own wall and thread-CPU time, so a lock (thread CPU unchanged, wall grows) can be
// told from contention (system time grows) and from no overlap at all.
//
//   g++ -O2 -std=c++20 scripts/experiments/nvrtc_threads.cpp -I$CUDA/include -L$CUDA/lib64
//       -lnvrtc -lpthread -o /tmp/nvrtc_threads && /tmp/nvrtc_threads [N=20] [T=16] [fork first=1]
#include <nvrtc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string source(int i, int salt) {
  // A kernel of about the size of a small translated metal_kernel: a template, a few math calls.
  return "template <typename T> struct Op { __device__ static T f(T x) { return expf(sinf(x)) * T(" +
         std::to_string(i + 1) + ") + T(" + std::to_string(salt) +
         "); } };\n"
         "extern \"C\" __global__ void k" +
         std::to_string(i) +
         "(const float* __restrict__ in, float* __restrict__ out, unsigned n) {\n"
         "  unsigned g = blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (g < n) { float v = in[g]; for (int r = 0; r < 4; ++r) v = Op<float>::f(v); out[g] = v; }\n"
         "}\n";
}

struct Result {
  double wall = 0, cpu = 0;
};

Result compile_one(int i, int salt) {
  double w0 = now(), c0 = thread_cpu();
  std::string src = source(i, salt);
  nvrtcProgram prog;
  if (nvrtcCreateProgram(&prog, src.c_str(), "k.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) std::abort();
  const char* opts[] = {"--gpu-architecture=sm_90", "--std=c++17", "-default-device"};
  nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    std::fprintf(stderr, "compile failed: %s\n", log.c_str());
    std::exit(1);
  }
  size_t bytes = 0;
  nvrtcGetCUBINSize(prog, &bytes);
  std::vector<char> cubin(bytes);
  nvrtcGetCUBIN(prog, cubin.data());
  nvrtcDestroyProgram(&prog);
  return {now() - w0, thread_cpu() - c0};
}

void rusage_now(double& user, double& sys) {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  user = double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) * 1e-6;
  sys = double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) * 1e-6;
}

void report(const char* what, double wall, double user, double sys, std::vector<Result>& rs) {
  std::vector<double> w, c;
  for (auto& r : rs) w.push_back(r.wall), c.push_back(r.cpu);
  std::sort(w.begin(), w.end());
  std::sort(c.begin(), c.end());
  std::printf("%-22s wall %7.1f ms  user %7.1f ms  sys %6.1f ms  per compile: wall median %6.1f ms, thread cpu median %6.1f ms\n",
              what, wall * 1e3, user * 1e3, sys * 1e3, w.empty() ? 0 : w[w.size() / 2] * 1e3,
              c.empty() ? 0 : c[c.size() / 2] * 1e3);
}

void run_threads(int n, int threads, int salt, const char* label) {
  std::vector<Result> rs(n);
  std::atomic<int> next{0};
  double u0, s0, u1, s1;
  rusage_now(u0, s0);
  double t0 = now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (int i; (i = next++) < n;) rs[i] = compile_one(i, salt);
    });
  for (auto& t : pool) t.join();
  double wall = now() - t0;
  rusage_now(u1, s1);
  report(label, wall, u1 - u0, s1 - s0, rs);
}

void run_processes(int n, int procs, int salt) {
  double t0 = now();
  std::vector<pid_t> kids;
  for (int p = 0; p < procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = p; i < n; i += procs) compile_one(i, salt);
      std::_Exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t k : kids) waitpid(k, nullptr, 0);
  double wall = now() - t0;
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  std::printf("%-22s wall %7.1f ms  (children cumulative user %.1f ms, sys %.1f ms)\n", "forked processes",
              wall * 1e3, (double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) * 1e-6) * 1e3,
              (double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) * 1e-6) * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 20;
  int t = argc > 2 ? std::atoi(argv[2]) : 16;
  bool fork_first = argc > 3 ? std::atoi(argv[3]) != 0 : true;
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  std::printf("NVRTC %d.%d, %u hardware threads, %d programs\n", major, minor,
              std::thread::hardware_concurrency(), n);
  // Processes first: fork before this process has any thread. Then a warm-up compile.
  if (fork_first) run_processes(n, t, 1);
  compile_one(0, 0);
  for (int round = 0; round < 2; ++round) {
    run_threads(n, 1, 10 + round, "serial (1 thread)");
    run_threads(n, 2, 20 + round, "2 threads");
    run_threads(n, t, 30 + round, (std::to_string(t) + " threads").c_str());
    std::fflush(stdout);
  }
  return 0;
}
