// libFuzzer target: the MLX signature writer (src/msl/signature.cpp), which turns metal_kernel's
// arguments (names, body, header, input ranks, dtypes, template arguments) into a Metal source.
// The input is split on NUL bytes into: name, input names, output names, body, header, template
// argument names; the remaining bytes choose ranks and dtypes. docs/reliability.md.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "alloy/errors.h"
#include "msl/signature.h"

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = split(std::string(reinterpret_cast<const char*>(data), size), '\0');
  parts.resize(7);
  alloy::KernelSpec spec;
  spec.name = parts[0];
  spec.input_names = split(parts[1], ',');
  spec.output_names = split(parts[2], ',');
  spec.source = parts[3];
  spec.header = parts[4];
  const std::string& knobs = parts[6];
  auto knob = [&](size_t i) { return i < knobs.size() ? static_cast<uint8_t>(knobs[i]) : 0; };
  constexpr alloy::Dtype dtypes[] = {alloy::float32, alloy::float16, alloy::bfloat16,
                                     alloy::int32,   alloy::uint32,  alloy::int64,
                                     alloy::bool_,   alloy::uint8,   alloy::float64};
  constexpr size_t ndt = sizeof dtypes / sizeof dtypes[0];
  std::vector<alloy::msl::SignatureInput> inputs;
  for (size_t i = 0; i < spec.input_names.size(); ++i)
    inputs.push_back({"", dtypes[knob(i) % ndt], static_cast<int>(knob(i + 8) % 5),
                      static_cast<int64_t>(knob(i + 16))});
  std::vector<alloy::Dtype> out_dtypes;
  for (size_t i = 0; i < spec.output_names.size(); ++i)
    out_dtypes.push_back(dtypes[knob(i + 24) % ndt]);
  alloy::TemplateArgs targs;
  size_t j = 0;
  for (auto& name : split(parts[5], ',')) {
    if (name.empty()) continue;
    uint8_t k = knob(32 + j++);
    if (k % 3 == 0)
      targs.push_back({name, dtypes[k % ndt]});
    else if (k % 3 == 1)
      targs.push_back({name, static_cast<int>(k) - 128});
    else
      targs.push_back({name, k % 2 == 0});
  }
  spec.ensure_row_contiguous = knob(40) % 2;
  spec.atomic_outputs = knob(41) % 2;
  try {
    alloy::msl::write_kernel_source(spec, inputs, out_dtypes, targs);
  } catch (const std::invalid_argument&) {
  } catch (const alloy::Error&) {
  }
  return 0;
}
