#include "core/block_pool.h"

#include "core/hot.h"
#include "core/thread_cache.h"

namespace alloy::block_pool {
namespace {
constexpr size_t kClasses = kMaxBlock / kGranule;

void release(void* p) noexcept {
  ::operator delete(p);
}
using Spare = ThreadCache<void, kClasses, kCapacity, release>;

size_t size_class(size_t bytes) {
  return (bytes + kGranule - 1) / kGranule - 1;
}
}  // namespace

ALLOY_HOT void* allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBlock) return ::operator new(bytes);
  size_t c = size_class(bytes);
  if (void* p = Spare::take(c)) return p;
  return ::operator new((c + 1) * kGranule);
}

ALLOY_HOT void deallocate(void* p, size_t bytes) noexcept {
  if (bytes == 0 || bytes > kMaxBlock) return ::operator delete(p);
  if (!Spare::give(size_class(bytes), p)) ::operator delete(p);
}

size_t pooled(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBlock) return 0;
  return Spare::size(size_class(bytes));
}

}  // namespace alloy::block_pool
