// A thread's own bounded lists of spare objects, for the allocators on the path of a kernel call
// (core/block_pool.cpp: small heap blocks; core/array.cpp: pending outputs' nodes). No lock and
// no atomic: each thread's lists are its own (a fork() copies only the calling thread's, which
// only that thread used). At the thread's exit the spare objects go to `Release`, and from then
// on the thread keeps none (take finds nothing, give refuses: the caller frees).
//
// The lists are plain arrays in constant-initialized thread-local storage: a take or a give reads
// them directly, with no call to the thread-local wrapper that a dynamically initialized object
// needs on every access (issue 9 item 7, the host cost of a cached launch). Only the thread's
// first take goes through one, to register the release at the thread's exit.
#pragma once
#include <cstddef>
#include <cstdint>

namespace alloy {

template <class T, size_t Lists, size_t Capacity, void (*Release)(T*) noexcept>
class ThreadCache {
 public:
  /// A spare object of list `i`, or nullptr. Makes the thread's lists at its first use.
  static T* take(size_t i) {
    if (state_ != alive && !start()) [[unlikely]]
      return nullptr;
    uint32_t& n = lists_.count[i];
    if (n == 0) return nullptr;
    return lists_.items[i][--n];
  }
  /// Keeps `p` in list `i`; false when that list is full or the thread has no lists (not made,
  /// or gone). Never allocates (it runs in deleters).
  static bool give(size_t i, T* p) noexcept {
    if (state_ != alive) return false;
    uint32_t& n = lists_.count[i];
    if (n >= Capacity) return false;
    lists_.items[i][n++] = p;
    return true;
  }
  /// Spare objects of list `i` on this thread (tests).
  static size_t size(size_t i) { return state_ == alive ? lists_.count[i] : 0; }

 private:
  enum State : unsigned char { unused, alive, gone };
  struct Storage {
    T* items[Lists][Capacity];
    uint32_t count[Lists];
  };
  // Its destructor, registered at the thread's first take, releases the spare objects.
  struct Reaper {
    bool armed = false;
    ~Reaper() {
      state_ = gone;
      for (size_t i = 0; i < Lists; ++i) {
        for (uint32_t k = 0; k < lists_.count[i]; ++k) Release(lists_.items[i][k]);
        lists_.count[i] = 0;
      }
    }
  };
  // False once the thread has released its lists.
  [[gnu::noinline]] static bool start() {
    if (state_ == gone) return false;
    reaper_.armed = true;  // the first use of reaper_ registers its destructor
    state_ = alive;
    return true;
  }
  static inline thread_local constinit State state_ = unused;
  static inline thread_local constinit Storage lists_{};
  static inline thread_local Reaper reaper_;
};

}  // namespace alloy
