// MLX's metal_kernel source generator, rewritten: same text, byte for byte (rules and the MLX
// version in docs/mlx-signature.md). Where MLX would build a source that cannot compile, we raise
// std::invalid_argument up front instead of producing it.
#include "msl/signature.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <variant>

namespace alloy::msl {
namespace {

// MLX passes inputs with fewer elements than this in the `constant` address space.
constexpr int64_t kMaxConstantArraySize = 8;

constexpr std::array<MetalAttribute, 20> kAttributes{{
    {"dispatch_quadgroups_per_threadgroup", "uint"},
    {"dispatch_simdgroups_per_threadgroup", "uint"},
    {"dispatch_threads_per_threadgroup", "uint3"},
    {"grid_origin", "uint3"},
    {"grid_size", "uint3"},
    {"quadgroup_index_in_threadgroup", "uint"},
    {"quadgroups_per_threadgroup", "uint"},
    {"simdgroup_index_in_threadgroup", "uint"},
    {"simdgroups_per_threadgroup", "uint"},
    {"thread_execution_width", "uint"},
    {"thread_index_in_quadgroup", "uint"},
    {"thread_index_in_simdgroup", "uint"},
    {"thread_index_in_threadgroup", "uint"},
    {"thread_position_in_grid", "uint3"},
    {"thread_position_in_threadgroup", "uint3"},
    {"threadgroup_position_in_grid", "uint3"},
    {"threadgroups_per_grid", "uint3"},
    {"threads_per_grid", "uint3"},
    {"threads_per_simdgroup", "uint"},
    {"threads_per_threadgroup", "uint3"},
}};

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("[metal_kernel] " + what);
}

// MLX's test is a plain substring search of the body (comments and longer names count too).
bool mentions(const std::string& source, const std::string& word) {
  return source.find(word) != std::string::npos;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  });
}

void check_identifier(const std::string& name, const char* role) {
  if (!is_identifier(name)) {
    fail(std::string("Invalid ") + role + " name `" + name + "`: it must be a C++ identifier.");
  }
}

std::string size_mismatch(const char* what, size_t expected, size_t got) {
  // MLX ends these messages with std::endl.
  return std::string("Expected `") + what + "` to have size " + std::to_string(expected) +
         " but got size " + std::to_string(got) + ".\n";
}

// MLX writes the template arguments with an ostream: ints in decimal, bools as 1/0 (no
// boolalpha), dtypes as their Metal type names.
std::string template_arg_text(const TemplateArg& arg) {
  if (auto* i = std::get_if<int>(&arg)) return std::to_string(*i);
  if (auto* b = std::get_if<bool>(&arg)) return *b ? "1" : "0";
  return std::string(msl_type_name(std::get<Dtype>(arg)));
}

const char* template_param_kind(const TemplateArg& arg) {
  if (std::holds_alternative<int>(arg)) return "int";
  if (std::holds_alternative<bool>(arg)) return "bool";
  return "typename";
}

// Every name declared in the generated source's template and parameter lists must be unique
// (Metal would reject a redefinition, or a parameter shadowing a template parameter).
class NameSet {
 public:
  void add(const std::string& name, std::string role) {
    auto [it, inserted] = roles_.emplace(name, role);
    if (!inserted) {
      fail("Name `" + name + "` is declared twice in the generated signature: as " + it->second +
           " and as " + role + ".");
    }
  }

 private:
  std::map<std::string, std::string> roles_;
};

}  // namespace

std::span<const MetalAttribute> metal_attributes() {
  return kAttributes;
}

std::string verbose_listing(std::string_view name, std::string_view source) {
  std::string out = "Generated source code for `";
  out += name;
  out += "`:\n```\n";
  out += source;
  out += "\n```\n";
  return out;
}

GeneratedSource write_kernel_source(const KernelSpec& spec,
                                    const std::vector<SignatureInput>& inputs,
                                    const std::vector<Dtype>& output_dtypes,
                                    const TemplateArgs& template_args) {
  // The checks MLX makes, with its messages, in its order.
  if (spec.output_names.empty()) fail("Must specify at least one output.");
  if (inputs.size() != spec.input_names.size()) {
    fail(size_mismatch("inputs", spec.input_names.size(), inputs.size()));
  }
  if (output_dtypes.size() != spec.output_names.size()) {
    fail(size_mismatch("output_dtypes", spec.output_names.size(), output_dtypes.size()));
  }

  // Checks MLX leaves to the Metal compiler: the generated source would not compile.
  if (!is_identifier("custom_kernel_" + spec.name)) {
    fail("Invalid kernel name `" + spec.name +
         "`: `custom_kernel_<name>` must be a C++ identifier.");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].name.empty() && inputs[i].name != spec.input_names[i]) {
      throw std::invalid_argument(
          "write_kernel_source: input " + std::to_string(i) + " is named `" + inputs[i].name +
          "` but the kernel's input_names say `" + spec.input_names[i] + "`");
    }
    if (inputs[i].ndim < 0 || inputs[i].size < 0) {
      throw std::invalid_argument("write_kernel_source: input `" + spec.input_names[i] +
                                  "` has a negative ndim or size");
    }
  }

  NameSet names;
  for (const auto& [name, arg] : template_args) {
    check_identifier(name, "template argument");
    names.add(name, "template argument");
  }
  int extra_buffers = 0;  // shape/strides/ndim buffers
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& name = spec.input_names[i];
    check_identifier(name, "input");
    names.add(name, "input");
    if (inputs[i].ndim == 0) continue;  // scalars never get shape/strides/ndim
    for (const char* suffix : {"_shape", "_strides", "_ndim"}) {
      if (mentions(spec.source, name + suffix)) {
        names.add(name + suffix, std::string(suffix + 1) + " of input `" + name + "`");
        ++extra_buffers;
      }
    }
  }
  for (const auto& name : spec.output_names) {
    check_identifier(name, "output");
    names.add(name, "output");
  }
  std::vector<const MetalAttribute*> attributes;
  for (const auto& attr : kAttributes) {
    if (mentions(spec.source, std::string(attr.name))) {
      attributes.push_back(&attr);
      names.add(std::string(attr.name), "attribute");
    }
  }
  // MLX closes the parameter list after the first output whose buffer index is at least
  // (#inputs + #outputs - 1) when no attribute follows. With shape/strides/ndim buffers that is
  // not the last output, and the text it produces cannot compile.
  if (attributes.empty() && extra_buffers > 0 && spec.output_names.size() > 1) {
    fail(
        "not supported: several outputs, shape/strides/ndim parameters and no Metal attribute "
        "in the source: MLX generates an invalid signature for this kernel (its parameter list "
        "is closed after the first output).");
  }

  GeneratedSource out;

  // Kernel name: custom_kernel_<name>, then the template "hash" (the instantiation text with
  // '<', '>' and ", " replaced by '_', last '_' dropped), then one _<type> per input (suffix 's'
  // for a scalar, 'c' for an array passed in `constant`), then one _<type> per output.
  std::string template_list;  // "<float, 1, 3>"
  if (!template_args.empty()) {
    template_list = "<";
    for (size_t i = 0; i < template_args.size(); ++i) {
      if (i > 0) template_list += ", ";
      template_list += template_arg_text(template_args[i].second);
    }
    template_list += ">";
  }
  std::string kernel_name = "custom_kernel_" + spec.name;
  if (!template_args.empty()) {
    kernel_name += "__";  // the separator, then the '_' that replaced '<'
    for (size_t i = 0; i < template_args.size(); ++i) {
      if (i > 0) kernel_name += "_";
      // MLX 0.32.4 writes a negative int's '-' as '_' in the name (`<-3>` gives `__3`); the
      // instantiation's template argument list keeps `-3`.
      std::string text = template_arg_text(template_args[i].second);
      std::replace(text.begin(), text.end(), '-', '_');
      kernel_name += text;
    }
  }
  for (const auto& in : inputs) {
    kernel_name += "_";
    kernel_name += msl_type_name(in.dtype);
    if (in.ndim == 0) {
      kernel_name += "s";
    } else if (in.size < kMaxConstantArraySize) {
      kernel_name += "c";
    }
  }
  for (Dtype t : output_dtypes) {
    kernel_name += "_";
    kernel_name += msl_type_name(t);
  }

  std::string& src = out.source;
  src.reserve(spec.header.size() + spec.source.size() + 1024);
  src += spec.header;
  if (!template_args.empty()) {
    src += "template <";
    for (size_t i = 0; i < template_args.size(); ++i) {
      if (i > 0) src += ", ";
      src += template_param_kind(template_args[i].second);
      src += " ";
      src += template_args[i].first;
    }
    src += ">\n";
  }
  src += "[[kernel]] void " + kernel_name + "(\n";

  auto buffer = [](int index) { return " [[buffer(" + std::to_string(index) + ")]]"; };
  int index = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& in = inputs[i];
    const std::string& name = spec.input_names[i];
    // Small arrays (and scalars) in `constant`, scalars by reference.
    src += "  const ";
    src += in.size < kMaxConstantArraySize ? "constant " : "device ";
    src += msl_type_name(in.dtype);
    src += in.ndim == 0 ? "& " : "* ";
    src += name + buffer(index++) + ",\n";
    out.bindings.push_back(
        {BindingKind::input, static_cast<int>(i), in.size < kMaxConstantArraySize});
    if (in.ndim == 0) continue;
    if (mentions(spec.source, name + "_shape")) {
      src += "  const constant int* " + name + "_shape" + buffer(index++) + ",\n";
      out.bindings.push_back({BindingKind::input_shape, static_cast<int>(i)});
    }
    if (mentions(spec.source, name + "_strides")) {
      src += "  const constant int64_t* " + name + "_strides" + buffer(index++) + ",\n";
      out.bindings.push_back({BindingKind::input_strides, static_cast<int>(i)});
    }
    if (mentions(spec.source, name + "_ndim")) {
      src += "  const constant int& " + name + "_ndim" + buffer(index++) + ",\n";
      out.bindings.push_back({BindingKind::input_ndim, static_cast<int>(i)});
    }
  }
  for (size_t i = 0; i < spec.output_names.size(); ++i) {
    src += "  device ";
    if (spec.atomic_outputs) src += "atomic<";
    src += msl_type_name(output_dtypes[i]);
    if (spec.atomic_outputs) src += ">";
    src += "* " + spec.output_names[i] + buffer(index++);
    bool last = i + 1 == spec.output_names.size() && attributes.empty();
    src += last ? ") {\n" : ",\n";
    out.bindings.push_back({BindingKind::output, static_cast<int>(i)});
  }
  for (size_t i = 0; i < attributes.size(); ++i) {
    const auto& attr = *attributes[i];
    src += "  ";
    src += attr.type;
    src += " ";
    src += attr.name;
    src += " [[";
    src += attr.name;
    src += "]]";
    src += i + 1 == attributes.size() ? ") {\n" : ",\n";
    out.attributes.emplace_back(attr.name);
  }
  // The body goes in verbatim (no re-indentation).
  src += spec.source;
  src += "\n}\n";

  if (!template_args.empty()) {
    std::string instance = kernel_name + template_list;
    src += "\ntemplate [[host_name(\"" + kernel_name + "\")]] [[kernel]] decltype(" + instance +
           ") " + instance + ";\n";
  }

  out.kernel_name = kernel_name;
  out.template_name = std::move(kernel_name);
  return out;
}

}  // namespace alloy::msl
