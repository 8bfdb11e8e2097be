#include "backend/cuda/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "alloy/errors.h"
#include "backend/cuda/device.h"
#include "backend/cuda/jit.h"
#include "core/hot.h"

namespace alloy::cuda {
namespace {

struct Recorded {
  CUfunction func = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::unique_ptr<ParamBlock> L;  // large (the parameter block's capacity): on the heap
  std::vector<int> param_buffers;
  std::string label;
};

struct Recording {
  Context* ctx = nullptr;
  CUstream stream = nullptr;  // of the first launch
  std::vector<Recorded> launches;
  std::vector<std::shared_ptr<Buffer>> kept;
  std::string rejected;  // why the recording cannot be replayed ("" = it can)
};

thread_local Recording* t_recording = nullptr;

// The kernel parameters of one node: L, then the entry's buffer parameters (pointers into L).
struct NodeParams {
  std::unique_ptr<ParamBlock> L;
  std::vector<int> param_buffers;
  std::vector<void*> params;
  KernelNodeParams node;

  void point_params() {
    params.assign(1 + param_buffers.size(), nullptr);
    params[0] = const_cast<void*>(L->bytes());
    for (size_t i = 0; i < param_buffers.size(); ++i)
      params[1 + i] = const_cast<void*>(L->buffer_slot(static_cast<uint32_t>(param_buffers[i])));
    node.kernel_params = params.data();
  }
};

class CudaLaunchGraph final : public LaunchGraph {
 public:
  CudaLaunchGraph(Context& ctx, std::vector<NodeParams> nodes, std::vector<PatchSite> sites,
                  std::vector<ExternalRange> external, std::vector<std::shared_ptr<Buffer>> kept,
                  std::string label)
      : ctx_(ctx),
        nodes_(std::move(nodes)),
        sites_(std::move(sites)),
        current_(std::move(external)),
        kept_(std::move(kept)),
        label_(std::move(label)) {}

  ~CudaLaunchGraph() override {
    const Driver& d = ctx_.driver();
    ctx_.make_current();
    // The kept buffers may still be in use by the last launch: let it finish first.
    if (last_stream_) d.cuStreamSynchronize(last_stream_);
    if (exec_) d.cuGraphExecDestroy(exec_);
    if (graph_) d.cuGraphDestroy(graph_);
  }

  // Builds and instantiates the graph (nodes in a chain: the recorded order on one stream).
  void build() {
    const Driver& d = ctx_.driver();
    ctx_.make_current();
    ctx_.check(d.cuGraphCreate(&graph_, 0), "cuGraphCreate");
    handles_.resize(nodes_.size());
    for (size_t i = 0; i < nodes_.size(); ++i) {
      CUgraphNode prev = i ? handles_[i - 1] : nullptr;
      ctx_.check(d.cuGraphAddKernelNode(&handles_[i], graph_, i ? &prev : nullptr, i ? 1 : 0,
                                        &nodes_[i].node),
                 "cuGraphAddKernelNode");
    }
    ctx_.check(d.cuGraphInstantiateWithFlags(&exec_, graph_, 0), "cuGraphInstantiateWithFlags");
  }

  int launches() const override { return static_cast<int>(nodes_.size()); }
  bool uses(size_t external) const override {
    return std::any_of(sites_.begin(), sites_.end(),
                       [&](const PatchSite& s) { return s.external == external; });
  }
  int64_t updates() const override {
    std::lock_guard lock(mu_);
    return updates_;
  }

  void launch(const void* const* ptrs, size_t count) override {
    if (count != current_.size())
      throw std::invalid_argument(
          fmt::format("graph of '{}': {} external buffers given, {} "
                      "recorded",
                      label_, count, current_.size()));
    std::lock_guard lock(mu_);
    const Driver& d = ctx_.driver();
    ctx_.check_usable();
    ctx_.make_current();
    // Rewrite the pointers into ranges that moved; each touched node once.
    bool any = false;
    for (size_t k = 0; k < count; ++k) any |= ptrs[k] != current_[k].ptr;
    if (any) {
      size_t i = 0;
      while (i < sites_.size()) {
        uint32_t n = sites_[i].launch;
        bool changed = false;
        for (; i < sites_.size() && sites_[i].launch == n; ++i) {
          const PatchSite& s = sites_[i];
          void* p = static_cast<char*>(const_cast<void*>(ptrs[s.external])) + s.offset;
          if (nodes_[n].L->buffer(s.buffer) != p) {
            nodes_[n].L->set_buffer(s.buffer, p);
            changed = true;
          }
        }
        if (changed) {
          ctx_.check(d.cuGraphExecKernelNodeSetParams(exec_, handles_[n], &nodes_[n].node),
                     "cuGraphExecKernelNodeSetParams");
          ++updates_;
        }
      }
      for (size_t k = 0; k < count; ++k) current_[k].ptr = ptrs[k];
    }
    CUstream s = ctx_.stream();
    // The intermediates are shared by every launch: a launch on another stream than the last
    // one waits for it on the device.
    if (last_stream_ && last_stream_ != s) {
      if (!fence_) ctx_.check(d.cuEventCreate(&fence_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      ctx_.check(d.cuEventRecord(fence_, last_stream_), "cuEventRecord");
      ctx_.check(d.cuStreamWaitEvent(s, fence_, 0), "cuStreamWaitEvent");
    }
    CUresult r = d.cuGraphLaunch(exec_, s);
    if (r != CUDA_SUCCESS) ctx_.fail(r, "cuGraphLaunch", label_.c_str());
    last_stream_ = s;
    ctx_.note_launch(label_.c_str());
  }

 private:
  Context& ctx_;
  std::vector<NodeParams> nodes_;
  std::vector<PatchSite> sites_;        // sorted by launch
  std::vector<ExternalRange> current_;  // where the external ranges are now
  std::vector<std::shared_ptr<Buffer>> kept_;
  std::string label_;
  std::vector<CUgraphNode> handles_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  CUevent fence_ = nullptr;
  CUstream last_stream_ = nullptr;
  mutable std::mutex mu_;
  int64_t updates_ = 0;
};

}  // namespace

std::vector<PatchSite> find_patch_sites(const std::vector<const ParamBlock*>& launches,
                                        const std::vector<ExternalRange>& external) {
  // Sorted by start, to find a pointer's range by binary search and check for overlaps.
  std::vector<uint32_t> order(external.size());
  for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
  auto start = [&](uint32_t k) { return reinterpret_cast<uintptr_t>(external[k].ptr); };
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return start(a) < start(b); });
  for (size_t i = 1; i < order.size(); ++i) {
    const ExternalRange& prev = external[order[i - 1]];
    if (prev.nbytes && start(order[i - 1]) + prev.nbytes > start(order[i]))
      throw std::invalid_argument(
          fmt::format("external buffers {} and {} overlap", order[i - 1], order[i]));
  }
  std::vector<PatchSite> sites;
  for (uint32_t n = 0; n < launches.size(); ++n) {
    const ParamBlock& L = *launches[n];
    const uint32_t nb = std::min(L.head.num_buffers, L.layout.num_buffers);
    for (uint32_t b = 0; b < nb; ++b) {
      if ((L.head.inline_mask >> b) & 1) continue;
      auto p = reinterpret_cast<uintptr_t>(L.buffer(b));
      if (!p) continue;
      // The last range starting at or before p.
      auto it = std::upper_bound(order.begin(), order.end(), p,
                                 [&](uintptr_t v, uint32_t k) { return v < start(k); });
      if (it == order.begin()) continue;
      uint32_t k = *(it - 1);
      // A zero-byte range matches its exact start only.
      uint64_t end = start(k) + std::max<uint64_t>(external[k].nbytes, 1);
      if (p < end) sites.push_back({n, b, k, p - start(k)});
    }
  }
  return sites;
}

namespace graph_recording {
ALLOY_HOT bool active() {
  return t_recording != nullptr;
}
void reject(const char* why) {
  if (t_recording && t_recording->rejected.empty()) t_recording->rejected = why;
}
}  // namespace graph_recording

void record_launch(const Function& fn, const unsigned grid_dims[3], const unsigned block_dims[3],
                   unsigned shared_bytes, CUstream stream, const ParamBlock& P,
                   const int* param_buffers, uint32_t num_param_buffers, const char* label) {
  Recording* r = t_recording;
  if (!r || !r->rejected.empty()) return;
  if (r->launches.empty()) {
    r->stream = stream;
  } else if (r->stream != stream) {
    r->rejected = "launches on several streams";
    return;
  }
  Recorded rec;
  rec.func = fn.handle;
  std::copy(grid_dims, grid_dims + 3, rec.grid);
  std::copy(block_dims, block_dims + 3, rec.block);
  rec.shared_bytes = shared_bytes;
  rec.L = std::make_unique<ParamBlock>(P);
  rec.param_buffers.assign(param_buffers, param_buffers + num_param_buffers);
  rec.label = label ? label : fn.kernel;
  r->launches.push_back(std::move(rec));
}

void record_allocation(const std::shared_ptr<Buffer>& buffer) {
  if (t_recording && t_recording->rejected.empty()) t_recording->kept.push_back(buffer);
}

bool begin_graph_recording(Context& ctx) {
  if (t_recording || !ctx.driver().has_graphs()) return false;
  t_recording = new Recording;
  t_recording->ctx = &ctx;
  return true;
}

std::unique_ptr<LaunchGraph> end_graph_recording(Context& ctx,
                                                 const std::vector<ExternalRange>& external,
                                                 std::string* why) {
  std::unique_ptr<Recording> r(t_recording);
  t_recording = nullptr;
  auto fail = [&](std::string reason) -> std::unique_ptr<LaunchGraph> {
    if (why) *why = std::move(reason);
    return nullptr;
  };
  if (!r) return fail("no recording was active");
  if (!r->rejected.empty()) return fail(r->rejected);
  if (r->launches.empty()) return fail("nothing was launched");
  std::vector<const ParamBlock*> ls;
  for (auto& l : r->launches) ls.push_back(l.L.get());
  std::vector<PatchSite> sites;
  try {
    sites = find_patch_sites(ls, external);
  } catch (const std::invalid_argument& e) {
    return fail(e.what());
  }
  // The external buffers are not the graph's: drop them from what it keeps.
  std::vector<std::shared_ptr<Buffer>> kept;
  for (auto& b : r->kept) {
    auto p = reinterpret_cast<uintptr_t>(b->ptr);
    bool ext = std::any_of(external.begin(), external.end(), [&](const ExternalRange& e) {
      auto s = reinterpret_cast<uintptr_t>(e.ptr);
      return p >= s && p < s + std::max<size_t>(e.nbytes, 1);
    });
    if (!ext) kept.push_back(b);
  }
  std::vector<NodeParams> nodes(r->launches.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    Recorded& rec = r->launches[i];
    NodeParams& n = nodes[i];
    n.L = std::move(rec.L);
    n.param_buffers = std::move(rec.param_buffers);
    n.node.func = rec.func;
    std::copy(rec.grid, rec.grid + 3, n.node.grid_dim);
    std::copy(rec.block, rec.block + 3, n.node.block_dim);
    n.node.shared_mem_bytes = rec.shared_bytes;
    n.point_params();
  }
  std::string label =
      fmt::format("CUDA graph of {} launches ({}...)", nodes.size(), r->launches.front().label);
  auto g = std::make_unique<CudaLaunchGraph>(ctx, std::move(nodes), std::move(sites), external,
                                             std::move(kept), std::move(label));
  try {
    g->build();
  } catch (const Error& e) {
    return fail(fmt::format("building the graph failed: {}", e.what()));
  }
  return g;
}

}  // namespace alloy::cuda
