// NVRTC, loaded at run time with dlopen: compiles CUDA C++ source (plus in-memory headers) to a
// cubin for one GPU architecture. Needs no GPU and no driver, so kernels can be compiled (and the
// compiler's diagnostics checked) on machines without CUDA hardware.
#pragma once
#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace alloy::cuda::nvrtc {

/// NVRTC failed to compile a program; log() is NVRTC's output ("<program>(LINE): error: ...").
class CompileFailure : public std::runtime_error {
 public:
  CompileFailure(const std::string& what, std::string log)
      : std::runtime_error(what), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

struct Version {
  int major = 0;
  int minor = 0;
};

/// True when an NVRTC library was found and loaded. Searched, in order: $ALLOY_NVRTC_LIBRARY (a
/// file), $CUDA_HOME and $CUDA_PATH (lib64/, lib/), /usr/local/cuda (lib64/), the sonames
/// libnvrtc.so.13, libnvrtc.so.12 and libnvrtc.so on the loader's path, and the Python wheels
/// nvidia-cuda-nvrtc (site-packages/nvidia/cu13/lib, nvidia/cuda_nvrtc/lib) of the active
/// virtualenv/conda env, the user's and the system's Python, and the site-packages that hold
/// Alloy itself. Never throws.
bool available();
/// Why available() is false ("" when it is true): every place tried.
const std::string& load_error();
/// The file that was loaded.
const std::string& library_path();
/// Identifies the NVRTC library without loading it (loading takes milliseconds, more than a
/// warm start from the disk cache may): "nvrtc:<real path>:<size>:<mtime>" of the library file that
/// available() loads (or would load). That file pins NVRTC's version, so cache keys include it.
/// Loads NVRTC only when it can be found through the loader's path alone (a soname). Throws
/// alloy::Error when NVRTC is not available.
const std::string& compiler_id();
/// NVRTC's version; throws alloy::Error when NVRTC is not available.
Version version();
/// Architectures NVRTC can emit cubins for (e.g. 75, 80, ..., 90, 100, ...), ascending.
const std::vector<int>& supported_archs();

/// What to compile for: a cubin for `sm_XY` when NVRTC knows that architecture, else PTX for the
/// newest `compute_XY` NVRTC knows below it (the driver then compiles that PTX for the device).
struct Target {
  std::string arch;   // "sm_90" or "compute_89": the value of --gpu-architecture
  bool cubin = true;  // false: the output is PTX text
};
/// The target for a device of compute capability major.minor; throws alloy::Error when NVRTC
/// knows no architecture at or below it.
Target target_for(int cc_major, int cc_minor);

struct Header {
  const char* name;  // as written in #include "..."
  const char* text;  // NUL-terminated
};

/// NVVM without optimisation (the quick first compile's, src/backend/cuda/tiered.h): a hint that
/// compile() drops when NVRTC rejects it (an option NVRTC passes to NVVM, not in its own list).
inline constexpr std::string_view kNvvmUnoptimised = "-Xnvvm=-opt=0";

/// NVRTC's automatic precompiled header (NVRTC 12.8+): the options that let a compile of `source`
/// make, or reuse, a PCH of what its first non-directive line follows (for a translation: the
/// selection's #defines and the prelude's #includes, docs/performance.md, item 1, 2026-11-29
/// h-cudafirst3). NVRTC keeps one PCH file per distinct directive prefix and option set, in a
/// folder of its own under $TMPDIR (or /tmp) that it removes at exit; a PCH changes no
/// compiler output (only the front end's parse is skipped), so the options are not part of cache
/// keys. Empty (no PCH) at a prefix's first compile in this process (making a PCH costs that
/// compile more than it saves: its second compile makes it, later ones load it), when NVRTC is
/// older than 12.8, when ALLOY_NVRTC_PCH=0, or when this process has already asked for PCHs of
/// `limit` distinct (prefix, options) pairs (ALLOY_NVRTC_PCH=N sets it; default 16: each PCH
/// file is 8-14 MB). compile() drops them where NVRTC rejects them or fails over them.
std::vector<std::string> auto_pch_options(const std::string& source,
                                          const std::vector<std::string>& options);
/// What compile() gets for `source` with NVRTC's automatic PCH: the options to add (as
/// auto_pch_options) and, where not empty, the text to compile instead of `source` (the same
/// program). A CUDA translation's prelude core ends at a line of its own (msl::kPreludeCoreEnd),
/// so the core's PCH, made at the second compile of a core (prefix and options) in this process,
/// serves kernels of every math selection; a selection's own PCH (the whole prelude) is made at
/// its second compile once the core's is there, by compiling the text with that line moved after
/// the math functions' #defines and metal_stdlib.h (NVRTC then loads the core's PCH and saves the
/// longer prefix), and later compiles of the selection use that text and load it. Each PCH counts
/// towards the limit. Other sources: auto_pch_options, the text as it is.
struct AutoPch {
  std::vector<std::string> options;
  std::string source;
};
AutoPch auto_pch(const std::string& source, const std::vector<std::string>& options);
/// Whether a compile failed over the PCH in this process (e.g. NVRTC's PCH folder was removed
/// under it): compile() then compiled again without the PCH options, and auto_pch_options gives
/// none any more.
bool auto_pch_failed();
/// The options by which a compile asks for the automatic PCH (those auto_pch_options gives), or
/// none when this process makes no PCH (NVRTC before 12.8, ALLOY_NVRTC_PCH=0, a PCH failed). A
/// warm-up compile in a worker (prestart_workers) sends them.
std::vector<std::string> pch_request_options();
/// The first of auto_pch_options' options ("--pch").
inline constexpr std::string_view kAutoPch = "--pch";
/// `options` without auto_pch_options' options and `--pch-dir=...` (a compile that failed over the
/// PCH runs again so; worker_pch_options starts from it).
std::vector<std::string> without_pch_options(const std::vector<std::string>& options);
/// A worker process's options for a request (docs/nvrtc-workers.md, "The PCH in workers"):
/// `options` without auto_pch_options' options, and, when they were there (the runtime asks for
/// the PCH of this prefix) and `pch_dir` is not empty, the PCH options with `--pch-dir=<pch_dir>`
/// (auto_pch_options' key, limit and failure rule in this process, but the PCH made at the
/// worker's first compile of the prefix: the runtime asked, so it recurs): NVRTC then keeps
/// the PCH files in that folder, which the runtime that started the worker made and removes,
/// instead of one of its own that a worker's _exit would leave behind.
std::vector<std::string> worker_pch_options(const std::string& source,
                                            const std::vector<std::string>& options,
                                            const std::string& pch_dir);
/// Removes from `dir` the PCH folders of processes that are gone (`kill(pid, 0)` fails with
/// ESRCH): NVRTC's own (`__nvrtc_auto_pch_<pid>_<n>`, made for a process's automatic PCH and
/// removed only at its normal exit) and the workers' roots (`alloy-nvrtc-pch-<pid>`,
/// docs/nvrtc-workers.md). A process killed before its exit handlers leaves them: 8-14 MB a
/// prefix. Never this process's. Folders of live processes in another PID namespace that shares
/// `dir` look gone too: a compile that loses its PCH folder so compiles again without it.
void remove_dead_processes_pch_folders(const std::string& dir);
/// The same in temp_dir() (core/files.h), once per process: at the first auto_pch(). (The
/// workers' pool sweeps again before it makes its PCH root, also in a forked child.)
void remove_dead_processes_pch_folders_once();
/// The option prefix that names NVRTC's PCH folder ("--pch-dir=").
inline constexpr std::string_view kPchDir = "--pch-dir=";

/// Compiles `source` (named `program_name` in diagnostics) with `options` (which must include
/// --gpu-architecture=...; `-minimal` is dropped for NVRTC before 12.4, which does not know it;
/// kNvvmUnoptimised where NVRTC rejects it).
/// Returns the cubin (or PTX, when `cubin` is false). Throws CompileFailure with NVRTC's log when
/// the source does not compile, alloy::Error when NVRTC is not available or fails otherwise. `log`,
/// when given, receives the log (warnings) on success.
///
/// NVRTC runs one compile at a time per process (an internal lock), so while one compile runs in
/// this process, others go to worker processes (alloy-nvrtc-worker, docs/nvrtc-workers.md) that
/// run the same code (compile_in_process) and give the same image, log and errors. A worker that
/// fails makes that compile run here. ALLOY_NVRTC_WORKERS=0 keeps every compile in this process.
std::string compile(const std::string& source, const std::string& program_name,
                    const std::vector<Header>& headers, const std::vector<std::string>& options,
                    bool cubin, std::string* log = nullptr);

/// While one lives, the compiles this thread runs through compile() are background work that no
/// caller waits for (the tiered compile's full compile, CompiledModule::refine): with workers
/// available they go to an idle or a new worker, leaving the in-process slot to a caller that
/// waits (a worker's compile costs more: docs/nvrtc-workers.md); they run here only when every
/// worker is busy and the slot is free, when there are no workers, or when a worker fails. Scopes
/// nest; set it only around code that runs no other job (one the compile pool's CompileJob::get
/// might help with could be a caller's).
class BackgroundScope {
 public:
  BackgroundScope();
  ~BackgroundScope();
  BackgroundScope(const BackgroundScope&) = delete;
  BackgroundScope& operator=(const BackgroundScope&) = delete;

 private:
  bool outer_;
};
/// True inside a BackgroundScope on this thread.
bool in_background();

/// compile() in this process, whatever else runs (what a worker process runs).
std::string compile_in_process(const std::string& source, const std::string& program_name,
                               const std::vector<Header>& headers,
                               const std::vector<std::string>& options, bool cubin,
                               std::string* log = nullptr);

/// The compile that workers started ahead run first (prestart_workers): what loads NVRTC in each
/// and, with `pch`, makes its PCH of the source's directive prefix, so that the runtime's first
/// real compiles of that prefix and options find the worker warm.
struct WarmUp {
  std::string source;
  std::string program_name = "alloy_warm_up.cu";
  std::vector<std::pair<std::string, std::string>> headers;  // (name, text): in-memory headers
  std::vector<std::string> options;                          // --gpu-architecture=... included
  bool cubin = true;
  /// The worker makes the PCH of the source's prefix (the automatic PCH's options are added when
  /// this process's NVRTC has it; the worker's own rules apply: worker_pch_options).
  bool pch = true;
};

/// Starts the compile workers ahead (docs/nvrtc-workers.md, "Workers started ahead"): returns at
/// once; a thread of its own loads NVRTC, makes the warm-up with `make` (there: choosing the
/// architecture needs NVRTC, and the caller is not kept waiting for it), starts as many workers as
/// compiles could start (the limit, ALLOY_NVRTC_WORKERS, at most 8, less those alive) and has each
/// compile the warm-up; a worker that has done it is idle, as after any compile. `make` throwing
/// starts nothing. Nothing when ALLOY_NVRTC_PRESTART=0, when workers are off
/// or not found, when NVRTC is not available, or while an earlier call's thread still runs.
/// Compiles meanwhile follow the usual rules: a worker still warming counts as started, so a
/// compile that finds the in-process slot taken waits for it (or for the slot) rather than
/// starting another. A worker that fails its warm-up is ended; compiles start workers as before.
/// Never throws.
void prestart_workers(std::function<WarmUp()> make);
/// The same with a warm-up made already.
void prestart_workers(WarmUp warm_up);
/// Whether the settings ask for workers started ahead: ALLOY_NVRTC_PRESTART (env::flag, default
/// on) and ALLOY_NVRTC_WORKERS not 0. Read now, without loading NVRTC or looking for the worker;
/// false when either is malformed (the next compile raises the error).
bool prestart_wanted();

/// What the compile workers did in this process (counters since the start or reset_workers()).
struct WorkerStats {
  int max_workers = 0;       // the limit (0: workers off); known after the first compile
  std::string worker_path;   // the worker executable used ("" when none)
  std::string disabled_why;  // why there are no workers ("" when there are)
  long spawned = 0;          // workers started (handshake done)
  long worker_compiles = 0;  // compiles answered by a worker (successes and compile errors)
  long fallbacks = 0;        // compiles a worker failed (died, bad reply) that ran here instead
  long in_process = 0;       // compiles run in this process (fallbacks included)
  long background = 0;       // compiles in a BackgroundScope (wherever they ran)
  long background_in_process = 0;  // of them, those that ran here (fallbacks included)
  int peak_busy_workers = 0;       // most workers compiling at the same time
  int waiting_callers = 0;         // callers waiting for the slot or a worker now
  int waiting_background = 0;      // background compiles waiting now
  std::vector<int> live_pids;      // workers alive now
  std::string pch_dir;  // the workers' PCH folder, made at the first worker start ("": none yet)
  long prestarted = 0;  // workers started ahead (prestart_workers; also counted in `spawned`)
  long warm_ups = 0;    // of them, those whose warm-up compile was answered
  long warm_up_failures = 0;  // workers ended because their warm-up failed (died, garbled)
  int warming = 0;            // workers started ahead that have not finished their warm-up now
  bool prestarting = false;   // the thread of prestart_workers runs now
};
WorkerStats worker_stats();

namespace testing {
/// Makes the next compile that goes to a worker carry wire::RequestFlags `flags` (the worker then
/// exits instead of answering, or answers garbage).
void fault_next_worker_compile(unsigned flags);
/// While held, the in-process slot counts as busy: every compile goes to a worker.
void hold_in_process_slot(bool held);
/// Ends every worker (closes its socket, waits for it: no zombie), zeroes the counters and reads
/// ALLOY_NVRTC_WORKERS and ALLOY_NVRTC_WORKER again. Workers busy now end when they finish; so do
/// workers still warming (prestart_workers).
void reset_workers();
/// Waits until no thread of prestart_workers runs (every worker it started is warm or ended);
/// false when `timeout` passed first.
bool wait_for_prestart(std::chrono::milliseconds timeout);
}  // namespace testing

}  // namespace alloy::cuda::nvrtc
