// Expansion of the macros that declare kernels, before translation.
//
// Metal libraries (MLX's kernels in particular) instantiate their templated kernels through
// function-like macros (the #define written on one line here):
//   #define instantiate_kernel(name, func, ...) template [[host_name(name)]] [[kernel]]
//       decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;
//   instantiate_kernel("copy_float", copy, float)
// The token-level translator reads `[[host_name]]` / `[[kernel]]` where they are written, so the
// instantiations must be visible: this pass expands exactly the macros whose body declares a
// kernel (contains `host_name` or `kernel`, or calls such a macro), with the C preprocessor's rules
// for `#`, `##` and `__VA_ARGS__`, and leaves every other macro to the target compiler.
#pragma once
#include <string>
#include <string_view>

namespace alloy::msl {

/// Returns `source` with the invocations of kernel-declaring function-like macros expanded and
/// their `#define`/`#undef` lines blanked. Line numbers are kept: each expansion is written on the
/// line where its invocation starts (adjacent string literals merged, so `"ss_" #op` becomes one
/// literal), followed by the newlines the invocation spanned. Sources without such macros come
/// back unchanged. Conditional compilation (`#if`) around invocations is not evaluated.
/// Throws std::invalid_argument for an invocation with unbalanced parentheses or the wrong
/// number of arguments.
std::string expand_kernel_macros(std::string_view source);

}  // namespace alloy::msl
