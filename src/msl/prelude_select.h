// Prelude selection: which optional parts of the Metal prelude (src/prelude/metal_stdlib.h) a
// translated kernel uses, from the identifiers in its source. Parsing the prelude is most of a
// small kernel's NVRTC compile time (and much of the host compiler's), so the translator puts
// `#define`s for just those parts before `#include "metal_stdlib.h"`.
//
// Conservative by construction: a part is left out only when no identifier of the source could
// name anything in it. A macro that pastes tokens (`##`) may make any name: with a parameter
// among the pasted operands it selects every part and math function, and every swizzle unless
// an operand rules swizzles out (`T##2`); a `##` outside a #define selects everything.
#pragma once
#include <set>
#include <string>
#include <string_view>

namespace alloy::msl {

struct PreludeSelection {
  bool all = false;                // no selection: the whole prelude
  std::set<std::string> needs;     // optional headers: "INTEGER", "ATOMIC", "SYNC", "SIMD", ...
  std::set<std::string> swizzles;  // swizzle members, xyzw spelling ("xy", "zyx", "xxxx")
  std::set<std::string> math;      // metal/math.h functions ("exp", "clamp", "dot", ...)
  // Pieces of the core (always-included headers) declared only when named (ALLOY_NEED_<piece>):
  // "LOWP" half and bfloat (metal/types.h; otherwise incomplete types), "PACKED" packed vectors
  // (metal/vector.h), "ENTRY_ARGS" the binding templates of prelude/entry.h (CUDA entries),
  // "VECTOR" vector values (vec's constructors, swizzles, operators; metal/vector.h): left out
  // only when the kernel's vectors are attributes read one component at a time (`gid.x`);
  // "TRAITS" the type traits no core code uses (metal/traits.h: is_array, decay, ...);
  // "LIMITS" numeric_limits (metal/types.h).
  std::set<std::string> core;
  bool all_swizzles = false;  // every swizzle member (ALLOY_SWIZZLES_ALL)
  bool all_math = false;      // every math function (ALLOY_MATH_ALL)
};

/// The optional prelude parts that `code` (a translated source, or any C++/Metal text) names.
PreludeSelection select_prelude(std::string_view code);

/// The same, where `component_params` are the names of the kernels' vector-typed attribute
/// parameters (`uint3 gid [[thread_position_in_grid]]`): when every vector in `code` is one of
/// them, declared as a parameter and read only through `.x`/`.y`/`.z`/`.w` (or rgba), "VECTOR"
/// is left out of the core.
PreludeSelection select_prelude(std::string_view code,
                                const std::set<std::string>& component_params);

/// `#define` lines for `s` (ALLOY_SELECT, ALLOY_NEED_<part>, ALLOY_SWIZZLE_<name> or
/// ALLOY_SWIZZLES_ALL, ALLOY_USE_<math function> or ALLOY_MATH_ALL); "" when s.all.
std::string prelude_defines(const PreludeSelection& s);

/// A CUDA translation's prelude in two parts (msl/translate.cpp): `core` (the #defines that
/// metal_core.h and entry.h read: ALLOY_SELECT, ALLOY_NEED_<part or piece>, the swizzles) goes
/// before `#include "metal_core.h"`, `math` (ALLOY_USE_<name>, ALLOY_MATH_ALL: only math.h and the
/// optional parts after it read them) after kPreludeCoreEnd, before `#include "metal_stdlib.h"`.
/// Together they define what prelude_defines(s) does; `core` also holds ALLOY_NEED_LIMITS where
/// a selected math function needs it (metal_core.h derives it from ALLOY_USE_fract otherwise).
struct SplitDefines {
  std::string core;
  std::string math;
};
SplitDefines prelude_defines_split(const PreludeSelection& s);

/// The line a CUDA translation puts after its prelude's core (metal_core.h, entry.h), before the
/// selected math functions: a declaration, so NVRTC's automatic PCH, which covers the directives
/// before a source's first other line, covers just the core, which kernels of different math
/// selections share (backend/cuda/nvrtc.h auto_pch). Declares nothing.
inline constexpr std::string_view kPreludeCoreEnd = "namespace metal {}  // the prelude's core\n";

/// metal/math.h's text (`math_h`) with its selection evaluated for the math functions a CUDA
/// translation `source` selects (its `#define ALLOY_USE_<name> 1` and `#define ALLOY_MATH_ALL 1`
/// lines after kPreludeCoreEnd): each `#if defined(ALLOY_MATH_ALL) || defined(ALLOY_USE_<name>)`
/// and `#if !defined(ALLOY_MATH_ALL) && !defined(ALLOY_USE_<name>)` block kept without its
/// directives or left out (a blank line), every other line as it is. The same program once
/// preprocessed, without the ~260 directives NVRTC's preprocessor would evaluate per kernel
/// (a few ms on the GPU host, docs/performance.md). "" when `source` is not such a translation
/// or `math_h` holds a form this does not know (then the header is used as it is).
std::string math_header_for(std::string_view source, std::string_view math_h);

/// Every optional part select_prelude() knows, as used in ALLOY_NEED_<part>.
const std::set<std::string>& prelude_parts();

/// Every lazily declared core piece select_prelude() knows, as used in ALLOY_NEED_<piece>.
const std::set<std::string>& prelude_core_pieces();

/// Every function of metal/math.h select_prelude() knows, as used in ALLOY_USE_<name>.
const std::set<std::string>& prelude_math_functions();

}  // namespace alloy::msl
