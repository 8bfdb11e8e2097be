// alloy/translate.h over the kernel layer's translation and offline GPU compile (program.h).
#include "alloy/translate.h"
#include "kernel/custom_kernel.h"
#include "kernel/library.h"
#include "kernel/program.h"
#include "msl/function_constants.h"
#include "msl/includes.h"

namespace alloy {
namespace {

std::string translate_source(const kernel::SourceMap& map, const kernel::BindOptions& bind,
                             const TranslateOptions& o) {
  switch (o.target) {
    case TranslateTarget::metal:
      return map.msl;
    case TranslateTarget::ptx: {
      kernel::check_math_mode(o.math_mode);
      auto topt = kernel::translate_options(map, msl::Target::cuda, bind);
      if (!o.kernels.empty()) topt.expand_macros = false;  // a library unit is expanded already
      auto tr = msl::translate(map.msl, topt);
      return kernel::compile_ptx(tr, o.math_mode, map, o.arch);
    }
    case TranslateTarget::cuda:
      return kernel::translate_only(map, msl::Target::cuda, bind);
    case TranslateTarget::cpu:
      break;
  }
  return kernel::translate_only(map, msl::Target::cpu, bind);
}

}  // namespace

std::string translate(const MetalKernel& k, const std::vector<Array>& inputs,
                      const KernelCall& call, const TranslateOptions& options) {
  auto gen = kernel::call_generated_source(k, inputs, call);
  kernel::SourceMap map = kernel::call_source_map(k.spec(), gen.source);
  return translate_source(map, kernel::call_bind_options(gen, options.robust), options);
}

std::string translate_library(const std::string& source, const LibraryOptions& library,
                              const TranslateOptions& options) {
  kernel::SourceMap map;
  map.label = library.name;
  if (!options.kernels.empty()) {
    // The unit a first call of these kernels compiles (the library as compile_library reads it).
    LibraryOptions read = library;
    read.robust = false;
    map.msl = kernel::library_unit_source(compile_library(source, read), options.kernels);
    map.user_text = true;
    kernel::BindOptions bind;
    bind.robust = options.robust || library.robust;
    return translate_source(map, bind, options);
  }
  msl::FunctionConstants constants{
      {library.function_constants.begin(), library.function_constants.end()},
      {library.named_function_constants.begin(), library.named_function_constants.end()}};
  map.msl = msl::apply_function_constants(
      msl::expand_includes(source, {library.headers, library.include_dirs, library.name}),
      constants, library.name);
  map.user_text = true;
  kernel::BindOptions bind;
  bind.robust = options.robust || library.robust;
  return translate_source(map, bind, options);
}

}  // namespace alloy
