// A thread's own bounded lists of spare objects, for the allocators on the path of a kernel call
// (core/block_pool.cpp: small heap blocks; core/array.cpp: pending outputs' nodes). No lock and
// no atomic: each thread's lists are its own (a fork() copies only the calling thread's, which
// only that thread used). At the thread's exit the spare objects go to `Release`, and from then
// on the thread keeps none (take finds nothing, give refuses: the caller frees).
//
// The lists are plain arrays behind a constant-initialized thread-local pointer: a take or a give
// reads them with no call to the thread-local wrapper that a dynamically initialized object needs
// on every access (issue 9 item 7, the host cost of a cached launch). Only the thread's first take
// goes through one, to register the release at the thread's exit. The arrays themselves are on the
// heap, not in thread-local storage: a module with any initial-exec thread-local (the CPU fault
// guard's) has its whole TLS block in the process's small static TLS surplus, which 18 KiB of
// lists overflowed ("cannot allocate memory in static TLS block" at the Python module's import).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace alloy {

template <class T, size_t Lists, size_t Capacity, void (*Release)(T*) noexcept>
class ThreadCache {
 public:
  /// A spare object of list `i`, or nullptr. Makes the thread's lists at its first use.
  static T* take(size_t i) {
    Storage* l = lists_;
    if (!l && !(l = start())) [[unlikely]]
      return nullptr;
    uint32_t& n = l->count[i];
    if (n == 0) return nullptr;
    return l->items[i][--n];
  }
  /// Keeps `p` in list `i`; false when that list is full or the thread has no lists (not made,
  /// or gone). Never allocates (it runs in deleters).
  static bool give(size_t i, T* p) noexcept {
    Storage* l = lists_;
    if (!l) return false;
    uint32_t& n = l->count[i];
    if (n >= Capacity) return false;
    l->items[i][n++] = p;
    return true;
  }
  /// Spare objects of list `i` on this thread (tests).
  static size_t size(size_t i) { return lists_ ? lists_->count[i] : 0; }

 private:
  struct Storage {
    T* items[Lists][Capacity];
    uint32_t count[Lists] = {};
  };
  // Its destructor, registered at the thread's first take, releases the spare objects and the
  // lists; from then on the thread keeps none.
  struct Reaper {
    bool armed = false;
    ~Reaper() {
      gone_ = true;
      Storage* l = std::exchange(lists_, nullptr);
      if (!l) return;
      for (size_t i = 0; i < Lists; ++i)
        for (uint32_t k = 0; k < l->count[i]; ++k) Release(l->items[i][k]);
      delete l;
    }
  };
  // The thread's lists, made at its first take; nullptr once the thread has released them (or
  // when they cannot be made).
  [[gnu::noinline]] static Storage* start() {
    if (gone_) return nullptr;
    reaper_.armed = true;  // the first use of reaper_ registers its destructor
    lists_ = new (std::nothrow) Storage;
    return lists_;
  }
  static inline thread_local constinit Storage* lists_ = nullptr;
  static inline thread_local constinit bool gone_ = false;
  static inline thread_local Reaper reaper_;
};

}  // namespace alloy
