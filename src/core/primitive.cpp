#include "core/primitive.h"

#include <flatbuffers/flexbuffers.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include "alloy/errors.h"

namespace alloy {

// ---- state -----------------------------------------------------------------------------------

PrimitiveState& PrimitiveState::set(std::string key, Value v) {
  for (auto& [k, old] : fields_)
    if (k == key) {
      old = std::move(v);
      return *this;
    }
  fields_.emplace_back(std::move(key), std::move(v));
  return *this;
}

bool PrimitiveState::has(const std::string& key) const {
  return std::any_of(fields_.begin(), fields_.end(), [&](auto& f) { return f.first == key; });
}

const PrimitiveState::Value& PrimitiveState::get(const std::string& key) const {
  for (auto& [k, v] : fields_)
    if (k == key) return v;
  throw std::invalid_argument("primitive state: no field '" + key + "'");
}

namespace {
// Field kinds as stored: a vector of [kind, value] per field keeps every kind distinguishable
// (FlexBuffers' own typing would merge e.g. an empty int list and an empty string list).
enum Kind : int64_t { kBool, kInt, kDouble, kString, kInts, kDoubles, kStrings, kIntLists };
constexpr const char* kVersionKey = "__version";
constexpr const char* kFieldsKey = "__fields";
}  // namespace

std::vector<uint8_t> PrimitiveState::to_bytes() const {
  flexbuffers::Builder b;
  b.Map([&] {
    b.Int(kVersionKey, version_);
    b.Vector(kFieldsKey, [&] {
      for (auto& field : fields_) {
        // Not a structured binding: clang 14 (the sanitizer build) cannot capture one.
        const std::string& key = field.first;
        const Value& value = field.second;
        b.Vector([&] {
          b.String(key);
          b.Int(static_cast<int64_t>(value.index()));
          std::visit(
              [&](auto& v) {
                using T = std::decay_t<decltype(v)>;
                if constexpr (std::is_same_v<T, bool>) {
                  b.Bool(v);
                } else if constexpr (std::is_same_v<T, int64_t>) {
                  b.Int(v);
                } else if constexpr (std::is_same_v<T, double>) {
                  b.Double(v);
                } else if constexpr (std::is_same_v<T, std::string>) {
                  b.String(v);
                } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
                  b.Vector([&] {
                    for (auto x : v) b.Int(x);
                  });
                } else if constexpr (std::is_same_v<T, std::vector<double>>) {
                  b.Vector([&] {
                    for (auto x : v) b.Double(x);
                  });
                } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
                  b.Vector([&] {
                    for (auto& x : v) b.String(x);
                  });
                } else {
                  b.Vector([&] {
                    for (auto& row : v)
                      b.Vector([&] {
                        for (auto x : row) b.Int(x);
                      });
                  });
                }
              },
              value);
        });
      }
    });
  });
  b.Finish();
  return b.GetBuffer();
}

PrimitiveState PrimitiveState::from_bytes(const uint8_t* data, size_t size) {
  std::vector<uint8_t> reuse;
  if (!data || size == 0 || !flexbuffers::VerifyBuffer(data, size, &reuse))
    throw std::invalid_argument("primitive state: the bytes are not a valid FlexBuffer");
  auto root = flexbuffers::GetRoot(data, size);
  if (!root.IsMap()) throw std::invalid_argument("primitive state: the root is not a map");
  auto map = root.AsMap();
  auto version = map[kVersionKey];
  auto fields = map[kFieldsKey];
  if (!version.IsInt() || !fields.IsVector())
    throw std::invalid_argument("primitive state: missing version or fields");
  PrimitiveState s(static_cast<int>(version.AsInt64()));
  auto vec = fields.AsVector();
  for (size_t i = 0; i < vec.size(); ++i) {
    auto f = vec[i].AsVector();
    if (f.size() != 3 || !f[0].IsString() || !f[1].IsInt())
      throw std::invalid_argument("primitive state: malformed field");
    std::string key = f[0].AsString().str();
    auto v = f[2];
    // Integers only where the writer put integers: AsInt64 of a float (a hostile file's NaN)
    // is undefined behaviour.
    auto int_of = [&](flexbuffers::Reference r) {
      if (!r.IsInt())
        throw std::invalid_argument("primitive state: field '" + key + "' holds a non-integer");
      return r.AsInt64();
    };
    auto ints = [&](flexbuffers::Reference r) {
      std::vector<int64_t> out;
      auto a = r.AsVector();
      for (size_t j = 0; j < a.size(); ++j) out.push_back(int_of(a[j]));
      return out;
    };
    switch (f[1].AsInt64()) {
      case kBool:
        s.set(key, v.AsBool());
        break;
      case kInt:
        s.set(key, int_of(v));
        break;
      case kDouble:
        s.set(key, v.AsDouble());
        break;
      case kString:
        s.set(key, v.AsString().str());
        break;
      case kInts:
        s.set(key, ints(v));
        break;
      case kDoubles: {
        std::vector<double> out;
        auto a = v.AsVector();
        for (size_t j = 0; j < a.size(); ++j) out.push_back(a[j].AsDouble());
        s.set(key, std::move(out));
        break;
      }
      case kStrings: {
        std::vector<std::string> out;
        auto a = v.AsVector();
        for (size_t j = 0; j < a.size(); ++j) out.push_back(a[j].AsString().str());
        s.set(key, std::move(out));
        break;
      }
      case kIntLists: {
        std::vector<std::vector<int64_t>> out;
        auto a = v.AsVector();
        for (size_t j = 0; j < a.size(); ++j) out.push_back(ints(a[j]));
        s.set(key, std::move(out));
        break;
      }
      default:
        throw std::invalid_argument("primitive state: unknown field kind in '" + key + "'");
    }
  }
  return s;
}

// ---- primitive defaults ------------------------------------------------------------------------

bool Primitive::is_equivalent(const Primitive& other) const {
  return std::string_view(name()) == other.name() && state() == other.state();
}

std::vector<Array> Primitive::vjp(const std::vector<Array>&, const std::vector<Array>&,
                                  const std::vector<int>&, const std::vector<Array>&) {
  throw NotSupported(label(), "no gradient for " + label() + " (it defines no vjp)");
}

std::vector<Array> Primitive::jvp(const std::vector<Array>&, const std::vector<Array>&,
                                  const std::vector<int>&) {
  throw NotSupported(label(), "no gradient for " + label() + " (it defines no jvp)");
}

// ---- registry --------------------------------------------------------------------------------

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, PrimitiveFactory> factories;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: registrations run at static init
  return *r;
}
}  // namespace

void register_primitive(const std::string& name, PrimitiveFactory factory) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  r.factories[name] = std::move(factory);
}

std::shared_ptr<Primitive> make_primitive(const std::string& name, const PrimitiveState& state) {
  PrimitiveFactory f;
  {
    auto& r = registry();
    std::lock_guard lock(r.mu);
    auto it = r.factories.find(name);
    if (it == r.factories.end())
      throw std::invalid_argument("unknown primitive '" + name + "' (not registered)");
    f = it->second;
  }
  return f(state);
}

std::vector<std::string> registered_primitives() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (auto& [n, f] : r.factories) names.push_back(n);
  return names;
}

}  // namespace alloy
