// Graph passes compile() runs over a trace before caching it, each a function of a Trace
// (src/transforms/trace.h) that leaves it valid:
//   fold_constants          ops whose inputs are all constants run once, at compile time, and
//                           become constants (when the result is not much larger than the
//                           inputs: a broadcast scalar stays a broadcast view);
//   eliminate_common        an op equivalent to an earlier one (Primitive::is_equivalent) on the
//                           same inputs is replaced by it;
//   remove_dead_code        ops and constants no output depends on are dropped;
//   fuse_elementwise        (transforms/fuse.h) elementwise chains become one generated kernel
//                           (then dead code again: the Broadcast views chains read through).
#pragma once
#include "transforms/trace.h"

namespace alloy::transforms {

void fold_constants(Trace& t);
void eliminate_common(Trace& t);
void remove_dead_code(Trace& t);

/// All of the above, in that order (what compile() runs).
void optimize(Trace& t);

}  // namespace alloy::transforms
