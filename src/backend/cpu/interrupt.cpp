#include "alloy/interrupt.h"

#include <memory>
#include <mutex>

#include "backend/cpu/executor.h"

namespace alloy {
namespace {
std::mutex g_mu;
std::shared_ptr<const InterruptCheck> g_check;
}  // namespace

void set_interrupt_check(InterruptCheck check) {
  auto p = check ? std::make_shared<const InterruptCheck>(std::move(check)) : nullptr;
  std::lock_guard lock(g_mu);
  g_check = std::move(p);
}

namespace cpu {
std::shared_ptr<const InterruptCheck> current_interrupt_check() {
  std::lock_guard lock(g_mu);
  return g_check;
}
}  // namespace cpu

}  // namespace alloy
