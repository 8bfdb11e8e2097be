// ALLOY_HOT marks the functions a cached kernel call runs through (the call, its evaluation and
// the release of its output). GCC and Clang place them together in the binary's .text.hot
// section, so that the few pages they take stay in the TLB and the caches between the driver's
// launches, which evict a path spread over the whole binary (docs/performance.md, "Host
// overhead per cached launch", session 17).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define ALLOY_HOT __attribute__((hot))
#else
#define ALLOY_HOT
#endif
