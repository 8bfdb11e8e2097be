// CUDA entries' parameter blocks sized to the kernel (prelude/cuda/abi.h): what the host packs
// (cuda::ParamBlock, cuda::pack) against what NVRTC compiles the entries to. Without a GPU:
// - The size every entry declares (its PTX `.param .align 16 .b8 <entry>_param_0[SIZE]`) is the
//   size of the block the host packs for it (cuda::param_layout over the translator's
//   CompileEntry): metal_kernel calls with 1, 3 and many buffers, shape parameters and small
//   host inputs in the block, robust mode, a library with threadgroup parameters (plain and
//   robust), and the quick (tiered) variant of coarsened entries.
// - The offsets the host writes are the ones the device reads: a probe kernel per layout reads
//   one field of each part, and its PTX parameter loads (`ld.param ... [probe_N_param_0+OFF]`)
//   are at the host's offsets; static_asserts compare NVRTC's struct sizes with the host's.
// - cuda::pack writes what a launch description binds where the layout says, nothing past the
//   block's size.
// With a GPU: a metal_kernel with many buffers and shape parameters gives the CPU's values.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "alloy/alloy.h"
#include "alloy/errors.h"
#include "backend/cuda/jit.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/nvrtc.h"
#include "backend/cuda/tiered.h"
#include "core/backend.h"
#include "kernel/custom_kernel.h"
#include "kernel/program.h"
#include "random_values.h"

namespace alloy {
namespace {

// The declared byte size of `entry`'s first parameter in `ptx` (-1: not found).
long declared_block_size(const std::string& ptx, const std::string& entry) {
  std::regex re("\\.param \\.align 16 \\.b8 " + entry + "_param_0\\[(\\d+)\\]");
  std::smatch m;
  if (!std::regex_search(ptx, m, re)) return -1;
  return std::stol(m[1].str());
}

std::string ptx_of(const cuda::KernelSource& k) {
  auto img = cuda::compile(k, {"sm_90", false});
  return std::string(img.bytes.data());
}

Array host_array(const Shape& shape, uint64_t seed) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return Array::from_doubles(testing::random_values(static_cast<size_t>(n), seed, 2), shape,
                             float32, Device::cpu());
}

KernelCall call_1d(int n, int outputs = 1) {
  KernelCall call;
  call.output_shapes.assign(static_cast<size_t>(outputs), Shape{n});
  call.output_dtypes.assign(static_cast<size_t>(outputs), float32);
  call.grid = {n, 1, 1};
  call.threadgroup = {64, 1, 1};
  return call;
}

// A translation, its source map and what the entries' blocks should hold.
struct Case {
  std::string name;
  msl::Translation tr;
  kernel::SourceMap map;
  uint32_t buffers;  // expected buffer-table entries of entry 0
  bool robust;
  bool inline_data;  // entry 0 has inline data
  uint32_t tg_params;
};

Case metal_case(const std::string& name, const std::vector<std::string>& in_names,
                const std::vector<Array>& inputs, const std::string& body, uint32_t buffers,
                bool inline_data, bool robust = false, bool row_contiguous = true) {
  auto k = metal_kernel(name, in_names, {"out"}, body, "", row_contiguous, false, {}, robust);
  Case c{name, {}, {}, buffers, robust, inline_data, 0};
  c.tr = kernel::call_gpu_translation(k, inputs, call_1d(64), &c.map);
  return c;
}

const char* kLibrarySource = R"(#include <metal_stdlib>
using namespace metal;
[[kernel]] void scale(const device float* in [[buffer(0)]], device float* out [[buffer(1)]],
                      constant float& s [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  out[i] = in[i] * s;
}
[[kernel]] void partial_sums(const device float* in [[buffer(0)]], device float* out [[buffer(4)]],
                             threadgroup float* scratch [[threadgroup(0)]],
                             threadgroup float* more [[threadgroup(2)]],
                             uint lid [[thread_index_in_threadgroup]],
                             uint gid [[threadgroup_position_in_grid]]) {
  scratch[lid] = in[gid * 32 + lid];
  more[lid] = 2 * scratch[lid];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (lid == 0) out[gid] = scratch[0] + more[31];
}
)";

Case library_case(bool robust) {
  Case c{robust ? "library_robust" : "library", {}, {}, 3, robust, false, 0};
  c.map.label = c.name;
  c.map.msl = kLibrarySource;
  c.map.user_text = true;
  kernel::BindOptions bind;
  bind.robust = robust;
  c.tr = msl::translate(c.map.msl, kernel::translate_options(c.map, msl::Target::cuda, bind));
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // One buffer (the output), three (two inputs and the output), many (20 inputs).
  out.push_back(metal_case("pb_one", {}, {}, "out[thread_position_in_grid.x] = 1.5f;", 1, false));
  out.push_back(metal_case("pb_three", {"a", "b"}, {host_array({64}, 1), host_array({64}, 2)},
                           "uint i = thread_position_in_grid.x; out[i] = a[i] * b[i];", 3, false));
  std::vector<std::string> names;
  std::vector<Array> many;
  std::string body = "uint i = thread_position_in_grid.x; float s = 0;\n";
  for (int k = 0; k < 20; ++k) {
    names.push_back("x" + std::to_string(k));
    many.push_back(host_array({64}, 10 + k));
    body += "s += " + names.back() + "[i] * " + std::to_string(k + 1) + ";\n";
  }
  body += "out[i] = s;";
  out.push_back(metal_case("pb_many", names, many, body, 21, false));
  // Shape parameters in the block (the strided path reads inp_shape/inp_strides/inp_ndim).
  out.push_back(metal_case(
      "pb_shapes", {"inp"}, {host_array({8, 8}, 3)},
      "uint i = thread_position_in_grid.x; out[i] = inp[elem_to_loc(i, inp_shape, inp_strides, "
      "inp_ndim)] + inp_shape[0];",
      5, true, false, false));
  // A small host input (fewer than 8 elements) travels in the block.
  out.push_back(metal_case("pb_small", {"big", "few"}, {host_array({64}, 4), host_array({4}, 5)},
                           "uint i = thread_position_in_grid.x; out[i] = big[i] + few[i % 4];", 3,
                           true));
  out.push_back(metal_case("pb_robust", {"a", "b"}, {host_array({64}, 6), host_array({64}, 7)},
                           "uint i = thread_position_in_grid.x; out[i] = a[i] - b[i];", 3, false,
                           true));
  out.push_back(library_case(false));
  out.push_back(library_case(true));
  return out;
}

TEST(CudaParamBlock, EntriesDeclareTheBlockTheHostPacks) {
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  for (Case& c : cases()) {
    SCOPED_TRACE(c.name);
    CompileRequest r = kernel::compile_request(c.tr, c.map, "safe");
    ASSERT_FALSE(r.entries.empty());
    const alloy_cuda_param_layout l0 = r.entries[0].cuda_block;
    EXPECT_EQ(l0.num_buffers, c.buffers);
    EXPECT_EQ(l0.robust, c.robust ? 1u : 0u);
    EXPECT_EQ(l0.inline_bytes != 0, c.inline_data);
    // Smaller than the former fixed block (1504 bytes) unless it needs all of it.
    if (!c.robust) {
      EXPECT_LT(l0.size, 1504u);
    }
    std::string ptx = ptx_of(cuda::kernel_source(r));
    for (size_t i = 0; i < r.entries.size(); ++i) {
      const alloy_cuda_param_layout l = r.entries[i].cuda_block;
      EXPECT_EQ(declared_block_size(ptx, "alloy_entry_" + std::to_string(i)),
                static_cast<long>(l.size))
          << "entry " << i;
    }
    // The quick first compile of coarsened entries declares the same blocks.
    if (auto quick = cuda::quick_kernel_source(r)) {
      std::string qptx = ptx_of(*quick);
      for (size_t i = 0; i < r.entries.size(); ++i)
        EXPECT_EQ(declared_block_size(qptx, "alloy_entry_" + std::to_string(i)),
                  static_cast<long>(r.entries[i].cuda_block.size))
            << "quick entry " << i;
    }
  }
  // The library's second entry: buffers 0 and 4 (a table of 5) and threadgroup(0) and (2).
  Case lib = library_case(false);
  CompileRequest r = kernel::compile_request(lib.tr, lib.map, "safe");
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_EQ(r.entries[1].cuda_block.num_buffers, 5u);
  EXPECT_EQ(r.entries[1].cuda_block.num_tg, 3u);
  EXPECT_EQ(r.entries[0].cuda_block.num_tg, 0u);
}

// One layout's probe: reads one field of each part of the block into `out`.
struct Probe {
  uint32_t nb, nt;
  bool robust;
  uint32_t ni;
};

std::string probe_source(const std::vector<Probe>& probes) {
  std::string s = "#include \"cuda/abi.h\"\n";
  s += "static_assert(sizeof(alloy_cuda_head) == " + std::to_string(sizeof(alloy_cuda_head)) +
       ", \"head\");\n";
  s += "static_assert(sizeof(alloy_cuda_oob_log) == " + std::to_string(sizeof(alloy_cuda_oob_log)) +
       ", \"oob log\");\n";
  s += "static_assert(sizeof(alloy_cuda_oob_record) == " +
       std::to_string(sizeof(alloy_cuda_oob_record)) + ", \"oob record\");\n";
  for (size_t j = 0; j < probes.size(); ++j) {
    const Probe& p = probes[j];
    const alloy_cuda_param_layout l = alloy_cuda_layout(p.nb, p.nt, p.robust, p.ni);
    std::string type = "alloy_cuda_params<" + std::to_string(p.nb) + "u, " + std::to_string(p.nt) +
                       "u, " + (p.robust ? "true" : "false") + ", " + std::to_string(p.ni) + "u>";
    s += "static_assert(sizeof(" + type + ") == " + std::to_string(l.size) + " && alignof(" + type +
         ") == 16, \"size\");\n";
    s += "extern \"C\" __global__ void probe_" + std::to_string(j) + "(const __grid_constant__ " +
         type + " L, unsigned long long* out) {\n";
    s += "  out[0] = L.head().inline_mask;\n  out[1] = L.head().groups[1];\n";
    s += "  out[2] = (unsigned long long)L.buffer(" + std::to_string(p.nb - 1) + ");\n";
    if (p.robust) {
      s += "  out[3] = L.buffer_bytes(" + std::to_string(p.nb - 1) + ");\n";
      s += "  out[4] = L.oob()->capacity;\n";
    }
    if (p.nt) s += "  out[5] = L.tg_offset(" + std::to_string(p.nt - 1) + ");\n";
    if (p.ni) s += "  out[6] = L.inline_data()[" + std::to_string(p.ni - 1) + "];\n";
    s += "}\n";
  }
  return s;
}

// The parameter-space offsets of `entry`'s first parameter that its PTX loads (each element of
// a vector load: `ld.param.v2.u64 {%rd1, %rd2}, [e_param_0+80]` reads 80 and 88).
std::set<long> loaded_offsets(const std::string& ptx, const std::string& entry) {
  std::set<long> out;
  size_t begin = ptx.find(".entry " + entry + "(");
  if (begin == std::string::npos) return out;
  size_t end = ptx.find("\n}", begin);
  std::string body = ptx.substr(begin, end - begin);
  std::regex re("ld\\.param(\\.v(\\d))?\\.[a-z]+(\\d+)[^\\[\\n]*\\[" + entry +
                "_param_0(\\+(\\d+))?\\]");
  for (std::sregex_iterator it(body.begin(), body.end(), re), e; it != e; ++it) {
    long lanes = (*it)[2].matched ? std::stol((*it)[2].str()) : 1;
    long bytes = std::stol((*it)[3].str()) / 8;
    long off = (*it)[5].matched ? std::stol((*it)[5].str()) : 0;
    for (long k = 0; k < lanes; ++k) out.insert(off + k * bytes);
  }
  return out;
}

TEST(CudaParamBlock, DeviceReadsTheOffsetsTheHostWrites) {
  if (!cuda::nvrtc::available()) GTEST_SKIP() << "NVRTC not found";
  std::vector<Probe> probes = {{1, 0, false, 0},   {2, 0, false, 512}, {3, 1, false, 0},
                               {48, 8, true, 512}, {5, 3, true, 0},    {21, 0, false, 16}};
  std::mt19937 rng(7);  // 32-bit results
  for (int k = 0; k < 10; ++k)
    probes.push_back({static_cast<uint32_t>(1 + rng() % 48), static_cast<uint32_t>(rng() % 9),
                      (rng() & 1) != 0, static_cast<uint32_t>((rng() % 3) * 256)});
  cuda::KernelSource src;
  src.name = "param_block_probe";
  src.source = probe_source(probes);
  for (size_t j = 0; j < probes.size(); ++j) src.entries.push_back("probe_" + std::to_string(j));
  std::string ptx = ptx_of(src);
  for (size_t j = 0; j < probes.size(); ++j) {
    const Probe& p = probes[j];
    SCOPED_TRACE(src.entries[j]);
    const alloy_cuda_param_layout l = alloy_cuda_layout(p.nb, p.nt, p.robust, p.ni);
    EXPECT_EQ(declared_block_size(ptx, src.entries[j]), static_cast<long>(l.size));
    // What the host writes (cuda::ParamBlock's setters, the head's members) at these offsets.
    std::set<long> want = {static_cast<long>(offsetof(alloy_cuda_head, inline_mask)),
                           static_cast<long>(offsetof(alloy_cuda_head, groups) + 4),
                           static_cast<long>(l.buffers + 8 * (p.nb - 1))};
    if (p.robust) {
      want.insert(l.buffer_bytes + 8 * (p.nb - 1));
      want.insert(l.oob + offsetof(alloy_cuda_oob_log, capacity));
    }
    if (p.nt) want.insert(l.tg_offset + 8 * (p.nt - 1));
    if (p.ni) want.insert(l.inline_data + p.ni - 1);
    EXPECT_EQ(loaded_offsets(ptx, src.entries[j]), want);
    // And they lie inside the block.
    EXPECT_LT(*want.rbegin(), static_cast<long>(l.size));
  }
}

TEST(CudaParamBlock, PackWritesWhatTheLayoutSaysAndNothingPastIt) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(round);
    const uint32_t nb = 1 + rng() % ALLOY_CUDA_MAX_BUFFERS;
    const uint32_t nt = rng() % (ALLOY_CUDA_MAX_TG_PARAMS + 1);
    const bool robust = rng() & 1;
    const uint32_t ni = (rng() & 1) ? ALLOY_CUDA_INLINE_BYTES : 0;
    const alloy_cuda_param_layout l = alloy_cuda_layout(nb, nt, robust, ni);
    // Poisoned storage: pack must leave everything past the block's size alone.
    alignas(cuda::ParamBlock) unsigned char storage[sizeof(cuda::ParamBlock)];
    std::memset(storage, 0xA5, sizeof storage);
    auto* P = new (storage) cuda::ParamBlock(l);
    const auto* base = static_cast<const unsigned char*>(P->bytes());

    // Up to 4 buffers past the entry's table (bound by the caller, never read by the entry).
    const uint32_t num_args = std::min<uint32_t>(nb + rng() % 5, ALLOY_CUDA_MAX_BUFFERS);
    std::vector<LaunchArg> args(num_args);
    std::vector<std::vector<unsigned char>> host(num_args);
    for (uint32_t i = 0; i < num_args; ++i) {
      int kind = static_cast<int>(rng() % 3);
      if (kind == 0 || (kind == 2 && !ni)) {
        args[i].kind = LaunchArg::Kind::memory;
        args[i].data = reinterpret_cast<const void*>(0x7f0000000000ull + (rng() % 4096) * 256);
        args[i].nbytes = rng() % 100000;
      } else {
        host[i].resize(rng() % 40);
        for (auto& b : host[i]) b = static_cast<unsigned char>(rng());
        args[i].kind = kind == 1 ? LaunchArg::Kind::bytes : LaunchArg::Kind::block;
        args[i].data = host[i].data();
        args[i].nbytes = host[i].size();
      }
    }
    LaunchDesc d;
    d.args = args.data();
    d.num_args = num_args;
    d.label = "pack_test";
    for (int k = 0; k < 3; ++k) {
      d.grid[k] = 1 + static_cast<uint32_t>(rng() % 5000);
      d.threadgroup[k] = 1 + static_cast<uint32_t>(rng() % 64);
    }
    for (int k = 0; k < ALLOY_CUDA_MAX_TG_PARAMS; ++k)
      d.tg_param_bytes[k] = (rng() & 1) ? rng() % 5000 : 0;

    cuda::Packed packed;
    try {
      packed = cuda::pack(d, *P);
    } catch (const Error& e) {
      // Only a `block` argument that does not fit may make it throw.
      size_t need = 0;
      for (uint32_t i = 0; i < std::min(num_args, nb); ++i)
        if (args[i].kind == LaunchArg::Kind::block) need = cuda::block_align(need) + args[i].nbytes;
      EXPECT_GT(need, ni) << e.what();
      continue;
    }
    auto u32_at = [&](size_t off) {
      uint32_t v;
      std::memcpy(&v, base + off, 4);
      return v;
    };
    auto u64_at = [&](size_t off) {
      uint64_t v;
      std::memcpy(&v, base + off, 8);
      return v;
    };
    const uint32_t n = std::min(num_args, nb);
    EXPECT_EQ(u32_at(offsetof(alloy_cuda_head, num_buffers)), n);
    for (int k = 0; k < 3; ++k) {
      uint32_t g = d.grid[k], t = d.threadgroup[k];
      EXPECT_EQ(u32_at(offsetof(alloy_cuda_head, grid) + 4 * k), g);
      EXPECT_EQ(u32_at(offsetof(alloy_cuda_head, threadgroup) + 4 * k), t);
      EXPECT_EQ(u32_at(offsetof(alloy_cuda_head, groups) + 4 * k), (g + t - 1) / t);
      EXPECT_EQ(u32_at(offsetof(alloy_cuda_head, full_groups) + 4 * k), g / t);
    }
    const uint64_t mask = u64_at(offsetof(alloy_cuda_head, inline_mask));
    EXPECT_EQ(mask >> n, 0u);
    EXPECT_EQ(packed.spilled & mask, 0u);
    std::vector<std::pair<uint64_t, uint64_t>> inline_ranges;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t slot = u64_at(l.buffers + 8 * i);
      if (robust) {
        EXPECT_EQ(u64_at(l.buffer_bytes + 8 * i), args[i].nbytes) << i;
      }
      if (args[i].kind == LaunchArg::Kind::memory) {
        EXPECT_EQ(slot, reinterpret_cast<uint64_t>(args[i].data)) << i;
        EXPECT_FALSE((mask >> i) & 1) << i;
      } else if ((mask >> i) & 1) {
        EXPECT_EQ(slot % 16, 0u) << i;
        ASSERT_LE(slot + args[i].nbytes, ni) << i;
        if (args[i].nbytes) {
          EXPECT_EQ(std::memcmp(base + l.inline_data + slot, args[i].data, args[i].nbytes), 0) << i;
        }
        inline_ranges.push_back({slot, slot + args[i].nbytes});
      } else {
        EXPECT_EQ(args[i].kind, LaunchArg::Kind::bytes) << i;
        EXPECT_TRUE((packed.spilled >> i) & 1) << i;
      }
    }
    // Inline arguments do not overlap.
    std::sort(inline_ranges.begin(), inline_ranges.end());
    for (size_t k = 1; k < inline_ranges.size(); ++k)
      EXPECT_LE(inline_ranges[k - 1].second, inline_ranges[k].first);
    uint64_t smem = 0;
    for (uint32_t k = 0; k < ALLOY_CUDA_MAX_TG_PARAMS; ++k) {
      if (!d.tg_param_bytes[k]) continue;
      if (k < nt) {
        EXPECT_EQ(u64_at(l.tg_offset + 8 * k), smem) << k;
      }
      smem += cuda::block_align(d.tg_param_bytes[k]);
    }
    EXPECT_EQ(packed.shared_bytes, smem);
    // Spilled arguments: spill_into copies each to its 16-byte aligned part of the spill buffer
    // (inside spill_bytes, no overlap) and points its entry at the device address of that part.
    std::vector<unsigned char> spill_host(packed.spill_bytes, 0xA5);
    char* device = reinterpret_cast<char*>(uintptr_t{0x500000000000});
    cuda::spill_into(d, packed, *P, spill_host.data(), device);
    std::vector<std::pair<uint64_t, uint64_t>> spill_ranges;
    for (uint32_t i = 0; i < n; ++i) {
      if (!((packed.spilled >> i) & 1)) continue;
      const uint64_t off = u64_at(l.buffers + 8 * i) - reinterpret_cast<uint64_t>(device);
      EXPECT_EQ(off % 16, 0u) << i;
      ASSERT_LE(off + args[i].nbytes, packed.spill_bytes) << i;
      if (args[i].nbytes) {
        EXPECT_EQ(std::memcmp(spill_host.data() + off, args[i].data, args[i].nbytes), 0) << i;
      }
      spill_ranges.push_back({off, off + args[i].nbytes});
    }
    std::sort(spill_ranges.begin(), spill_ranges.end());
    for (size_t k = 1; k < spill_ranges.size(); ++k)
      EXPECT_LE(spill_ranges[k - 1].second, spill_ranges[k].first);
    for (size_t b = l.size; b < sizeof(alloy_cuda_head) + sizeof(P->rest); ++b)
      ASSERT_EQ(base[b], 0xA5) << "written past the block at " << b;
  }
  // Too many buffers for any entry.
  cuda::ParamBlock P(alloy_cuda_layout(1, 0, false, 0));
  std::vector<LaunchArg> too_many(ALLOY_CUDA_MAX_BUFFERS + 1);
  LaunchDesc d;
  d.args = too_many.data();
  d.num_args = static_cast<uint32_t>(too_many.size());
  EXPECT_THROW(cuda::pack(d, P), std::invalid_argument);
}

// On a GPU: a kernel with 20 input buffers and one reading its shape parameters from the block
// give the CPU's values (the GPU run checks that packing and the entries agree at run time).
TEST(CudaParamBlock, ManyBuffersAndShapeParametersOnTheGpu) {
  if (!gpu_available()) GTEST_SKIP() << "no CUDA GPU";
  const int n = 1000;
  std::vector<std::string> names;
  std::vector<Array> cpu_in, gpu_in;
  std::string body = "uint i = thread_position_in_grid.x; float s = 0;\n";
  for (int k = 0; k < 20; ++k) {
    names.push_back("x" + std::to_string(k));
    cpu_in.push_back(host_array({n}, 100 + k));
    gpu_in.push_back(cpu_in.back().to(Device::gpu()));
    body += "s += " + names.back() + "[i] * " + std::to_string(k + 1) + ";\n";
  }
  body += "out[i] = s + x0_shape[0];";
  auto k = metal_kernel("pb_gpu_many", names, {"out"}, body);
  KernelCall call = call_1d(n);
  call.threadgroup = {128, 1, 1};
  call.device = Device::cpu();
  auto want = k(cpu_in, call)[0].to_vector<float>();
  call.device = Device::gpu();
  auto got = k(gpu_in, call)[0].to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FLOAT_EQ(got[i], want[i]) << i;

  // Shape parameters in the block: a transposed (strided) input read through elem_to_loc.
  Array m = host_array({32, 40}, 200);
  Array mt = transpose(m.to(Device::gpu()), {1, 0});
  auto ks = metal_kernel("pb_gpu_strided", {"inp"}, {"out"},
                         "uint i = thread_position_in_grid.x;\n"
                         "out[i] = inp[elem_to_loc(i, inp_shape, inp_strides, inp_ndim)] * "
                         "inp_shape[1];",
                         "", false);
  KernelCall sc = call_1d(32 * 40);
  sc.device = Device::gpu();
  auto g = ks({mt}, sc)[0].to_vector<float>();
  auto mv = m.to_vector<float>();
  for (int r = 0; r < 40; ++r)
    for (int c = 0; c < 32; ++c)
      ASSERT_FLOAT_EQ(g[static_cast<size_t>(r * 32 + c)], mv[static_cast<size_t>(c * 40 + r)] * 32)
          << r << "," << c;
}

}  // namespace
}  // namespace alloy
