#include "core/block_pool.h"

#include <vector>

namespace alloy::block_pool {
namespace {
constexpr size_t kClasses = kMaxBlock / kGranule;
enum State : unsigned char { unused, alive, gone };
thread_local constinit State t_state = unused;

struct Pool {
  std::vector<void*> spare[kClasses];
  Pool() {
    for (auto& s : spare) s.reserve(kCapacity);  // deallocate() never allocates
    t_state = alive;
  }
  ~Pool() {
    t_state = gone;
    for (size_t c = 0; c < kClasses; ++c)
      for (void* p : spare[c]) ::operator delete(p);
  }
};
thread_local Pool t_pool;

size_t size_class(size_t bytes) {
  return (bytes + kGranule - 1) / kGranule - 1;
}
}  // namespace

void* allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBlock) return ::operator new(bytes);
  size_t c = size_class(bytes);
  if (t_state != gone) {
    auto& spare = t_pool.spare[c];  // constructs the pool on the thread's first use
    if (!spare.empty()) {
      void* p = spare.back();
      spare.pop_back();
      return p;
    }
  }
  return ::operator new((c + 1) * kGranule);
}

void deallocate(void* p, size_t bytes) noexcept {
  if (bytes == 0 || bytes > kMaxBlock) return ::operator delete(p);
  size_t c = size_class(bytes);
  if (t_state == alive && t_pool.spare[c].size() < kCapacity) {
    t_pool.spare[c].push_back(p);
    return;
  }
  ::operator delete(p);
}

size_t pooled(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBlock || t_state == gone) return 0;
  return t_pool.spare[size_class(bytes)].size();
}

}  // namespace alloy::block_pool
