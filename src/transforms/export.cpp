// Alloy's export format: a FlatBuffers file (schema src/transforms/export.fbs) holding one
// function as traces, constants, primitives (registry name + PrimitiveState bytes) and kernels
// (their specification, trust hash and generated Metal text). docs/export.md.
#include "alloy/export.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "alloy/errors.h"
#include "core/array_node.h"
#include "kernel/custom_kernel.h"
#include "kernel/library.h"
#include "msl/signature.h"
#include "transforms/export_generated.h"
#include "transforms/export_impl.h"
#include "transforms/kernel_spec.h"

namespace alloy {

namespace {
constexpr uint32_t kFormatVersion = 1;
constexpr const char* kProducer = "alloy 0.1.0";
// FlatBuffers addresses at most 2 GiB; stay well below it.
constexpr size_t kMaxFileBytes = size_t{1} << 30;

std::string shape_str(const Shape& s) {
  return fmt::format("({}{})", fmt::join(s, ", "), s.size() == 1 ? "," : "");
}

using transforms::ValueRef;

// Shape and dtype of a value of a trace.
std::pair<Shape, Dtype> value_type(const transforms::Trace& t, const ValueRef& r) {
  switch (r.kind) {
    case ValueRef::Kind::input:
      return {t.input_shapes.at(r.index), t.input_dtypes.at(r.index)};
    case ValueRef::Kind::constant:
      return {t.constants.at(r.index).shape, t.constants.at(r.index).dtype};
    default:
      return {t.ops.at(r.index).shapes.at(r.output), t.ops.at(r.index).dtypes.at(r.output)};
  }
}

// The MLX-identical Metal text of a kernel op at its traced shapes ("" when it cannot be made).
std::string op_metal_source(const transforms::Trace& t, const transforms::TapeOp& op,
                            const kernel::CustomKernel& k) {
  try {
    auto call = transforms::kernel_call_info(k.state());
    std::vector<msl::SignatureInput> in;
    for (auto& r : op.inputs) {
      auto [shape, dtype] = value_type(t, r);
      int64_t n = checked_numel(shape);
      in.push_back({"", dtype, static_cast<int>(shape.size()), n});
    }
    return msl::write_kernel_source(k.spec(), in, call.output_dtypes, call.template_args).source;
  } catch (const std::exception&) {
    return "";
  }
}

// ---- writing ---------------------------------------------------------------------------------

struct Recorded {
  transforms::Trace trace;
  std::vector<std::string> kwarg_names;
};

std::vector<uint8_t> write_file(const std::vector<Recorded>& traces, bool shapeless,
                                const std::string& metadata) {
  flatbuffers::FlatBufferBuilder b(1 << 16);
  size_t total = 0;
  for (auto& r : traces)
    for (auto& c : r.trace.constants) total += c.bytes.size();
  if (total > kMaxFileBytes)
    throw std::invalid_argument(fmt::format(
        "export_function: the function's constants take {} bytes; the format holds at most {}",
        total, kMaxFileBytes));
  auto dims = [&](const Shape& s) { return fb::CreateDims(b, b.CreateVector(s)); };
  auto strings = [&](const std::vector<std::string>& v) { return b.CreateVectorOfStrings(v); };
  auto refs = [&](const std::vector<ValueRef>& v) {
    std::vector<fb::ValueRef> out;
    for (auto& r : v) out.emplace_back(static_cast<fb::ValueKind>(r.kind), r.output, r.index);
    return b.CreateVectorOfStructs(out);
  };
  std::vector<flatbuffers::Offset<fb::Kernel>> kernels;
  std::map<std::string, int> kernel_index;  // by state bytes
  std::vector<flatbuffers::Offset<fb::Library>> libraries;
  std::map<std::string, int> library_index;  // by content key
  std::vector<flatbuffers::Offset<fb::Trace>> fb_traces;
  const std::vector<std::string> registered = registered_primitives();  // sorted
  for (auto& rec : traces) {
    const transforms::Trace& t = rec.trace;
    std::vector<flatbuffers::Offset<fb::Dims>> in_shapes;
    std::vector<std::string> in_dtypes;
    for (size_t i = 0; i < t.input_shapes.size(); ++i) {
      in_shapes.push_back(dims(t.input_shapes[i]));
      in_dtypes.emplace_back(dtype_name(t.input_dtypes[i]));
    }
    std::vector<flatbuffers::Offset<fb::Constant>> constants;
    for (auto& c : t.constants)
      constants.push_back(fb::CreateConstant(b, b.CreateVector(c.shape),
                                             b.CreateString(std::string(dtype_name(c.dtype))),
                                             b.CreateVector(c.bytes)));
    std::vector<flatbuffers::Offset<fb::Op>> ops;
    for (auto& op : t.ops) {
      if (!std::binary_search(registered.begin(), registered.end(), op.primitive->name()))
        throw NotSupported(op.primitive->label(),
                           fmt::format("not supported: {} cannot be exported (no factory "
                                       "rebuilds it from its state)",
                                       op.primitive->label()));
      PrimitiveState state = op.primitive->state();
      std::vector<uint8_t> bytes = state.to_bytes();
      int kidx = -1;
      if (auto* k = dynamic_cast<kernel::CustomKernel*>(op.primitive.get())) {
        auto [it, fresh] = kernel_index.emplace(std::string(bytes.begin(), bytes.end()),
                                                static_cast<int>(kernels.size()));
        if (fresh) {
          const KernelSpec& s = k->spec();
          auto call = transforms::kernel_call_info(state);
          std::vector<flatbuffers::Offset<fb::TemplateArg>> targs;
          for (auto& [name, v] : call.template_args) {
            std::string kind, value;
            if (auto* d = std::get_if<Dtype>(&v)) {
              kind = "dtype";
              value = dtype_name(*d);
            } else if (auto* bl = std::get_if<bool>(&v)) {
              kind = "bool";
              value = *bl ? "true" : "false";
            } else {
              kind = "int";
              value = std::to_string(std::get<int>(v));
            }
            targs.push_back(fb::CreateTemplateArg(b, b.CreateString(name), b.CreateString(kind),
                                                  b.CreateString(value)));
          }
          std::vector<std::string> odt;
          for (auto d : call.output_dtypes) odt.emplace_back(dtype_name(d));
          kernels.push_back(fb::CreateKernel(
              b, b.CreateString(transforms::kernel_sha256(s)), b.CreateString(s.name),
              strings(s.input_names), strings(s.output_names), b.CreateString(s.source),
              b.CreateString(s.header), s.ensure_row_contiguous, s.atomic_outputs,
              b.CreateString(s.math_mode), b.CreateVector(targs), strings(call.grid),
              strings(call.threadgroup), strings(call.output_shapes), strings(odt),
              b.CreateString(op_metal_source(t, op, *k))));
        }
        kidx = it->second;
      }
      int lidx = -1;
      if (kernel::is_library_kernel(*op.primitive)) {
        kernel::LibrarySpec spec = kernel::library_spec(*op.primitive);
        std::string key = kernel::library_key(spec);
        auto [it, fresh] = library_index.emplace(key, static_cast<int>(libraries.size()));
        if (fresh) {
          std::vector<std::string> inputs, placeholders;
          for (auto& [input, ph] : spec.template_dtypes) {
            inputs.push_back(input);
            placeholders.push_back(ph);
          }
          libraries.push_back(fb::CreateLibrary(
              b, b.CreateString(key), b.CreateString(transforms::library_sha256(spec)),
              b.CreateString(spec.name), b.CreateString(spec.source), strings(inputs),
              strings(placeholders), b.CreateString(spec.math_mode)));
        }
        lidx = it->second;
      }
      std::vector<flatbuffers::Offset<fb::Dims>> shapes;
      std::vector<std::string> dtypes;
      for (size_t i = 0; i < op.shapes.size(); ++i) {
        shapes.push_back(dims(op.shapes[i]));
        dtypes.emplace_back(dtype_name(op.dtypes[i]));
      }
      ops.push_back(fb::CreateOp(b, b.CreateString(op.primitive->name()), b.CreateVector(bytes),
                                 refs(op.inputs), b.CreateVector(shapes), strings(dtypes), kidx,
                                 lidx));
    }
    fb_traces.push_back(fb::CreateTrace(b, b.CreateVector(in_shapes), strings(in_dtypes),
                                        strings(rec.kwarg_names), b.CreateVector(constants),
                                        b.CreateVector(ops), refs(t.outputs)));
  }
  auto root = fb::CreateFunction(b, kFormatVersion, b.CreateString(kProducer), shapeless,
                                 b.CreateVector(fb_traces), b.CreateVector(kernels),
                                 b.CreateString(metadata), b.CreateVector(libraries));
  b.Finish(root, fb::FunctionIdentifier());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

void write_atomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("export_function: cannot write '" + path + "'");
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("export_function: cannot write '" + path + "'");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error("export_function: cannot write '" + path + "': " + ec.message());
}

bool same_signature(const Recorded& a, const Recorded& b, bool shapeless) {
  if (a.kwarg_names != b.kwarg_names || a.trace.input_dtypes != b.trace.input_dtypes) return false;
  for (size_t i = 0; i < a.trace.input_shapes.size(); ++i) {
    if (a.trace.input_shapes[i].size() != b.trace.input_shapes[i].size()) return false;
    if (!shapeless && a.trace.input_shapes[i] != b.trace.input_shapes[i]) return false;
  }
  return a.trace.input_shapes.size() == b.trace.input_shapes.size();
}

}  // namespace

// ---- export API ------------------------------------------------------------------------------

struct FunctionExporter::State {
  std::string path;
  std::function<Args(const Args&, const Kwargs&)> fn;
  bool shapeless = false;
  std::string metadata;
  std::vector<Recorded> traces;
};

FunctionExporter::FunctionExporter(std::string path,
                                   std::function<Args(const Args&, const Kwargs&)> fn,
                                   bool shapeless)
    : state_(std::make_shared<State>()) {
  if (!fn) throw std::invalid_argument("export_function: no function given");
  state_->path = std::move(path);
  state_->fn = std::move(fn);
  state_->shapeless = shapeless;
}

void FunctionExporter::set_metadata(std::string metadata) {
  state_->metadata = std::move(metadata);
}

void FunctionExporter::operator()(const Args& args, const Kwargs& kwargs) {
  Recorded rec;
  Args flat = args;
  for (auto& [k, v] : kwargs) {
    rec.kwarg_names.push_back(k);
    flat.push_back(v);
  }
  size_t npos = args.size();
  auto& fn = state_->fn;
  auto names = rec.kwarg_names;
  rec.trace = transforms::trace(
      [&](const std::vector<Array>& in) {
        Args a(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(npos));
        Kwargs kw;
        for (size_t i = 0; i < names.size(); ++i) kw.emplace(names[i], in[npos + i]);
        return fn(a, kw);
      },
      flat);
  // A shapeless file is replayed on other shapes without the function: a trace that holds the
  // call's shapes (compile traces such a function again; see docs/compile.md) would compute with
  // the traced ones there. Export does not fuse, so the elementwise ops' own broadcasts count too.
  if (state_->shapeless) {
    std::string why = transforms::call_shapes_held(rec.trace, /*fused=*/false);
    if (!why.empty())
      throw NotSupported(
          "export_function",
          fmt::format("not supported: exporting this function shapeless ({}): replayed on other "
                      "shapes it would keep the traced ones. Export it with shapeless=False, "
                      "once per input shape (a file holds several), or give kernel geometry as "
                      "shape expressions",
                      why));
  }
  for (auto& r : state_->traces)
    if (same_signature(r, rec, state_->shapeless))
      throw std::invalid_argument(
          "export_function: the function was already exported for this input signature");
  state_->traces.push_back(std::move(rec));
  write_atomically(state_->path, write_file(state_->traces, state_->shapeless, state_->metadata));
}

FunctionExporter exporter(const std::string& path,
                          std::function<Args(const Args&, const Kwargs&)> fn, bool shapeless) {
  return FunctionExporter(path, std::move(fn), shapeless);
}

void export_function(const std::string& path, const std::function<Args(const Args&)>& fn,
                     const Args& args, bool shapeless) {
  if (!fn) throw std::invalid_argument("export_function: no function given");
  exporter(
      path, [fn](const Args& a, const Kwargs&) { return fn(a); }, shapeless)(args);
}

void export_function(const std::string& path,
                     const std::function<Args(const Args&, const Kwargs&)>& fn, const Args& args,
                     const Kwargs& kwargs, bool shapeless) {
  exporter(path, fn, shapeless)(args, kwargs);
}

// ---- reading ---------------------------------------------------------------------------------

namespace transforms {

bool has_alloy_identifier(const uint8_t* data, size_t size) {
  return size >= 8 && flatbuffers::BufferHasIdentifier(data, fb::FunctionIdentifier());
}

namespace {
[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("import_function: bad Alloy file: " + what);
}

template <class T>
const T& need(const T* p, const char* what) {
  if (!p) bad(std::string("missing ") + what);
  return *p;
}

// A [long] vector's elements. Read bytewise: the verifier checks the alignment of a vector's
// length, not of 8-byte elements, so a hostile file can misalign them.
Shape read_longs(const flatbuffers::Vector<int64_t>* v) {
  Shape s;
  if (!v) return s;
  const uint8_t* p = v->Data();
  s.resize(v->size());
  for (size_t i = 0; i < s.size(); ++i) std::memcpy(&s[i], p + 8 * i, 8);  // little-endian file
  return s;
}

Shape read_dims(const fb::Dims* d) {
  Shape s = d ? read_longs(d->dims()) : Shape{};
  checked_numel(s);  // negative or overflowing dimensions are errors
  return s;
}

Dtype read_dtype(const flatbuffers::String* s) {
  if (!s) bad("missing dtype");
  return dtype_from_name(s->string_view());
}

std::vector<ValueRef> read_refs(const flatbuffers::Vector<const fb::ValueRef*>* v) {
  std::vector<ValueRef> out;
  if (!v) return out;
  for (auto* r : *v) {
    if (r->kind() > fb::ValueKind_MAX) bad("unknown value kind");
    out.push_back({static_cast<ValueRef::Kind>(r->kind()), r->index(), r->output()});
  }
  return out;
}
}  // namespace

std::shared_ptr<ImportedFunction::Impl> load_alloy_file(const uint8_t* data, size_t size) {
  if (!has_alloy_identifier(data, size)) bad("no 'ALYF' file identifier");
  flatbuffers::Verifier verifier(data, size, /*max_depth=*/32, /*max_tables=*/1000000);
  if (!fb::VerifyFunctionBuffer(verifier))
    bad("the FlatBuffers verifier rejects it (truncated or corrupted)");
  const fb::Function* f = fb::GetFunction(data);
  if (f->format_version() != kFormatVersion)
    throw std::invalid_argument(
        fmt::format("import_function: the file has format version {}; this Alloy reads version {}",
                    f->format_version(), kFormatVersion));
  auto impl = std::make_shared<ImportedFunction::Impl>();
  impl->format = "alloy";
  impl->producer = f->producer() ? f->producer()->str() : "";
  impl->metadata = f->metadata() ? f->metadata()->str() : "";
  impl->shapeless = f->shapeless();
  const auto& traces = need(f->traces(), "traces");
  if (traces.size() == 0) bad("no traces");
  size_t n_kernels = f->kernels() ? f->kernels()->size() : 0;
  // Libraries first: reading one registers it under its content key, which the LibraryKernel
  // ops' states name (reading translates for reflection; it compiles nothing).
  std::vector<std::string> library_keys;
  if (f->libraries())
    for (const fb::Library* fl : *f->libraries()) {
      kernel::LibrarySpec spec;
      spec.name = need(fl->name(), "library name").str();
      spec.source = need(fl->source(), "library source").str();
      spec.math_mode = need(fl->math_mode(), "library math mode").str();
      size_t n_ph = fl->placeholders() ? fl->placeholders()->size() : 0;
      if ((fl->placeholder_inputs() ? fl->placeholder_inputs()->size() : 0) != n_ph)
        bad("a library's placeholder lists differ in length");
      for (size_t i = 0; i < n_ph; ++i)
        spec.template_dtypes[fl->placeholder_inputs()->Get(static_cast<unsigned>(i))->str()] =
            fl->placeholders()->Get(static_cast<unsigned>(i))->str();
      std::string key = kernel::library_key(spec);
      if (!fl->key() || fl->key()->str() != key)
        bad(fmt::format("library '{}': its content key does not match its source", spec.name));
      if (!fl->sha256() || fl->sha256()->str() != library_sha256(spec))
        bad(fmt::format("library '{}': its hash does not match its source", spec.name));
      try {
        impl->libraries.push_back(kernel::load_library(spec));
      } catch (const NotSupported&) {
        throw;  // valid content Alloy cannot read
      } catch (const std::exception& err) {
        bad(fmt::format("library '{}': {}", spec.name, err.what()));
      }
      library_keys.push_back(key);
    }
  for (const fb::Trace* ft : traces) {
    ImportedFunction::Impl::Entry e;
    transforms::Trace& t = e.trace;
    const auto& shapes = need(ft->input_shapes(), "input shapes");
    const auto& dtypes = need(ft->input_dtypes(), "input dtypes");
    if (shapes.size() != dtypes.size()) bad("input shapes and dtypes differ in number");
    for (size_t i = 0; i < shapes.size(); ++i) {
      t.input_shapes.push_back(read_dims(shapes.Get(i)));
      t.input_dtypes.push_back(read_dtype(dtypes.Get(i)));
      t.input_devices.push_back(Device::cpu());
    }
    if (ft->kwarg_names())
      for (auto* s : *ft->kwarg_names()) e.kwarg_names.push_back(s->str());
    if (e.kwarg_names.size() > shapes.size()) bad("more keyword names than inputs");
    if (!std::is_sorted(e.kwarg_names.begin(), e.kwarg_names.end()) ||
        std::adjacent_find(e.kwarg_names.begin(), e.kwarg_names.end()) != e.kwarg_names.end())
      bad("keyword names are not sorted and distinct");
    if (ft->constants())
      for (const fb::Constant* c : *ft->constants()) {
        TapeConstant tc;
        if (!c->shape()) bad("a constant has no shape");
        tc.shape = read_longs(c->shape());
        tc.dtype = read_dtype(c->dtype());
        int64_t n = checked_numel(tc.shape), bytes = 0;
        if (__builtin_mul_overflow(n, static_cast<int64_t>(size_of(tc.dtype)), &bytes) ||
            !c->data() || static_cast<int64_t>(c->data()->size()) != bytes)
          bad(fmt::format("a constant of shape {} does not hold its bytes", shape_str(tc.shape)));
        tc.bytes.assign(c->data()->begin(), c->data()->end());
        t.constants.push_back(std::move(tc));
      }
    const auto& ops = need(ft->ops(), "ops");
    for (size_t i = 0; i < ops.size(); ++i) {
      const fb::Op* o = ops.Get(i);
      TapeOp op;
      std::string name = need(o->primitive(), "primitive name").str();
      const auto& sbytes = need(o->state(), "primitive state");
      PrimitiveState state = PrimitiveState::from_bytes(sbytes.data(), sbytes.size());
      try {
        op.primitive = make_primitive(name, state);
      } catch (const std::invalid_argument& err) {
        bad(fmt::format("op {} ({}): {}", i, name, err.what()));
      }
      if (name == "CustomKernel") {
        if (o->kernel() < 0 || static_cast<size_t>(o->kernel()) >= n_kernels)
          bad(fmt::format("op {} refers to no kernel", i));
        auto* k = dynamic_cast<kernel::CustomKernel*>(op.primitive.get());
        const fb::Kernel* fk = f->kernels()->Get(static_cast<unsigned>(o->kernel()));
        if (!k || !fk->sha256() || fk->sha256()->str() != kernel_sha256(k->spec()))
          bad(fmt::format("the kernel table disagrees with op {} (kernel hash)", i));
      }
      if (name == "LibraryKernel") {
        if (o->library() < 0 || static_cast<size_t>(o->library()) >= library_keys.size() ||
            library_keys[static_cast<size_t>(o->library())] != state.get_string("library"))
          bad(fmt::format("op {} refers to no library of the file", i));
      }
      op.inputs = read_refs(o->inputs());
      if (o->output_shapes())
        for (auto* d : *o->output_shapes()) op.shapes.push_back(read_dims(d));
      if (o->output_dtypes())
        for (auto* d : *o->output_dtypes()) op.dtypes.push_back(read_dtype(d));
      op.device = Device::cpu();
      t.ops.push_back(std::move(op));
    }
    t.outputs = read_refs(ft->outputs());
    if (t.outputs.empty()) bad("a trace has no outputs");
    try {
      transforms::validate(t);
    } catch (const std::invalid_argument& err) {
      bad(err.what());
    }
    impl->entries.push_back(std::move(e));
  }
  collect_kernels(*impl);
  return impl;
}

void collect_kernels(ImportedFunction::Impl& impl) {
  std::set<std::pair<std::string, std::string>> seen;
  for (auto& e : impl.entries)
    for (auto& op : e.trace.ops)
      if (auto* k = dynamic_cast<kernel::CustomKernel*>(op.primitive.get())) {
        ExportedKernel ek{k->spec().name, kernel_sha256(k->spec()),
                          op_metal_source(e.trace, op, *k)};
        if (seen.insert({ek.sha256, ek.metal_source}).second) impl.kernels.push_back(ek);
      } else if (kernel::is_library_kernel(*op.primitive)) {
        // A library is trusted as a whole (its source), listed once.
        kernel::LibrarySpec spec = kernel::library_spec(*op.primitive);
        ExportedKernel ek{"library " + spec.name, library_sha256(spec), spec.source};
        if (seen.insert({ek.sha256, ek.metal_source}).second) impl.kernels.push_back(ek);
      }
}

std::shared_ptr<ImportedFunction::Impl> load_exported(const uint8_t* data, size_t size) {
  if (has_alloy_identifier(data, size)) return load_alloy_file(data, size);
  return load_mlxfn_file(data, size);
}

}  // namespace transforms

// ---- ImportedFunction ------------------------------------------------------------------------

namespace {
std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  if (ec)
    throw std::invalid_argument("import_function: cannot read '" + path + "': " + ec.message());
  if (size > (size_t{1} << 34))
    throw std::invalid_argument("import_function: '" + path + "' is larger than 16 GiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument("import_function: cannot open '" + path + "'");
  std::vector<uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in) throw std::invalid_argument("import_function: cannot read '" + path + "'");
  return bytes;
}

std::shared_ptr<ImportedFunction::Impl> load_path(const std::string& path) {
  auto bytes = read_whole_file(path);
  try {
    return transforms::load_exported(bytes.data(), bytes.size());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " ('" + path + "')");
  }
}

std::string signature_text(const ImportedFunction::Impl::Entry& e) {
  std::string s;
  size_t n = e.trace.input_shapes.size(), npos = n - e.kwarg_names.size();
  for (size_t i = 0; i < n; ++i) {
    s += i < npos ? fmt::format("    {}: ", i)
                  : fmt::format("    \"{}\": ", e.kwarg_names[i - npos]);
    s += fmt::format("{} {}\n", shape_str(e.trace.input_shapes[i]),
                     dtype_name(e.trace.input_dtypes[i]));
  }
  return s;
}
}  // namespace

std::vector<Array> ImportedFunction::operator()(const Args& args, const Kwargs& kwargs) const {
  if (!impl_) throw std::invalid_argument("ImportedFunction: empty (not imported)");
  Args flat = args;
  std::vector<std::string> names;
  for (auto& [k, v] : kwargs) {
    names.push_back(k);
    flat.push_back(v);
  }
  for (auto& e : impl_->entries) {
    const auto& t = e.trace;
    if (e.kwarg_names != names || t.input_shapes.size() != flat.size()) continue;
    bool match = true;
    for (size_t i = 0; i < flat.size() && match; ++i) {
      if (!flat[i].valid()) throw std::invalid_argument(fmt::format("input {} is empty", i));
      match = flat[i].dtype() == t.input_dtypes[i] &&
              flat[i].ndim() == static_cast<int>(t.input_shapes[i].size()) &&
              (impl_->shapeless || flat[i].shape() == t.input_shapes[i]);
    }
    if (!match) continue;
    return transforms::replay(t, flat, impl_->device, &e.constants);
  }
  std::string msg = "import_function: no exported trace matches the arguments. The file holds:\n";
  for (size_t i = 0; i < impl_->entries.size(); ++i)
    msg += fmt::format("  {}. inputs:\n{}", i + 1, signature_text(impl_->entries[i]));
  msg += "Called with:\n";
  for (size_t i = 0; i < flat.size(); ++i)
    msg += fmt::format("    {}: {} {}\n",
                       i < args.size() ? std::to_string(i) : "\"" + names[i - args.size()] + "\"",
                       flat[i].valid() ? shape_str(flat[i].shape()) : "(empty)",
                       flat[i].valid() ? dtype_name(flat[i].dtype()) : "");
  throw std::invalid_argument(msg);
}

const std::string& ImportedFunction::format() const {
  return impl_->format;
}
bool ImportedFunction::shapeless() const {
  return impl_->shapeless;
}
const std::vector<ExportedKernel>& ImportedFunction::kernels() const {
  return impl_->kernels;
}

std::string ImportedFunction::describe() const {
  const Impl& f = *impl_;
  std::string s = fmt::format("format: {} (written by {}){}\n", f.format, f.producer,
                              f.shapeless ? ", shapeless" : "");
  if (!f.metadata.empty()) s += "metadata: " + f.metadata + "\n";
  for (size_t i = 0; i < f.entries.size(); ++i) {
    const auto& e = f.entries[i];
    const auto& t = e.trace;
    s += fmt::format("trace {}:\n  inputs:\n{}", i + 1, signature_text(e));
    s += "  outputs:\n";
    for (size_t j = 0; j < t.outputs.size(); ++j) {
      auto [shape, dtype] = value_type(t, t.outputs[j]);
      s += fmt::format("    {}: {} {}\n", j, shape_str(shape), dtype_name(dtype));
    }
    std::map<std::string, int> count;
    for (auto& op : t.ops) ++count[op.primitive->label()];
    s += fmt::format("  ops ({}):", t.ops.size());
    for (auto& [n, c] : count) s += fmt::format(" {} x{}", n, c);
    s += fmt::format("\n  constants: {}\n", t.constants.size());
  }
  s += fmt::format("kernels ({}):\n", f.kernels.size());
  for (auto& k : f.kernels) s += fmt::format("  {}  sha256 {}\n", k.name, k.sha256);
  return s;
}

ImportedFunction import_function(const std::string& path, const ImportOptions& options) {
  auto impl = load_path(path);
  std::vector<const ExportedKernel*> refused;
  if (!options.trust_kernels)
    for (auto& k : impl->kernels)
      if (!options.allowed_kernels.count(k.sha256)) refused.push_back(&k);
  if (!refused.empty()) {
    std::string msg = fmt::format(
        "import_function: '{}' holds kernels that would be compiled to native code and run; "
        "give trust_kernels=true, or allow their hashes (allowed_kernels):\n",
        path);
    for (auto* k : refused) msg += fmt::format("  {}  sha256 {}\n", k->name, k->sha256);
    throw UntrustedKernels(msg);
  }
  impl->device = options.device.value_or(default_device());
  for (auto& e : impl->entries) e.constants = transforms::make_constants(e.trace, impl->device);
  ImportedFunction f;
  f.impl_ = std::move(impl);
  return f;
}

std::string describe_exported_function(const std::string& path) {
  ImportedFunction f;
  f.impl_ = load_path(path);
  return f.describe();
}

}  // namespace alloy
