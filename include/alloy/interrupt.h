// Interrupting long CPU runs (docs/reliability.md). A launch on the CPU runs its threadgroups on a
// pool of threads; between two groups, the thread that started the launch calls the interrupt
// check (at most every 50 ms). The check throws to stop the launch: the groups not yet started
// are skipped, and eval() throws alloy::Interrupted carrying the check's exception. The Python
// bindings install a check that turns Ctrl-C (SIGINT) into KeyboardInterrupt at the next group
// boundary. Work queued on a CPU stream runs on that stream's worker thread, where the check never
// runs: the thread waiting for it in eval()/synchronize() runs the check every 50 ms and, when it
// throws, stops every CPU launch then running at its next group boundary (that wait throws
// Interrupted too).
//
// A single threadgroup is never interrupted (a kernel that loops forever inside one group still
// hangs); a GPU launch is not interrupted.
#pragma once
#include <exception>
#include <functional>

namespace alloy {

/// What a launch throws when its interrupt check threw; cause() is what the check threw. On
/// purpose not a std::exception: no layer between the executor and the caller may wrap it into a
/// kernel error (Python gets the check's own KeyboardInterrupt back).
class Interrupted {
 public:
  explicit Interrupted(std::exception_ptr cause) : cause_(std::move(cause)) {}
  const std::exception_ptr& cause() const { return cause_; }
  const char* what() const noexcept { return "interrupted"; }

 private:
  std::exception_ptr cause_;
};

/// Called between threadgroups on the thread that started a CPU launch; throws to stop it (the
/// launch then throws Interrupted carrying that exception).
using InterruptCheck = std::function<void()>;

/// Installs the process-wide interrupt check (an empty function removes it). Thread-safe; a
/// launch already running keeps the check it started with. (Each thread that launches keeps a
/// copy of the check it last read, so a replaced check is destroyed once every such thread has
/// read the new one or exited: what it captures must stay valid that long.)
void set_interrupt_check(InterruptCheck check);

}  // namespace alloy
