#include "msl/target.h"

#include <fmt/format.h>

#include <algorithm>

#include "prelude/cuda/abi.h"

namespace alloy::msl {
namespace {

// Arguments of the kernel call in an entry: buffers cast to the parameter's type, attributes
// from the thread's ids (`t`), threadgroup parameters from the target's group storage.
// `buffer(n)` is the expression of [[buffer(n)]]'s address.
template <class BufferExpr>
std::string call_args(const KernelEntry& k, BufferExpr buffer, const char* bytes, const char* ctx,
                      const char* tg_param) {
  std::string args;
  for (size_t i = 0; i < k.params.size(); ++i) {
    const auto& p = k.params[i];
    if (i) args += ", ";
    switch (p.kind) {
      case ParamKind::buffer:
        args += fmt::format("::alloy_entry::arg<{0}>(&{1}, {2}, {3}[{4}], {4}, {5})", i, k.function,
                            buffer(p.index), bytes, p.index, ctx);
        break;
      case ParamKind::threadgroup:
        args += fmt::format("::alloy_entry::arg<{}>(&{}, {}, 0, 0, nullptr)", i, k.function,
                            fmt::format(fmt::runtime(tg_param), p.index));
        break;
      case ParamKind::attribute:
        args += fmt::format("t.{}()", p.attribute);
        break;
    }
  }
  return args;
}

// CUDA entries bind a parameter without instantiating the binding templates of prelude/entry.h
// (they cost a small kernel's NVRTC compile milliseconds): a pointer or reference buffer through
// alloy_entry::ptr_arg/ref_arg (one conversion per type), an attribute of a known type as plain
// code. Robust pointers and attributes of other declared types keep the templates
// (alloy_entry::arg, attr_to_param), which the prelude selection then includes (ENTRY_ARGS).

// The element type and width of an attribute's declared type: "unsigned int", 3 for "uint3";
// empty when the type is not one of Metal's attribute spellings.
std::pair<std::string, int> attribute_type(std::string type) {
  if (type.rfind("const ", 0) == 0) type = type.substr(6);
  while (!type.empty() && type.back() == ' ') type.pop_back();
  static const std::pair<const char*, const char*> kScalars[] = {
      {"uint", "unsigned int"}, {"ushort", "unsigned short"}, {"int", "int"}, {"short", "short"}};
  for (auto [name, elem] : kScalars) {
    std::string n = name;
    if (type == n) return {elem, 1};
    if (type == n + "2") return {elem, 2};
    if (type == n + "3") return {elem, 3};
  }
  if (type == "unsigned" || type == "unsigned int" || type == "uint32_t")
    return {"unsigned int", 1};
  if (type == "unsigned short" || type == "uint16_t") return {"unsigned short", 1};
  return {"", 0};
}

std::string cuda_attribute(const KernelParam& p) {
  auto [elem, n] = attribute_type(p.type);
  std::string v = fmt::format("t.{}()", p.attribute);
  if (n == 0) return fmt::format("::alloy_entry::attr_to_param({})", v);
  if (n == 1) return fmt::format("static_cast<{}>({}.x)", elem, v);
  // The parameter is declared as alloy_attr_<spelling> (msl/translate.cpp, prelude/entry.h):
  // Metal's vector, or with no vector values in the translation its plain components.
  if (n == 3 && elem == "unsigned int") return fmt::format("ALLOY_ATTR_UINT3({})", v);
  return fmt::format("ALLOY_ATTR_VEC({}, {}, {})", elem, n, v);
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string cpu_threadgroup(const std::string& type, const std::string& name,
                            const std::string& dims, int slot, int) {
  // A reference to storage in the group's arena: the first thread to get here allocates it,
  // the group's other threads (loop iterations or fibers) get the same memory.
  return fmt::format(
      "typedef {0} alloy_tg_t{3} {2}; alloy_tg_t{3}& {1} = "
      "*static_cast<alloy_tg_t{3}*>(::alloy_target::tg_slot({3}, sizeof(alloy_tg_t{3}), "
      "alignof(alloy_tg_t{3})));",
      type, name, dims, slot);
}

std::string cuda_threadgroup(const std::string& type, const std::string& name,
                             const std::string& dims, int slot, int prev_slot) {
  // The object's end in the kernel's threadgroup frame (after the previous declaration's) picks
  // its place at compile time: a __shared__ variable, or past Metal's 32 KiB (CUDA allows 48 KiB
  // of static shared memory per block) the top of the dynamic shared memory (tg_storage in
  // prelude/cuda/target.h).
  std::string prev = prev_slot < 0 ? "0u" : fmt::format("alloy_tg_end{}", prev_slot);
  return fmt::format(
      "typedef {0} alloy_tg_t{3} {2}; constexpr unsigned alloy_tg_end{3} = "
      "::alloy_target::tg_end<alloy_tg_t{3}>({4}); alloy_tg_t{3}& {1} = "
      "::alloy_target::tg_storage<alloy_tg_t{3}, alloy_tg_end{3}, {3}>();",
      type, name, dims, slot, prev);
}

std::string cpu_unroll(const std::string& count) {
  return "#pragma GCC unroll " + (count.empty() ? std::string("16") : count);
}
std::string cuda_unroll(const std::string& count) {
  return count.empty() ? "#pragma unroll" : "#pragma unroll " + count;
}

// A loop-mode kernel whose threads cannot tell which threadgroup they are in: its attributes are
// the position in the grid and grid-wide values only, it has no threadgroup parameter, and robust
// mode (which reports the group of an out-of-range access) is off. Its alloy_groups_<i> runs
// consecutive groups as one loop (alloy_entry::cpu_for_each_run).
bool merged_groups(const KernelEntry& k, const TranslateOptions& opt) {
  if (opt.robust) return false;
  static const char* const kGridWide[] = {"thread_position_in_grid",
                                          "threads_per_grid",
                                          "grid_size",
                                          "grid_origin",
                                          "dispatch_threads_per_threadgroup",
                                          "threadgroups_per_grid",
                                          "threads_per_simdgroup",
                                          "thread_execution_width",
                                          "dispatch_simdgroups_per_threadgroup",
                                          "dispatch_quadgroups_per_threadgroup"};
  for (const auto& p : k.params) {
    if (p.kind == ParamKind::threadgroup) return false;
    if (p.kind != ParamKind::attribute) continue;
    bool ok = false;
    for (const char* a : kGridWide) ok = ok || p.attribute == a;
    if (!ok) return false;
  }
  return true;
}

std::string cpu_entry(const KernelEntry& k, size_t i, const TranslateOptions& opt) {
  // Buffers and threadgroup parameters are bound once per group, before the thread loop: locals
  // that the kernel's stores cannot alias, so the loop stays a plain counted loop. Attributes are
  // computed per thread inside it.
  std::string bind;
  std::vector<std::string> names;
  for (size_t j = 0; j < k.params.size(); ++j) {
    const auto& p = k.params[j];
    if (p.kind == ParamKind::attribute) {
      names.push_back(fmt::format("t.{}()", p.attribute));
      continue;
    }
    std::string expr =
        p.kind == ParamKind::buffer
            ? fmt::format(
                  "::alloy_entry::arg<{0}>(&{1}, L->buffers[{2}], L->buffer_bytes[{2}], "
                  "{2}, g)",
                  j, k.function, p.index)
            : fmt::format("::alloy_entry::arg<{0}>(&{1}, g->tg_params[{2}], 0, 0, nullptr)", j,
                          k.function, p.index);
    bind += fmt::format("  decltype(auto) alloy_a{} = {};\n", j, expr);
    names.push_back(fmt::format("alloy_a{}", j));
  }
  std::string args;
  for (size_t j = 0; j < names.size(); ++j) args += (j ? ", " : "") + names[j];
  std::string thread_args = call_args(
      k, [](int n) { return fmt::format("L->buffers[{}]", n); }, "L->buffer_bytes", "g",
      "g->tg_params[{}]");
  // The per-thread entry (fiber mode calls it; the other modes compile a stub): `body` is its
  // code.
  auto thread_entry = [&](const std::string& body) {
    return fmt::format(
        "extern \"C\" ALLOY_CPU_EXPORT void alloy_thread_{0}(const alloy_cpu_launch* L, "
        "alloy_cpu_group* g, unsigned lid) {{\n{1}}}\n",
        i, body);
  };
  const std::string thread_call = fmt::format(
      "  ::alloy_target::set_group(g);\n"
      "  const ::alloy_entry::thread_ids t = ::alloy_entry::cpu_ids(L, g, lid);\n"
      "  {0}({1});\n",
      k.function, thread_args);
  if (k.split) {
    // Split mode (msl/regions.h): the kernel itself loops over the group's threads region by
    // region; it is called once per group with thread 0's attribute values (its uniform ones
    // are the group's) and the launch and group.
    std::string split_args = args;
    split_args += std::string(args.empty() ? "" : ", ") + "L, g";
    return fmt::format(
               "extern \"C\" ALLOY_CPU_EXPORT ALLOY_CPU_LOOP_ENTRY void alloy_group_{0}(const "
               "alloy_cpu_launch* L, alloy_cpu_group* g) {{\n"
               "  ::alloy_target::set_group(g);\n"
               "{3}"
               "  const ::alloy_entry::thread_ids t = ::alloy_entry::cpu_ids(L, g, 0u);\n"
               "  {1}({2});\n"
               "}}\n",
               i, k.function, split_args, bind) +
           thread_entry(
               "  ALLOY_THROW_LOGIC_ERROR(\"alloy: internal: thread entry of a split kernel\");\n");
  }
  if (k.fibers) {
    // The executor runs every group of this translation as fibers: no loop to compile.
    return fmt::format(
               "extern \"C\" ALLOY_CPU_EXPORT void alloy_group_{0}(const alloy_cpu_launch*, "
               "alloy_cpu_group*) {{\n"
               "  ALLOY_THROW_LOGIC_ERROR(\"alloy: internal: loop entry of a kernel that runs as "
               "fibers\");\n"
               "}}\n",
               i) +
           thread_entry(thread_call);
  }
  // Loop mode never calls the per-thread entry (the executor runs a translation's groups as
  // fibers only when the translation says so, and then it has no loop entry): compiled as a
  // stub, since the scalar copy of the kernel cost g++ ~10 ms per compile. The typed analysis
  // (src/typed, which defines ALLOY_TYPED_ANALYSIS) walks each kernel's calls from this entry,
  // so it sees the real body.
  const std::string thread_stub =
      thread_entry("#ifdef ALLOY_TYPED_ANALYSIS\n" + thread_call +
                   "#else\n"
                   "  __builtin_trap();  // unreachable: see msl/target.cpp cpu_entry\n"
                   "#endif\n");
  if (merged_groups(k, opt)) {
    // A kernel that cannot tell its group gets alloy_groups_<i>: a chunk of groups per call,
    // each x row of them as one thread loop (alloy_entry::cpu_for_each_run), so the group
    // pointer, the arguments and the executor's per-group work are paid once per chunk and the
    // loop's setup, alias check and vector tail once per row of groups. (A loop over the groups
    // around each group's own thread loop was measured ~6% slower than one call per group for
    // `exp` f16: kernels that read their group keep one call per group.) Its alloy_group_<i>
    // (which the executor calls only to locate a fault inside a chunk) runs its one group
    // through alloy_groups_<i>: one vectorised loop to compile, not two.
    //
    // With outputs that may be streamed (KernelEntry::stream_params), a copy of the loop comes
    // first: in a 1D grid whose output is at least g->stream_min_bytes (the executor's
    // threshold), each run of groups goes in blocks of alloy_block threads; the kernel writes a
    // block's elements into alloy_stage<j> (L1-resident: the output's pointer is moved so that
    // index x0 lands at its start) and cpu_stream_store copies them to the output with
    // non-temporal stores, which skip the read-for-ownership of a plain store. The call ends
    // with a store fence, so the stores are ordered before the executor reports the group done.
    // (One loop for both, its output pointer chosen per block between the staging block and the
    // output, was not vectorised by g++ 12: "no vectype" for the loads.)
    std::string streamed;
    if (!k.stream_params.empty()) {
      std::string types, stage, fields, redirect, store, on, sizes;
      std::string call = args;  // the streamed outputs through the block's pointers
      for (size_t j : k.stream_params) {
        const int b = k.params[j].index;
        types += fmt::format("  typedef __typeof__(alloy_a{0}[0]) alloy_sT{0};\n", j);
        sizes += fmt::format("{}sizeof(alloy_sT{})", sizes.empty() ? "" : " + ", j);
        stage += fmt::format(
            "  alignas(64) unsigned char alloy_stage{0}[alloy_block * sizeof(alloy_sT{0})];\n", j);
        fields += fmt::format(" alloy_sT{0}* p{0};", j);
        redirect += fmt::format(
            "{}(alloy_sT{}*)((unsigned long long)alloy_stage{} - (unsigned long long)x0 * "
            "sizeof(alloy_sT{}))",
            redirect.empty() ? "" : ", ", j, j, j);
        store += fmt::format(
            "    ::alloy_entry::cpu_stream_store(alloy_a{0}, x0, n, alloy_stage{0}, "
            "L->buffer_bytes[{1}]);\n",
            j, b);
        on += fmt::format("{}L->buffer_bytes[{}] >= g->stream_min_bytes", on.empty() ? "" : " || ",
                          b);
        // args names the output alloy_a<j>, followed by ", " or at the end.
        const std::string from = fmt::format("alloy_a{}", j);
        for (size_t pos = 0; (pos = call.find(from, pos)) != std::string::npos;) {
          const size_t e = pos + from.size();
          if (e == call.size() || call[e] == ',') {
            call.replace(pos, from.size(), fmt::format("alloy_p.p{}", j));
            break;
          }
          pos = e;
        }
      }
      streamed = fmt::format(
          "{1}"
          "  if (L->grid[1] == 1 && L->grid[2] == 1 && ({5})) {{\n"
          "  constexpr unsigned alloy_block = ::alloy_entry::cpu_stream_block({2});\n"
          "{3}"
          "  struct alloy_ptrs {{{4} }};\n"
          "  ::alloy_entry::cpu_for_each_run_blocks(L, g, alloy_first, alloy_count, "
          "alloy_block, [&](unsigned x0) ALLOY_CPU_INLINE_LAMBDA {{\n"
          "    return alloy_ptrs{{{6}}};\n"
          "  }}, [&](const ::alloy_entry::thread_ids& t, const alloy_ptrs& alloy_p) "
          "ALLOY_CPU_INLINE_LAMBDA {{\n"
          "    {0}({7});\n"
          "  }}, [&](unsigned x0, unsigned n) ALLOY_CPU_INLINE_LAMBDA {{\n"
          "{8}"
          "  }});\n"
          "  ::alloy_entry::cpu_stream_fence();\n"
          "  return;\n"
          "  }}\n",
          k.function, types, sizes, stage, fields, on, redirect, call, store);
    }
    return fmt::format(
               "extern \"C\" ALLOY_CPU_EXPORT ALLOY_CPU_LOOP_ENTRY void alloy_groups_{0}(const "
               "alloy_cpu_launch* L, alloy_cpu_group* g, uint64_t alloy_first, uint64_t "
               "alloy_count) {{\n"
               "  ::alloy_target::set_group(g);\n"
               "{3}{4}"
               "  ::alloy_entry::cpu_for_each_run(L, g, alloy_first, alloy_count, [&](const "
               "::alloy_entry::thread_ids& t) ALLOY_CPU_INLINE_LAMBDA {{\n"
               "    {1}({2});\n"
               "  }});\n"
               "}}\n"
               "extern \"C\" ALLOY_CPU_EXPORT void alloy_group_{0}(const alloy_cpu_launch* L, "
               "alloy_cpu_group* g) {{\n"
               "  alloy_groups_{0}(L, g, g->group_pos[0] + (uint64_t)L->groups[0] * "
               "(g->group_pos[1] + (uint64_t)L->groups[1] * g->group_pos[2]), 1);\n"
               "}}\n",
               i, k.function, args, bind, streamed) +
           thread_stub;
  }
  // Other loop-mode kernels: the group's threads as one loop (alloy_entry::cpu_for_each_thread)
  // with the kernel and everything it calls inlined (flatten), for the host compiler to
  // vectorise. The library is built with hidden visibility and no semantic interposition, so no
  // call goes through the PLT. Robust mode records the running thread for out-of-range reports.
  return fmt::format(
             "extern \"C\" ALLOY_CPU_EXPORT ALLOY_CPU_LOOP_ENTRY void alloy_group_{0}(const "
             "alloy_cpu_launch* L, alloy_cpu_group* g) {{\n"
             "  ::alloy_target::set_group(g);\n"
             "{3}"
             "  ::alloy_entry::cpu_for_each_thread(L, g, [&](const ::alloy_entry::thread_ids& t) "
             "ALLOY_CPU_INLINE_LAMBDA {{\n"
             "{4}"
             "    {1}({2});\n"
             "  }});\n"
             "}}\n",
             i, k.function, args, bind, opt.robust ? "    g->current = t.lid;\n" : "") +
         thread_stub;
}

std::string cuda_entry(const KernelEntry& k, size_t i, const TranslateOptions& opt) {
  // Buffers are restrict parameters (param_buffers), small ones may sit in the parameter block,
  // the rest come from L. Only robust pointers need the launch's address (for their reports);
  // __grid_constant__ lets them take it without copying the parameter block to local memory.
  std::string params;
  for (int n : k.param_buffers) {
    bool is_const = false;
    for (auto& p : k.params)
      if (p.kind == ParamKind::buffer && p.index == n) is_const = p.is_const;
    params += fmt::format(", {}void* __restrict__ alloy_b{}", is_const ? "const " : "", n);
  }
  auto buffer = [&](int n) {
    if (contains(k.param_buffers, n)) return fmt::format("const_cast<void*>(alloy_b{})", n);
    if (contains(opt.block_buffers, n))
      return fmt::format("::alloy_entry::cuda_block_buffer(L, {})", n);
    if (contains(opt.small_buffers, n))
      return fmt::format("::alloy_entry::cuda_small_buffer(L, {})", n);
    return fmt::format("L.buffer({})", n);
  };
  std::string args;
  for (size_t j = 0; j < k.params.size(); ++j) {
    const auto& p = k.params[j];
    if (j) args += ", ";
    if (p.kind == ParamKind::attribute) {
      args += cuda_attribute(p);
      continue;
    }
    std::string mem = p.kind == ParamKind::buffer
                          ? buffer(p.index)
                          : fmt::format("(alloy_dyn_smem + L.tg_offset({}))", p.index);
    if (p.kind == ParamKind::buffer && opt.robust)
      args += fmt::format(
          "::alloy_entry::arg<{0}>(&{1}, {2}, L.buffer_bytes({3}), {3}, (void*)L.oob())", j,
          k.function, mem, p.index);
    else
      args += fmt::format("::alloy_entry::{}_arg{{{}}}", p.is_pointer ? "ptr" : "ref", mem);
  }
  std::string bounds =
      k.max_total_threads > 0 ? fmt::format("__launch_bounds__({}) ", k.max_total_threads) : "";
  std::string body;
  if (k.coarsen > 1) {
    // Several whole groups per block: straight-line calls the compiler can interleave (their
    // loads go ahead of the previous group's stores: restrict buffers). Elsewhere, one at a time
    // with Metal's partial-group ids and the grid check. ALLOY_QUICK_ENTRY (the CUDA backend's
    // quick first compile, src/backend/cuda/tiered.h) is launched one group per block
    // (Function::one_group_per_block): the body once and no loop, which NVVM and ptxas compile
    // in a fraction of the time, with the same results.
    // The quick entry reads the attributes that need no group sizes straight from CUDA's ids
    // (alloy_entry::cuda_grid_ids): NVVM compiles it faster than a filled thread_ids.
    std::string quick_ids =
        cuda_quick_grid_ids(k)
            ? "const ::alloy_entry::cuda_grid_ids t{L.head()};"
            : "const ::alloy_entry::thread_ids t = ::alloy_entry::cuda_ids_at(L, blockIdx.x, "
              "false);";
    body = fmt::format(
        "#ifdef ALLOY_QUICK_ENTRY\n"
        "  {3}\n"
        "  if (t.outside_grid()) return;\n"
        "  {1}({2});\n"
        "#else\n"
        "  const unsigned alloy_nb = gridDim.x;\n"
        "  if (::alloy_entry::cuda_groups_whole(L, {0})) {{\n"
        "#pragma unroll\n"
        "    for (unsigned alloy_k = 0; alloy_k < {0}; ++alloy_k) {{\n"
        "      const ::alloy_entry::thread_ids t =\n"
        "          ::alloy_entry::cuda_ids_at(L, blockIdx.x + alloy_k * alloy_nb, true);\n"
        "      {1}({2});\n"
        "    }}\n"
        "    return;\n"
        "  }}\n"
        "#pragma unroll 1\n"
        "  for (unsigned alloy_k = 0; alloy_k < {0}; ++alloy_k) {{\n"
        "    const unsigned alloy_gx = blockIdx.x + alloy_k * alloy_nb;\n"
        "    if (alloy_gx >= L.head().groups[0]) break;\n"
        "    const ::alloy_entry::thread_ids t = ::alloy_entry::cuda_ids_at(L, alloy_gx, false);\n"
        "    if (t.outside_grid()) continue;\n"
        "    {1}({2});\n"
        "  }}\n"
        "#endif\n",
        k.coarsen, k.function, args, quick_ids);
  } else {
    body = fmt::format(
        "  const ::alloy_entry::thread_ids t = ::alloy_entry::cuda_ids(L);\n"
        "  if (t.outside_grid()) return;  // dispatchThreads: only `grid` threads run the body\n"
        "  {}({});\n",
        k.function, args);
  }
  // The parameter block sized to this entry (prelude/cuda/abi.h); k.cuda_block is what the host
  // packs for it.
  const alloy_cuda_param_layout& blk = k.cuda_block;
  return fmt::format(
      "extern \"C\" __global__ void {0}alloy_entry_{1}(const __grid_constant__ "
      "alloy_cuda_params<{4}u, {5}u, {6}, {7}u> L{2}) {{\n"
      "  extern __shared__ __align__(16) unsigned char alloy_dyn_smem[];\n"
      "  (void)alloy_dyn_smem;\n"
      "{3}"
      "}}\n",
      bounds, i, params, body, blk.num_buffers, blk.num_tg, blk.robust ? "true" : "false",
      blk.inline_bytes);
}

// The prelude's 512-bit vector preference (cpu/target.h) is set again after its headers: a
// `#pragma GCC target` inside a precompiled prelude does not outlive the PCH (the kernel's own
// functions would get the compiler's 256-bit tuning on Intel hosts), while its macro does.
// reset_options first: successive target pragmas accumulate their strings, and a function the
// prelude declares under one string and the user defines under two would be a different
// (multiversioned) function: "ambiguating new declaration".
const TargetTraits kCpu{"cpu",
                        "#include \"metal_stdlib.h\"\n#include \"entry.h\"\n"
                        "#ifdef ALLOY_CPU_WIDE_VECTORS\n#pragma GCC reset_options\n"
                        "#pragma GCC target(\"prefer-vector-width=512\")\n#endif\n",
                        cpu_threadgroup, cpu_unroll, cpu_entry};
const TargetTraits kCuda{"cuda", "#include \"metal_stdlib.h\"\n#include \"entry.h\"\n",
                         cuda_threadgroup, cuda_unroll, cuda_entry};

}  // namespace

bool cuda_quick_grid_ids(const KernelEntry& k) {
  if (k.coarsen <= 1) return false;
  for (const auto& p : k.params)
    if (p.kind == ParamKind::attribute && p.attribute != "thread_position_in_grid" &&
        p.attribute != "threads_per_grid" && p.attribute != "grid_size" &&
        p.attribute != "thread_position_in_threadgroup" &&
        p.attribute != "threadgroup_position_in_grid")
      return false;
  return true;
}

alloy_cuda_param_layout cuda_block_of(const KernelEntry& k, const TranslateOptions& opt) {
  uint32_t buffers = 0, tg_params = 0, inline_bytes = 0;
  for (const auto& p : k.params) {
    if (p.kind == ParamKind::buffer) {
      buffers = std::max<uint32_t>(buffers, static_cast<uint32_t>(p.index) + 1);
      if (contains(opt.small_buffers, p.index) || contains(opt.block_buffers, p.index))
        inline_bytes = ALLOY_CUDA_INLINE_BYTES;
    } else if (p.kind == ParamKind::threadgroup) {
      tg_params = std::max<uint32_t>(tg_params, static_cast<uint32_t>(p.index) + 1);
    }
  }
  return alloy_cuda_layout(buffers, tg_params, opt.robust, inline_bytes);
}

const TargetTraits& target_traits(Target t) {
  return t == Target::cuda ? kCuda : kCpu;
}

}  // namespace alloy::msl
