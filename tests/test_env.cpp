// core/env.h: the one grammar of the ALLOY_* environment variables.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/env.h"
#include "core/host_allocator.h"
#include "msl/regions.h"
#include "msl/translate.h"
#include "scoped_env.h"

namespace alloy {
namespace {
using testing::ScopedEnv;

constexpr const char* kName = "ALLOY_TEST_ENV_GRAMMAR";

// The message of what `fn` throws as std::invalid_argument ("" when it does not throw).
template <class Fn>
std::string invalid_argument_of(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Env, UnsetOrEmptyMeansTheDefault) {
  for (const char* v : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnv e(kName, v);
    EXPECT_FALSE(env::text(kName));
    EXPECT_TRUE(env::flag(kName, true));
    EXPECT_FALSE(env::flag(kName, false));
    EXPECT_FALSE(env::count(kName, "a count"));
    EXPECT_FALSE(env::choice(kName, {"a", "b"}));
  }
  ScopedEnv e(kName, " x ");
  EXPECT_EQ(env::text(kName), " x ");
}

TEST(Env, FlagsTakeTheWordsOfBothKindsInAnyCase) {
  for (const char* v : {"1", "true", "ON", "Yes"}) {
    ScopedEnv e(kName, v);
    EXPECT_TRUE(env::flag(kName, false)) << v;
  }
  for (const char* v : {"0", "False", "off", "NO"}) {
    ScopedEnv e(kName, v);
    EXPECT_FALSE(env::flag(kName, true)) << v;
  }
  for (const char* v : {"2", "maybe", " 1", "1 "}) {
    ScopedEnv e(kName, v);
    std::string m = invalid_argument_of([] { env::flag(kName, true); });
    EXPECT_NE(m.find(std::string(kName) + "=" + v), std::string::npos) << m;
    EXPECT_NE(m.find("expected 1, true, on or yes, or 0, false, off or no"), std::string::npos)
        << m;
  }
}

TEST(Env, CountsAreDecimalWithinTheirMaximum) {
  {
    ScopedEnv e(kName, "0");
    EXPECT_EQ(env::count(kName, "a count"), 0u);
  }
  {
    ScopedEnv e(kName, "18446744073709551615");
    EXPECT_EQ(env::count(kName, "a count"), ~uint64_t{0});
  }
  {
    ScopedEnv e(kName, "4096");
    EXPECT_EQ(env::count(kName, "a count", 4096), 4096u);
  }
  for (const char* v : {"-1", "12x", "0x10", "1e3", " 5", "18446744073709551616", "4097"}) {
    ScopedEnv e(kName, v);
    std::string m = invalid_argument_of([] { env::count(kName, "up to 4096 things", 4096); });
    EXPECT_EQ(m, std::string(kName) + "=" + v + ": expected up to 4096 things") << v;
  }
}

TEST(Env, ChoicesAreExactAndTheErrorListsThem) {
  {
    ScopedEnv e(kName, "split");
    EXPECT_EQ(env::choice(kName, {"auto", "fibers", "split"}), 2u);
  }
  ScopedEnv e(kName, "Split");
  EXPECT_EQ(invalid_argument_of([] {
              env::choice(kName, {"auto", "fibers", "split"});
            }),
            std::string(kName) + "=Split: expected auto, fibers or split");
}

// The variables that kept their own parsers until session 15 now use the grammar: a misspelt
// value is an error naming the variable, not silently the default (or "on").
TEST(Env, CpuAndHostAllocatorVariablesUseTheGrammar) {
  {
    ScopedEnv e("ALLOY_CPU_SYNC", "split");
    EXPECT_EQ(msl::cpu_sync_mode(), msl::CpuSyncMode::split);
  }
  {
    ScopedEnv e("ALLOY_CPU_SYNC", "fibers");
    EXPECT_EQ(msl::cpu_sync_mode(), msl::CpuSyncMode::fibers);
  }
  {
    ScopedEnv e("ALLOY_CPU_SYNC", "Fibers");
    EXPECT_EQ(invalid_argument_of([] { msl::cpu_sync_mode(); }),
              "ALLOY_CPU_SYNC=Fibers: expected auto, fibers or split");
  }
  for (const char* v : {"on", "4096"}) {
    ScopedEnv e("ALLOY_CPU_STREAM", v);
    EXPECT_TRUE(msl::cpu_stream_loops()) << v;
  }
  {
    ScopedEnv e("ALLOY_CPU_STREAM", "off");
    EXPECT_FALSE(msl::cpu_stream_loops());
  }
  {
    ScopedEnv e("ALLOY_CPU_STREAM", "yes");
    EXPECT_EQ(invalid_argument_of([] { msl::cpu_stream_loops(); }),
              "ALLOY_CPU_STREAM=yes: expected off, on, auto or a size in bytes");
  }
  const std::pair<const char*, GuardMode> modes[] = {
      {"all", GuardMode::all}, {"large", GuardMode::large}, {"none", GuardMode::none},
      {"0", GuardMode::none},  {"off", GuardMode::none},    {"", GuardMode::all}};
  for (const auto& [v, mode] : modes) {
    ScopedEnv e("ALLOY_HOST_GUARD_PAGES", v);
    EXPECT_EQ(host_guard_mode_from_env(), mode) << v;
  }
  ScopedEnv e("ALLOY_HOST_GUARD_PAGES", "small");
  EXPECT_EQ(invalid_argument_of([] { host_guard_mode_from_env(); }),
            "ALLOY_HOST_GUARD_PAGES=small: expected all, large, none, 0 or off");
}

}  // namespace
}  // namespace alloy
