// ShapeExpr: a postfix integer program over the inputs' shapes (include/alloy/kernel.h).
#include <fmt/format.h>

#include <stdexcept>

#include "alloy/kernel.h"

namespace alloy {
namespace {
// Opcodes and their operand counts in the code stream.
enum Op : int64_t { kConst, kDim, kSize, kAdd, kSub, kMul, kFloorDiv, kCeilDiv, kMin, kMax };

ShapeExpr binary(const ShapeExpr& a, const ShapeExpr& b, Op op) {
  std::vector<int64_t> code = a.code(), tail = b.code();
  code.insert(code.end(), tail.begin(), tail.end());
  code.push_back(op);
  return ShapeExpr::from_code(std::move(code));
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Walks the program: calls leaf(op, operands) and node(op) for binary operators.
template <class Leaf, class Node>
void walk(const std::vector<int64_t>& code, Leaf&& leaf, Node&& node) {
  size_t depth = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    switch (code[i]) {
      case kConst:
        if (i + 1 >= code.size()) throw std::invalid_argument("ShapeExpr: truncated constant");
        leaf(kConst, code[i + 1], 0);
        i += 1;
        ++depth;
        break;
      case kDim:
        if (i + 2 >= code.size()) throw std::invalid_argument("ShapeExpr: truncated dim");
        leaf(kDim, code[i + 1], code[i + 2]);
        i += 2;
        ++depth;
        break;
      case kSize:
        if (i + 1 >= code.size()) throw std::invalid_argument("ShapeExpr: truncated size");
        leaf(kSize, code[i + 1], 0);
        i += 1;
        ++depth;
        break;
      case kAdd:
      case kSub:
      case kMul:
      case kFloorDiv:
      case kCeilDiv:
      case kMin:
      case kMax:
        if (depth < 2) throw std::invalid_argument("ShapeExpr: operator without operands");
        node(static_cast<Op>(code[i]));
        --depth;
        break;
      default:
        throw std::invalid_argument(fmt::format("ShapeExpr: unknown opcode {}", code[i]));
    }
  }
  if (depth != 1) throw std::invalid_argument("ShapeExpr: malformed program");
}
}  // namespace

ShapeExpr::ShapeExpr(int64_t value) : value_(value) {}

std::vector<int64_t> ShapeExpr::code() const {
  return code_.empty() ? std::vector<int64_t>{kConst, value_} : code_;
}

ShapeExpr ShapeExpr::dim(int input, int axis) {
  if (input < 0) throw std::invalid_argument("ShapeExpr::dim: negative input index");
  return from_code({kDim, input, axis});
}
ShapeExpr ShapeExpr::size(int input) {
  if (input < 0) throw std::invalid_argument("ShapeExpr::size: negative input index");
  return from_code({kSize, input});
}
ShapeExpr ShapeExpr::ceil_div(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kCeilDiv);
}
ShapeExpr ShapeExpr::min(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kMin);
}
ShapeExpr ShapeExpr::max(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kMax);
}
ShapeExpr operator+(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kAdd);
}
ShapeExpr operator-(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kSub);
}
ShapeExpr operator*(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kMul);
}
ShapeExpr operator/(const ShapeExpr& a, const ShapeExpr& b) {
  return binary(a, b, kFloorDiv);
}

ShapeExpr ShapeExpr::from_code(std::vector<int64_t> code) {
  walk(
      code, [](Op, int64_t, int64_t) {}, [](Op) {});
  ShapeExpr e;
  if (code.size() == 2 && code[0] == kConst) {
    e.value_ = code[1];  // a constant reads back as one (is_constant, the fast path of eval)
    return e;
  }
  e.code_ = std::move(code);
  return e;
}

bool ShapeExpr::is_constant() const {
  return code_.empty();
}

int64_t ShapeExpr::eval(const std::vector<Shape>& shapes) const {
  if (is_constant()) return value_;
  std::vector<int64_t> stack;
  walk(
      code_,
      [&](Op op, int64_t a, int64_t b) {
        if (op == kConst) return stack.push_back(a);
        if (a >= static_cast<int64_t>(shapes.size()))
          throw std::invalid_argument(fmt::format("ShapeExpr {}: there is no input {} ({} inputs)",
                                                  str(), a, shapes.size()));
        const Shape& s = shapes[a];
        if (op == kSize) {
          int64_t n = 1;
          for (auto d : s) n *= d;
          return stack.push_back(n);
        }
        int64_t axis = b < 0 ? b + static_cast<int64_t>(s.size()) : b;
        if (axis < 0 || axis >= static_cast<int64_t>(s.size()))
          throw std::invalid_argument(fmt::format(
              "ShapeExpr {}: input {} has {} dimensions, no axis {}", str(), a, s.size(), b));
        stack.push_back(s[axis]);
      },
      [&](Op op) {
        int64_t y = stack.back();
        stack.pop_back();
        int64_t x = stack.back();
        int64_t r = 0;
        switch (op) {
          case kAdd:
            r = x + y;
            break;
          case kSub:
            r = x - y;
            break;
          case kMul:
            r = x * y;
            break;
          case kMin:
            r = std::min(x, y);
            break;
          case kMax:
            r = std::max(x, y);
            break;
          case kFloorDiv:
          case kCeilDiv:
            if (y == 0)
              throw std::invalid_argument(fmt::format("ShapeExpr {}: division by zero", str()));
            r = op == kFloorDiv ? floor_div(x, y) : -floor_div(-x, y);
            break;
          default:
            break;
        }
        stack.back() = r;
      });
  return stack.back();
}

std::string ShapeExpr::str() const {
  if (is_constant()) return std::to_string(value_);
  std::vector<std::string> stack;
  walk(
      code_,
      [&](Op op, int64_t a, int64_t b) {
        if (op == kConst)
          stack.push_back(std::to_string(a));
        else if (op == kDim)
          stack.push_back(fmt::format("in{}.shape[{}]", a, b));
        else
          stack.push_back(fmt::format("in{}.size", a));
      },
      [&](Op op) {
        std::string y = stack.back();
        stack.pop_back();
        std::string& x = stack.back();
        switch (op) {
          case kAdd:
            x = "(" + x + " + " + y + ")";
            break;
          case kSub:
            x = "(" + x + " - " + y + ")";
            break;
          case kMul:
            x = "(" + x + " * " + y + ")";
            break;
          case kFloorDiv:
            x = "(" + x + " // " + y + ")";
            break;
          case kCeilDiv:
            x = "ceil_div(" + x + ", " + y + ")";
            break;
          case kMin:
            x = "min(" + x + ", " + y + ")";
            break;
          case kMax:
            x = "max(" + x + ", " + y + ")";
            break;
          default:
            break;
        }
      });
  return stack.back();
}

}  // namespace alloy
