// A thread's own bounded lists of spare objects, for the allocators on the path of a kernel call
// (core/block_pool.cpp: small heap blocks; core/array.cpp: pending outputs' nodes). No lock and
// no atomic: each thread's lists are its own (a fork() copies only the calling thread's, which
// only that thread used). At the thread's exit the spare objects go to `Release`, and from then
// on the thread keeps none (take finds nothing, give refuses: the caller frees).
#pragma once
#include <cstddef>
#include <vector>

namespace alloy {

template <class T, size_t Lists, size_t Capacity, void (*Release)(T*) noexcept>
class ThreadCache {
 public:
  /// A spare object of list `i`, or nullptr. Makes the thread's lists at its first use.
  static T* take(size_t i) {
    if (state_ == gone) return nullptr;
    std::vector<T*>& l = lists_.spare[i];
    if (l.empty()) return nullptr;
    T* p = l.back();
    l.pop_back();
    return p;
  }
  /// Keeps `p` in list `i`; false when that list is full or the thread has no lists (not made,
  /// or gone). Never allocates (it runs in deleters).
  static bool give(size_t i, T* p) noexcept {
    if (state_ != alive) return false;
    std::vector<T*>& l = lists_.spare[i];
    if (l.size() >= Capacity) return false;
    l.push_back(p);
    return true;
  }
  /// Spare objects of list `i` on this thread (tests).
  static size_t size(size_t i) { return state_ == gone ? 0 : lists_.spare[i].size(); }

 private:
  enum State : unsigned char { unused, alive, gone };
  struct PerThread {
    std::vector<T*> spare[Lists];
    PerThread() {
      for (auto& l : spare) l.reserve(Capacity);
      state_ = alive;
    }
    ~PerThread() {
      state_ = gone;
      for (auto& l : spare)
        for (T* p : l) Release(p);
    }
  };
  static inline thread_local constinit State state_ = unused;
  static inline thread_local PerThread lists_;
};

}  // namespace alloy
