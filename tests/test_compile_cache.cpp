// The content-addressed compile cache: keys, disk entries (atomic writes, verification, corrupt
// entries), the memory level (one build per key), and the fallback without a writable folder.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cache/compile_cache.h"
#include "scoped_env.h"

using alloy::testing::ScopedEnv;

namespace alloy::cache {
namespace {
namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
class CompileCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("alloy-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<char> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<char> v(n);
    for (char& c : v) c = static_cast<char>(rng());
    return v;
  }

  static std::vector<char> read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

TEST_F(CompileCacheTest, KeyDependsOnEveryInputButNotOnAName) {
  std::string base = key_hex("src", "cpu", "g++ 12", "-O2", "p1");
  EXPECT_EQ(base.size(), 32u);
  EXPECT_EQ(base, key_hex("src", "cpu", "g++ 12", "-O2", "p1"));
  EXPECT_NE(base, key_hex("src2", "cpu", "g++ 12", "-O2", "p1"));
  EXPECT_NE(base, key_hex("src", "cuda", "g++ 12", "-O2", "p1"));
  EXPECT_NE(base, key_hex("src", "cpu", "g++ 13", "-O2", "p1"));
  EXPECT_NE(base, key_hex("src", "cpu", "g++ 12", "-O3", "p1"));
  EXPECT_NE(base, key_hex("src", "cpu", "g++ 12", "-O2", "p2"));
  // Parts are length-prefixed: moving a boundary changes the key.
  EXPECT_NE(hash_hex({"ab", "c"}), hash_hex({"a", "bc"}));
  EXPECT_NE(hash_hex({"abc"}), hash_hex({"abc", ""}));
}

TEST_F(CompileCacheTest, StoreThenLoad) {
  CompileCache c(dir_);
  ASSERT_TRUE(c.has_disk());
  auto bytes = random_bytes(100000, 1);
  std::string key = hash_hex({"k1"});
  EXPECT_FALSE(c.load("cpu", key).has_value());
  EXPECT_TRUE(c.store("cpu", key, bytes));
  auto got = c.load("cpu", key);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, bytes);
  auto path = c.load_file("cpu", key);
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(read(*path), bytes);  // the payload file is exactly the artifact (dlopen-able)
  Stats s = c.stats();
  EXPECT_EQ(s.disk_hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.stores, 1u);
  EXPECT_EQ(s.corrupt, 0u);
  // No temp files left behind.
  for (auto& e : fs::recursive_directory_iterator(dir_)) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
  }
}

TEST_F(CompileCacheTest, TargetsAndKeysAreSeparate) {
  CompileCache c(dir_);
  auto a = random_bytes(1000, 2), b = random_bytes(1000, 3);
  std::string k1 = hash_hex({"1"}), k2 = hash_hex({"2"});
  c.store("cpu", k1, a);
  c.store("cuda", k1, b);
  c.store("cpu", k2, b);
  EXPECT_EQ(*c.load("cpu", k1), a);
  EXPECT_EQ(*c.load("cuda", k1), b);
  EXPECT_EQ(*c.load("cpu", k2), b);
}

void corrupt_and_expect_rebuild(
    const fs::path& dir, const std::function<void(const fs::path&, const fs::path&)>& damage) {
  CompileCache c(dir);
  auto bytes = std::vector<char>(5000, 'x');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 31 + 7);
  std::string key = hash_hex({"entry"});
  ASSERT_TRUE(c.store("cpu", key, bytes));
  damage(c.entry_path("cpu", key, ".bin"), c.entry_path("cpu", key, ".meta"));
  CompileCache fresh(dir);  // a new process
  EXPECT_FALSE(fresh.load("cpu", key).has_value());
  EXPECT_EQ(fresh.stats().corrupt, 1u);
  EXPECT_FALSE(fs::exists(fresh.entry_path("cpu", key, ".bin")));  // removed
  EXPECT_FALSE(fs::exists(fresh.entry_path("cpu", key, ".meta")));
  // Rebuilt.
  ASSERT_TRUE(fresh.store("cpu", key, bytes));
  EXPECT_EQ(*fresh.load("cpu", key), bytes);
}

TEST_F(CompileCacheTest, FlippedByteIsDetected) {
  corrupt_and_expect_rebuild(dir_, [](const fs::path& bin, const fs::path&) {
    std::fstream f(bin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1234);
    f.put('\x5a' ^ static_cast<char>(1234 * 31 + 7));
  });
}

TEST_F(CompileCacheTest, TruncatedPayloadIsDetected) {
  corrupt_and_expect_rebuild(
      dir_, [](const fs::path& bin, const fs::path&) { fs::resize_file(bin, 4000); });
}

TEST_F(CompileCacheTest, GarbledMetaIsDetected) {
  corrupt_and_expect_rebuild(dir_, [](const fs::path&, const fs::path& meta) {
    std::ofstream(meta, std::ios::binary) << "alloy-cache 1\nkey zzz\n";
  });
}

TEST_F(CompileCacheTest, MetaOfAnotherKeyIsRejected) {
  corrupt_and_expect_rebuild(dir_, [this](const fs::path& bin, const fs::path& meta) {
    CompileCache other(dir_);
    std::vector<char> same(5000);
    for (size_t i = 0; i < same.size(); ++i) same[i] = static_cast<char>(i * 31 + 7);
    std::string k = hash_hex({"other"});
    other.store("cpu", k, same);
    fs::copy_file(other.entry_path("cpu", k, ".meta"), meta, fs::copy_options::overwrite_existing);
  });
}

TEST_F(CompileCacheTest, UnusableFolderMeansMemoryOnly) {
  fs::create_directories(dir_);
  std::ofstream(dir_ / "file") << "not a folder";
  CompileCache c(dir_ / "file" / "cache");
  EXPECT_FALSE(c.has_disk());
  EXPECT_FALSE(c.disk_error().empty());
  EXPECT_FALSE(c.store("cpu", hash_hex({"k"}), random_bytes(10, 4)));
  EXPECT_FALSE(c.load("cpu", hash_hex({"k"})).has_value());
  int builds = 0;
  auto v = c.get_or_build("cpu", "k", [&] {
    ++builds;
    return std::make_shared<int>(5);
  });
  EXPECT_EQ(*std::static_pointer_cast<int>(v), 5);
  c.get_or_build("cpu", "k", [&] { return (++builds, std::make_shared<int>(6)); });
  EXPECT_EQ(builds, 1);
}

TEST_F(CompileCacheTest, FolderIsCreatedOnDemand) {
  CompileCache c(dir_ / "a" / "b");
  EXPECT_TRUE(c.has_disk());
  EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b"));
}

TEST_F(CompileCacheTest, StoreFileMovesIntoTheCache) {
  CompileCache c(dir_);
  auto bytes = random_bytes(3000, 5);
  fs::path tmp = c.temp_dir() / "artifact.so";
  write_file_atomic(tmp, bytes);
  std::string key = hash_hex({"moved"});
  ASSERT_TRUE(c.store_file("cpu", key, tmp));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(*c.load("cpu", key), bytes);
}

TEST_F(CompileCacheTest, MemoryLevelBuildsOncePerKeyAcrossThreads) {
  CompileCache c(dir_);
  std::atomic<int> builds{0};
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<void>> results(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      results[t] = c.get_or_build("cpu", t % 2 ? "odd" : "even", [&, t] {
        builds++;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return std::make_shared<int>(t % 2);
      });
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(builds.load(), 2);
  for (int t = 0; t < 8; ++t) EXPECT_EQ(*std::static_pointer_cast<int>(results[t]), t % 2);
  EXPECT_EQ(c.stats().memory_hits, 6u);
  c.clear_memory();
  c.get_or_build("cpu", "odd", [&] { return (builds++, std::make_shared<int>(1)); });
  EXPECT_EQ(builds.load(), 3);
}

// A build running in the parent when it forks has no thread in the child: a child asking for the
// same key builds it itself instead of waiting forever; the parent's build still completes there.
TEST_F(CompileCacheTest, ForkedChildBuildsWhatItsParentWasBuilding) {
  CompileCache c(std::nullopt);
  std::atomic<bool> started{false}, release{false};
  std::thread builder([&] {
    c.get_or_build("cpu", "k", [&] {
      started = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return std::make_shared<int>(1);
    });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(20);  // a hang fails the test instead of stalling it
    auto v = c.get_or_build("cpu", "k", [] { return std::make_shared<int>(2); });
    auto again = c.get_or_build("cpu", "k", [] { return std::make_shared<int>(3); });
    ::_exit(*std::static_pointer_cast<int>(v) == 2 && again == v ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  release = true;
  builder.join();
  ASSERT_TRUE(WIFEXITED(status)) << "the child hung or crashed (status " << status << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto v = c.get_or_build("cpu", "k", [] { return std::make_shared<int>(4); });
  EXPECT_EQ(*std::static_pointer_cast<int>(v), 1);  // the parent's own build
}

TEST_F(CompileCacheTest, FailedBuildIsNotCached) {
  CompileCache c(dir_);
  EXPECT_THROW(
      c.get_or_build("cpu", "k",
                     []() -> std::shared_ptr<void> { throw std::runtime_error("compile error"); }),
      std::runtime_error);
  auto v = c.get_or_build("cpu", "k", [] { return std::make_shared<int>(3); });
  EXPECT_EQ(*std::static_pointer_cast<int>(v), 3);
}

TEST_F(CompileCacheTest, DefaultDirHonoursAlloyCacheDir) {
  {
    ScopedEnv env("ALLOY_CACHE_DIR", dir_.c_str());
    EXPECT_EQ(default_dir(), dir_);
  }
  ScopedEnv env("ALLOY_CACHE_DIR", nullptr), home("HOME", "/home/someone"),
      xdg("XDG_CACHE_HOME", nullptr);
  EXPECT_EQ(default_dir(), fs::path("/home/someone/.cache/alloy"));
}

}  // namespace
}  // namespace alloy::cache
