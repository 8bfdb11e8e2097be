// Content-addressed compile cache, shared by the backends (CPU shared objects, CUDA cubins).
//
// The key is a hash of everything that determines the artifact: source text, target, compiler
// identity, flags and prelude contents. Never the kernel name: two kernels with the same name and
// different bodies must not share an entry (MLX bug #3832).
//
// Two levels:
//  - memory: key -> loaded artifact (whatever the backend loads: a dlopen'ed library, a CUmodule),
//    thread-safe, one build per key even when several threads ask at once;
//  - disk: <dir>/<target>/<key>.bin (the payload, exactly the artifact's bytes, so a shared object
//    can be dlopen'ed in place) + <key>.meta (key, payload size and hash). Written atomically
//    (temp file in the same folder + rename), verified on load; a corrupt or truncated entry is
//    removed and reported as a miss, so the caller rebuilds it.
// The disk level is an optimization: when the folder is not writable the cache works from memory.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace alloy::cache {

/// 32 lowercase hex digits of XXH3-128 over `parts`, each prefixed by its length (so that
/// ("ab", "c") and ("a", "bc") differ).
std::string hash_hex(std::initializer_list<std::string_view> parts);

/// The cache key of one compilation. Every argument is part of it; the kernel name is not.
std::string key_hex(std::string_view source, std::string_view target, std::string_view compiler_id,
                    std::string_view flags, std::string_view prelude_hash);

/// $ALLOY_CACHE_DIR, else $XDG_CACHE_HOME/alloy, else ~/.cache/alloy; nullopt if none can be
/// formed.
std::optional<std::filesystem::path> default_dir();

/// Reads a whole regular file; false when it cannot be read or is not a regular file (a FIFO or a
/// device is never opened for reading: no lookup can block).
bool read_regular_file(const std::filesystem::path& path, std::vector<char>* out);

/// Writes `bytes` to `path` atomically: a temp file in the same folder, then rename. Throws
/// std::filesystem::filesystem_error on failure (the temp file is removed).
void write_file_atomic(const std::filesystem::path& path, std::span<const char> bytes);

struct Stats {
  uint64_t memory_hits = 0;  // get_or_build found the artifact (or a build in flight)
  uint64_t disk_hits = 0;    // load/load_file returned a verified entry
  uint64_t misses = 0;       // load/load_file found nothing usable (corrupt entries included)
  uint64_t corrupt = 0;      // entries that failed verification and were removed
  uint64_t stores = 0;       // entries written to disk
};

class CompileCache {
 public:
  /// `dir`: root of the disk cache (created on demand). nullopt, or a folder that cannot be
  /// created/written: memory only.
  explicit CompileCache(std::optional<std::filesystem::path> dir);
  CompileCache(const CompileCache&) = delete;
  CompileCache& operator=(const CompileCache&) = delete;

  /// The process-wide cache rooted at default_dir().
  static CompileCache& global();

  bool has_disk() const { return disk_.has_value(); }
  /// Root folder of the disk cache; only meaningful when has_disk().
  const std::filesystem::path& dir() const { return *disk_; }
  /// Why the disk cache is off (empty when it is on or was not asked for).
  const std::string& disk_error() const { return disk_error_; }

  // ---- disk level (all no-ops / nullopt without disk) ----

  /// The payload's verified bytes, or nullopt (absent or corrupt; corrupt entries are removed).
  std::optional<std::vector<char>> load(std::string_view target, std::string_view key);
  /// Like load(), but returns the path of the verified payload file instead of its bytes (for
  /// artifacts that must be loaded from a file, e.g. dlopen).
  std::optional<std::filesystem::path> load_file(std::string_view target, std::string_view key);
  /// Stores `bytes` as the entry. Disk errors are swallowed: the cache is only an optimization.
  /// Returns whether the entry was written.
  bool store(std::string_view target, std::string_view key, std::span<const char> bytes);
  /// Moves `file` (which must be on the cache's file system, e.g. created under temp_dir()) into
  /// the cache as the entry's payload. On failure `file` is left where it was; returns false.
  bool store_file(std::string_view target, std::string_view key, const std::filesystem::path& file);
  /// Removes an entry (e.g. one that verified but could not be loaded).
  void remove(std::string_view target, std::string_view key);
  /// <dir>/<target>/<key><ext>: where an entry's files live (ext ".bin" is the payload).
  std::filesystem::path entry_path(std::string_view target, std::string_view key,
                                   std::string_view ext = ".bin") const;
  /// A folder on the cache's file system for temp files (created on demand; a file in its place
  /// is replaced). May still be unusable (full or read-only disk): callers fall back.
  std::filesystem::path temp_dir() const;
  /// Removes what crashed processes left behind and nothing finishes: files in temp_dir(),
  /// half-written entries and prelude folders, older than `age`. Returns how many were removed.
  size_t remove_orphans(std::chrono::seconds age);

  // ---- memory level ----

  /// The artifact for (target, key): from memory, else `build()` (which typically tries the disk,
  /// then compiles). Concurrent callers with the same key wait for one build. If build() throws,
  /// every waiter gets the exception and nothing is cached. In a forked child, a build that was
  /// still running in the parent at the fork (its thread is not in the child: it would never
  /// finish) is built again by the child's caller.
  std::shared_ptr<void> get_or_build(std::string_view target, std::string_view key,
                                     const std::function<std::shared_ptr<void>()>& build);
  /// Whether the memory level holds (target, key), built or being built.
  bool in_memory(std::string_view target, std::string_view key) const;
  /// Drops every loaded artifact (the next get_or_build goes to disk, like a fresh process).
  void clear_memory();

  Stats stats() const;
  void reset_stats();

 private:
  std::optional<std::filesystem::path> disk_;
  std::string disk_error_;

  mutable std::mutex mu_;
  struct Entry {
    std::shared_future<std::shared_ptr<void>> value;
    pid_t builder;  // the process whose thread builds it (a forked child has another pid)
  };
  std::unordered_map<std::string, Entry> memory_;

  std::atomic<uint64_t> memory_hits_{0}, disk_hits_{0}, misses_{0}, corrupt_{0}, stores_{0};

  bool verify(std::string_view target, std::string_view key, std::vector<char>* bytes);
  bool write_meta(std::string_view target, std::string_view key, std::span<const char> payload);
};

}  // namespace alloy::cache
