// CUDA graphs for compile()'s replay (docs/compile.md, "CUDA graphs").
//
// Recording, not stream capture: while a thread records, every kernel it launches through
// cuda::launch still runs as usual and is also remembered (function, dimensions, its parameter
// block (a ParamBlock, sized to the entry) and which of its buffers it also takes as entry
// parameters); every buffer the backend
// allocates meanwhile is kept alive by the recording. Any other work enqueued meanwhile (copies,
// fills, cuBLAS, the strided-copy kernel, host synchronizations, events, robust-mode launches,
// launches with spilled arguments, launches on another stream) marks the recording unusable with
// the reason. At the end the launches become one CUDA graph (a chain of kernel nodes, built with
// cuGraphAddKernelNode: the driver copies the parameters into the graph), whose intermediate
// buffers are the kept allocations (their addresses never change while the graph lives).
// Buffers that change from call to call (the compiled function's inputs and outputs: the
// "external" ranges) are found in each node's buffer table; a later launch rewrites those
// parameters with cuGraphExecKernelNodeSetParams, only for nodes whose pointers differ from the
// previous launch's, then enqueues the graph with cuGraphLaunch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/driver.h"
#include "backend/cuda/launch.h"
#include "core/backend.h"

namespace alloy::cuda {

class Context;
struct Function;

/// One pointer of a recorded launch that lies in an external range: it becomes
/// new_base[external] + offset at replay.
struct PatchSite {
  uint32_t launch = 0;  // index of the recorded launch
  uint32_t buffer = 0;  // buffer-table index
  uint32_t external = 0;
  uint64_t offset = 0;  // bytes from the range's start
};

/// The pointers of the recorded launches' buffer tables (index = launch, then buffer; inline
/// buffers (head.inline_mask) hold no pointer and are skipped) that fall in one of `external`
/// (start, bytes) ranges. Throws std::invalid_argument when two external ranges overlap (the
/// recording could not tell which one a pointer belongs to).
std::vector<PatchSite> find_patch_sites(const std::vector<const ParamBlock*>& launches,
                                        const std::vector<ExternalRange>& external);

/// Graph recording of the calling thread (see the header comment).
namespace graph_recording {
/// Whether the calling thread records.
bool active();
/// Marks the calling thread's recording unusable (no-op when not recording).
void reject(const char* why);
}  // namespace graph_recording

/// Called by cuda::launch after a successful cuLaunchKernel.
void record_launch(const Function& fn, const unsigned grid_dims[3], const unsigned block_dims[3],
                   unsigned shared_bytes, CUstream stream, const ParamBlock& P,
                   const int* param_buffers, uint32_t num_param_buffers, const char* label);

/// Called by the backend's allocate(): the recording keeps `buffer` alive.
void record_allocation(const std::shared_ptr<Buffer>& buffer);

/// Starts recording on the calling thread; false when the driver lacks the graph API (then
/// nothing records) or a recording is already active on this thread.
bool begin_graph_recording(Context& ctx);
/// Ends the calling thread's recording and builds its graph; nullptr (and *why) when the
/// recording is unusable or builds no graph.
std::unique_ptr<LaunchGraph> end_graph_recording(Context& ctx,
                                                 const std::vector<ExternalRange>& external,
                                                 std::string* why);

}  // namespace alloy::cuda
