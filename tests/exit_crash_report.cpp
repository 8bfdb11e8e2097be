// After the last test, a crash during process exit (static destruction, threads still running)
// would end the test binary with a bare "Segmentation fault" and no hint of where. Once every
// test has run, this installs a handler for fatal signals that prints a backtrace to stderr and
// then lets the signal kill the process as before. Installed only after the tests, so the CPU
// backend's fault guard and the tests' own handlers are never disturbed.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>

namespace {

void report_and_die(int sig) {
  static const char msg[] = "\nfatal signal after the tests (at exit); backtrace:\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, 2);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

class ExitCrashReport : public ::testing::Environment {
 public:
  void TearDown() override {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) std::signal(sig, report_and_die);
  }
};

[[maybe_unused]] ::testing::Environment* const kInstalled =
    ::testing::AddGlobalTestEnvironment(new ExitCrashReport);

}  // namespace
