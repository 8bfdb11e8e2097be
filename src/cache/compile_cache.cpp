#include "cache/compile_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace alloy::cache {
namespace fs = std::filesystem;

namespace {

// Bumped when the disk layout or the meaning of a key changes.
constexpr std::string_view kFormat = "alloy-cache 1";

std::string hex128(XXH128_hash_t h) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char* digits = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[2 * i] = digits[c.digest[i] >> 4];
    out[2 * i + 1] = digits[c.digest[i] & 15];
  }
  return out;
}

std::string payload_hash(std::span<const char> bytes) {
  return hex128(XXH3_128bits(bytes.data(), bytes.size()));
}

// Target names become folder names: keep them tame.
std::string folder_name(std::string_view target) {
  std::string out(target);
  for (char& c : out) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
  return out;
}

// Reads a whole regular file; false if it cannot be opened or read, or is not a regular file.
// O_NONBLOCK: opening a FIFO planted in the cache must not wait for a writer.
bool read_file(const fs::path& path, std::vector<char>* out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (ok) {
    out->resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (ok && done < out->size()) {
      ssize_t n = ::read(fd, out->data() + done, out->size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        ok = false;
      else
        done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return ok;
}

// A unique temp file next to `path` (same folder, so rename is atomic). Returns the fd.
int make_temp(const fs::path& path, std::string* tmp_path) {
  *tmp_path = path.string() + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp_path->data());
  if (fd >= 0) {
    ::fchmod(fd, 0644);  // mkstemp gives 0600; entries are plain readable files
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  return fd;
}

// Test-only fault injection (docs/reliability.md): ALLOY_TEST_FULL_DISK=<dir> makes every file
// this module creates under <dir> fail with ENOSPC, as on a full disk.
bool injected_full_disk(const fs::path& path) {
  const char* dir = std::getenv("ALLOY_TEST_FULL_DISK");
  if (!dir || !*dir) return false;
  std::string p = fs::absolute(path).lexically_normal().string();
  std::string d = fs::absolute(dir).lexically_normal().string();
  return p.compare(0, d.size(), d) == 0;
}

}  // namespace

bool read_regular_file(const fs::path& path, std::vector<char>* out) {
  return read_file(path, out);
}

std::string hash_hex(std::initializer_list<std::string_view> parts) {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  for (std::string_view p : parts) {
    uint64_t n = p.size();
    XXH3_128bits_update(&state, &n, sizeof n);
    XXH3_128bits_update(&state, p.data(), p.size());
  }
  return hex128(XXH3_128bits_digest(&state));
}

std::string key_hex(std::string_view source, std::string_view target, std::string_view compiler_id,
                    std::string_view flags, std::string_view prelude_hash) {
  return hash_hex({kFormat, source, target, compiler_id, flags, prelude_hash});
}

std::optional<fs::path> default_dir() {
  if (const char* d = std::getenv("ALLOY_CACHE_DIR"); d && *d) return fs::path(d);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "alloy";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "alloy";
  return std::nullopt;
}

void write_file_atomic(const fs::path& path, std::span<const char> bytes) {
  if (injected_full_disk(path))
    throw fs::filesystem_error("cannot create a temp file (ALLOY_TEST_FULL_DISK)", path,
                               std::error_code(ENOSPC, std::generic_category()));
  std::string tmp;
  int fd = make_temp(path, &tmp);
  if (fd < 0) {
    throw fs::filesystem_error("cannot create a temp file", path,
                               std::error_code(errno, std::generic_category()));
  }
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && !err) err = errno;
  if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw fs::filesystem_error("cannot write", path, std::error_code(err, std::generic_category()));
  }
}

CompileCache::CompileCache(std::optional<fs::path> dir) {
  if (!dir) return;
  std::error_code ec;
  fs::create_directories(*dir, ec);
  if (ec) {
    disk_error_ = "cannot create " + dir->string() + ": " + ec.message();
    return;
  }
  if (::access(dir->c_str(), W_OK | X_OK) != 0) {
    disk_error_ = dir->string() + " is not writable";
    return;
  }
  disk_ = fs::absolute(*dir, ec);
  if (ec) disk_ = *dir;
}

CompileCache& CompileCache::global() {
  static CompileCache cache(default_dir());
  return cache;
}

fs::path CompileCache::entry_path(std::string_view target, std::string_view key,
                                  std::string_view ext) const {
  std::string name(key);
  name += ext;
  return *disk_ / folder_name(target) / name;
}

fs::path CompileCache::temp_dir() const {
  fs::path p = *disk_ / "tmp";
  std::error_code ec;
  fs::create_directories(p, ec);
  if (!fs::is_directory(fs::symlink_status(p, ec))) {
    // Something else took the name (a file, a dangling link): replace it once.
    fs::remove(p, ec);
    fs::create_directories(p, ec);
  }
  return p;
}

size_t CompileCache::remove_orphans(std::chrono::seconds age) {
  if (!disk_) return 0;
  size_t removed = 0;
  auto now = fs::file_time_type::clock::now();
  auto old = [&](const fs::directory_entry& e) {
    std::error_code ec;
    auto t = fs::symlink_status(e.path(), ec).type() == fs::file_type::symlink
                 ? now
                 : fs::last_write_time(e.path(), ec);
    return !ec && now - t > age;
  };
  auto sweep = [&](const fs::path& dir, auto&& matches) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (!matches(it->path().filename().string()) || !old(*it)) continue;
      std::error_code rm;
      if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
    }
  };
  // Work files of compiles that never finished (the process was killed), in <dir>/tmp.
  sweep(*disk_ / "tmp", [](const std::string&) { return true; });
  // Half-written entries (<key>.bin.tmp.XXXXXX) in the target folders, prelude folders being
  // written (prelude-<hash>.tmp-<pid>-<n>, prelude-<hash>.old-<pid>-<n>).
  std::error_code ec;
  for (fs::directory_iterator it(*disk_, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.starts_with("prelude-")) {
      if ((name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos) &&
          old(*it)) {
        std::error_code rm;
        if (fs::remove_all(it->path(), rm) > 0 && !rm) ++removed;
      }
    } else if (it->is_directory(ec) && name != "tmp") {
      sweep(it->path(), [](const std::string& n) { return n.find(".tmp.") != std::string::npos; });
    }
  }
  return removed;
}

// Meta file: the format line, the key, the payload's size and XXH3-128. A payload whose size or
// hash differs (truncated, overwritten, half-written by a crashed process) fails verification.
bool CompileCache::write_meta(std::string_view target, std::string_view key,
                              std::span<const char> payload) {
  std::string meta(kFormat);
  meta += "\nkey ";
  meta += key;
  meta += "\nsize " + std::to_string(payload.size());
  meta += "\nxxh3 " + payload_hash(payload) + "\n";
  try {
    write_file_atomic(entry_path(target, key, ".meta"), meta);
    return true;
  } catch (const fs::filesystem_error&) {
    return false;
  }
}

bool CompileCache::verify(std::string_view target, std::string_view key, std::vector<char>* bytes) {
  std::vector<char> meta;
  if (!read_file(entry_path(target, key, ".meta"), &meta)) {
    // No entry (or only a payload whose meta was never written: not trusted).
    return false;
  }
  std::string_view m(meta.data(), meta.size());
  std::string expect_head = std::string(kFormat) + "\nkey " + std::string(key) + "\nsize ";
  bool ok = m.substr(0, expect_head.size()) == expect_head;
  size_t size = 0;
  std::string_view hash;
  if (ok) {
    m.remove_prefix(expect_head.size());
    size_t nl = m.find('\n');
    ok = nl != std::string_view::npos && nl > 0;
    if (ok) {
      for (char c : m.substr(0, nl)) {
        ok = ok && c >= '0' && c <= '9';
        size = size * 10 + static_cast<size_t>(c - '0');
      }
      m.remove_prefix(nl + 1);
      ok = ok && m.size() == 5 + 32 + 1 && m.substr(0, 5) == "xxh3 " && m.back() == '\n';
      hash = m.substr(5, 32);
    }
  }
  ok = ok && read_file(entry_path(target, key, ".bin"), bytes) && bytes->size() == size &&
       payload_hash(*bytes) == hash;
  if (!ok) {
    corrupt_++;
    remove(target, key);
  }
  return ok;
}

std::optional<std::vector<char>> CompileCache::load(std::string_view target, std::string_view key) {
  std::vector<char> bytes;
  if (disk_ && verify(target, key, &bytes)) {
    disk_hits_++;
    return bytes;
  }
  misses_++;
  return std::nullopt;
}

std::optional<fs::path> CompileCache::load_file(std::string_view target, std::string_view key) {
  std::vector<char> bytes;
  if (disk_ && verify(target, key, &bytes)) {
    disk_hits_++;
    return entry_path(target, key, ".bin");
  }
  misses_++;
  return std::nullopt;
}

bool CompileCache::store(std::string_view target, std::string_view key,
                         std::span<const char> bytes) {
  if (!disk_) return false;
  std::error_code ec;
  fs::create_directories(*disk_ / folder_name(target), ec);
  try {
    // Payload first, then meta: a reader that sees the new meta sees a complete payload (or one
    // from a concurrent writer of the same key, which verification then rejects).
    write_file_atomic(entry_path(target, key, ".bin"), bytes);
  } catch (const fs::filesystem_error&) {
    return false;
  }
  if (!write_meta(target, key, bytes)) return false;
  stores_++;
  return true;
}

bool CompileCache::store_file(std::string_view target, std::string_view key, const fs::path& file) {
  if (!disk_) return false;
  std::vector<char> bytes;
  if (!read_file(file, &bytes)) return false;
  std::error_code ec;
  fs::create_directories(*disk_ / folder_name(target), ec);
  fs::path entry = entry_path(target, key, ".bin");
  if (::rename(file.c_str(), entry.c_str()) != 0) return false;
  if (!write_meta(target, key, bytes)) {
    // Leave `file` where it was, as promised (the caller still loads it from there).
    if (::rename(entry.c_str(), file.c_str()) != 0) ::unlink(entry.c_str());
    return false;
  }
  stores_++;
  return true;
}

void CompileCache::remove(std::string_view target, std::string_view key) {
  if (!disk_) return;
  ::unlink(entry_path(target, key, ".meta").c_str());
  ::unlink(entry_path(target, key, ".bin").c_str());
}

std::shared_ptr<void> CompileCache::get_or_build(
    std::string_view target, std::string_view key,
    const std::function<std::shared_ptr<void>()>& build) {
  std::string k;
  k.reserve(target.size() + 1 + key.size());
  k.append(target).push_back('\0');
  k.append(key);

  std::promise<std::shared_ptr<void>> promise;
  std::shared_future<std::shared_ptr<void>> found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(k);
    if (it == memory_.end()) {
      memory_.emplace(k, Entry{promise.get_future().share(), ::getpid()});
    } else if (it->second.builder != ::getpid() &&
               it->second.value.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      // Being built in the parent when this process was forked: no thread here finishes it.
      it->second = Entry{promise.get_future().share(), ::getpid()};
    } else {
      found = it->second.value;
    }
  }
  if (found.valid()) {
    memory_hits_++;
    return found.get();  // waits (outside the lock) if another thread is building it
  }
  try {
    std::shared_ptr<void> value = build();
    promise.set_value(value);
    return value;
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      memory_.erase(k);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

bool CompileCache::in_memory(std::string_view target, std::string_view key) const {
  std::string k;
  k.reserve(target.size() + 1 + key.size());
  k.append(target).push_back('\0');
  k.append(key);
  std::lock_guard<std::mutex> lock(mu_);
  return memory_.count(k) > 0;
}

void CompileCache::clear_memory() {
  decltype(memory_) old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old.swap(memory_);
  }
  // `old` is released outside the lock: artifacts' destructors (dlclose) may take time.
}

Stats CompileCache::stats() const {
  return {memory_hits_.load(), disk_hits_.load(), misses_.load(), corrupt_.load(), stores_.load()};
}

void CompileCache::reset_stats() {
  memory_hits_ = disk_hits_ = misses_ = corrupt_ = stores_ = 0;
}

}  // namespace alloy::cache
