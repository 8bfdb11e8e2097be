#include "core/scheduler.h"

#include <fmt/format.h>
#include <tbb/spin_mutex.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "alloy/array.h"
#include "alloy/errors.h"
#include "alloy/interrupt.h"
#include "core/array_node.h"
#include "core/backend.h"
#include "core/env.h"
#include "core/hot.h"
#include "core/interrupt_state.h"

namespace alloy {

void OpDone::finish(std::exception_ptr e) {
  {
    std::lock_guard lock(mu);
    error = std::move(e);
    finished = true;
  }
  cv.notify_all();
}

std::exception_ptr OpDone::wait() {
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return finished; });
  return error;
}

namespace {
bool is_interrupted(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const Interrupted&) {
    return true;
  } catch (...) {
    return false;
  }
}
// The error a waiter reports: the interrupt it requested wins over what the work did meanwhile.
std::exception_ptr after_wait(std::exception_ptr thrown, std::exception_ptr error) {
  if (thrown && !is_interrupted(error)) return std::make_exception_ptr(Interrupted(thrown));
  return error;
}
}  // namespace

std::exception_ptr OpDone::wait_interruptible() {
  std::unique_lock lock(mu);
  auto thrown = interrupt::wait(cv, lock, [&] { return finished; });
  return after_wait(std::move(thrown), error);
}

std::string Stream::str() const {
  return fmt::format("Stream({}, {})", device.str(), index);
}

namespace {

// The graph's `pending` links and ops' `inputs` change under this lock (see scheduler.h). A spin
// lock (oneTBB's: it backs off and then yields while another thread holds it): every hold is
// short (a link read or changed, an op's inputs swapped, one walk of a graph), nothing under it
// waits for another thread (no condition wait, no GIL, no driver call, no last release of an
// op or input: docs/architecture.md), and its release is a plain store. A cached kernel call
// takes it twice: with a mutex those were 4 atomic updates and two calls into libpthread per
// call (issue 9 item 7).
tbb::spin_mutex& graph_mu() {
  static tbb::spin_mutex m;
  return m;
}

// One stream: a CPU worker (started on first hand-off) or a GPU stream handle.
struct StreamState {
  Stream stream;
  void* gpu = nullptr;  // GPU: the backend's handle (nullptr: its default stream)

  std::mutex mu;
  std::condition_variable cv;  // work was queued, or the worker went idle
  std::deque<std::function<void()>> queue;
  bool busy = false;         // the worker runs a task
  pid_t worker_pid = 0;      // the process whose worker thread serves the queue
  std::exception_ptr error;  // first failure of queued work since the last synchronize
  // Tasks queued or running (changed under `mu`, read without it: idle() per evaluation). The
  // worker lowers it after a task's effects (release), idle() reads it with acquire.
  std::atomic<int64_t> outstanding{0};

  bool idle() const { return outstanding.load(std::memory_order_acquire) == 0; }

  void submit(std::function<void()> task) {
    std::lock_guard lock(mu);
    // Threads do not survive fork: a child starts its own worker.
    if (worker_pid != ::getpid()) {
      worker_pid = ::getpid();
      queue.clear();
      busy = false;
      outstanding.store(0, std::memory_order_relaxed);
      std::thread([this] { work(); }).detach();
    }
    queue.push_back(std::move(task));
    outstanding.fetch_add(1, std::memory_order_relaxed);
    cv.notify_all();
  }

  void work() {
    interrupt::mark_worker_thread();
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return !queue.empty(); });
      auto task = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      task();  // never throws: failures are recorded by the task
      // Its captures (inputs, possibly imported NumPy/PyTorch memory whose release takes the GIL)
      // go before the stream's mutex is taken again: no thread may wait for the GIL under it.
      task = nullptr;
      lock.lock();
      busy = false;
      outstanding.fetch_sub(1, std::memory_order_release);
      cv.notify_all();
    }
  }

  /// Waits until nothing is queued or running (running the interrupt check meanwhile); returns
  /// and clears the first error.
  std::exception_ptr drain() {
    std::unique_lock lock(mu);
    auto thrown = interrupt::wait(cv, lock, [&] { return queue.empty() && !busy; });
    return after_wait(std::move(thrown), std::exchange(error, nullptr));
  }

  void record_error(std::exception_ptr e) {
    std::lock_guard lock(mu);
    if (!error) error = std::move(e);
  }
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<StreamState>> streams;  // by index
  // The first streams again, read without the lock (state_of per evaluation): set once when a
  // stream is added, never cleared (streams live until exit).
  static constexpr int kFast = 64;
  std::atomic<StreamState*> fast[kFast] = {};
  // Per device: the CPU at 0, GPU i at 1 + i (slot()); -1 until first asked for.
  std::atomic<int> default_index[1 + kMaxGpus];
  Registry() {
    for (auto& i : default_index) i.store(-1);
  }
};

// Leaked on purpose: detached workers may still wait on their queues at exit.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// The device's entry in Registry::default_index (check_device first: index is in range).
int slot(Device d) {
  return d.type == Device::Type::cpu ? 0 : 1 + d.index;
}

Backend& gpu_of(int index) {
  return *gpu_backend(index);  // streams exist for present GPUs only (check_device)
}

void check_device(Device d, const char* api) {
  if (d.type == Device::Type::gpu) {
    if (!gpu_backend())
      throw std::invalid_argument(
          fmt::format("{}: no GPU is available (no CUDA driver or device)", api));
    if (d.index < 0 || d.index >= kMaxGpus || !gpu_backend(d.index))
      throw std::invalid_argument(fmt::format("{}: gpu:{} is not available: {}", api, d.index,
                                              gpu_unavailable_reason(d.index)));
  } else if (d.index != 0) {
    throw std::invalid_argument(
        fmt::format("{}: there is one CPU device (index 0), got {}", api, d.index));
  }
}

// Makes a stream just added (under the registry's lock) visible to state_of's lock-free read.
void publish(Registry& r, StreamState& st) {
  if (st.stream.index < Registry::kFast)
    r.fast[st.stream.index].store(&st, std::memory_order_release);
}

Stream add_stream(Device d, void* gpu) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto st = std::make_unique<StreamState>();
  st->stream = Stream(static_cast<int>(r.streams.size()), d);
  st->gpu = gpu;
  r.streams.push_back(std::move(st));
  publish(r, *r.streams.back());
  return r.streams.back()->stream;
}

ALLOY_HOT StreamState& state_of(const Stream& s) {
  Registry& r = registry();
  if (s.index >= 0 && s.index < Registry::kFast)
    if (StreamState* st = r.fast[s.index].load(std::memory_order_acquire);
        st && st->stream.device == s.device)
      return *st;
  std::lock_guard lock(r.mu);
  if (s.index < 0 || s.index >= static_cast<int>(r.streams.size()) ||
      r.streams[s.index]->stream.device != s.device)
    throw std::invalid_argument("unknown stream " + s.str() +
                                " (streams come from new_stream / default_stream)");
  return *r.streams[s.index];
}

// Failures that a second read must not retry: the kernel's own (compile, launch) and interrupts.
// Foreign exceptions (e.g. Python's, from a reference function) are not kept: their bindings may
// consume them when they are raised.
bool fails_for_good(const std::exception_ptr& p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error&) {
    return true;
  } catch (const Interrupted&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The output list run_pending hands to a primitive, kept per thread so that a cached call's
// evaluation allocates none (issue 9's launch overhead). A primitive that evaluates arrays
// itself (a Python reference function run at evaluation) nests run_pending: nested calls use
// lists of their own.
struct RunLists {
  std::vector<Array> outputs;
  bool busy = false;
};
thread_local RunLists t_run_lists;

// Runs one op on the calling thread: its inputs are ready.
ALLOY_HOT void run_pending(const std::shared_ptr<PendingOp>& op) {
  // A failed evaluation fails once: reading its outputs again reports the same error.
  if (op->error) std::rethrow_exception(op->error);
  RunLists nested;
  RunLists& lists = t_run_lists.busy ? nested : t_run_lists;
  struct Release {  // empties the list (it holds nodes) and frees the per-thread one
    RunLists& l;
    bool was_busy;
    ~Release() {
      l.outputs.clear();
      l.busy = was_busy;
    }
  } release{lists, lists.busy};
  lists.busy = true;
  // The outputs' live nodes, and fresh nodes for dropped outputs (the primitive fills them too;
  // nobody else sees them, so what is done below to every node changes nothing for those).
  std::vector<Array>& outputs = lists.outputs;
  outputs.reserve(op->outputs.size());
  for (size_t i = 0; i < op->outputs.size(); ++i) {
    if (auto n = op->outputs[i].lock()) {
      outputs.push_back(array_of(std::move(n)));
    } else {
      // A dropped output still needs a node for the primitive to fill.
      n = std::make_shared<ArrayNode>();
      n->dtype = op->dtypes[i];
      n->shape = op->shapes[i];
      n->strides = row_major_strides(op->shapes[i]);
      n->device = op->device;
      outputs.push_back(array_of(std::move(n)));
    }
  }
  try {
    if (op->device.type == Device::Type::gpu)
      op->primitive->eval_gpu(op->inputs, outputs);
    else
      op->primitive->eval_cpu(op->inputs, outputs);
    for (auto& o : outputs)
      if (!node_of(o)->buffer)
        throw Error(op->primitive->label(),
                    op->primitive->label() + " did not produce all of its outputs");
  } catch (...) {
    // Leave the outputs pending (not half-materialized) so state stays consistent, and remember
    // the error: reading these outputs again reports it without running the primitive again.
    for (auto& o : outputs) node_of(o)->buffer.reset();
    if (fails_for_good(std::current_exception())) {
      op->error = std::current_exception();
      std::vector<Array> inputs;  // released after the graph mutex (below)
      std::lock_guard lock(graph_mu());
      inputs.swap(op->inputs);
    }
    throw;
  }
  // The inputs are released after the graph mutex: one may hold the last reference to memory
  // imported from Python, whose release takes the GIL, while a Python thread holding the GIL
  // waits for the graph mutex (`array.shape` of a lazy array: Array::is_evaluated).
  std::vector<Array> inputs;
  std::lock_guard lock(graph_mu());
  for (auto& o : outputs) node_of(o)->pending.reset();
  inputs.swap(op->inputs);
}

// Runs a GPU op with the backend's current stream set to the op's stream.
ALLOY_HOT void run_on_gpu_stream(const std::shared_ptr<PendingOp>& op, void* stream) {
  if (!stream) return run_pending(op);
  Backend* gpu = &gpu_of(op->device.index);
  gpu->set_current_stream(stream);
  try {
    run_pending(op);
  } catch (...) {
    gpu->set_current_stream(nullptr);
    throw;
  }
  gpu->set_current_stream(nullptr);
}

struct Scheduled {
  std::shared_ptr<PendingOp> op;
  std::vector<std::shared_ptr<OpDone>> deps;  // of inputs produced by handed-off ops
};

// The walk of scheduler::pending_ops; the caller holds graph_mu().
std::vector<std::shared_ptr<PendingOp>> pending_ops_locked(
    const std::vector<Array>& roots, const std::function<bool(const PendingOp&)>& skip,
    const char* empty_message) {
  std::vector<std::shared_ptr<PendingOp>> order;
  std::unordered_set<const PendingOp*> seen;
  struct Frame {
    std::shared_ptr<PendingOp> op;
    size_t next = 0;
  };
  std::vector<Frame> stack;
  auto push = [&](const Array& a) {
    if (!a.valid()) throw std::invalid_argument(empty_message);
    auto& p = node_of(a)->pending;
    if (p && !skip(*p) && seen.insert(p.get()).second) stack.push_back({p, 0});
  };
  for (auto& a : roots) {
    push(a);
    while (!stack.empty()) {
      auto& f = stack.back();
      if (f.next < f.op->inputs.size()) {
        push(f.op->inputs[f.next++]);
        continue;
      }
      order.push_back(std::move(f.op));
      stack.pop_back();
    }
  }
  return order;
}

// Ops below `arrays` not handed to a stream yet, in dependency order, each given its OpDone.
std::vector<Scheduled> collect(const std::vector<Array>& arrays) {
  std::lock_guard lock(graph_mu());
  std::vector<Scheduled> order;
  for (auto& op : pending_ops_locked(
           arrays, [](const PendingOp& p) { return p.done != nullptr; },
           "eval: invalid (empty) array"))
    order.push_back({std::move(op), {}});
  for (auto& s : order) {
    for (auto& in : s.op->inputs) {
      auto& p = node_of(in)->pending;
      if (p && p->done) s.deps.push_back(p->done);
    }
    s.op->done = std::make_shared<OpDone>();
  }
  return order;
}

// An op that ran (or failed) on the calling thread: no one needs to wait for it any more; a
// failure leaves it to be reported (op->error) or retried by the next evaluation.
void finish_inline(const std::shared_ptr<PendingOp>& op, std::exception_ptr e) {
  std::shared_ptr<OpDone> done;
  {
    std::lock_guard lock(graph_mu());
    done = std::exchange(op->done, nullptr);
  }
  if (done) done->finish(std::move(e));
}

void dispatch(std::vector<Scheduled>& order, bool waiting) {
  for (size_t i = 0; i < order.size(); ++i) {
    auto& [op, deps] = order[i];
    StreamState& st = state_of(op->stream);
    // Events on the GPU streams of this op's GPU inputs (enqueued already: a GPU op is done
    // once enqueued), for the op run here.
    std::vector<std::pair<Backend*, std::shared_ptr<void>>> gpu_events;
    try {
      if (op->device.type == Device::Type::gpu) {
        for (auto& d : deps) {
          if (auto e = d->wait_interruptible())
            std::rethrow_exception(e);  // CPU inputs: on the host
          // (An event of another GPU's stream works here too: CUDA orders across devices.)
          if (d->gpu && (d->gpu_stream != st.gpu || d->gpu_index != op->device.index))
            gpu_of(op->device.index)
                .stream_wait(st.gpu, gpu_of(d->gpu_index).record_event(d->gpu_stream));
        }
        run_on_gpu_stream(op, st.gpu);
        op->done->gpu = true;
        op->done->gpu_stream = st.gpu;
        op->done->gpu_index = op->device.index;
        op->done->finish(nullptr);
        continue;
      }
      bool deps_done = true;
      for (auto& d : deps) {
        std::unique_lock lock(d->mu);
        if (d->finished && d->gpu) {
          lock.unlock();
          if (d->error) std::rethrow_exception(d->error);
          Backend& g = gpu_of(d->gpu_index);
          gpu_events.emplace_back(&g, g.record_event(d->gpu_stream));
          continue;
        }
        deps_done &= d->finished && !d->error;
      }
      if (waiting && deps_done && st.idle()) {
        for (auto& [g, ev] : gpu_events) g->event_synchronize(ev);
        run_pending(op);
        finish_inline(op, nullptr);
        continue;
      }
    } catch (...) {
      auto e = std::current_exception();
      finish_inline(op, e);
      for (size_t j = i + 1; j < order.size(); ++j) finish_inline(order[j].op, e);
      throw;
    }
    // Hand the op to the stream's worker: it waits for the inputs, then runs it.
    st.submit([op = op, deps = deps, &st] {
      std::exception_ptr e;
      try {
        for (auto& d : deps) {
          if (auto de = d->wait()) std::rethrow_exception(de);
          // A GPU input: wait for its stream's work so far (at least the producer).
          if (d->gpu) {
            Backend& g = gpu_of(d->gpu_index);
            g.event_synchronize(g.record_event(d->gpu_stream));
          }
        }
        run_pending(op);
      } catch (...) {
        e = std::current_exception();
        st.record_error(e);
      }
      // Keep the OpDone (and its error) on the op: later reads of its outputs report the error.
      op->done->finish(e);
    });
  }
}

}  // namespace

namespace scheduler {

bool is_ready(const ArrayNode& node) {
  std::lock_guard lock(graph_mu());
  return !node.pending && node.buffer;
}

std::vector<std::shared_ptr<PendingOp>> pending_ops(
    const std::vector<Array>& roots, const std::function<bool(const PendingOp&)>& skip,
    const char* empty_message) {
  std::lock_guard lock(graph_mu());
  return pending_ops_locked(roots, skip, empty_message);
}

std::shared_ptr<PendingOp> pending_of(const ArrayNode& node) {
  std::lock_guard lock(graph_mu());
  return node.pending;
}

void* gpu_handle(const Stream& s) {
  return state_of(s).gpu;
}

Stream wrap_gpu_stream(void* handle, int gpu_index) {
  Device gpu = Device::gpu(gpu_index);
  check_device(gpu, "cuda::stream_from_handle");
  if (!handle) return default_stream(gpu);
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (auto& st : r.streams)
      if (st->gpu == handle) return st->stream;
  }
  gpu_of(gpu_index).register_stream(handle);
  return add_stream(gpu, handle);
}

}  // namespace scheduler

ALLOY_HOT Stream default_stream(Device device) {
  Registry& r = registry();
  if (device.index >= 0 && device.index < (device.type == Device::Type::cpu ? 1 : kMaxGpus)) {
    int i = r.default_index[slot(device)].load(std::memory_order_acquire);
    if (i >= 0) return Stream(i, device);
  }
  check_device(device, "default_stream");
  std::lock_guard lock(r.mu);
  int i = r.default_index[slot(device)].load();
  if (i >= 0) return Stream(i, device);
  auto st = std::make_unique<StreamState>();
  st->stream = Stream(static_cast<int>(r.streams.size()), device);
  r.streams.push_back(std::move(st));
  publish(r, *r.streams.back());
  r.default_index[slot(device)].store(r.streams.back()->stream.index, std::memory_order_release);
  return r.streams.back()->stream;
}

void set_default_stream(Stream s) {
  state_of(s);  // known
  registry().default_index[slot(s.device)].store(s.index, std::memory_order_release);
}

Stream new_stream(Device device) {
  check_device(device, "new_stream");
  void* gpu = device.type == Device::Type::gpu ? gpu_of(device.index).create_stream() : nullptr;
  return add_stream(device, gpu);
}

namespace {
thread_local bool t_has_context = false;
thread_local Stream t_context;
}  // namespace

std::optional<Stream> scheduler::context_stream() {
  if (!t_has_context) return std::nullopt;
  return t_context;
}

StreamContext::StreamContext(const StreamOrDevice& s) {
  Stream next = to_stream(s);
  had_previous_ = t_has_context;
  previous_ = t_context;
  t_context = next;
  t_has_context = true;
}

StreamContext::~StreamContext() {
  t_has_context = had_previous_;
  t_context = previous_;
}

Stream to_stream(const StreamOrDevice& s) {
  if (auto* st = std::get_if<Stream>(&s)) return *st;
  if (auto* d = std::get_if<Device>(&s)) return default_stream(*d);
  if (t_has_context) return t_context;
  return default_stream(default_device());
}

void synchronize(Stream s) {
  StreamState& st = state_of(s);
  std::exception_ptr e = st.drain();
  if (s.device.type == Device::Type::gpu) gpu_of(s.device.index).synchronize_stream(st.gpu);
  if (e) std::rethrow_exception(e);
}

void synchronize(std::optional<Device> device) {
  Device d = device.value_or(default_device());
  std::vector<StreamState*> states;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    for (auto& st : r.streams)
      if (st->stream.device == d) states.push_back(st.get());
  }
  std::exception_ptr first;
  for (auto* st : states)
    if (auto e = st->drain(); e && !first) first = e;
  if (d.type == Device::Type::gpu)
    if (auto* gpu = gpu_backend(d.index)) gpu->synchronize();
  if (first) std::rethrow_exception(first);
}

namespace {
// The common case of one array whose op reads only materialized inputs on a stream with nothing
// queued (a kernel call on arrays that exist): runs it without building an order. False when
// the array needs the general path.
ALLOY_HOT bool eval_leaf(const Array& a) {
  if (!a.valid()) return false;
  std::shared_ptr<PendingOp> op;
  bool leaf = true;
  {
    std::lock_guard lock(graph_mu());
    op = node_of(a)->pending;
    if (!op) return true;
    leaf = !op->done;
    for (auto& in : op->inputs) leaf &= in.valid() && !node_of(in)->pending;
  }
  if (!leaf) return false;
  StreamState& st = state_of(op->stream);
  if (op->device.type == Device::Type::gpu) {
    run_on_gpu_stream(op, st.gpu);
    return true;
  }
  if (!st.idle()) return false;
  run_pending(op);
  return true;
}
}  // namespace

ALLOY_HOT void scheduler::eval_one(const Array& a) {
  if (!eval_leaf(a)) eval(std::vector<Array>{a});
}

void eval(const std::vector<Array>& arrays) {
  if (arrays.size() == 1 && eval_leaf(arrays[0])) return;
  auto order = collect(arrays);
  dispatch(order, /*waiting=*/true);
  for (auto& a : arrays) {
    std::shared_ptr<OpDone> done;
    {
      std::lock_guard lock(graph_mu());
      auto& p = node_of(a)->pending;
      if (!p) continue;
      if (!p->done) {
        // Not handed off: it failed on this thread earlier in this call (already thrown) or
        // is a retry candidate; run the usual path for its error.
        if (p->error) std::rethrow_exception(p->error);
        continue;
      }
      done = p->done;
    }
    if (auto e = done->wait_interruptible()) std::rethrow_exception(e);
  }
}

bool eval_inline(const Array& a) {
  // ALLOY_EVAL_INLINE=0: never (for measurements); read once, with core/env.h's grammar.
  static const bool enabled = env::flag("ALLOY_EVAL_INLINE", true);
  if (!enabled || !a.valid()) return false;
  std::shared_ptr<PendingOp> op;
  {
    std::lock_guard lock(graph_mu());
    op = node_of(a)->pending;
    if (!op) return true;
    if (op->done || op->error || op->device.type != Device::Type::cpu) return false;
    for (auto& in : op->inputs)
      if (!in.valid() || node_of(in)->pending) return false;
  }
  if (!state_of(op->stream).idle() || !op->primitive->runs_inline(op->inputs)) return false;
  run_pending(op);
  return true;
}

void async_eval(const std::vector<Array>& arrays) {
  auto order = collect(arrays);
  dispatch(order, /*waiting=*/false);
}

}  // namespace alloy
