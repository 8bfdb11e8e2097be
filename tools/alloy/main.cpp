// The `alloy` command line: demo (example kernels on the best device, checked against
// references), translate (the Metal text of a metal_kernel call, or its CPU/CUDA translation),
// inspect and run (exported functions, either format; docs/export.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <fstream>
#include <iostream>
#include <sstream>

#include "alloy/alloy.h"
#include "alloy/analyze.h"
#include "alloy/translate.h"
#include "demo.h"
#include "npy.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "4x16" -> {4, 16}; "" or "scalar" -> {} (a 0-d input).
alloy::Shape parse_shape(const std::string& s) {
  alloy::Shape shape;
  if (s.empty() || s == "scalar") return shape;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, 'x')) shape.push_back(std::stoll(part));
  return shape;
}

alloy::TemplateArg parse_template_value(const std::string& v) {
  if (v == "true" || v == "True") return true;
  if (v == "false" || v == "False") return false;
  try {
    size_t used = 0;
    int i = std::stoi(v, &used);
    if (used == v.size()) return i;
  } catch (...) {
  }
  return alloy::dtype_from_name(v);
}

struct TranslateArgs {
  std::string target = "metal";
  std::string name = "kernel";
  std::vector<std::string> inputs, outputs, input_dtypes, input_shapes, output_dtypes, templates;
  std::string source, header, library;
  std::vector<std::string> include_dirs, function_constants, kernels;  // --library
  bool ensure_row_contiguous = true, atomic_outputs = false, robust = false;
  bool analyze = false;  // --analyze: the typed analysis's report instead of the text
  std::string arch = "sm_90", math_mode = "safe";  // --target ptx
};

int run_translate(const TranslateArgs& a) {
  using namespace alloy;
  TranslateOptions o;
  if (a.target == "metal")
    o.target = TranslateTarget::metal;
  else if (a.target == "cpu")
    o.target = TranslateTarget::cpu;
  else if (a.target == "cuda")
    o.target = TranslateTarget::cuda;
  else if (a.target == "ptx")
    o.target = TranslateTarget::ptx;
  else
    throw std::invalid_argument("--target must be metal, cpu, cuda or ptx");
  o.robust = a.robust;
  o.math_mode = a.math_mode;
  o.arch = a.arch;
  o.kernels = a.kernels;
  if (!a.library.empty()) {
    // As compile_library reads it: headers from the include folders, then function constants.
    LibraryOptions lib;
    lib.name = a.library;
    lib.include_dirs = a.include_dirs;
    for (auto& c : a.function_constants) {
      auto eq = c.find('=');
      if (eq == std::string::npos)
        throw std::invalid_argument("--function-constant takes INDEX=VALUE or NAME=VALUE");
      std::string key = c.substr(0, eq), v = c.substr(eq + 1);
      FunctionConstant value;
      if (v == "true" || v == "false")
        value = v == "true";
      else if (v.find_first_of(".eE") != std::string::npos)
        value = std::stod(v);
      else
        value = static_cast<int64_t>(std::stoll(v));
      if (!key.empty() && std::isdigit(static_cast<unsigned char>(key[0])))
        lib.function_constants[std::stoi(key)] = value;
      else
        lib.named_function_constants[key] = value;
    }
    if (a.analyze)
      std::cout << analyze_library(read_file(a.library), lib).report();
    else
      std::cout << translate_library(read_file(a.library), lib, o);
    return 0;
  }
  if (a.source.empty()) throw std::invalid_argument("give --source BODY_FILE or --library FILE");
  if (a.input_dtypes.size() != a.inputs.size() || a.input_shapes.size() != a.inputs.size())
    throw std::invalid_argument("give one --input-dtype and one --input-shape per --input");
  std::vector<Array> inputs;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    Shape shape = parse_shape(a.input_shapes[i]);
    inputs.push_back(zeros(shape, dtype_from_name(a.input_dtypes[i]), Device::cpu()));
  }
  KernelCall call;
  for (auto& d : a.output_dtypes) call.output_dtypes.push_back(dtype_from_name(d));
  for (auto& t : a.templates) {
    auto eq = t.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--template takes NAME=VALUE");
    call.template_args.push_back({t.substr(0, eq), parse_template_value(t.substr(eq + 1))});
  }
  auto k = metal_kernel(a.name, a.inputs, a.outputs, read_file(a.source),
                        a.header.empty() ? "" : read_file(a.header), a.ensure_row_contiguous,
                        a.atomic_outputs);
  if (a.analyze)
    std::cout << analyze(k, inputs, call).report();
  else
    std::cout << translate(k, inputs, call, o);
  return 0;
}

struct RunArgs {
  std::string file;
  std::vector<std::string> inputs, kw_inputs, outputs;
  bool trust = false;
  std::vector<std::string> allow;
  std::string device = "best";
};

// `alloy run FILE --input x.npy ... [--kw-input name=y.npy] --output out.npy ...`
int run_exported(const RunArgs& a) {
  using namespace alloy;
  ImportOptions o;
  o.trust_kernels = a.trust;
  o.allowed_kernels = {a.allow.begin(), a.allow.end()};
  if (a.device == "cpu")
    o.device = Device::cpu();
  else if (a.device == "gpu")
    o.device = Device::gpu();
  else if (a.device != "best")
    throw std::invalid_argument("--device must be best, cpu or gpu");
  auto f = import_function(a.file, o);
  Args args;
  for (auto& p : a.inputs) args.push_back(tools::read_npy(p));
  Kwargs kwargs;
  for (auto& kv : a.kw_inputs) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--kw-input takes NAME=FILE.npy");
    kwargs.emplace(kv.substr(0, eq), tools::read_npy(kv.substr(eq + 1)));
  }
  auto outs = f(args, kwargs);
  if (!a.outputs.empty() && a.outputs.size() != outs.size())
    throw std::invalid_argument(fmt::format("the function returns {} arrays; {} --output given",
                                            outs.size(), a.outputs.size()));
  for (size_t i = 0; i < outs.size(); ++i) {
    if (i < a.outputs.size()) {
      tools::write_npy(a.outputs[i], outs[i]);
    } else {
      std::cout << fmt::format("output {}: shape ({}) {}\n", i, fmt::join(outs[i].shape(), ", "),
                               dtype_name(outs[i].dtype()));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Alloy: Metal compute kernels on NVIDIA GPUs and CPUs"};
  app.require_subcommand(1);

  auto* demo =
      app.add_subcommand("demo", "Run the example kernels on the best device and check them");
  std::string device = "best";
  demo->add_option("--device", device, "best | cpu | gpu");

  TranslateArgs ta;
  auto* tr = app.add_subcommand(
      "translate", "Print the Metal source of a metal_kernel call (MLX's text) or its translation");
  tr->add_option("--target", ta.target, "metal | cpu | cuda | ptx (NVRTC's output)")
      ->default_val("metal");
  tr->add_option("--arch", ta.arch, "GPU architecture for --target ptx")->default_val("sm_90");
  tr->add_option("--math-mode", ta.math_mode, "safe | relaxed | fast (--target ptx)")
      ->default_val("safe");
  tr->add_option("--name", ta.name, "kernel name (metal_kernel's name)");
  tr->add_option("--input", ta.inputs, "input name (repeat)");
  tr->add_option("--input-dtype", ta.input_dtypes, "dtype of each input (repeat)");
  tr->add_option("--input-shape", ta.input_shapes, "shape of each input, e.g. 4x16 or scalar");
  tr->add_option("--output", ta.outputs, "output name (repeat)");
  tr->add_option("--output-dtype", ta.output_dtypes, "dtype of each output (repeat)");
  tr->add_option("--template", ta.templates, "template argument NAME=VALUE (dtype, int, bool)");
  tr->add_option("--source", ta.source, "file holding the kernel body");
  tr->add_option("--include-dir", ta.include_dirs, "folder searched for #include (--library)");
  tr->add_option("--kernel", ta.kernels,
                 "--library: only this kernel (host name; repeat), as its first call compiles it");
  tr->add_option("--function-constant", ta.function_constants,
                 "function constant INDEX=VALUE or NAME=VALUE (--library; repeat)");
  tr->add_option("--header", ta.header, "file holding the header");
  tr->add_option("--library", ta.library, "a whole .metal library instead of a body");
  tr->add_flag("--atomic-outputs", ta.atomic_outputs, "outputs are device atomic<T>*");
  tr->add_flag("--robust", ta.robust, "bounds-checked buffer accesses (robust mode)");
  tr->add_flag("--analyze", ta.analyze,
               "print the typed analysis per kernel (Clang): Metal conversions, barriers and "
               "simd functions reached, with user lines");
  tr->add_flag("!--no-ensure-row-contiguous", ta.ensure_row_contiguous,
               "pass strided inputs as they are");

  std::string inspect_file;
  auto* inspect = app.add_subcommand(
      "inspect",
      "List an exported function (Alloy's format or MLX's .mlxfn): inputs, outputs, "
      "ops, kernels with their trust hashes");
  inspect->add_option("file", inspect_file, "the exported file")->required();

  RunArgs ra;
  auto* run = app.add_subcommand("run", "Run an exported function on .npy inputs");
  run->add_option("file", ra.file, "the exported file")->required();
  run->add_option("--input", ra.inputs, "positional input, a .npy file (repeat, in order)");
  run->add_option("--kw-input", ra.kw_inputs, "keyword input NAME=FILE.npy (repeat)");
  run->add_option("--output", ra.outputs, ".npy file for each output (repeat, in order)");
  run->add_flag("--trust", ra.trust, "compile and run the file's kernels (native code)");
  run->add_option("--allow-kernel", ra.allow, "SHA-256 of a kernel allowed to run (repeat)");
  run->add_option("--device", ra.device, "best | cpu | gpu")->default_val("best");

  CLI11_PARSE(app, argc, argv);
  try {
    if (demo->parsed()) return alloy::tools::run_demo(device);
    if (tr->parsed()) return run_translate(ta);
    if (inspect->parsed()) {
      std::cout << alloy::describe_exported_function(inspect_file);
      return 0;
    }
    if (run->parsed()) return run_exported(ra);
  } catch (const std::exception& e) {
    std::cerr << "alloy: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
