// The typed analysis over Clang's AST (Clang 14, in process): parse the CPU translation with the
// embedded prelude as in-memory files, then walk each kernel's call graph from its entry.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "alloy/errors.h"
#include "core/prelude_files.h"
#include "typed/typed.h"

#if ALLOY_HAVE_CLANG
#include <clang/AST/ASTContext.h>
#include <clang/AST/ExprCXX.h>
#include <clang/AST/RecursiveASTVisitor.h>
#include <clang/Basic/Diagnostic.h>
#include <clang/Basic/SourceManager.h>
#include <clang/Frontend/ASTUnit.h>
#include <clang/Tooling/Tooling.h>
#endif

namespace alloy::typed {

#if !ALLOY_HAVE_CLANG

bool available() {
  return false;
}

Analysis analyze_translation(const msl::Translation&, const kernel::SourceMap& map,
                             const std::string&) {
  throw NotSupported(map.label, "not supported: typed analysis (Clang not found)");
}

#else

bool available() {
  return true;
}

namespace {

using namespace clang;

constexpr const char* kPreludeDir = "/alloy-prelude";
constexpr const char* kMainFile = "/alloy-typed/kernel.cpp";

// Barrier and simd functions, named as the translator's token scan names them (msl/translate.cpp
// is_sync_ident), for calls.
bool is_barrier(const std::string& s) {
  return s == "threadgroup_barrier" || s == "simdgroup_barrier";
}
bool is_simd(const std::string& s) {
  return (s.starts_with("simd_") || s.starts_with("quad_") ||
          (s.starts_with("simdgroup_") && s != "simdgroup_index_in_threadgroup" &&
           s != "simdgroups_per_threadgroup")) &&
         !is_barrier(s);
}

// Clang's errors as a g++-style log ("kernel.metal:12:5: error: ..."), for map_compile_log.
class LogDiagnostics : public DiagnosticConsumer {
 public:
  std::string log;
  int errors = 0;
  void HandleDiagnostic(DiagnosticsEngine::Level level, const Diagnostic& info) override {
    DiagnosticConsumer::HandleDiagnostic(level, info);
    if (level < DiagnosticsEngine::Error && level != DiagnosticsEngine::Note) return;
    if (level >= DiagnosticsEngine::Error) ++errors;
    if (level == DiagnosticsEngine::Note && errors == 0) return;
    SmallString<256> text;
    info.FormatDiagnostic(text);
    const char* what = level == DiagnosticsEngine::Note ? "note" : "error";
    if (info.hasSourceManager() && info.getLocation().isValid()) {
      const SourceManager& sm = info.getSourceManager();
      PresumedLoc p = sm.getPresumedLoc(sm.getExpansionLoc(info.getLocation()));
      if (p.isValid()) {
        log += fmt::format("{}:{}:{}: {}: {}\n", p.getFilename(), p.getLine(), p.getColumn(), what,
                           text.str().str());
        return;
      }
    }
    log += fmt::format("{}: {}\n", what, text.str().str());
  }
};

// Metal's name for a (canonical) type: builtin scalars and the prelude's half/bfloat by their
// Metal names, anything else as Clang prints it without scopes.
std::string metal_name(QualType t, const ASTContext& ctx) {
  t = t.getNonReferenceType().getCanonicalType().getUnqualifiedType();
  if (const auto* b = t->getAs<BuiltinType>()) {
    switch (b->getKind()) {
      case BuiltinType::Bool:
        return "bool";
      case BuiltinType::Char_S:
      case BuiltinType::SChar:
        return "char";
      case BuiltinType::Char_U:
      case BuiltinType::UChar:
        return "uchar";
      case BuiltinType::Short:
        return "short";
      case BuiltinType::UShort:
        return "ushort";
      case BuiltinType::Int:
        return "int";
      case BuiltinType::UInt:
        return "uint";
      case BuiltinType::Long:
      case BuiltinType::LongLong:
        return "long";
      case BuiltinType::ULong:
      case BuiltinType::ULongLong:
        return "ulong";
      case BuiltinType::Float:
        return "float";
      case BuiltinType::Double:
        return "double";
      default:
        break;
    }
  }
  if (const auto* r = t->getAsCXXRecordDecl()) {
    std::string n = r->getNameAsString();
    if (n == "half" || n == "bfloat") return n;
  }
  PrintingPolicy pp(ctx.getLangOpts());
  pp.SuppressScope = true;
  return t.getAsString(pp);
}

bool lowp_name(const std::string& t) {
  return t == "half" || t == "bfloat";
}

// The operand as the user wrote it: without implicit conversions, copies, parentheses and the
// translator's `cond_t` casts around conditional operands.
const Expr* written(const Expr* e) {
  for (;;) {
    const Expr* n = e->IgnoreImplicit()->IgnoreParens();
    if (const auto* c = dyn_cast<CXXStaticCastExpr>(n)) {
      std::string as = c->getTypeAsWritten().getAsString();
      if (as.find("cond_t") != std::string::npos) n = c->getSubExprAsWritten();
    } else if (const auto* k = dyn_cast<CXXConstructExpr>(n)) {
      if (!isa<CXXTemporaryObjectExpr>(k) && k->getNumArgs() == 1 &&
          (k->isElidable() || k->getConstructor()->isCopyOrMoveConstructor()))
        n = k->getArg(0);
    } else if (const auto* m = dyn_cast<MaterializeTemporaryExpr>(n)) {
      n = m->getSubExpr();
    }
    if (n == e) return e;
    e = n;
  }
}

struct Place {
  bool user = false;
  int line = 0;          // line of the Metal text (after #line)
  unsigned tline = 0;    // physical line of the translation
  unsigned tcolumn = 0;  // column there
};

class Walker {
 public:
  Walker(ASTContext& ctx, const kernel::SourceMap& map, const std::string& filename,
         const std::string& code)
      : ctx_(ctx), sm_(ctx.getSourceManager()), map_(map), filename_(filename) {
    std::istringstream in(code);
    for (std::string s; std::getline(in, s);) code_lines_.push_back(s);
    std::istringstream m(map.msl);
    for (std::string s; std::getline(m, s);) msl_lines_.push_back(s);
  }

  Place place(SourceLocation loc) const {
    Place p;
    if (loc.isInvalid()) return p;
    SourceLocation e = sm_.getExpansionLoc(loc);
    PresumedLoc pl = sm_.getPresumedLoc(e);
    if (pl.isInvalid()) return p;
    p.user = filename_ == pl.getFilename();
    p.line = static_cast<int>(pl.getLine());
    if (sm_.getFileID(e) == sm_.getMainFileID()) {
      p.tline = sm_.getExpansionLineNumber(e);
      p.tcolumn = sm_.getExpansionColumnNumber(e);
    }
    return p;
  }

  SourcePlace user_place(const Place& p, const std::string& token) const {
    SourcePlace s;
    s.line = p.line;
    s.where = map_.describe(p.line);
    if (p.tline > 0 && p.tline <= code_lines_.size() && p.line > 0 &&
        static_cast<size_t>(p.line) <= msl_lines_.size())
      s.column = user_column(code_lines_[p.tline - 1], static_cast<int>(p.tcolumn),
                             msl_lines_[p.line - 1], token);
    return s;
  }

  bool user_function(const FunctionDecl* f) const {
    const FunctionDecl* pattern = f->getTemplateInstantiationPattern();
    return place((pattern ? pattern : f)->getLocation()).user;
  }

  std::string function_name(const FunctionDecl* f) const {
    std::string s;
    llvm::raw_string_ostream os(s);
    PrintingPolicy pp(ctx_.getLangOpts());
    pp.SuppressScope = true;
    f->getNameForDiagnostic(os, pp, /*Qualified=*/false);
    // The translator renames kernel functions (msl/translate.cpp): the user's name.
    const std::string prefix = "alloy_kernel_";
    if (s.starts_with(prefix)) s.erase(0, prefix.size());
    return s;
  }

  ASTContext& ctx_;
  SourceManager& sm_;
  const kernel::SourceMap& map_;
  std::string filename_;
  std::vector<std::string> code_lines_, msl_lines_;
};

// One function body: its calls (to follow), its barrier/simd calls and its typed expressions.
class BodyVisitor : public RecursiveASTVisitor<BodyVisitor> {
 public:
  BodyVisitor(const Walker& w, const FunctionDecl* fn, KernelAnalysis& out,
              std::vector<const FunctionDecl*>& callees)
      : w_(w), name_(w.function_name(fn)), out_(out), callees_(callees) {}

  bool shouldVisitTemplateInstantiations() const { return true; }
  bool shouldVisitImplicitCode() const { return true; }
  // A lambda's body is analysed when its call operator is reached (each instantiation of a
  // generic one separately), not where it is written.
  bool TraverseLambdaExpr(LambdaExpr*) { return true; }

  void callee(const FunctionDecl* f, SourceLocation loc) {
    if (!f) return;
    std::string n = f->getNameAsString();
    if (is_barrier(n) || is_simd(n)) {
      Place p = w_.place(loc);
      if (!p.user) return;  // a generated or prelude call (entries)
      SyncCall c;
      c.name = n;
      c.barrier = is_barrier(n);
      c.place = w_.user_place(p, n);
      c.function = name_;
      out_.sync_calls.push_back(std::move(c));
      return;
    }
    callees_.push_back(f);
  }

  bool VisitCallExpr(CallExpr* e) {
    callee(e->getDirectCallee(), e->getBeginLoc());
    return true;
  }
  bool VisitCXXConstructExpr(CXXConstructExpr* e) {
    callee(e->getConstructor(), e->getBeginLoc());
    return true;
  }

  void record(const Expr* e, SourceLocation op_loc, const std::string& kind, const std::string& op,
              const std::string& a, const std::string& b, QualType result) {
    Place p = w_.place(op_loc);
    if (!p.user) return;
    TypedExpression t;
    t.place = w_.user_place(p, op == "?:" ? "?" : op);
    t.kind = kind;
    t.op = op;
    t.operand_types = {a, b};
    t.result_type = metal_name(result, w_.ctx_);
    t.metal_type = metal_result_type(kind, a, b);
    t.agrees = t.metal_type.empty() || t.metal_type == t.result_type;
    t.function = name_;
    (void)e;
    out_.expressions.push_back(std::move(t));
  }

  std::string type_of(const Expr* e) const { return metal_name(written(e)->getType(), w_.ctx_); }

  bool VisitConditionalOperator(ConditionalOperator* e) {
    if (e->isTypeDependent()) return true;
    std::string a = type_of(e->getTrueExpr()), b = type_of(e->getFalseExpr());
    if (a != b && !metal_result_type("conditional", a, b).empty())
      record(e, e->getQuestionLoc(), "conditional", "?:", a, b, e->getType());
    return true;
  }

  void binary(const Expr* e, SourceLocation loc, const std::string& op, bool compound,
              bool comparison, const Expr* l, const Expr* r, QualType result) {
    std::string a = type_of(l), b = type_of(r);
    if (compound) {
      if (!lowp_name(a)) return;
      record(e, loc, "compound-assignment", op, a, b, result);
      return;
    }
    if (!(lowp_name(a) || lowp_name(b)) || a == b) return;
    std::string kind = comparison ? "comparison" : "binary";
    if (metal_result_type(kind, a, b).empty()) return;
    record(e, loc, kind, op, a, b, result);
  }

  bool VisitBinaryOperator(BinaryOperator* e) {
    if (e->isTypeDependent()) return true;
    BinaryOperatorKind k = e->getOpcode();
    bool compound = e->isCompoundAssignmentOp() && (k == BO_AddAssign || k == BO_SubAssign ||
                                                    k == BO_MulAssign || k == BO_DivAssign);
    bool arith = k == BO_Add || k == BO_Sub || k == BO_Mul || k == BO_Div;
    if (!(compound || arith || e->isComparisonOp())) return true;
    binary(e, e->getOperatorLoc(), e->getOpcodeStr().str(), compound, e->isComparisonOp(),
           e->getLHS(), e->getRHS(), e->getType());
    return true;
  }

  bool VisitCXXOperatorCallExpr(CXXOperatorCallExpr* e) {
    if (e->isTypeDependent() || e->getNumArgs() != 2) return true;
    OverloadedOperatorKind k = e->getOperator();
    bool compound =
        k == OO_PlusEqual || k == OO_MinusEqual || k == OO_StarEqual || k == OO_SlashEqual;
    bool arith = k == OO_Plus || k == OO_Minus || k == OO_Star || k == OO_Slash;
    bool comparison = k == OO_Less || k == OO_Greater || k == OO_LessEqual ||
                      k == OO_GreaterEqual || k == OO_EqualEqual || k == OO_ExclaimEqual;
    if (!(compound || arith || comparison)) return true;
    binary(e, e->getOperatorLoc(), getOperatorSpelling(k), compound, comparison, e->getArg(0),
           e->getArg(1), e->getType());
    return true;
  }

 private:
  const Walker& w_;
  std::string name_;
  KernelAnalysis& out_;
  std::vector<const FunctionDecl*>& callees_;
};

// Finds the entry functions alloy_thread_<i>.
class EntryFinder : public RecursiveASTVisitor<EntryFinder> {
 public:
  std::map<size_t, const FunctionDecl*> entries;
  bool VisitFunctionDecl(FunctionDecl* f) {
    const IdentifierInfo* id = f->getIdentifier();
    if (!id || !f->doesThisDeclarationHaveABody()) return true;
    std::string n = id->getName().str();
    const std::string prefix = "alloy_thread_";
    if (n.starts_with(prefix) && n.size() > prefix.size() &&
        n.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      entries[std::stoul(n.substr(prefix.size()))] = f;
    return true;
  }
};

KernelAnalysis analyse_kernel(const Walker& w, const FunctionDecl* entry) {
  KernelAnalysis out;
  std::set<const FunctionDecl*> seen;
  std::vector<const FunctionDecl*> work = {entry};
  bool root = true;
  while (!work.empty()) {
    const FunctionDecl* f = work.back();
    work.pop_back();
    const FunctionDecl* def = nullptr;
    if (!f->hasBody(def) || !def) continue;
    if (!seen.insert(def).second) continue;
    if (!root && !w.user_function(def)) continue;  // the prelude: not the user's code
    if (!root && out.function.empty()) out.function = w.function_name(def);
    std::vector<const FunctionDecl*> callees;
    BodyVisitor v(w, def, out, callees);
    v.TraverseStmt(const_cast<Stmt*>(def->getBody()));
    if (const auto* c = dyn_cast<CXXConstructorDecl>(def))
      for (const CXXCtorInitializer* i : c->inits())
        if (i->getInit()) v.TraverseStmt(const_cast<Expr*>(i->getInit()));
    root = false;
    // Depth-first in call order: reverse so the first call is visited first.
    for (auto it = callees.rbegin(); it != callees.rend(); ++it) work.push_back(*it);
  }
  // In source order (a helper's calls where the helper is written).
  auto by_place = [](const auto& a, const auto& b) {
    return std::pair(a.place.line, a.place.column) < std::pair(b.place.line, b.place.column);
  };
  std::stable_sort(out.sync_calls.begin(), out.sync_calls.end(), by_place);
  std::stable_sort(out.expressions.begin(), out.expressions.end(), by_place);
  return out;
}

}  // namespace

Analysis analyze_translation(const msl::Translation& tr, const kernel::SourceMap& map,
                             const std::string& filename) {
  std::vector<std::string> args = {"-std=c++20", "-w", "-fno-math-errno", "-ferror-limit=20",
                                   // A loop-mode translation's per-thread entry, which the
                                   // walk starts from, is a stub unless this is defined
                                   // (msl/target.cpp cpu_entry).
                                   "-DALLOY_TYPED_ANALYSIS",
                                   "-resource-dir=" ALLOY_CLANG_RESOURCE_DIR,
                                   std::string("-I") + kPreludeDir};
  tooling::FileContentMappings files;
  for (const prelude::EmbeddedFile& f : prelude::embedded_files())
    files.emplace_back(std::string(kPreludeDir) + "/" + std::string(f.path), std::string(f.text));
  LogDiagnostics diagnostics;
  auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ASTUnit> ast = tooling::buildASTFromCodeWithArgs(
      tr.code, args, kMainFile, "alloy-typed", std::make_shared<PCHContainerOperations>(),
      tooling::getClangStripDependencyFileAdjuster(), files, &diagnostics);
  Analysis result;
  result.parse_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!ast || diagnostics.errors > 0) {
    std::string log =
        diagnostics.log.empty() ? "clang could not parse the translation\n" : diagnostics.log;
    throw CompileError(map.label, "typed analysis: " + kernel::map_compile_log(map, log, filename),
                       log);
  }
  ASTContext& ctx = ast->getASTContext();
  Walker w(ctx, map, filename, tr.code);
  EntryFinder finder;
  finder.TraverseDecl(ctx.getTranslationUnitDecl());
  for (size_t i = 0; i < tr.kernels.size(); ++i) {
    auto it = finder.entries.find(i);
    if (it == finder.entries.end())
      throw Error(map.label, fmt::format("typed analysis: internal: no entry for kernel '{}'",
                                         tr.kernels[i].host_name));
    KernelAnalysis k = analyse_kernel(w, it->second);
    k.kernel = tr.kernels[i].host_name;
    result.kernels.push_back(std::move(k));
  }
  return result;
}

#endif

}  // namespace alloy::typed
